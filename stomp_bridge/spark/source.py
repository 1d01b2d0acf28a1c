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

import logging
import socket
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from stomp_bridge.spark.client import StompClient, StompClientError
from stomp_bridge.spark.options import STREAM_PREFIX, ConnectionOptions, OptionError, ReadOptions, WriteOptions
from stomp_bridge.spark.partitions import (
    DataLoss,
    dump_offsets,
    fair_shares,
    partition_for_key,
    partition_name,
    plan,
    split,
)
from stomp_bridge.spark.publishing import Publisher
from stomp_bridge.spark.reading import (
    DataLossError,
    StreamMissing,
    drain,
    exists,
    first_offset,
    first_offset_at,
    probe_tail,
    read_range,
)
from stomp_bridge.spark import streams
from stomp_bridge.spark.amqp10 import DURABLE, Amqp10Error, chunk_bodies, decode, encode
from stomp_bridge.spark.arrow import BATCH_ROWS, BatchMaker, Columns
from stomp_bridge.spark.rows import (
    NOT_IN_HEADERS,
    NOT_SENDABLE,
    RAW_COLUMNS,
    RAW_SCHEMA,
    body_bytes,
    row_to_json,
    send_headers,
)

log = logging.getLogger("stomp_bridge.spark")


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


# -- which path ----------------------------------------------------------------------------


def stream_port_answers(conn: ConnectionOptions) -> bool:
    try:
        socket.create_connection((conn.stream_host, conn.stream_port), timeout=min(conn.connect_timeout, 2.0)).close()
        return True
    except OSError:
        return False


def choose_stream_protocol(conn: ConnectionOptions) -> bool:
    """On the driver, once: does this query move a stream's data over RabbitMQ's stream protocol?
    protocol=stream: yes; stomp: no; auto: yes when rstream is installed and the stream port answers."""
    if conn.protocol == "stomp":
        return False
    if conn.protocol == "stream":
        return True
    return streams.available() and stream_port_answers(conn)


# -- reading -------------------------------------------------------------------------------


def split_range(lo: int, hi: int, parts: int) -> list[InputPartition]:
    """``[lo, hi)`` in up to ``parts`` contiguous, nearly equal ranges."""
    return [InputPartition(r) for r in split(lo, hi, parts)]


