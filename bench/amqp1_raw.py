"""A minimal AMQP 1.0 client for bench.amqp_patterns: what a gateway's own AMQP 1.0 codec would
cost, and what RabbitMQ 4.x spends per message when the client is as quick as the 0-9-1 one.

python-qpid-proton (the maintained Python AMQP 1.0 client) costs 80-100 µs of client CPU per
message, so a client on it hands RabbitMQ about one transfer per socket read; this one encodes
each transfer from a template with ``struct`` (as ``stomp_bridge.amqp.codec`` encodes a
basic.publish) and decodes RabbitMQ's frames with a small decoder of the types they use. It does
SASL PLAIN, open, begin, one attach per connection, transfers (unsettled: RabbitMQ settles them
with dispositions once the queue has them, the confirms of AMQP 1.0; ranges of deliveries per
disposition), and as a receiver flow (link credit) and dispositions (each delivery accepted on
its own, or one range per socket read, or none: pre-settled). No heart-beats, no session flow
beyond RabbitMQ's incoming window, nothing the bench does not need. Not a client for anything
else.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import Any

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
_FRAME = struct.Struct(">IBBH")  # size, doff, type, channel

# performatives (descriptor codes)
OPEN, BEGIN, ATTACH, FLOW, TRANSFER, DISPOSITION, DETACH, END, CLOSE = range(0x10, 0x19)
SASL_MECHANISMS, SASL_INIT, SASL_OUTCOME = 0x40, 0x41, 0x44
ACCEPTED = 0x24
MASK = 0xFFFFFFFF  # sequence numbers are serial numbers modulo 2**32 (RabbitMQ starts near the top)


class Symbol(str):
    pass


class Described:
    __slots__ = ("code", "value")

    def __init__(self, code: int, value: Any) -> None:
        self.code, self.value = code, value

    def __repr__(self) -> str:
        return f"Described(0x{self.code:x}, {self.value!r})"


class UByte(int):
    pass


class UInt(int):
    pass


# -- encoding (the few shapes the bench sends) ----------------------------------------------


def encode(value: Any) -> bytes:
    if value is None:
        return b"\x40"
    if value is True:
        return b"\x41"
    if value is False:
        return b"\x42"
    if isinstance(value, Described):
        return b"\x00\x53" + bytes([value.code]) + encode(value.value)
    if isinstance(value, UByte):
        return b"\x50" + bytes([value])
    if isinstance(value, int):  # uint
        return b"\x70" + struct.pack(">I", value)
    if isinstance(value, Symbol):
        raw = value.encode()
        return b"\xa3" + bytes([len(raw)]) + raw
    if isinstance(value, str):
        raw = value.encode()
        return b"\xa1" + bytes([len(raw)]) + raw
    if isinstance(value, bytes):
        return (b"\xa0" + bytes([len(value)]) if len(value) < 256 else b"\xb0" + struct.pack(">I", len(value))) + value
    if isinstance(value, list):
        body = b"".join(encode(v) for v in value)
        return b"\xd0" + struct.pack(">II", len(body) + 4, len(value)) + body
    raise TypeError(f"cannot encode {value!r}")


def frame(channel: int, body: bytes, kind: int = 0) -> bytes:
    return _FRAME.pack(len(body) + 8, 2, kind, channel) + body


def performative(code: int, fields: list[Any], channel: int = 0, kind: int = 0) -> bytes:
    return frame(channel, encode(Described(code, fields)), kind)


# -- decoding ---------------------------------------------------------------------------------

_FIXED = {0x50: 1, 0x51: 1, 0x52: 1, 0x53: 1, 0x54: 1, 0x55: 1, 0x56: 1, 0x60: 2, 0x61: 2,
          0x70: 4, 0x71: 4, 0x72: 4, 0x73: 4, 0x80: 8, 0x81: 8, 0x82: 8, 0x83: 8, 0x84: 8, 0x94: 16, 0x98: 16}
_UNSIGNED = {0x50: ">B", 0x52: ">B", 0x53: ">B", 0x60: ">H", 0x70: ">I", 0x80: ">Q", 0x83: ">q",
             0x51: ">b", 0x54: ">b", 0x55: ">b", 0x61: ">h", 0x71: ">i", 0x81: ">q"}


def decode(buf: bytes | memoryview, pos: int) -> tuple[Any, int]:
    """One value at ``pos``: (value, position after it)."""
    code = buf[pos]
    pos += 1
    if code == 0x00:
        descriptor, pos = decode(buf, pos)
        value, pos = decode(buf, pos)
        return Described(descriptor, value), pos
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
    if code == 0x56:
        return buf[pos] == 1, pos + 1
    if code in _UNSIGNED:
        size = _FIXED[code]
        return struct.unpack_from(_UNSIGNED[code], buf, pos)[0], pos + size
    if code in _FIXED:
        size = _FIXED[code]
        return bytes(buf[pos:pos + size]), pos + size
    if code in (0xa0, 0xa1, 0xa3):
        size = buf[pos]
        raw = bytes(buf[pos + 1:pos + 1 + size])
        return (raw if code == 0xa0 else raw.decode()), pos + 1 + size
    if code in (0xb0, 0xb1, 0xb3):
        size = struct.unpack_from(">I", buf, pos)[0]
        raw = bytes(buf[pos + 4:pos + 4 + size])
        return (raw if code == 0xb0 else raw.decode()), pos + 4 + size
    if code in (0xc0, 0xc1, 0xd0, 0xd1):
        if code < 0xd0:
            size, count = buf[pos], buf[pos + 1]
            at, end = pos + 2, pos + 1 + size
        else:
            size, count = struct.unpack_from(">II", buf, pos)
            at, end = pos + 8, pos + 4 + size
        items = []
        for _ in range(count):
            item, at = decode(buf, at)
            items.append(item)
        if code in (0xc1, 0xd1):
            return dict(zip(items[::2], items[1::2])), end
        return items, end
    if code in (0xe0, 0xf0):
        if code == 0xe0:
            size, count = buf[pos], buf[pos + 1]
            at, end = pos + 2, pos + 1 + size
        else:
            size, count = struct.unpack_from(">II", buf, pos)
            at, end = pos + 8, pos + 4 + size
        element = buf[at]
        at += 1
        items = []
        for _ in range(count):
            item, at = _decode_element(buf, at, element, end)
            items.append(item)
        return items, end
    raise ValueError(f"AMQP 1.0 type 0x{code:02x} not handled")


def _decode_element(buf: bytes | memoryview, pos: int, element: int, end: int) -> tuple[Any, int]:
    """An array element: its constructor is the array's, given once before them."""
    value, used = decode(bytes([element]) + bytes(buf[pos:end]), 0)
    return value, pos + used - 1


