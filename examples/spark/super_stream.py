"""Super stream jobs: write orders partitioned by customer, copy every partition to Parquet.

    # publish 10,000 JSON orders, each to the partition RabbitMQ's stream clients pick for its customer
    python examples/spark/super_stream.py write --master 'local[2]' --port 61623 \\
        --super-stream orders --rows 10000
    # copy the super stream to Parquet: one Spark task per partition, offsets per partition
    python examples/spark/super_stream.py read --master 'local[2]' --port 61623 \\
        --super-stream orders --output /tmp/orders --checkpoint /tmp/orders-checkpoint --available-now

The super stream must exist (``rabbitmq-streams add_super_stream orders --partitions 4``).
``write`` sends each row with ``partitionKey`` = its customer, hashed as the Java, Go and .NET
stream clients do (``--key-hash rstream``: as rstream, the Python client, does; the two differ), so
they and this job agree on where a customer's orders are; a task returns when RabbitMQ confirmed
its rows. ``read`` is a streaming query whose
checkpoint keeps one offset per partition: run it again and it continues where it stopped,
every message once in the Parquet output (exactly once); a partition added meanwhile is read
from its first offset; offsets removed by retention before they were read fail the query
(``--skip-lost`` logs and goes on instead).
"""

from __future__ import annotations

import argparse
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

try:
    from common import add_connection_args, connection_options, session
except ImportError:  # imported as examples.spark.super_stream
    from .common import add_connection_args, connection_options, session

ORDER_SCHEMA = "order_id BIGINT, customer STRING, amount DOUBLE"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    write = sub.add_parser("write", help="publish generated orders, partitioned by customer")
    read = sub.add_parser("read", help="copy every partition to Parquet (streaming, checkpointed)")
    for p in (write, read):
        add_connection_args(p)
        p.add_argument("--super-stream", required=True, help="the super stream's name, e.g. orders")
    write.add_argument("--rows", type=int, default=10_000)
    write.add_argument("--customers", type=int, default=1000)
    write.add_argument("--tasks", type=int, default=2, help="parallel STOMP connections (default 2)")
    write.add_argument("--receipt-window", default="500", help="unconfirmed messages per connection at most")
    write.add_argument("--key-hash", default="murmur3", choices=("murmur3", "rstream"),
                       help="partitionKeyHash: murmur3 (Java, Go, .NET clients) or rstream (the Python client)")
    read.add_argument("--output", required=True, help="Parquet directory")
    read.add_argument("--checkpoint", required=True, help="the query's checkpoint directory")
    read.add_argument("--max-per-trigger", default=None, help="messages per micro-batch, shared by the partitions")
    read.add_argument("--num-partitions", default="1", help="Spark tasks per stream partition and batch")
    read.add_argument("--available-now", action="store_true", help="read what is there, then stop")
    read.add_argument("--skip-lost", action="store_true", help="failOnDataLoss=false: log offsets lost, go on")
    return parser.parse_args(argv)


def orders(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    return (spark.range(args.rows, numPartitions=args.tasks)
            .select(F.col("id").alias("order_id"),
                    F.concat(F.lit("customer-"), (F.col("id") % args.customers).cast("string")).alias("customer"),
                    F.round(F.rand(seed=7) * 100, 2).alias("amount"))
            .withColumn("partitionKey", F.col("customer")))


def write(spark: SparkSession, args: argparse.Namespace) -> int:
    """Publish the orders as JSON (the whole row, partitionKey included); returns how many."""
    rows = orders(spark, args)
    (rows.write.format("stomp").options(**connection_options(args))
     .option("superStream", args.super_stream).option("receiptWindow", args.receipt_window)
     .option("partitionKeyHash", args.key_hash).mode("append").save())
    return args.rows


def start(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    reader = (spark.readStream.format("stomp").options(**connection_options(args))
              .option("superStream", args.super_stream).option("jsonSchema", ORDER_SCHEMA)
              .option("numPartitions", args.num_partitions)
              .option("failOnDataLoss", "false" if args.skip_lost else "true"))
    if args.max_per_trigger:
        reader = reader.option("maxMessagesPerTrigger", args.max_per_trigger)
    events = reader.load().select("order_id", "customer", "amount", "destination", "stream_offset", "timestamp")
    writer = (events.writeStream.format("parquet").option("path", args.output)
              .option("checkpointLocation", args.checkpoint))
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spark = session(args, f"stomp-super-stream-{args.command}")
    if args.command == "write":
        print(f"published {write(spark, args)} orders to super stream {args.super_stream}")
        return 0
    query = start(spark, args)
    query.awaitTermination()
    if query.exception() is not None:
        print(query.exception(), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
