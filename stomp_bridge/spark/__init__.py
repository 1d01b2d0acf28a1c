"""A PySpark data source (``format("stomp")``) that moves rows through stomp-bridge.

``register(spark)`` makes the format known to a session; the classes live in
``stomp_bridge.spark.source`` (which imports pyspark: install the ``[spark]``
extra). The client, option and row modules import only the standard library.
"""

from __future__ import annotations


def register(spark) -> None:
    """Register ``format("stomp")`` with ``spark`` (a SparkSession)."""
    from stomp_bridge.spark.source import StompDataSource

    spark.dataSource.register(StompDataSource)
