"""Connection flags shared by the example jobs, and a SparkSession that knows format("stomp")."""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession

from stomp_bridge.spark import register


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="stomp-bridge host (default 127.0.0.1)")
    parser.add_argument("--port", default="61613", help="stomp-bridge port (default 61613)")
    parser.add_argument("--vhost", default="/", help="RabbitMQ vhost (default /)")
    parser.add_argument("--login", default="guest")
    parser.add_argument("--passcode", default="guest")
    parser.add_argument("--tls", action="store_true", help="connect with TLS")
    parser.add_argument("--protocol", default="auto", choices=("auto", "stream", "stomp"),
                        help="streams over RabbitMQ's stream protocol when it answers (auto), always, or never")
    parser.add_argument("--stream-port", default=None, help="RabbitMQ's stream port (default 5552)")
    parser.add_argument("--master", default=None, help="Spark master when not run by spark-submit, e.g. local[2]")


def connection_options(args: argparse.Namespace) -> dict[str, str]:
    options = {"host": args.host, "port": str(args.port), "vhost": args.vhost, "login": args.login,
               "passcode": args.passcode, "tls": str(args.tls).lower(), "protocol": args.protocol}
    if args.stream_port:
        options["streamPort"] = str(args.stream_port)
    return options


def session(args: argparse.Namespace, app: str) -> SparkSession:
    builder = SparkSession.builder.appName(app)
    if args.master:
        builder = builder.master(args.master)
    spark = builder.getOrCreate()
    register(spark)
    return spark