class _Reader:
    """What batch and streaming reads share: options, partitions and their tails, frames to rows.

    Offsets are kept as a map from stream queue name to offset, one entry per partition of a
    super stream, or one for the stream named by ``destination``."""

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
        self.schema = schema
        self.single = None if self.opts.super_stream else self.opts.destination[len(STREAM_PREFIX):]
        if self.opts.mode == "drain" and self.conn.protocol == "stream":
            raise OptionError("option protocol=stream reads streams; a drain (mode=drain) of a queue goes through "
                              "STOMP: drop the option or set protocol=stomp")
        self.stream = self.opts.mode == "stream" and choose_stream_protocol(self.conn)

    # -- where the partitions are ---------------------------------------------------------

    def _tail(self, name: str) -> int | None:
        """The stream's highest offset (-1: empty), None if it does not exist."""
        try:
            if self.stream:
                with streams.StreamSession(self.conn) as session:
                    return session.tail(name, self.opts.tail_idle)
            with StompClient(self.conn) as client:
                return probe_tail(client, STREAM_PREFIX + name, self.opts.prefetch, self.opts.tail_idle)
        except (StreamMissing, streams.StreamMissing) as exc:
            self.why_missing = str(exc)
            return None

    def _super_partitions(self) -> list[str] | None:
        """A super stream's partitions as RabbitMQ lists them (stream protocol), else None."""
        if not self.stream:
            return None
        with streams.StreamSession(self.conn) as session:
            return session.partitions(self.opts.super_stream)

    def _each(self, function, names) -> dict:
        names = list(names)
        if len(names) <= 1:
            return {n: function(n) for n in names}
        with ThreadPoolExecutor(max_workers=min(8, len(names))) as pool:
            return dict(zip(names, pool.map(function, names)))

    def tails(self, known=()) -> dict[str, int | None]:
        """Each partition's tail (None: it does not exist). A super stream's partitions are found
        by RabbitMQ's naming, ``<name>-0``, ``<name>-1``, ... up to the first missing one after
        those already ``known`` (or listed in option partitions)."""
        if self.single is not None:
            return {self.single: self._tail(self.single)}
        if self.opts.partitions is not None:
            return self._each(self._tail, self.opts.partitions)
        listed = self._super_partitions()
        if listed is not None:
            found = self._each(self._tail, listed)
            return {**{k: None for k in known if k not in found}, **found}  # a known one gone: deleted
        base = self.opts.super_stream
        count = 1 + max((int(k[len(base) + 1:]) for k in known
                         if k.startswith(base + "-") and k[len(base) + 1:].isdigit()), default=-1)
        found = self._each(self._tail, [partition_name(base, i) for i in range(count + 1)])
        index = count + 1
        while found[partition_name(base, index - 1)] is not None:
            found[partition_name(base, index)] = self._tail(partition_name(base, index))
            index += 1
        # a missing partition beyond the known ones ends the super stream, not a loss
        last_known = count - 1
        return {n: t for n, t in found.items() if t is not None or int(n[len(base) + 1:]) <= last_known}

    def existing(self, known=()) -> dict[str, int]:
        """The tails of the partitions that exist; a super stream without any fails."""
        tails = {n: t for n, t in self.tails(known).items() if t is not None}
        if not tails and self.single is not None:
            raise StompClientError(self.why_missing)
        if not tails:
            raise StompClientError(
                f"super stream {self.opts.super_stream} has no partitions: no stream queue "
                f"{partition_name(self.opts.super_stream, 0)}" + (
                    f" nor any of {', '.join(self.opts.partitions)}" if self.opts.partitions else "")
                + " (declare it with `rabbitmq-streams add_super_stream`, or list its streams in option partitions)")
        return tails

    def _first(self, name: str) -> int | None:
        if self.stream:
            with streams.StreamSession(self.conn) as session:
                return session.first(name, self.opts.tail_idle)
        with StompClient(self.conn) as client:
            return first_offset(client, STREAM_PREFIX + name, self.opts.tail_idle)

    def _at(self, name: str, timestamp: int, tail: int) -> int:
        if self.stream:
            with streams.StreamSession(self.conn) as session:
                found = session.first_at(name, timestamp, self.opts.tail_idle)
        else:
            with StompClient(self.conn) as client:
                found = first_offset_at(client, STREAM_PREFIX + name, timestamp, self.opts.tail_idle)
        return tail + 1 if found is None else found

    def starts(self, tails: dict[str, int]) -> dict[str, int]:
        """Where a read starts in each partition: startingOffsets (a word, an offset or a JSON map
        with -2 for earliest and -1 for latest), or startingTimestamp."""
        o = self.opts
        spec = {n: o.starting for n in tails}
        if o.starting_map is not None:
            unknown = sorted(set(o.starting_map) - set(tails))
            if unknown:
                raise OptionError(
                    f"option startingOffsets names {', '.join(unknown)}, which "
                    + ("is" if len(unknown) == 1 else "are") + f" not a partition of {o.streams}: "
                    f"its partitions are {', '.join(sorted(tails))}")
            spec = {n: {-2: "earliest", -1: "latest"}.get(o.starting_map.get(n, -2), o.starting_map.get(n, -2))
                    for n in tails}

        def start(name: str) -> int:
            how, tail = spec[name], tails[name]
            if how == "earliest":
                first = self._first(name) if tail >= 0 else None
                return 0 if first is None else first
            if how == "latest":
                return tail + 1
            if how == "timestamp":
                return self._at(name, o.starting_timestamp, tail)
            return how

        return self._each(start, tails)

    # -- offsets as Spark keeps them --------------------------------------------------------

    def dump(self, offsets: dict[str, int]) -> dict:
        """The checkpoint's JSON: ``{"offset": n}`` for one stream (as before super streams),
        ``{"<partition>": n, ...}`` for a super stream."""
        if self.single is not None:
            return {"offset": int(offsets[self.single])}
        return dump_offsets(offsets)

    def load(self, offset: dict) -> dict[str, int]:
        if self.single is not None:
            return {self.single: int(offset["offset"])}
        return {str(k): int(v) for k, v in offset.items()}

    # -- reading a range --------------------------------------------------------------------

    def lost(self, loss: DataLoss) -> None:
        """A gap in a read's offsets: data loss if retention removed them (asks the stream)."""
        if loss.first is not None:
            loss = loss.against(self._first(loss.partition))
            if loss is None:
                return
        text = loss.message(self.opts.super_stream)
        if self.opts.fail_on_data_loss:
            raise DataLossError(text)
        log.warning("failOnDataLoss=false, skipping: %s", text.split(" To skip")[0])

    def batches_of_frames(self, frames: Iterator, maker: BatchMaker):
        """STOMP MESSAGEs in Arrow batches of up to BATCH_ROWS rows (``rows.raw_values`` in columns,
        inlined: this loop runs once per message)."""
        columns = Columns()
        hidden = NOT_IN_HEADERS
        for frame in frames:
            h = frame.headers
            offset = h.get("x-stream-offset")
            ts = h.get("timestamp")
            columns.bodies.append(frame.body)
            columns.destinations.append(h.get("destination"))
            columns.headers.append({k: v for k, v in h.items() if k not in hidden})
            columns.message_ids.append(h.get("message-id"))
            columns.offsets.append(int(offset) if offset is not None else None)
            columns.timestamps.append(int(ts) * 1000 if ts is not None and ts.lstrip("-").isdigit() else None)
            if len(columns.bodies) >= BATCH_ROWS:
                yield maker.batch(columns)
                columns = Columns()
        if len(columns):
            yield maker.batch(columns)

    def batches_of_chunks(self, session, name: str, lo: int, hi: int, maker: BatchMaker):
        """Stream-protocol chunks in Arrow batches: whole chunks, at least BATCH_ROWS rows a batch.

        A chunk of plain messages (a data section each) costs one slice per body here: offsets,
        destinations and empty headers are whole-chunk list operations, message ids are made by
        Arrow (``<stream>@<offset>``). Any other message is decoded one by one."""
        columns = Columns()
        columns.id_prefix = f"{name}@"
        # a message without routing annotations (a stream-protocol publish): what the STOMP
        # path shows for it, and docs/spark.md says, /queue/<stream>
        default_destination = "/queue/" + name
        for frame, start, stop in session.chunks(name, lo, hi, self.lost):
            first = frame.chunk_first_offset
            n = stop - start
            bodies = chunk_bodies(frame.data, frame.num_entries, start, stop) if frame.num_entries == frame.num_records else None
            if bodies is not None:
                columns.bodies.extend(bodies)
                columns.destinations.extend([default_destination] * n)
                columns.headers.extend([None] * n)
                columns.message_ids.extend([None] * n)
                columns.offsets.extend(range(first + start, first + stop))
                columns.timestamps.extend([None] * n)
            else:
                offset = first + start
                for message in frame.get_messages()[start:stop]:
                    try:
                        body, headers, message_id, created, destination = decode(message)
                    except (Amqp10Error, IndexError, UnicodeDecodeError, TypeError, ValueError):
                        body, headers, message_id, created, destination = streams.decode_slowly(message)
                    columns.add(body, destination or default_destination, headers, message_id, offset, created)
                    offset += 1
            if len(columns) >= BATCH_ROWS:
                yield maker.batch(columns)
                columns = Columns()
                columns.id_prefix = f"{name}@"
        if len(columns):
            yield maker.batch(columns)

    def read_partition(self, partition: InputPartition):
        if partition is None or partition.value is None:  # Spark's stand-in when partitions() is empty
            return
        maker = BatchMaker(self.schema, self.json_type, self.opts.json_fail_fast)
        if self.stream:
            name, lo, hi = partition.value
            with streams.StreamSession(self.conn) as session:
                yield from self.batches_of_chunks(session, name, lo, hi, maker)
            return
        with StompClient(self.conn) as client:
            if self.opts.mode == "drain":
                frames = drain(client, self.opts.destination, partition.value, self.opts.prefetch, self.opts.drain_idle)
            else:
                name, lo, hi = partition.value
                frames = read_range(client, STREAM_PREFIX + name, lo, hi, self.opts.prefetch, self.lost, name)
            yield from self.batches_of_frames(frames, maker)

    def plan(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [InputPartition(p) for p in plan(start, end, self.opts.num_partitions)]


class StompBatchReader(_Reader, DataSourceReader):
    """A bounded range of a stream or of every partition of a super stream, or up to
    ``maxMessages`` taken from a queue."""

    def __init__(self, options, schema: StructType) -> None:
        super().__init__(options, schema, streaming=False)

    def partitions(self) -> list[InputPartition]:
        o = self.opts
        if o.mode == "drain":
            share, extra = divmod(o.max_messages, o.num_partitions)
            return [InputPartition(share + (1 if i < extra else 0))
                    for i in range(o.num_partitions) if share or i < extra]
        tails = self.existing()
        start = self.starts(tails)
        end = {}
        for name, tail in tails.items():
            hi = tail + 1
            if o.ending == "timestamp":
                hi = min(hi, self._at(name, o.ending_timestamp, tail))
            elif o.ending != "latest":
                hi = min(hi, o.ending)
            end[name] = max(hi, start[name])
        return self.plan(start, end)

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        return self.read_partition(partition)


class StompStreamReader(_Reader, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of a stream queue or a super stream; the checkpointed offsets (one per
    partition) are where a restart resumes."""

    def __init__(self, options, schema: StructType) -> None:
        super().__init__(options, schema, streaming=True)
        self.target: dict[str, int] | None = None  # Trigger.AvailableNow: never plan past these

    def initialOffset(self) -> dict:
        return self.dump(self.starts(self.existing()))

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_messages_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = {name: tail + 1 for name, tail in self.existing().items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = self.load(start)
        tails = self.tails(begin)
        end: dict[str, int] = {}
        for name, tail in tails.items():
            first = begin.get(name, 0)  # a partition added while the query runs: from its first offset
            if tail is None:
                if name in begin:  # deleted under the running query (once: then dropped from the offsets)
                    self.lost(DataLoss(name, first, None))
                continue
            hi = tail + 1
            if self.target is not None:
                hi = min(hi, self.target.get(name, first))
            end[name] = max(hi, first)
        if isinstance(limit, ReadMaxRows):
            shares = fair_shares({n: end[n] - begin.get(n, 0) for n in end}, limit.max_rows)
            end = {n: begin.get(n, 0) + shares[n] for n in end}
        return self.dump(end)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return self.plan(self.load(start), self.load(end))

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        return self.read_partition(partition)

    def commit(self, end: dict) -> None:
        """Nothing to release: the stream keeps its messages, the checkpoint keeps the offsets."""


# -- writing -------------------------------------------------------------------------------

FRAME_BYTES = 900_000  # a publish frame's messages: under RabbitMQ's default stream frame_max (1 MiB)
FRAME_MESSAGES = 1000
IN_FLIGHT = 20_000  # unconfirmed messages per stream and task


@dataclass
class StompCommitMessage(WriterCommitMessage):
    messages: int
    unroutable: int = 0


def _task():
    from pyspark import TaskContext

    return TaskContext.get()


class StompWriter(DataSourceArrowWriter):
    """Rows from Arrow batches; a task returns only after RabbitMQ confirmed all of its rows.

    Columns: ``body`` (binary or string; without it the whole row is sent as a
    JSON object), ``destination`` (else the option), ``headers`` (map). With option
    ``superStream``: ``partitionKey`` (the partition RabbitMQ's stream clients' hash picks) or
    ``routingKey`` (the super stream's exchange routes it by its bindings).

    A stream or super stream written over the stream protocol: batched publishes, one named
    producer per task and stream (``producer_name``) whose publishing ids make RabbitMQ drop
    what a retried task sends again. Everything else: one SEND per row, through STOMP."""

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
        self.stream = self.use_stream_protocol()
        self.partitions = self.find_partitions() if self.opts.routing == "partitionKey" else None
        self.job = uuid.uuid4().hex[:16]  # names this write's producers (batch writes)

    def use_stream_protocol(self) -> bool:
        """On the driver: streams and super streams over the stream protocol (protocol=auto when
        its port answers and the destination is a stream; protocol=stream always)."""
        o, conn = self.opts, self.conn
        if conn.protocol == "stomp":
            return False
        streamable = o.super_stream is not None or (
            not self.has_destination and o.destination is not None and o.destination.startswith(STREAM_PREFIX))
        refuse = None
        if not streamable:
            refuse = "writes streams (destination /amq/queue/<stream> or superStream), not a destination column"
        elif o.transactional:
            refuse = "has no transactions: transactional=true goes through STOMP"
        if refuse is not None:
            if conn.protocol == "stream":
                raise OptionError(f"option protocol=stream {refuse}; drop the option or set protocol=stomp")
            return False
        if conn.protocol == "auto":
            if not (streams.available() and stream_port_answers(conn)):
                return False
            if o.super_stream is None:  # /amq/queue/<name> may be a classic or quorum queue
                with streams.StreamSession(conn) as session:
                    return session.exists(o.destination[len(STREAM_PREFIX):])
        return True

    def find_partitions(self) -> tuple[str, ...]:
        """On the driver: the super stream's partitions in order (option partitions; RabbitMQ's own
        list over the stream protocol; else ``<name>-0``, ``<name>-1``, ... up to the first missing)."""
        o = self.opts
        if o.partitions is not None:
            return o.partitions
        found: list[str] = []
        if self.stream:
            with streams.StreamSession(self.conn) as session:
                found = session.partitions(o.super_stream)
        else:
            while True:
                name = partition_name(o.super_stream, len(found))
                with StompClient(self.conn) as client:
                    if not exists(client, STREAM_PREFIX + name):
                        break
                found.append(name)
        if not found:
            raise StompClientError(
                f"super stream {o.super_stream} has no partitions: no stream queue {partition_name(o.super_stream, 0)} "
                "(declare it with `rabbitmq-streams add_super_stream`, or list its streams in option partitions)")
        return tuple(found)

    def hash_key(self, key) -> int:
        return partition_for_key(str(key), len(self.partitions), self.opts.partition_key_hash)

    def route(self, row: dict) -> str:
        """Where a row goes (STOMP path): its destination, or its super stream partition."""
        o = self.opts
        if o.routing is None:
            destination = (row["destination"] if self.has_destination else None) or o.destination
            if destination is None:
                raise OptionError("a row has no destination: fill the destination column or set option destination")
            return destination
        key = row[o.routing]
        if key is None:
            raise OptionError(f"a row's {o.routing} is null: every row written to a super stream needs one")
        if o.routing == "routingKey":
            return f"/exchange/{o.super_stream}/{key}"
        return STREAM_PREFIX + self.partitions[self.hash_key(key)]

    def producer_name(self) -> tuple[str, int]:
        """The producer name of this task and the first publishing id of its rows.

        Batch writes: ``spark-<write>-<partition>``, ids from 1: a task attempt retried after a
        failure sends the same rows with the same ids. Streaming writes: ``spark-<query id>-<partition>``,
        ids from ``batch id * 2**32 + 1``: a micro-batch run again after a restart likewise. RabbitMQ
        keeps the highest id per producer name and stream and drops lower ones (deduplication).
        Same rows in the same order give the same ids: that holds for a partition computed by the same
        plan from the same input (it need not after a shuffle without an order)."""
        ctx = _task()
        partition = ctx.partitionId() if ctx is not None else 0
        query = ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None
        batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
        if query and batch is not None and str(batch).isdigit():
            return f"spark-{query}-{partition}", (int(batch) << 32) + 1
        return f"spark-{self.job}-{partition}", 1

    def write(self, iterator) -> StompCommitMessage:
        if self.stream:
            return self.write_streams(iterator)
        o = self.opts
        content_type = o.content_type or (None if self.has_body else "application/json")
        transaction = f"spark-{uuid.uuid4().hex}" if o.transactional else None
        with StompClient(self.conn) as client:
            publisher = Publisher(client, o.receipt_window, transaction)
            for batch in iterator:
                for row in batch.to_pylist():
                    publisher.publish(self.route(row), self.body_of(row),
                                      send_headers(self.headers_of(row), o.persistent, content_type))
            return StompCommitMessage(publisher.finish())

    def body_of(self, row: dict) -> bytes:
        if self.has_body:
            return body_bytes(row["body"])
        return row_to_json({c: row[c] for c in self.payload_columns})

    def headers_of(self, row: dict) -> dict | None:
        value = row["headers"] if self.has_headers else None
        return dict(value) if isinstance(value, list) else value

    def bodies(self, batch) -> list[bytes]:
        if not self.has_body:
            return [row_to_json(r) for r in batch.select(self.payload_columns).to_pylist()]
        column = batch.column("body")
        return [b"" if b is None else (b.encode() if isinstance(b, str) else b) for b in column.to_pylist()]

    def write_streams(self, iterator) -> StompCommitMessage:
        o = self.opts
        content_type = o.content_type or (None if self.has_body else "application/json")
        name, first_id = self.producer_name()
        routes: dict = {}
        unroutable = 0
        with streams.StreamSession(self.conn) as session:
            limit = min(FRAME_BYTES, session.frame_max(FRAME_BYTES) - 1024)
            outs: dict[str, list] = {}  # stream -> [publisher, next id, pending messages, pending bytes]

            def flush(out) -> None:
                publisher, next_id, pending, _ = out
                publisher.publish(pending, next_id)
                out[1], out[2], out[3] = next_id + len(pending), [], 0
                publisher.wait(IN_FLIGHT)

            def out_for(stream: str):
                out = outs.get(stream)
                if out is None:
                    out = outs[stream] = [session.publisher(stream, name), first_id, [], 0]
                return out

            single = None if o.super_stream else out_for(o.destination[len(STREAM_PREFIX):])
            durable = DURABLE if o.persistent else b""
            lead, lead_long = durable + b"\x00\x53\x75\xa0", durable + b"\x00\x53\x75\xb0"
            for batch in iterator:
                bodies = self.bodies(batch)
                heads = batch.column("headers").to_pylist() if self.has_headers else None
                keys = batch.column(o.routing).to_pylist() if o.routing else None
                for i, body in enumerate(bodies):
                    if heads is not None or content_type is not None:
                        h = heads[i] if heads is not None else None
                        message = encode(body, {k: v for k, v in (h or ()) if v is not None and k not in NOT_SENDABLE}
                                         if h else None, content_type, o.persistent)
                    elif len(body) < 256:
                        message = lead + bytes((len(body),)) + body
                    else:
                        message = lead_long + len(body).to_bytes(4, "big") + body
                    if single is not None:
                        out = single
                    else:
                        key = keys[i]
                        if key is None:
                            raise OptionError(f"a row's {o.routing} is null: every row written to a super stream needs one")
                        target = routes.get(key)
                        if target is None:
                            if o.routing == "partitionKey":
                                target = self.partitions[self.hash_key(key)]
                            else:
                                found = session.route(str(key), o.super_stream)
                                target = found[0] if found else ""
                            routes[key] = target
                        if not target:
                            unroutable += 1
                            continue
                        out = out_for(target)
                    out[2].append(message)
                    out[3] += len(message) + 16
                    if len(out[2]) >= FRAME_MESSAGES or out[3] >= limit:
                        flush(out)
            for out in outs.values():
                if out[2]:
                    flush(out)
            confirmed = sum(out[0].close() for out in outs.values())
        if unroutable:
            log.warning("superStream %s: %d row(s) had a routingKey no binding of the super stream takes; "
                        "RabbitMQ would drop them, so they were not sent", o.super_stream, unroutable)
        return StompCommitMessage(confirmed, unroutable)

    def commit(self, messages) -> None:
        unroutable = sum(getattr(m, "unroutable", 0) for m in messages if m is not None)
        if unroutable:
            log.warning("superStream %s: %d row(s) were not routable (no binding takes their routingKey)",
                        self.opts.super_stream, unroutable)


class StompStreamWriter(StompWriter, DataSourceStreamArrowWriter):
    """The same per-task guarantee for every micro-batch. Over STOMP: at-least-once (a batch
    retried after a failure publishes its rows again); over the stream protocol, RabbitMQ drops
    what a retried micro-batch publishes again (``producer_name``)."""

    def commit(self, messages, batchId) -> None:
        StompWriter.commit(self, messages)

    def abort(self, messages, batchId) -> None:
        pass
