"""The ``stomp`` data source for Spark 4.2+ (``pyspark.sql.datasource``).

Driver-side objects (the DataSource, readers' planning methods, writers'
commit) only parse options and plan offset ranges; every byte of data moves in
``read()``/``write()`` on the executors, each task over its own STOMP
connection opened there. Streaming offsets are ``{"offset": n}``: the next
stream offset to read. Spark writes them to the checkpoint before a batch
runs, so a restarted query replans the same range and continues after it;
``commit()`` needs to do nothing (it is not even called for the last batch
before a stop).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Iterator

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from stomp_bridge.spark.client import StompClient
from stomp_bridge.spark.options import ConnectionOptions, OptionError, ReadOptions, WriteOptions
from stomp_bridge.spark.publishing import Publisher
from stomp_bridge.spark.reading import drain, first_offset_at, probe_tail, read_range
from stomp_bridge.spark.rows import RAW_COLUMNS, RAW_SCHEMA, body_bytes, json_parser, raw_values, row_to_json, send_headers


class StompDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("stomp")``; options in docs/spark.md."""

    @classmethod
    def name(cls) -> str:
        return "stomp"

    def schema(self) -> str:
        json_schema = self.options.get("jsonSchema")
        return RAW_SCHEMA if not json_schema else f"{json_schema}, {RAW_SCHEMA}"

    def reader(self, schema: StructType) -> "StompBatchReader":
        return StompBatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> "StompStreamReader":
        return StompStreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> "StompWriter":
        return StompWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> "StompStreamWriter":
        return StompStreamWriter(self.options, schema)


# -- reading -------------------------------------------------------------------------------


def split_range(lo: int, hi: int, parts: int) -> list[InputPartition]:
    """``[lo, hi)`` in up to ``parts`` contiguous, nearly equal ranges."""
    count = hi - lo
    if count <= 0:
        return []
    parts = min(parts, count)
    step, extra = divmod(count, parts)
    out, start = [], lo
    for i in range(parts):
        end = start + step + (1 if i < extra else 0)
        out.append(InputPartition((start, end)))
        start = end
    return out


class _Reader:
    """What batch and streaming reads share: options, tail probes, turning frames into rows."""

    def __init__(self, options, schema: StructType, streaming: bool) -> None:
        self.conn = ConnectionOptions.parse(options)
        self.opts = ReadOptions.parse(options, streaming=streaming)
        names = [f.name for f in schema.fields]
        if tuple(names[-len(RAW_COLUMNS):]) != RAW_COLUMNS:
            raise OptionError(
                "the stomp source has its own columns (" + ", ".join(RAW_COLUMNS) + "): drop .schema(...) "
                "and give the body's JSON columns with option jsonSchema instead")
        json_fields = names[: len(names) - len(RAW_COLUMNS)]
        clash = sorted(set(json_fields) & set(RAW_COLUMNS))
        if clash:
            raise OptionError(f"jsonSchema column(s) {', '.join(clash)} clash with the source's own columns; rename them")
        self.json_type = StructType(schema.fields[: len(json_fields)]) if json_fields else None

    def tail(self) -> int:
        with StompClient(self.conn) as client:
            return probe_tail(client, self.opts.destination, self.opts.prefetch, self.opts.tail_idle)

    def offset_at(self, timestamp: int) -> int:
        with StompClient(self.conn) as client:
            found = first_offset_at(client, self.opts.destination, timestamp, self.opts.tail_idle)
        return self.tail() + 1 if found is None else found

    def rows(self, frames: Iterator) -> Iterator[tuple]:
        if self.json_type is None:
            for frame in frames:
                yield raw_values(frame)
            return
        parse = json_parser(self.json_type, self.opts.json_fail_fast)
        for frame in frames:
            yield parse(frame.body) + raw_values(frame)

    def read_partition(self, partition: InputPartition) -> Iterator[tuple]:
        if partition is None or partition.value is None:  # Spark's stand-in when partitions() is empty
            return
        with StompClient(self.conn) as client:
            if self.opts.mode == "drain":
                frames = drain(client, self.opts.destination, partition.value, self.opts.prefetch, self.opts.drain_idle)
            else:
                lo, hi = partition.value
                frames = read_range(client, self.opts.destination, lo, hi, self.opts.prefetch)
            yield from self.rows(frames)