def fields(values: list[Any], count: int) -> list[Any]:
    return values + [None] * (count - len(values))


# -- the connection ----------------------------------------------------------------------------


class Amqp1Error(Exception):
    pass


class Link1(asyncio.Protocol):
    """One AMQP 1.0 connection with one session and one link (sender or receiver) on it.

    Sender: :meth:`publish` ``count`` messages, at most ``window`` unsettled, as RabbitMQ's link
    credit and session window allow, one batch per socket read (the refill after RabbitMQ's
    dispositions, as the 0-9-1 client refills after confirms). Receiver: credit ``prefetch``,
    topped up when half is used; each read's deliveries settled as ``settle`` says:
    ``each`` (a disposition per delivery), ``range`` (one disposition first..last) or
    ``settled`` (pre-settled by RabbitMQ: nothing to send)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.buf = bytearray()
        self.stage = "sasl-header"
        self.waiter: asyncio.Future | None = None
        self.error: str | None = None
        self.on_done: Callable[[], None] = lambda: None
        # sender state
        self.next_id = 0  # next outgoing delivery id = transfer id
        self.credit = 0
        self.remote_window = 0  # RabbitMQ's session incoming window left
        self.unsettled = 0
        self.left = 0
        self.window = 0
        self.transfer_head = b""
        self.message = b""
        # receiver state
        self.receiver = False
        self.settle = "each"
        self.expected = 0
        self.received = 0
        self.granted = 0  # credit left with RabbitMQ
        self.prefetch = 0
        self.first_unsettled: int | None = None
        self.ids: list[int] = []
        self.delivery_count = 0
        self.next_incoming_id = 0

    @classmethod
    async def open(cls, port: int, host: str = "127.0.0.1") -> Link1:
        loop = asyncio.get_running_loop()
        _, link = await loop.create_connection(cls, host, port)
        link.waiter = loop.create_future()
        link.transport.write(SASL_HEADER)
        await asyncio.wait_for(link.waiter, 30)
        return link

    def _expect(self) -> asyncio.Future:
        self.waiter = asyncio.get_running_loop().create_future()
        return self.waiter

    async def attach_sender(self, address: str) -> None:
        waiter = self._expect()
        self.transport.write(
            performative(BEGIN, [None, 0, 65535, 65535], channel=0)
            + performative(ATTACH, [
                "sender", 0, False, UByte(0), UByte(0),
                Described(0x28, []), Described(0x29, [address]), None, False, 0,
            ])
        )
        await asyncio.wait_for(waiter, 30)
        # the link credit arrives in a flow after the attach
        if not self.credit:
            await asyncio.wait_for(self._expect(), 30)

    async def attach_receiver(self, address: str, settle: str, prefetch: int, expected: int) -> None:
        self.receiver = True
        self.settle, self.prefetch, self.expected = settle, prefetch, expected
        waiter = self._expect()
        self.transport.write(
            performative(BEGIN, [None, 0, 1 << 20, 65535], channel=0)
            + performative(ATTACH, [
                "receiver", 0, True, UByte(1 if settle == "settled" else 0), UByte(0),
                Described(0x28, [address]), Described(0x29, []),
            ])
        )
        await asyncio.wait_for(waiter, 30)

    def grant(self) -> bytes:
        """A flow frame that sets the link's credit back to ``prefetch``."""
        self.granted = self.prefetch
        return performative(FLOW, [self.next_incoming_id, 1 << 20, self.next_id, 65535, 0,
                                   self.delivery_count, self.prefetch], channel=0)

    async def close(self) -> None:
        if self.transport.is_closing():
            return
        waiter = self._expect()
        self.transport.write(performative(DETACH, [0, True]) + performative(END, []) + performative(CLOSE, []))
        try:
            await asyncio.wait_for(waiter, 10)
        except (asyncio.TimeoutError, Amqp1Error):
            pass
        self.transport.close()

    # sending

    def start_publishing(self, count: int, window: int, per_write: int, body: bytes, durable: bool,
                         done: Callable[[], None]) -> None:
        self.left, self.window, self.on_done = count, window, done
        self.per_write = per_write
        # transfer [handle 0, delivery-id, delivery-tag, message-format 0, settled false]; the id
        # and the tag (the id's 4 bytes) are patched per message
        header = b"\x00\x53\x70\xc0\x02\x01\x41" if durable else b""
        self.message = header + b"\x00\x53\x75\xb0" + struct.pack(">I", len(body)) + body
        self.fill()

    def fill(self) -> None:
        """Whole batches of ``per_write`` transfers (fewer for the last), one write each, while
        RabbitMQ's link credit and session window and our window allow."""
        message = self.message
        while self.left:
            k = min(self.per_write, self.left)
            if self.credit < k or self.remote_window < k or self.unsettled + k > self.window:
                break
            out = []
            for _ in range(k):
                i = self.next_id
                tag = i.to_bytes(4, "big")
                # transfer: list8 (size 15, 5 fields): handle uint0, delivery-id uint, delivery-tag
                # vbin8 of 4 bytes, message-format uint0, settled false; then the message's sections
                body = b"\x00\x53\x14\xc0\x0f\x05\x43\x70" + tag + b"\xa0\x04" + tag + b"\x43\x42" + message
                out.append(_FRAME.pack(len(body) + 8, 2, 0, 0) + body)
                self.next_id = i + 1
            self.credit -= k
            self.remote_window -= k
            self.unsettled += k
            self.left -= k
            self.transport.write(out[0] if k == 1 else b"".join(out))

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        import socket
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(self.error or f"RabbitMQ closed the connection ({exc})")

    def fail(self, text: str) -> None:
        self.error = self.error or text
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(Amqp1Error(text))
        self.on_done()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        if self.stage in ("sasl-header", "amqp-header"):
            if len(buf) < 8:
                return
            pos = 8
            self.stage = "sasl" if self.stage == "sasl-header" else "open"
        out: list[bytes] = []
        settled_any = False
        size_all = len(buf)
        while size_all - pos >= 8:
            size, doff, kind, channel = _FRAME.unpack_from(buf, pos)
            end = pos + size
            if end > size_all:
                break
            at = pos + doff * 4
            if at == end:  # an empty frame: a heart-beat
                pos = end
                continue
            # the performative's descriptor: 0x00 0x53 code
            code = buf[at + 2]
            if code == TRANSFER:
                self._transfer(buf, at + 3)
            elif code == DISPOSITION:
                self._disposition(buf, at + 3)
                settled_any = True
            elif code == FLOW:
                self._flow(buf, at + 3)
                settled_any = True
            else:
                self._control(code, buf, at + 3, out)
            pos = end
        del buf[:pos]
        if self.receiver and self.ids:
            self._settle(out)
        if out:
            self.transport.write(b"".join(out))
        if settled_any and not self.receiver:
            self.fill()
            if not self.left and not self.unsettled:
                self.on_done()

    def _control(self, code: int, buf: bytearray, at: int, out: list[bytes]) -> None:
        values, _ = decode(buf, at)
        if code == SASL_MECHANISMS:
            out.append(performative(SASL_INIT, [Symbol("PLAIN"), b"\0guest\0guest"], kind=1))
        elif code == SASL_OUTCOME:
            if values[0] != 0:
                self.fail(f"SASL refused: {values}")
                return
            self.stage = "amqp-header"
            out.append(AMQP_HEADER)
            out.append(performative(OPEN, ["bench.amqp_patterns", None, 1 << 20]))
        elif code == OPEN:
            self._wake()
        elif code == BEGIN:
            values = fields(values, 4)
            self.next_incoming_id = values[1] or 0
            self.remote_window = values[2] or 0
        elif code == ATTACH:
            values = fields(values, 10)
            if self.receiver:
                self.delivery_count = values[9] or 0
            self._wake()
        elif code in (DETACH, END, CLOSE):
            values = fields(values, 3)
            error = values[2] if code == DETACH else values[0]
            if error is not None:
                self.fail(f"RabbitMQ sent {code:#x} with {error!r}")
            elif code == CLOSE:
                self._wake()

    def _flow(self, buf: bytearray, at: int) -> None:
        values, _ = decode(buf, at)
        values = fields(values, 7)
        next_incoming, incoming_window = values[0], values[1]
        if next_incoming is not None:
            self.remote_window = (next_incoming + incoming_window - self.next_id) & MASK
        if values[4] is not None and values[6] is not None and not self.receiver:
            delivery_count = values[5] or 0
            self.credit = (delivery_count + values[6] - self.next_id) & MASK
            self._wake()

    def _disposition(self, buf: bytearray, at: int) -> None:
        values, _ = decode(buf, at)
        values = fields(values, 5)
        first, last, state = values[1], values[2], values[4]
        if last is None:
            last = first
        if state is not None and getattr(state, "code", ACCEPTED) != ACCEPTED:
            self.fail(f"RabbitMQ settled deliveries {first}..{last} as {state!r}")
            return
        self.unsettled -= ((last - first) & MASK) + 1

    def _transfer(self, buf: bytearray, at: int) -> None:
        # list8 or list32 of [handle, delivery-id, ...]: only the id matters here
        code = buf[at]
        at += 3 if code == 0xc0 else 9 if code == 0xd0 else 1
        # handle
        handle_code = buf[at]
        at += 1 if handle_code == 0x43 else 2 if handle_code == 0x52 else 5
        id_code = buf[at]
        if id_code == 0x43:
            delivery_id = 0
        elif id_code == 0x52:
            delivery_id = buf[at + 1]
        else:
            delivery_id = int.from_bytes(buf[at + 1:at + 5], "big")
        self.ids.append(delivery_id)
        self.received += 1
        self.next_incoming_id = (self.next_incoming_id + 1) & MASK  # one transfer frame each
        self.delivery_count = (self.delivery_count + 1) & MASK
        self.granted -= 1

    def _settle(self, out: list[bytes]) -> None:
        ids, self.ids = self.ids, []
        if self.settle == "each":
            out.extend(performative(DISPOSITION, [True, i, i, True, Described(ACCEPTED, [])]) for i in ids)
        elif self.settle == "range":
            if ids[-1] >= ids[0]:
                out.append(performative(DISPOSITION, [True, ids[0], ids[-1], True, Described(ACCEPTED, [])]))
            else:  # the ids wrapped (RabbitMQ starts them just below 2**32): a range each side
                out.append(performative(DISPOSITION, [True, ids[0], MASK, True, Described(ACCEPTED, [])]))
                out.append(performative(DISPOSITION, [True, 0, ids[-1], True, Described(ACCEPTED, [])]))
        if self.received >= self.expected:
            self.on_done()
        elif self.granted <= self.prefetch // 2:
            out.append(self.grant())
