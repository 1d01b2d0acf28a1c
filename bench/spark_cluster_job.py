"""The timed jobs ``python -m bench.spark_cluster`` submits with spark-submit (not run directly).

    spark-submit ... bench/spark_cluster_job.py write HOST PORT SUPER_STREAM ROWS TASKS
    spark-submit ... bench/spark_cluster_job.py read  HOST PORT SUPER_STREAM

Each prints one JSON line (``RESULT {...}``) with the rows and the seconds of its Spark action,
timed in the driver around the action only (not the JVM's and the session's start-up).
"""

from __future__ import annotations

import json
import os
import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from stomp_bridge.spark import register


def main(argv: list[str]) -> int:
    command, host, port, super_stream = argv[:4]
    spark = SparkSession.builder.appName(f"stomp-cluster-bench-{command}").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    conn = {"host": host, "port": port, "login": "guest", "passcode": "guest", "superStream": super_stream}
    conn.update(json.loads(os.environ.get("STOMP_SPARK_OPTIONS", "{}")))  # e.g. protocol, streamPort
    if command == "write":
        rows, tasks = int(argv[4]), int(argv[5])
        df = (spark.range(rows, numPartitions=tasks)
              .select(F.concat(F.lit("key-"), (F.col("id") % 1000).cast("string")).alias("partitionKey"),
                      F.concat(F.lit("row-"), F.col("id").cast("string"), F.lit("-"), F.repeat(F.lit("x"), 64))
                      .alias("body"))
              .persist())
        df.count()
        start = time.perf_counter()
        df.write.format("stomp").options(**conn, receiptWindow="500").mode("append").save()
        seconds = time.perf_counter() - start
        landed = {r.destination: r["count"] for r in spark.read.format("stomp").options(**conn).load()
                  .groupBy("destination").count().collect()}
        result = {"rows": rows, "seconds": seconds, "landed": landed}
    else:
        df = spark.read.format("stomp").options(**conn).load()
        start = time.perf_counter()
        rows = df.select("stream_offset").count()
        seconds = time.perf_counter() - start
        result = {"rows": rows, "seconds": seconds, "tasks": df.rdd.getNumPartitions(),
                  "executors": spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1}
    print("RESULT " + json.dumps(result), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