class StompBatchReader(_Reader, DataSourceReader):
    """A bounded range of a stream, or up to ``maxMessages`` taken from a queue."""

    def __init__(self, options, schema: StructType) -> None:
        super().__init__(options, schema, streaming=False)

    def partitions(self) -> list[InputPartition]:
        o = self.opts
        if o.mode == "drain":
            share, extra = divmod(o.max_messages, o.num_partitions)
            return [InputPartition(share + (1 if i < extra else 0))
                    for i in range(o.num_partitions) if share or i < extra]
        end = self.tail() + 1
        lo = {"earliest": 0, "latest": end}.get(o.starting, o.starting)
        if o.starting == "timestamp":
            lo = self.offset_at(o.starting_timestamp)
        hi = end if o.ending == "latest" else o.ending
        if o.ending == "timestamp":
            hi = self.offset_at(o.ending_timestamp)
        return split_range(lo, min(hi, end), o.num_partitions)

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        return self.read_partition(partition)


class StompStreamReader(_Reader, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of a stream queue; the checkpointed offset is where a restart resumes."""

    def __init__(self, options, schema: StructType) -> None:
        super().__init__(options, schema, streaming=True)
        self.target: int | None = None  # Trigger.AvailableNow: never plan past this

    def initialOffset(self) -> dict:
        start = self.opts.starting
        if start == "earliest":
            return {"offset": 0}
        if start == "latest":
            return {"offset": self.tail() + 1}
        if start == "timestamp":
            return {"offset": self.offset_at(self.opts.starting_timestamp)}
        return {"offset": start}

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_messages_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self.tail() + 1

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = start["offset"]
        end = self.target if self.target is not None else self.tail() + 1
        if isinstance(limit, ReadMaxRows):
            end = min(end, begin + limit.max_rows)
        return {"offset": max(end, begin)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return split_range(start["offset"], end["offset"], self.opts.num_partitions)

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        return self.read_partition(partition)

    def commit(self, end: dict) -> None:
        """Nothing to release: the stream keeps its messages, the checkpoint keeps the offset."""


# -- writing -------------------------------------------------------------------------------


@dataclass
class StompCommitMessage(WriterCommitMessage):
    messages: int


class StompWriter(DataSourceWriter):
    """Each row one SEND; a task returns only after RabbitMQ confirmed all of its rows.

    Columns: ``body`` (binary or string; without it the whole row is sent as a
    JSON object), ``destination`` (else the option), ``headers`` (map)."""

    def __init__(self, options, schema: StructType) -> None:
        columns = tuple(f.name for f in schema.fields)
        self.conn = ConnectionOptions.parse(options)
        self.opts = WriteOptions.parse(options, columns)
        self.has_body = "body" in columns
        self.has_destination = "destination" in columns
        self.has_headers = "headers" in columns
        if self.has_headers and schema["headers"].dataType.typeName() != "map":
            raise OptionError("column headers must be a map of header name to value, e.g. map<string,string>")
        self.payload_columns = [c for c in columns if c not in ("destination", "headers")]

    def write(self, iterator) -> StompCommitMessage:
        o = self.opts
        content_type = o.content_type or (None if self.has_body else "application/json")
        transaction = f"spark-{uuid.uuid4().hex}" if o.transactional else None
        with StompClient(self.conn) as client:
            publisher = Publisher(client, o.receipt_window, transaction)
            for row in iterator:
                if self.has_body:
                    body = body_bytes(row["body"])
                else:
                    record = row.asDict(recursive=True)
                    body = row_to_json({c: record[c] for c in self.payload_columns})
                destination = (row["destination"] if self.has_destination else None) or o.destination
                if destination is None:
                    raise OptionError("a row has no destination: fill the destination column or set option destination")
                headers = send_headers(row["headers"] if self.has_headers else None, o.persistent, content_type)
                publisher.publish(destination, body, headers)
            return StompCommitMessage(publisher.finish())


class StompStreamWriter(StompWriter, DataSourceStreamWriter):
    """The same per-task guarantee for every micro-batch (at-least-once: a batch that is
    retried after a failure publishes its rows again)."""

    def commit(self, messages, batchId) -> None:
        pass

    def abort(self, messages, batchId) -> None:
        pass
