"""Options of the ``stomp`` Spark data source, parsed and checked without Spark.

Spark hands a data source its options as strings (case-insensitive names). Each
reader and writer turns them into a frozen dataclass once, on the driver, so a
wrong value fails the query before any task starts, with a message that names
the option, the value and what would be accepted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from stomp_bridge.spark.partitions import KEY_HASHES, parse_offset_map

STREAM_PREFIX = "/amq/queue/"
DRAIN_PREFIXES = ("/queue/", "/amq/queue/")
WRITE_PREFIXES = ("/queue/", "/amq/queue/", "/topic/", "/exchange/")


PROTOCOLS = ("auto", "stream", "stomp")


class OptionError(ValueError):
    """A missing or wrong option; the text says which and what to write instead."""


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _int(opts: dict[str, str], name: str, default: int | None, minimum: int = 1) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"option {name}={raw!r} is not an integer") from None
    if value < minimum:
        raise OptionError(f"option {name}={raw!r} must be at least {minimum}")
    return value


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    text = raw.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name}={raw!r} must be true or false")


def _destination(opts: dict[str, str], prefixes: tuple[str, ...], what: str, required: bool = True) -> str | None:
    raw = opts.get("destination")
    if raw is None:
        if required:
            raise OptionError(
                f"option destination is missing: {what} needs one, e.g. "
                f".option('destination', '{prefixes[0]}<name>')")
        return None
    if not raw.startswith(prefixes) or raw in prefixes:
        raise OptionError(
            f"option destination={raw!r} cannot be used for {what}: it must start with "
            + " or ".join(prefixes) + " and name something")
    return raw


def _super_stream(opts: dict[str, str]) -> str | None:
    raw = opts.get("superstream")
    if raw is None:
        return None
    name = raw.strip()
    if not name or "/" in name:
        raise OptionError(f"option superStream={raw!r} must be a super stream's name (its exchange), e.g. 'invoices'")
    if "destination" in opts:
        raise OptionError("give option superStream or option destination, not both")
    return name


def _partition_list(opts: dict[str, str]) -> tuple[str, ...] | None:
    raw = opts.get("partitions")
    if raw is None:
        return None
    names = tuple(n.strip() for n in raw.split(",") if n.strip())
    if not names or any("/" in n for n in names):
        raise OptionError(f"option partitions={raw!r} must list the partitions' stream names, "
                          "comma-separated, e.g. 'invoices-0,invoices-1'")
    if "superstream" not in opts:
        raise OptionError("option partitions needs option superStream")
    return names


@dataclass(frozen=True)
class ConnectionOptions:
    """Where and how each task connects (one STOMP connection per task)."""

    host: str = "127.0.0.1"
    port: int = 61613
    vhost: str = "/"
    login: str | None = None
    passcode: str | None = None
    tls: bool = False
    tls_ca_file: str | None = None
    tls_verify: bool = True
    tls_server_name: str | None = None
    connect_timeout: float = 10.0
    read_timeout: float = 30.0
    protocol: str = "auto"  # auto | stream | stomp: how streams are read and written (docs/spark.md)
    stream_host: str = "127.0.0.1"  # RabbitMQ's stream port (streamHost, streamPort)
    stream_port: int = 5552

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "ConnectionOptions":
        opts = _lower(options)
        if "host" not in opts:
            raise OptionError("option host is missing: the bridge's address, e.g. .option('host', 'stomp-bridge')")
        host = opts["host"].strip()
        if not host:
            raise OptionError("option host is empty: give the bridge's host name or address")
        port = _int(opts, "port", 61613)
        if port > 65535:
            raise OptionError(f"option port={port} is not a TCP port (1-65535)")
        login, passcode = opts.get("login"), opts.get("passcode")
        if (login is None) != (passcode is None):
            raise OptionError("options login and passcode go together: give both or neither")
        tls = _bool(opts, "tls", False)
        protocol = opts.get("protocol", "auto").strip().lower()
        if protocol not in PROTOCOLS:
            raise OptionError(f"option protocol={opts['protocol']!r} must be auto (the stream protocol for streams "
                              "when RabbitMQ's stream port answers, else STOMP), stream or stomp")
        stream_port = _int(opts, "streamPort", 5551 if _bool(opts, "tls", False) else 5552)
        if stream_port > 65535:
            raise OptionError(f"option streamPort={stream_port} is not a TCP port (1-65535)")
        tls_only = [name for name in ("tlscafile", "tlsservername", "tlsverify") if name in opts]
        if tls_only and not tls:
            raise OptionError(f"option {tls_only[0]} needs option tls=true")
        return cls(
            host=host,
            port=port,
            vhost=opts.get("vhost", "/"),
            login=login,
            passcode=passcode,
            tls=tls,
            tls_ca_file=opts.get("tlscafile"),
            tls_verify=_bool(opts, "tlsVerify", True),
            tls_server_name=opts.get("tlsservername"),
            connect_timeout=float(_int(opts, "connectTimeoutMs", 10_000)) / 1000,
            read_timeout=float(_int(opts, "readTimeoutMs", 30_000)) / 1000,
            protocol=protocol,
            stream_host=(opts.get("streamhost") or host).strip(),
            stream_port=stream_port,
        )


def _offset_spec(opts: dict[str, str], name: str, default: str, allowed: tuple[str, ...]) -> str | int:
    raw = opts.get(name.lower(), default).strip().lower()
    if raw in allowed:
        return raw
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option {name}={raw!r} must be " + ", ".join(allowed) + " or a stream offset (integer >= 0)") from None
    if value < 0:
        raise OptionError(f"option {name}={raw!r} must not be negative")
    return value


@dataclass(frozen=True)
class ReadOptions:
    """What a batch or streaming read takes from the stream or queue."""

    destination: str
    mode: str = "stream"  # stream: a range of a stream queue; drain: take N from a queue
    starting: str | int = "earliest"  # earliest, latest or an offset
    ending: str | int = "latest"  # batch only: latest or an offset (exclusive)
    starting_timestamp: int | None = None  # batch only: unix seconds
    ending_timestamp: int | None = None
    max_messages_per_trigger: int | None = None
    num_partitions: int = 1
    prefetch: int = 500
    tail_idle: float = 0.3
    max_messages: int | None = None  # drain
    drain_idle: float = 1.0
    json_schema: str | None = None
    json_fail_fast: bool = False
    super_stream: str | None = None  # read every partition of this super stream
    partitions: tuple[str, ...] | None = None  # its partitions, if not found by RabbitMQ's naming
    starting_map: dict | None = None  # startingOffsets as JSON: partition -> offset (-2 earliest, -1 latest)
    fail_on_data_loss: bool = True

    @property
    def streams(self) -> str:
        """What the read names in its messages: the super stream or the destination."""
        return self.super_stream or self.destination

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool = False) -> "ReadOptions":
        opts = _lower(options)
        super_stream = _super_stream(opts)
        partitions = _partition_list(opts)
        starting_map = None
        raw_start = opts.get("startingoffsets", "").strip()
        if raw_start.startswith("{"):
            try:
                starting_map = parse_offset_map(raw_start, "startingOffsets")
            except ValueError as exc:
                raise OptionError(str(exc)) from None
            opts = {k: v for k, v in opts.items() if k != "startingoffsets"}
            if "startingtimestamp" in opts:
                raise OptionError("give startingOffsets or startingTimestamp, not both")
        if super_stream is not None:
            if opts.get("mode", "stream").strip().lower() != "stream":
                raise OptionError("option superStream reads streams: mode must be stream")
            opts = {**opts, "destination": STREAM_PREFIX + super_stream}  # checked like a stream's
        mode = opts.get("mode", "stream").strip().lower()
        if mode not in ("stream", "drain"):
            raise OptionError(f"option mode={mode!r} must be stream (read a stream queue) or drain (take messages from a queue)")
        if streaming and mode != "stream":
            raise OptionError("a streaming read needs mode=stream: only stream queues keep offsets a checkpoint can resume from")
        if mode == "stream":
            destination = _destination(opts, (STREAM_PREFIX,), "reading a stream (it must exist)")
        else:
            destination = _destination(opts, DRAIN_PREFIXES, "draining a queue")
        starting = _offset_spec(opts, "startingOffsets", "earliest", ("earliest", "latest"))
        ending = _offset_spec(opts, "endingOffsets", "latest", ("latest",))
        ts_start = _int(opts, "startingTimestamp", None, minimum=0)
        ts_end = _int(opts, "endingTimestamp", None, minimum=0)
        if streaming and ("endingoffsets" in opts or ts_end is not None):
            raise OptionError("endingOffsets/endingTimestamp are for batch reads; a streaming read has no end")
        if ts_start is not None and "startingoffsets" in opts:
            raise OptionError("give startingOffsets or startingTimestamp, not both")
        if ts_end is not None and "endingoffsets" in opts:
            raise OptionError("give endingOffsets or endingTimestamp, not both")
        if isinstance(starting, int) and isinstance(ending, int) and ending < starting:
            raise OptionError(f"endingOffsets={ending} is before startingOffsets={starting}")
        if ts_start is not None and ts_end is not None and ts_end < ts_start:
            raise OptionError(f"endingTimestamp={ts_end} is before startingTimestamp={ts_start}")
        max_messages = _int(opts, "maxMessages", None)
        if mode == "drain" and max_messages is None:
            raise OptionError("mode=drain needs option maxMessages: how many messages to take from the queue")
        if mode == "drain" and any(k in opts for k in ("startingoffsets", "endingoffsets", "startingtimestamp", "endingtimestamp")):
            raise OptionError("offsets and timestamps are for mode=stream; a drained queue has none")
        json_schema = opts.get("jsonSchema".lower())
        if json_schema is not None and not json_schema.strip():
            raise OptionError("option jsonSchema is empty: give a DDL schema such as 'key STRING, value DOUBLE'")
        return cls(
            destination=destination,
            mode=mode,
            starting=starting if ts_start is None else "timestamp",
            ending=ending if ts_end is None else "timestamp",
            starting_timestamp=ts_start,
            ending_timestamp=ts_end,
            max_messages_per_trigger=_int(opts, "maxMessagesPerTrigger", None),
            num_partitions=_int(opts, "numPartitions", 1),
            prefetch=_int(opts, "prefetch", 500),
            tail_idle=_int(opts, "tailIdleMs", 300) / 1000,
            max_messages=max_messages,
            drain_idle=_int(opts, "drainIdleMs", 1000) / 1000,
            json_schema=json_schema,
            json_fail_fast=_bool(opts, "jsonFailFast", False),
            super_stream=super_stream,
            partitions=partitions,
            starting_map=starting_map,
            fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        )


@dataclass(frozen=True)
class WriteOptions:
    """How each task publishes its rows."""

    destination: str | None = None  # None: every row has a destination column
    persistent: bool = True
    receipt_window: int = 100
    transactional: bool = False
    content_type: str | None = None
    super_stream: str | None = None  # route each row to a partition of this super stream
    partitions: tuple[str, ...] | None = None
    routing: str | None = None  # "partitionKey" (hash) or "routingKey" (the exchange's bindings)
    partition_key_hash: str = "murmur3"  # murmur3 (Java, Go, .NET clients) or rstream (the Python client)

    @classmethod
    def parse(cls, options: Mapping[str, str], columns: tuple[str, ...] = ()) -> "WriteOptions":
        opts = _lower(options)
        super_stream = _super_stream(opts)
        partitions = _partition_list(opts)
        routing = None
        if super_stream is not None:
            keys = [c for c in ("partitionKey", "routingKey") if c in columns]
            if len(keys) != 1:
                raise OptionError(
                    "writing to a super stream needs exactly one of the columns partitionKey (hashed as "
                    "RabbitMQ's stream clients do) or routingKey (routed by the super stream's bindings)")
            if "destination" in columns:
                raise OptionError("option superStream routes every row: drop the destination column")
            routing = keys[0]
            destination = None
        else:
            has_column = "destination" in columns
            destination = _destination(opts, WRITE_PREFIXES, "writing", required=not has_column)
        key_hash = opts.get("partitionkeyhash", "murmur3").strip().lower()
        if key_hash not in KEY_HASHES:
            raise OptionError(f"option partitionKeyHash={opts['partitionkeyhash']!r} must be murmur3 (as RabbitMQ's "
                              "Java, Go and .NET stream clients hash) or rstream (as the Python client rstream does)")
        return cls(
            super_stream=super_stream,
            partitions=partitions,
            routing=routing,
            partition_key_hash=key_hash,
            destination=destination,
            persistent=_bool(opts, "persistent", True),
            receipt_window=_int(opts, "receiptWindow", 100),
            transactional=_bool(opts, "transactional", False),
            content_type=opts.get("contenttype"),
        )
