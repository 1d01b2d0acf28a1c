"""Batch job: publish every row of a Parquet or CSV file as a persistent message.

    python examples/spark/bulk_load.py --master 'local[2]' --port 61623 \\
        --input rows.parquet --destination /queue/imports --partitions 4

Each row becomes one SEND with ``persistent:true``; a Spark task finishes
only when the bridge has sent a RECEIPT for each of its rows (RabbitMQ
confirmed them), so a job that succeeds has published every row. A task that
fails is retried by Spark and publishes its rows again: at-least-once. With
``--body-column`` that column is the body (other columns are dropped);
without it each row is sent as a JSON object.
"""

from __future__ import annotations

import argparse
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

try:
    from common import add_connection_args, connection_options, session
except ImportError:  # imported as examples.spark.bulk_load
    from .common import add_connection_args, connection_options, session


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_connection_args(parser)
    parser.add_argument("--input", required=True, help="Parquet file/directory or CSV file (with a header line)")
    parser.add_argument("--format", choices=("parquet", "csv"), default=None, help="default: from the file name")
    parser.add_argument("--destination", required=True, help="e.g. /queue/imports, /amq/queue/stream, /topic/x")
    parser.add_argument("--body-column", default=None, help="send this column as the body instead of JSON rows")
    parser.add_argument("--partitions", type=int, default=2, help="parallel STOMP connections (default 2)")
    parser.add_argument("--receipt-window", default="100", help="unconfirmed messages per connection at most")
    parser.add_argument("--transactional", action="store_true", help="one STOMP transaction per task")
    return parser.parse_args(argv)


def load(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    fmt = args.format or ("csv" if args.input.endswith(".csv") else "parquet")
    if fmt == "csv":
        return spark.read.option("header", "true").option("inferSchema", "true").csv(args.input)
    return spark.read.parquet(args.input)


def publish(spark: SparkSession, args: argparse.Namespace) -> int:
    """Publish the file's rows; returns how many."""
    rows = load(spark, args)
    if args.body_column:
        rows = rows.select(F.col(args.body_column).cast("string").alias("body"))
    rows = rows.repartition(args.partitions).persist()
    try:
        count = rows.count()
        (rows.write.format("stomp").options(**connection_options(args))
         .option("destination", args.destination).option("receiptWindow", args.receipt_window)
         .option("transactional", str(args.transactional).lower()).mode("append").save())
    finally:
        rows.unpersist()
    return count


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spark = session(args, "stomp-bulk-load")
    count = publish(spark, args)
    print(f"published {count} rows to {args.destination}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
