"""Rows per second through the bridge with the Spark connector (format("stomp")), 1 and 2 partitions.

    python -m bench.spark                       # starts a bridge on --bridge-port, local[2]
    python -m bench.spark --rows 50000 --runs 3 --json spark.json

Per partition count and run: a batch write of ``--rows`` rows (persistent
SENDs, receipt each, window ``--window``) into a fresh stream queue, then a
batch read of that whole stream (``count()`` over the rows). Timed around the
Spark action, so each figure includes Spark's job scheduling (tens of ms) but
not its start-up. Prints the median rows/s. Needs the ``[spark]`` extra and
Java 17+. Run by hand: numbers go in docs/performance.md, never into test assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid

from bench.procstat import start_bridge
from testkit.management import Management


def one_run(spark, args: argparse.Namespace, partitions: int) -> dict:
    stream = f"spark-bench-{uuid.uuid4().hex[:8]}"
    rabbit = Management(args.api)
    rabbit.declare_queue(stream, arguments={"x-queue-type": "stream"})
    conn = {"host": "127.0.0.1", "port": str(args.bridge_port), "login": "guest", "passcode": "guest",
            "destination": f"/amq/queue/{stream}"}
    try:
        rows = spark.range(args.rows, numPartitions=partitions).selectExpr(
            "concat('row-', id, '-', repeat('x', 64)) AS body").persist()
        rows.count()
        start = time.perf_counter()
        rows.write.format("stomp").options(**conn, receiptWindow=str(args.window)).mode("append").save()
        write_s = time.perf_counter() - start
        rows.unpersist()
        start = time.perf_counter()
        read = spark.read.format("stomp").options(**conn, numPartitions=str(partitions)).load().count()
        read_s = time.perf_counter() - start
        if read != args.rows:
            raise RuntimeError(f"read {read} rows back, wrote {args.rows}")
        return {"partitions": partitions, "write_rows_per_s": args.rows / write_s, "read_rows_per_s": read / read_s}
    finally:
        rabbit.delete_queue(stream)


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.spark", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bridge-port", type=int, default=61634)
    ap.add_argument("--no-start", action="store_true", help="a bridge already runs on --bridge-port")
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--window", type=int, default=100, help="receiptWindow: unconfirmed SENDs per task")
    ap.add_argument("--api", default="http://127.0.0.1:15672/api")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from stomp_bridge.spark import register

    bridge = None if args.no_start else start_bridge(args.bridge_port)
    spark = (SparkSession.builder.master("local[2]").appName("stomp-spark-bench")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    results = []
    try:
        one_run(spark, args, 1)  # warm-up: Python workers, JIT of the plan
        for _ in range(args.runs):
            for partitions in (1, 2):
                results.append(one_run(spark, args, partitions))
    finally:
        spark.stop()
        if bridge is not None:
            bridge.terminate()
            bridge.wait(30)
    print(f"{args.rows} rows of ~75 bytes, {args.runs} runs, median rows/s")
    print("| partitions | write (persistent, receipts) | read (stream range) |")
    print("|---|---|---|")
    for partitions in (1, 2):
        mine = [r for r in results if r["partitions"] == partitions]
        write = statistics.median(r["write_rows_per_s"] for r in mine)
        read = statistics.median(r["read_rows_per_s"] for r in mine)
        print(f"| {partitions} | {write:,.0f} | {read:,.0f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
