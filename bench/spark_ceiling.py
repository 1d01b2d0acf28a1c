"""What Spark itself costs a Python data source: count() of 200,000 rows of the connector's seven
columns, yielded as ready Arrow batches (no broker, no network), four times in one session.

    python -m bench.spark_ceiling

The connector cannot read faster than this through Spark; docs/performance.md compares.
"""
import os, sys, time
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader
from stomp_bridge.spark.rows import RAW_SCHEMA
class Src(DataSource):
    @classmethod
    def name(cls): return "ceiling"
    def schema(self): return RAW_SCHEMA
    def reader(self, schema): return R(schema)
class R(DataSourceReader):
    def __init__(self, schema): self.schema = schema
    def read(self, partition):
        from stomp_bridge.spark.arrow import BatchMaker, Columns
        m = BatchMaker(self.schema, None, False)
        for b in range(25):
            c = Columns(); c.id_prefix = "s@"; n = 8000
            c.bodies.extend([b'{"key":"k1","n":12345,"value":1763.5714285714287}'] * n)
            c.destinations.extend(["/amq/queue/s"] * n); c.headers.extend([None] * n); c.message_ids.extend([None] * n)
            c.offsets.extend(range(b * n, b * n + n)); c.timestamps.extend([None] * n)
            yield m.batch(c)
spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
spark.dataSource.register(Src)
for i in range(4):
    t = time.perf_counter(); n = spark.read.format("ceiling").load().count(); dt = time.perf_counter() - t
    print(n, f"{n/dt:,.0f} rows/s", f"{dt:.2f}s")
t=time.perf_counter()
from stomp_bridge.spark.arrow import BatchMaker
print("python side only:", end=" ")
r = R(spark.read.format("ceiling").load().schema); n = sum(b.num_rows for b in r.read(None)); print(f"{n/(time.perf_counter()-t):,.0f} rows/s")
spark.stop()
