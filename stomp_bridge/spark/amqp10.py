"""AMQP 1.0 messages as RabbitMQ stores them in a stream, decoded into the connector's columns.

A stream's chunk holds each message as its AMQP 1.0 encoding (sections: header, annotations,
properties, application-properties, data). A read needs only a few of their fields, so this
decoder walks the sections itself (standard library only, no object per section) and hands back
what the columns are made of; rstream's own decoder builds a full message object per message,
which costs more than everything else a read does. ``encode`` is the inverse for the writer:
properties, application-properties and one data section.

Section and field numbers are from the AMQP 1.0 specification, part 3 (messaging).
"""

from __future__ import annotations

import struct
from typing import Any

_U16, _U32, _U64 = struct.Struct(">H"), struct.Struct(">I"), struct.Struct(">Q")
_I32, _I64 = struct.Struct(">i"), struct.Struct(">q")
_F32, _F64 = struct.Struct(">f"), struct.Struct(">d")

# fixed-width constructors: code -> (width, struct or None)
_FIXED = {
    0x50: (1, None), 0x51: (1, "b"), 0x52: (1, None), 0x53: (1, None), 0x54: (1, "b"), 0x55: (1, "b"),
    0x56: (1, "?"), 0x60: (2, None), 0x61: (2, "h"), 0x70: (4, None), 0x71: (4, "i"), 0x72: (4, "f"),
    0x73: (4, None), 0x74: (4, None), 0x80: (8, None), 0x81: (8, "q"), 0x82: (8, "d"), 0x83: (8, "q"),
    0x84: (8, None), 0x94: (16, None), 0x98: (16, None),
}
_SIGNED = {1: "b", 2: "h", 4: "i", 8: "q"}


class Amqp10Error(ValueError):
    """A message that is not AMQP 1.0 this decoder reads (the caller falls back to rstream's)."""


def _value(buf, pos: int) -> tuple[Any, int]:
    code = buf[pos]
    pos += 1
    if code == 0x00:  # described: the descriptor, then the value (kept as the value)
        _, pos = _value(buf, pos)
        return _value(buf, pos)
    if code == 0x40:
        return None, pos
    if code == 0x41:
        return True, pos
    if code == 0x42:
        return False, pos
    if code in (0x43, 0x44):
        return 0, pos
    if code == 0x45:
        return [], pos
    if code in (0xA0, 0xA1, 0xA3):
        size = buf[pos]
        raw = bytes(buf[pos + 1:pos + 1 + size])
        return (raw if code == 0xA0 else raw.decode("utf-8")), pos + 1 + size
    if code in (0xB0, 0xB1, 0xB3):
        size = _U32.unpack_from(buf, pos)[0]
        raw = bytes(buf[pos + 4:pos + 4 + size])
        return (raw if code == 0xB0 else raw.decode("utf-8")), pos + 4 + size
    if code in (0xC0, 0xC1, 0xD0, 0xD1):
        if code in (0xC0, 0xC1):
            count, pos = buf[pos + 1], pos + 2
        else:
            count, pos = _U32.unpack_from(buf, pos + 4)[0], pos + 8
        items = []
        for _ in range(count):
            item, pos = _value(buf, pos)
            items.append(item)
        if code in (0xC1, 0xD1):
            return dict(zip(items[0::2], items[1::2])), pos
        return items, pos
    fixed = _FIXED.get(code)
    if fixed is None:
        raise Amqp10Error(f"AMQP 1.0 type 0x{code:02x} is not read here")
    width, fmt = fixed
    raw = buf[pos:pos + width]
    if code == 0x98:
        import uuid
        return str(uuid.UUID(bytes=bytes(raw))), pos + width
    if fmt is None:
        return int.from_bytes(raw, "big"), pos + width
    return struct.unpack(">" + fmt, raw)[0], pos + width


# properties fields (AMQP 1.0 3.2.4) that are STOMP headers on the other path
_PROPERTY_HEADERS = {2: "to", 3: "subject", 4: "reply-to", 5: "correlation-id", 6: "content-type",
                     7: "content-encoding"}


