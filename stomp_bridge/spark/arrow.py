"""Runs of messages to ``pyarrow.RecordBatch``es, and JSON bodies to typed columns by pyarrow.

PySpark (4.2+) takes a data source's ``read()`` output as Arrow record batches as they are: no
Python object per row crosses into the JVM. A read collects a run of messages as plain lists
(one per column), and ``Columns.batch`` turns them into one batch. With ``jsonSchema`` the bodies
are joined by newlines and parsed by ``pyarrow.json`` in one call; a run that pyarrow cannot
parse as such (a body that is not JSON, a value of another type than its column's) is parsed
body by body as before (``rows.json_parser``), so the columns mean the same either way.
"""

from __future__ import annotations

import io
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from stomp_bridge.spark.rows import RAW_COLUMNS, json_parser

BATCH_ROWS = 8192  # rows per RecordBatch: Spark's own default Arrow batch is 10,000


def arrow_schema(spark_schema) -> pa.Schema:
    """The Arrow schema PySpark checks a reader's batches against (timestamps in UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema, timezone="UTC")


class Columns:
    """The raw columns of a run of messages; ``timestamps`` in milliseconds."""

    __slots__ = ("bodies", "destinations", "headers", "id_prefix", "message_ids", "offsets", "timestamps")

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.destinations: list[str | None] = []
        self.headers: list[dict | None] = []
        self.message_ids: list[str | None] = []
        self.offsets: list[int | None] = []
        self.timestamps: list[int | None] = []
        self.id_prefix: str | None = None  # a missing message id: this prefix and the offset

    def __len__(self) -> int:
        return len(self.bodies)

    def add(self, body: bytes, destination, headers, message_id, offset, timestamp_ms) -> None:
        self.bodies.append(body)
        self.destinations.append(destination)
        self.headers.append(headers)
        self.message_ids.append(message_id)
        self.offsets.append(offset)
        self.timestamps.append(timestamp_ms)


def _texts(bodies: pa.Array) -> pa.Array:
    try:
        return bodies.cast(pa.string())
    except pa.ArrowInvalid:  # some body is not UTF-8: that row's body_text is null
        out = []
        for b in bodies.to_pylist():
            try:
                out.append(b.decode("utf-8"))
            except UnicodeDecodeError:
                out.append(None)
        return pa.array(out, pa.string())


def _maps(maps: list[dict | None], kind: pa.DataType) -> pa.Array:
    if maps.count(None) == len(maps):  # no message had headers: n empty maps
        empty = pa.array([], pa.string())
        return pa.MapArray.from_arrays(pa.array([0] * (len(maps) + 1), pa.int32()), empty, empty, type=kind)
    offsets, keys, values = [0], [], []
    for m in maps:
        if m:
            keys.extend(m.keys())
            values.extend(m.values())
        offsets.append(len(keys))
    return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(keys, pa.string()),
                                   pa.array(values, pa.string()), type=kind)


def _same_value(values: list, n: int):
    return n and values[0] is not None and values.count(values[0]) == n


class BatchMaker:
    """Builds the reader's batches: the JSON columns (if any) then the raw ones, in the schema's types."""

    def __init__(self, spark_schema, json_type, json_fail_fast: bool) -> None:
        self.schema = arrow_schema(spark_schema)
        self.json_type = json_type
        self.json_fail_fast = json_fail_fast
        self.raw_fields = [self.schema.field(name) for name in RAW_COLUMNS]
        if json_type is not None:
            self.json_schema = pa.schema(self.schema.field(i) for i in range(len(json_type.fields)))
            self.parse_one = json_parser(json_type, json_fail_fast)
            self.parse_options = pa_json.ParseOptions(explicit_schema=self.json_schema,
                                                      unexpected_field_behavior="ignore",
                                                      newlines_in_values=False)

    def batch(self, c: Columns) -> pa.RecordBatch:
        n = len(c)
        bodies = pa.array(c.bodies, pa.binary())
        f = {f.name: f for f in self.raw_fields}
        if _same_value(c.destinations, n):  # one stream's run: one value, no list to convert
            destinations = pa.repeat(pa.scalar(c.destinations[0], pa.string()), n)
        else:
            destinations = pa.array(c.destinations, pa.string())
        timestamps = pa.array(c.timestamps, pa.int64()).cast(pa.timestamp("ms")).cast(
            pa.timestamp("us")).cast(f["timestamp"].type)
        offsets = pa.array(c.offsets, pa.int64())
        ids = pa.array(c.message_ids, pa.string())
        if c.id_prefix is not None and ids.null_count:
            made = pc.binary_join_element_wise(c.id_prefix, offsets.cast(pa.string()), "")
            ids = made if ids.null_count == n else pc.coalesce(ids, made)
        raw = [bodies, _texts(bodies), destinations, _maps(c.headers, f["headers"].type), ids, offsets, timestamps]
        arrays = (self.json_columns(c.bodies) if self.json_type is not None else []) + raw
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def json_columns(self, bodies: list[bytes]) -> list[pa.Array]:
        joined = b"\n".join(bodies)
        if joined.count(b"\n") != len(bodies) - 1:  # a raw newline can only be JSON whitespace
            joined = b"\n".join(b.replace(b"\n", b" ").replace(b"\r", b" ") for b in bodies)
        try:
            table = pa_json.read_json(io.BytesIO(joined), parse_options=self.parse_options,
                                      read_options=pa_json.ReadOptions(block_size=max(1 << 20, len(joined) + 1)))
            if table.num_rows == len(bodies):
                return [table.column(i).combine_chunks().cast(self.json_schema.field(i).type)
                        for i in range(len(self.json_schema))]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pass
        rows = [self.parse_one(b) for b in bodies]  # body by body: the exact, slower meaning
        return [pa.array([_fix(r[i], self.json_schema.field(i).type) for r in rows], self.json_schema.field(i).type)
                for i in range(len(self.json_schema))]


def _fix(value, kind: pa.DataType):
    """What ``rows.converter`` gives, as Arrow takes it: structs as dicts, maps as pairs, UTC times."""
    if value is None:
        return None
    if pa.types.is_struct(kind):
        return {kind.field(i).name: _fix(v, kind.field(i).type) for i, v in enumerate(value)}
    if pa.types.is_map(kind):
        return [(k, _fix(v, kind.item_type)) for k, v in value.items()]
    if pa.types.is_list(kind):
        return [_fix(v, kind.value_type) for v in value]
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(timezone.utc)
    return value


def batches(runs, maker: BatchMaker):
    """Batches of at most BATCH_ROWS rows from an iterator of ``Columns``."""
    for c in runs:
        if len(c):
            yield maker.batch(c)
