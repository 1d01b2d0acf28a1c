"""MESSAGE frames to Spark rows and rows to SEND frames; JSON bodies to typed columns.

Pure functions: the readers and writers call them per message, the unit tests
call them directly.
"""

from __future__ import annotations

import base64
import json
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any, Callable

from stomp_bridge.spark.client import Frame

# The columns every read has, in this order (after the JSON columns, if any).
RAW_COLUMNS = ("body", "body_text", "destination", "headers", "message_id", "stream_offset", "timestamp")
RAW_SCHEMA = (
    "body BINARY, body_text STRING, destination STRING, headers MAP<STRING, STRING>, "
    "message_id STRING, stream_offset BIGINT, timestamp TIMESTAMP"
)

# MESSAGE headers that are columns or only mean something on this connection.
_NOT_IN_HEADERS = frozenset(
    ("destination", "message-id", "x-stream-offset", "subscription", "ack", "content-length", "redelivered"))
NOT_IN_HEADERS = _NOT_IN_HEADERS
# Headers a row's map may not set on SEND: the publisher owns them, or the server refuses them.
NOT_SENDABLE = frozenset(("destination", "receipt", "transaction", "content-length", "message-id",
                          "subscription", "ack", "redelivered", "x-stream-offset"))


def raw_values(frame: Frame) -> tuple:
    """The RAW_COLUMNS of one MESSAGE."""
    h = frame.headers
    body = frame.body
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    offset = h.get("x-stream-offset")
    ts = h.get("timestamp")
    timestamp = None
    if ts is not None and ts.lstrip("-").isdigit():
        timestamp = datetime.fromtimestamp(int(ts), tz=timezone.utc)
    headers = {k: v for k, v in h.items() if k not in _NOT_IN_HEADERS}
    return (body, text, h.get("destination"), headers, h.get("message-id"),
            int(offset) if offset is not None else None, timestamp)


# -- JSON bodies -------------------------------------------------------------------------


class JsonFieldError(ValueError):
    """A JSON value that does not fit its column's type."""


def _timestamp(value: Any) -> datetime:
    if isinstance(value, bool):
        raise JsonFieldError(f"{value!r} is not a timestamp")
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, tz=timezone.utc)
    if isinstance(value, str):
        parsed = datetime.fromisoformat(value)
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
    raise JsonFieldError(f"{value!r} is not a timestamp")


def _integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise JsonFieldError(f"{value!r} is not an integer")
    number = int(value)
    if isinstance(value, float) and number != value:
        raise JsonFieldError(f"{value!r} is not an integer")
    return number


def _float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise JsonFieldError(f"{value!r} is not a number")
    return float(value)


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise JsonFieldError(f"{value!r} is not true or false")
    return value


def _string(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


_SIMPLE: dict[str, Callable[[Any], Any]] = {
    "string": _string,
    "long": _integer,
    "integer": _integer,
    "short": _integer,
    "byte": _integer,
    "double": _float,
    "float": _float,
    "boolean": _boolean,
    "timestamp": _timestamp,
    "timestamp_ntz": lambda v: _timestamp(v).replace(tzinfo=None),
    "date": lambda v: date.fromisoformat(v) if isinstance(v, str) else _timestamp(v).date(),
    "binary": lambda v: base64.b64decode(v) if isinstance(v, str) else bytes(v),
}


def converter(data_type: Any) -> Callable[[Any], Any]:
    """A function from a parsed JSON value to what Spark expects for ``data_type`` (a pyspark DataType)."""
    name = data_type.typeName()
    if name == "struct":
        fields = [(f.name, converter(f.dataType)) for f in data_type.fields]

        def struct(value: Any) -> tuple:
            if not isinstance(value, dict):
                raise JsonFieldError(f"{value!r} is not an object")
            return tuple(None if value.get(n) is None else conv(value[n]) for n, conv in fields)

        return struct
    if name == "array":
        element = converter(data_type.elementType)
        return lambda v: [None if x is None else element(x) for x in _list(v)]
    if name == "map":
        val = converter(data_type.valueType)
        return lambda v: {str(k): None if x is None else val(x) for k, x in _dict(v).items()}
    if name == "decimal":
        return lambda v: Decimal(str(v))
    simple = _SIMPLE.get(name)
    if simple is None:
        raise JsonFieldError(f"JSON columns of type {data_type.simpleString()} are not supported")
    return simple


def _list(value: Any) -> list:
    if not isinstance(value, list):
        raise JsonFieldError(f"{value!r} is not an array")
    return value


def _dict(value: Any) -> dict:
    if not isinstance(value, dict):
        raise JsonFieldError(f"{value!r} is not an object")
    return value


def json_parser(struct_type: Any, fail_fast: bool) -> Callable[[bytes], tuple]:
    """Body -> one value per field of ``struct_type``; a body that is not such JSON gives
    all nulls, or raises with ``fail_fast``."""
    convert = converter(struct_type)
    empty = (None,) * len(struct_type.fields)

    def parse(body: bytes) -> tuple:
        try:
            return convert(json.loads(body))
        except (ValueError, TypeError, ArithmeticError) as exc:
            if fail_fast:
                raise JsonFieldError(f"body is not JSON matching the schema ({exc}): {body[:200]!r}") from exc
            return empty

    return parse


# -- rows -> SEND --------------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        # PySpark hands TIMESTAMP values over as naive local times: say which instant they are.
        return (value.astimezone(timezone.utc) if value.tzinfo is None else value).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def row_to_json(row: dict) -> bytes:
    return json.dumps(row, default=_json_default, separators=(",", ":")).encode()


def send_headers(row_headers: dict | None, persistent: bool, content_type: str | None) -> dict[str, str]:
    headers: dict[str, str] = {}
    if row_headers:
        for name, value in row_headers.items():
            if value is not None and name not in NOT_SENDABLE:
                headers[str(name)] = str(value)
    if persistent:
        headers["persistent"] = "true"
    if content_type is not None and "content-type" not in headers:
        headers["content-type"] = content_type
    return headers


def body_bytes(value: Any) -> bytes:
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode()
    return bytes(value)