def decode(message) -> tuple[bytes, dict[str, str] | None, str | None, int | None, str | None]:
    """``(body, headers, message_id, creation_time_ms, exchange/routing key destination)`` of one
    stored message. ``headers`` is None when the message has nothing but its body."""
    if message[:3] == b"\x00\x53\x75":  # only a data section: what rstream and most producers write
        code = message[3]
        if code == 0xA0 and len(message) == 5 + message[4]:
            return bytes(message[5:]), None, None, None, None
        if code == 0xB0 and len(message) == 8 + _U32.unpack_from(message, 4)[0]:
            return bytes(message[8:]), None, None, None, None
    pos, end = 0, len(message)
    body = b""
    headers: dict[str, str] = {}
    message_id = created = None
    exchange = routing_key = None
    parts: list[bytes] = []
    while pos < end:
        if message[pos] != 0x00:
            raise Amqp10Error("not an AMQP 1.0 section")
        descriptor, pos = _value(message, pos + 1)
        value, pos = _value(message, pos)
        if descriptor == 0x75:
            parts.append(value)
        elif descriptor == 0x77:  # amqp-value: a string or binary is the body, anything else its text
            parts.append(value if isinstance(value, bytes) else str(value).encode())
        elif descriptor == 0x70 and value:  # header: durable, priority
            if value[0]:
                headers["persistent"] = "true"
            if len(value) > 1 and value[1] is not None:
                headers["priority"] = str(value[1])
        elif descriptor == 0x72 and value:  # message-annotations: where RabbitMQ routed it
            exchange, routing_key = value.get("x-exchange"), value.get("x-routing-key")
        elif descriptor == 0x73 and value:
            for i, name in _PROPERTY_HEADERS.items():
                if i < len(value) and value[i] is not None:
                    headers[name] = value[i] if isinstance(value[i], str) else str(value[i])
            if value[0] is not None:
                message_id = str(value[0])
            if len(value) > 9 and value[9] is not None:
                created = int(value[9])
                headers["timestamp"] = str(created // 1000)  # as STOMP shows it: seconds
        elif descriptor == 0x74 and value:
            for k, v in value.items():
                if v is not None:
                    headers[str(k)] = v if isinstance(v, str) else (
                        str(v).lower() if isinstance(v, bool) else str(v))
    body = parts[0] if len(parts) == 1 else b"".join(parts)
    destination = None
    if routing_key is not None:
        destination = f"/queue/{routing_key}" if not exchange else f"/exchange/{exchange}/{routing_key}"
    return body, headers or None, message_id, created, destination


DURABLE = b"\x00\x53\x70\xc0\x02\x01\x41"  # a header section: durable = true (STOMP's persistent)


def chunk_bodies(data: bytes, entries: int, start: int, stop: int) -> list[bytes] | None:
    """The bodies of entries ``start`` to ``stop`` of a chunk's data when every message there is
    only a data section under 256 bytes (what rstream and most stream producers write); None
    otherwise (sub-entry batches, properties, larger bodies: ``entries`` + ``decode`` then)."""
    unpack = _U32.unpack_from
    pos = 0
    for _ in range(start):
        if data[pos] & 0x80:
            return None
        pos += 4 + unpack(data, pos)[0]
    bodies = []
    append = bodies.append
    for _ in range(stop - start):
        size = unpack(data, pos)[0]
        at = pos + 4
        if data[at + 2] == 0x70:  # Spark's own writes: durable, then the data
            if data[at:at + 7] != DURABLE:
                return None
            at += 7
        if size & 0x80000000 or data[at:at + 4] != b"\x00\x53\x75\xa0" or data[at + 4] != pos + 4 + size - at - 5:
            return None
        append(data[at + 5:pos + 4 + size])
        pos += 4 + size
    return bodies


def _str(code_short: int, code_long: int, text: bytes) -> bytes:
    if len(text) < 256:
        return bytes((code_short, len(text))) + text
    return bytes((code_long,)) + _U32.pack(len(text)) + text


def _list(items: list[bytes]) -> bytes:
    payload = b"".join(items)
    return b"\xd0" + _U32.pack(len(payload) + 4) + _U32.pack(len(items)) + payload


def encode(body: bytes, headers: dict[str, str] | None = None, content_type: str | None = None,
           durable: bool = True) -> bytes:
    """One message: header (durable: STOMP consumers see ``persistent:true``), properties
    (content-type), application-properties (``headers``, strings) and the body as one data section."""
    out = bytearray(DURABLE if durable else b"")
    if content_type is not None:
        fields = [b"\x40"] * 6 + [_str(0xA3, 0xB3, content_type.encode())]
        out += b"\x00\x53\x73" + _list(fields)
    if headers:
        items = []
        for k, v in headers.items():
            items.append(_str(0xA1, 0xB1, str(k).encode()))
            items.append(_str(0xA1, 0xB1, str(v).encode()))
        payload = b"".join(items)
        out += b"\x00\x53\x74\xd1" + _U32.pack(len(payload) + 4) + _U32.pack(len(items)) + payload
    out += b"\x00\x53\x75" + _str(0xA0, 0xB0, body)
    return bytes(out)
