"""The Spark connector (format("stomp")) against rstream, RabbitMQ's own Python stream client, in one run.

    python -m bench.spark                       # broker 4.3 (testkit.brokers), bridge on --bridge-port, local[2]
    python -m bench.spark --rows 200000 --runs 2 --broker system --json spark.json

Per run, on fresh streams of ``--rows`` small JSON messages (~60 bytes):

- rstream publishing them (batches of ``--batch``, every message confirmed): the write baseline;
- rstream reading them back, twice: undecoded (the callback gets each message's AMQP bytes: the
  client's own ceiling, the figure issue 35 compared against) and with ``amqp_decoder`` (the body
  as a user of rstream gets it);
- a bare STOMP client reading them through the bridge (SUBSCRIBE ``x-stream-offset:first``,
  ``prefetch-count`` 1000, ack client every 500; the connector's own client and frame parser
  without Spark): the bridge baseline, against which the connector's STOMP path (``protocol=stomp``,
  ``prefetch`` 1000) shows what Spark and the rows cost;
- the connector: ``spark.read.format("stomp")...count()`` (default path: the stream protocol),
  the same with ``jsonSchema`` (3 columns), the same through the bridge (``protocol=stomp``),
  ``df.write.format("stomp")`` of ``--rows`` rows into a new stream, and a super stream of 3
  partitions read and written.

Every figure is rows/s around the one action (Spark's job scheduling included, its start-up not);
ratios are against rstream (or the bare STOMP client) measured in the same run, which is what the
targets in docs/performance.md are. Needs the ``[spark]`` extra and Java 17+. Run by hand: numbers go in
docs/performance.md, never into test assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import time
import uuid

from bench.procstat import start_bridge
from testkit.brokers import local
from testkit.management import Management

SCHEMA = "key STRING, n BIGINT, value DOUBLE"


def body(i: int) -> bytes:
    return json.dumps({"key": f"k{i % 97}", "n": i, "value": i / 7}, separators=(",", ":")).encode()


# -- rstream, the baseline ------------------------------------------------------------------


async def _rstream_publish(port: int, stream: str, rows: int, batch: int, window: int = 20) -> float:
    from rstream import AMQPMessage, Producer

    confirmed = 0
    done = asyncio.Event()

    def on_confirm(status) -> None:
        nonlocal confirmed
        confirmed += 1
        if confirmed >= rows:
            done.set()

    bodies = [body(i) for i in range(rows)]
    async with Producer("127.0.0.1", port, username="guest", password="guest") as producer:
        start = time.perf_counter()
        for lo in range(0, rows, batch):
            await producer.send_batch(stream, [AMQPMessage(body=b) for b in bodies[lo:lo + batch]],
                                      on_publish_confirm=on_confirm)
            while (lo + batch) - confirmed > window * batch:  # a bounded number of batches in flight
                await asyncio.sleep(0.001)
        await asyncio.wait_for(done.wait(), 120)
        return time.perf_counter() - start


async def _rstream_read(port: int, stream: str, rows: int, decode: bool) -> float:
    from rstream import Consumer, ConsumerOffsetSpecification, OffsetType, amqp_decoder

    seen = 0
    done = asyncio.Event()

    async def on_message(message, context) -> None:
        nonlocal seen
        seen += 1
        if seen >= rows:
            done.set()

    async with Consumer("127.0.0.1", port, username="guest", password="guest") as consumer:
        start = time.perf_counter()
        await consumer.subscribe(stream, on_message, decoder=amqp_decoder if decode else None,
                                 offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None))
        await asyncio.wait_for(done.wait(), 300)
        return time.perf_counter() - start


def stomp_read(port: int, stream: str, rows: int) -> float:
    """A bare STOMP client through the bridge: the same stream from its first offset."""
    from stomp_bridge.spark.client import StompClient
    from stomp_bridge.spark.options import ConnectionOptions

    with StompClient(ConnectionOptions(host="127.0.0.1", port=port, login="guest", passcode="guest")) as client:
        start = time.perf_counter()
        client.send("SUBSCRIBE", {"destination": f"/amq/queue/{stream}", "id": "b", "ack": "client",
                                  "prefetch-count": "1000", "x-stream-offset": "first"})
        seen = 0
        while seen < rows:
            frame = client.expect()
            if frame.command != "MESSAGE":
                continue
            seen += 1
            if seen % 500 == 0:
                client.send("ACK", {"id": frame.headers["ack"]})
        return time.perf_counter() - start


# -- one run -------------------------------------------------------------------------------


def declare_super_stream(rabbit: Management, name: str, partitions: int) -> list[str]:
    rabbit.request("PUT", f"/exchanges/%2F/{rabbit.q(name)}", {
        "type": "direct", "durable": True, "auto_delete": False, "arguments": {"x-super-stream": True}})
    names = []
    for i in range(partitions):
        queue = f"{name}-{i}"
        rabbit.declare_queue(queue, arguments={"x-queue-type": "stream"})
        rabbit.request("POST", f"/bindings/%2F/e/{rabbit.q(name)}/q/{rabbit.q(queue)}",
                       {"routing_key": str(i), "arguments": {"x-stream-partition-order": i}})
        names.append(queue)
    return names


def one_run(spark, args: argparse.Namespace, broker) -> dict:
    tag = uuid.uuid4().hex[:8]
    stream, target, sup = f"spark-bench-{tag}", f"spark-bench-w-{tag}", f"spark-bench-s-{tag}"
    rabbit = Management(broker.api_url)
    for name in (stream, target):
        rabbit.declare_queue(name, arguments={"x-queue-type": "stream"})
    parts = declare_super_stream(rabbit, sup, 3)
    conn = {"host": "127.0.0.1", "port": str(args.bridge_port), "login": "guest", "passcode": "guest",
            "streamPort": str(broker.stream_port)}
    n = args.rows
    out: dict[str, float] = {}

    def timed(name: str, action) -> None:
        start = time.perf_counter()
        got = action()
        seconds = time.perf_counter() - start
        if got is not None and got != n:
            raise RuntimeError(f"{name}: {got} rows, expected {n}")
        out[name] = n / seconds

    try:
        out["rstream_publish"] = n / asyncio.run(_rstream_publish(broker.stream_port, stream, n, args.batch))
        out["rstream_read"] = n / asyncio.run(_rstream_read(broker.stream_port, stream, n, decode=True))
        out["rstream_read_raw"] = n / asyncio.run(_rstream_read(broker.stream_port, stream, n, decode=False))
        out["stomp_client_read"] = n / stomp_read(args.bridge_port, stream, n)
        src = {**conn, "destination": f"/amq/queue/{stream}", "numPartitions": str(args.partitions)}
        timed("spark_read", lambda: spark.read.format("stomp").options(**src).load().count())
        timed("spark_read_json", lambda: spark.read.format("stomp").options(**src, jsonSchema=SCHEMA).load()
              .where("n >= 0").count())
        timed("spark_read_stomp", lambda: spark.read.format("stomp").options(**src, protocol="stomp", prefetch="1000")
              .load().count())
        rows = spark.range(n, numPartitions=args.partitions).selectExpr(
            "to_json(named_struct('key', concat('k', id % 97), 'n', id, 'value', id / 7)) AS body").persist()
        rows.count()
        timed("spark_write", lambda: rows.write.format("stomp").options(
            **conn, destination=f"/amq/queue/{target}").mode("append").save())
        # super stream: 3 partitions, written by key then read whole
        keyed = rows.selectExpr("body", "get_json_object(body, '$.n') AS partitionKey").persist()
        keyed.count()
        timed("spark_write_super", lambda: keyed.write.format("stomp").options(**conn, superStream=sup)
              .mode("append").save())
        timed("spark_read_super", lambda: spark.read.format("stomp").options(**conn, superStream=sup).load().count())
        rows.unpersist()
        keyed.unpersist()
        return out
    finally:
        for name in (stream, target, *parts):
            rabbit.delete_queue(name)
        rabbit.delete_exchange(sup)


RATIOS = [
    ("batch read / rstream read (undecoded bytes)", "spark_read", "rstream_read_raw", 0.5),
    ("batch read / rstream read (amqp_decoder)", "spark_read", "rstream_read", 0.5),
    ("read with jsonSchema / rstream read (undecoded)", "spark_read_json", "rstream_read_raw", 0.4),
    ("read with jsonSchema / rstream read (amqp_decoder)", "spark_read_json", "rstream_read", 0.4),
    ("write / rstream publish", "spark_write", "rstream_publish", 0.5),
    ("super stream (3) read / rstream read (undecoded)", "spark_read_super", "rstream_read_raw", 0.5),
    ("super stream (3) write / rstream publish", "spark_write_super", "rstream_publish", 0.5),
    ("read through the bridge / bare STOMP client", "spark_read_stomp", "stomp_client_read", 0.8),
]


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.spark", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", default=os.environ.get("STOMP_BRIDGE_TEST_BROKER", "4.3"),
                    help="a local broker of testkit.brokers: 4.3, 4.0 or system")
    ap.add_argument("--bridge-port", type=int, default=61634)
    ap.add_argument("--no-start", action="store_true", help="a bridge already runs on --bridge-port")
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=1000, help="rstream's publish batch")
    ap.add_argument("--partitions", type=int, default=1, help="numPartitions of the reads, partitions of the write")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()
    broker = local(args.broker)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from stomp_bridge.spark import register

    bridge = None if args.no_start else start_bridge(args.bridge_port, {"amqp_url": broker.amqp_url})
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", args.bridge_port), 1).close()
            break
        except OSError:
            time.sleep(0.1)
    spark = (SparkSession.builder.master("local[2]").appName("stomp-spark-bench")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    results = []
    try:
        warm = argparse.Namespace(**{**vars(args), "rows": min(args.rows, 5000)})
        one_run(spark, warm, broker)  # warm-up: Python workers, the JVM's JIT
        for _ in range(args.runs):
            results.append(one_run(spark, args, broker))
            print(json.dumps({k: round(v) for k, v in results[-1].items()}), flush=True)
    finally:
        spark.stop()
        if bridge is not None:
            bridge.terminate()
            bridge.wait(30)
    print(f"\n{args.rows:,} JSON messages of ~{len(body(args.rows // 2))} bytes, broker {args.broker}, "
          f"{args.runs} run(s), rows/s (median)")
    print("| figure | rows/s | baseline rows/s | ratio (each run) | target |")
    print("|---|---|---|---|---|")
    for label, mine, base, target in RATIOS:
        ratios = [r[mine] / r[base] for r in results]
        print(f"| {label} | {statistics.median(r[mine] for r in results):,.0f} | "
              f"{statistics.median(r[base] for r in results):,.0f} | "
              f"{' / '.join(f'{x:.2f}' for x in ratios)} | >= {target} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
