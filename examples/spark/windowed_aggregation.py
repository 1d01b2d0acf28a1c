"""Streaming job: JSON events from a RabbitMQ stream -> per window and key aggregates -> Parquet and a topic.

Events look like ``{"key": "sensor-1", "value": 21.5, "ts": "2026-01-01T00:00:12Z"}``
(``ts`` may also be unix seconds). Each window's aggregates are written once,
when the watermark has passed the window's end (append mode): appended to
Parquet and published as one JSON message per window and key to ``--topic``.

    python examples/spark/windowed_aggregation.py --master 'local[2]' --port 61623 \\
        --stream events --output /tmp/agg --checkpoint /tmp/agg-checkpoint --topic /topic/aggregates

The checkpoint holds the stream offset: stop the job at any time and start it
again with the same ``--checkpoint`` to continue where it stopped. Both sinks
are written from ``foreachBatch``; a micro-batch that fails half-way is run
again after a restart, so each sink is at-least-once (Parquet rows and topic
messages carry ``window_start``/``key`` to deduplicate on).
"""

from __future__ import annotations

import argparse
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

try:
    from common import add_connection_args, connection_options, session
except ImportError:  # imported as examples.spark.windowed_aggregation
    from .common import add_connection_args, connection_options, session

EVENT_SCHEMA = "key STRING, value DOUBLE, ts TIMESTAMP"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_connection_args(parser)
    parser.add_argument("--stream", required=True, help="stream queue with the events (it must exist)")
    parser.add_argument("--output", required=True, help="Parquet directory for the aggregates")
    parser.add_argument("--checkpoint", required=True, help="checkpoint directory (the stream offset lives here)")
    parser.add_argument("--topic", default="/topic/aggregates", help="where each aggregate is published")
    parser.add_argument("--window", default="1 minute", help="window length (default 1 minute)")
    parser.add_argument("--watermark", default="1 minute", help="how late an event may be (default 1 minute)")
    parser.add_argument("--max-per-trigger", default=None, help="messages per micro-batch at most")
    parser.add_argument("--available-now", action="store_true", help="process what is in the stream, then stop")
    parser.add_argument("--trigger-seconds", type=int, default=10, help="micro-batch interval otherwise")
    return parser.parse_args(argv)


def aggregates(events: DataFrame, window: str, watermark: str) -> DataFrame:
    """Count, sum, mean and max of ``value`` per ``window`` of ``ts`` and ``key``."""
    return (
        events.where(F.col("key").isNotNull() & F.col("ts").isNotNull())
        .withWatermark("ts", watermark)
        .groupBy(F.window("ts", window), "key")
        .agg(F.count("*").alias("count"), F.sum("value").alias("sum"), F.avg("value").alias("mean"),
             F.max("value").alias("max"))
        .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                "key", "count", "sum", "mean", "max")
    )


def start(spark: SparkSession, args: argparse.Namespace):
    """Start the streaming query and return it."""
    conn = connection_options(args)
    reader = (spark.readStream.format("stomp").options(**conn)
              .option("destination", f"/amq/queue/{args.stream}").option("jsonSchema", EVENT_SCHEMA))
    if args.max_per_trigger:
        reader = reader.option("maxMessagesPerTrigger", args.max_per_trigger)
    result = aggregates(reader.load(), args.window, args.watermark)

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        batch.persist()
        try:
            if batch.isEmpty():
                return
            batch.write.mode("append").parquet(args.output)
            (batch.write.format("stomp").options(**conn).option("destination", args.topic)
             .mode("append").save())  # no body column: each row is sent as a JSON object
        finally:
            batch.unpersist()

    writer = (result.writeStream.outputMode("append").foreachBatch(write_batch)
              .option("checkpointLocation", args.checkpoint))
    writer = writer.trigger(availableNow=True) if args.available_now else writer.trigger(
        processingTime=f"{args.trigger_seconds} seconds")
    return writer.start()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spark = session(args, "stomp-windowed-aggregation")
    query = start(spark, args)
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
