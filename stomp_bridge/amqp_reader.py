"""A bulk AMQP frame reader for aiormq, with a direct path for deliveries and confirms.

aiormq reads each frame with three ``readexactly`` awaits, decodes it with
pamqp, queues it for the connection, then for the channel, whose reader task
awaits it again: about a dozen awaits and three pamqp decodes per delivered
message. This receiver reads whatever the socket has, cuts every complete
frame out of the buffer, and for the bridge's channel decodes basic.deliver
(with its content) and publisher confirms itself, calling the session
synchronously. Every other frame takes aiormq's usual route, in order.

aiormq creates its receiver inside ``connect()``; the session hands the
receiver its :class:`Hooks` through a context variable set around that call.
"""

from __future__ import annotations

import contextvars
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import aiormq.connection
import aiormq.exceptions as amqp_exc
import pamqp.frame

from .amqp_codec import (
    _CLASS_METHOD,
    _FRAME_HEADER,
    BASIC_ACK,
    BASIC_DELIVER,
    BASIC_NACK,
    decode_confirm,
    decode_content_header,
    decode_deliver,
)

log = logging.getLogger(__name__)

READ_SIZE = 256 * 1024
FRAME_END = 0xCE

DeliveryHook = Callable[[str, int, bool, str, str, dict[str, Any], bytes], None]
ConfirmHook = Callable[[int, bool, bool], None]


class Hooks:
    """Where the direct path delivers; ``channel`` stays None until the channel is ready."""

    __slots__ = ("channel", "on_delivery", "on_confirm", "on_batch_end", "wait_writable")

    def __init__(self) -> None:
        self.channel: int | None = None
        self.on_delivery: DeliveryHook | None = None
        self.on_confirm: ConfirmHook | None = None
        # After each socket read's frames: lets the session send its frames now,
        # not one event-loop pass later.
        self.on_batch_end: Callable[[], None] | None = None
        # Awaited before each socket read: while the STOMP client does not drain
        # its socket, the bridge stops reading from RabbitMQ, so TCP pushes back
        # on the broker instead of deliveries piling up in the bridge.
        self.wait_writable: Callable[[], Awaitable[None]] | None = None


current_hooks: contextvars.ContextVar[Hooks | None] = contextvars.ContextVar(
    "stomp_bridge_amqp_hooks", default=None
)


class BulkFrameReceiver(aiormq.connection.FrameReceiver):
    def __init__(self, reader: Any) -> None:
        super().__init__(reader)
        self.hooks = current_hooks.get()
        self._buf = bytearray()
        self._frames: deque[tuple[int, int, Any]] = deque()
        # A delivery being assembled: [deliver args, properties, bytes still due, body parts]
        self._pending: list[Any] | None = None

    async def get_frame(self) -> Any:
        frames = self._frames
        while not frames:
            hooks = self.hooks
            if hooks is not None and hooks.wait_writable is not None:
                await hooks.wait_writable()
            try:
                data = await self.reader.read(READ_SIZE)
            except (ConnectionError, OSError) as exc:
                raise amqp_exc.AMQPConnectionError(f"Server connection error: {exc!r}") from exc
            if not data:
                raise amqp_exc.AMQPConnectionError("Server connection unexpectedly closed")
            self._buf += data
            self._parse()
            if hooks is not None and hooks.on_batch_end is not None:
                self._call(hooks.on_batch_end)
        return frames.popleft()

    def _parse(self) -> None:
        buf = self._buf
        size_now = len(buf)
        pos = 0
        hooks = self.hooks
        direct = hooks.channel if hooks is not None else None
        while size_now - pos >= 8:
            if not self.started and buf.startswith(b"AMQP"):
                raise amqp_exc.ProtocolSyntaxError("Unexpected AMQP protocol header")
            frame_type, channel, size = _FRAME_HEADER.unpack_from(buf, pos)
            end = pos + 7 + size
            if end >= size_now:
                break
            if buf[end] != FRAME_END:
                raise amqp_exc.InvalidFrameError(f"frame of type {frame_type} does not end with 0xCE")
            self.started = True
            if channel == direct and self._direct(frame_type, bytes(buf[pos + 7 : end])):
                pos = end + 1
                continue
            self._frames.append(pamqp.frame.unmarshal(bytes(buf[pos : end + 1])))
            pos = end + 1
        if pos:
            del buf[:pos]

    def _direct(self, frame_type: int, payload: bytes) -> bool:
        """Handle a frame of the bridge's channel; False hands it to aiormq."""
        hooks = self.hooks
        assert hooks is not None
        pending = self._pending
        if frame_type == 1:
            method = _CLASS_METHOD.unpack_from(payload)
            if method == BASIC_DELIVER:
                self._pending = [decode_deliver(payload), None, 0, []]
                return True
            if method == BASIC_ACK or method == BASIC_NACK:
                tag, multiple = decode_confirm(payload)
                if hooks.on_confirm is not None:
                    self._call(hooks.on_confirm, tag, multiple, method == BASIC_NACK)
                return True
            return False
        if pending is None:
            return False
        if frame_type == 2:
            pending[2], pending[1] = decode_content_header(payload)
            if pending[2] == 0:
                self._deliver(pending)
            return True
        if frame_type == 3:
            pending[3].append(payload)
            pending[2] -= len(payload)
            if pending[2] <= 0:
                self._deliver(pending)
            return True
        return False

    def _deliver(self, pending: list[Any]) -> None:
        self._pending = None
        parts = pending[3]
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        hook = self.hooks.on_delivery if self.hooks is not None else None
        if hook is not None:
            self._call(hook, *pending[0], pending[1], body)

    @staticmethod
    def _call(hook: Callable[..., None], *args: Any) -> None:
        try:
            hook(*args)
        except Exception:  # noqa: BLE001 - one session's bug must not kill the reader
            log.exception("delivery hook failed")


def install() -> bool:
    """Make aiormq use the bulk receiver; False (stock aiormq paths) if its shape changed."""
    base = getattr(aiormq.connection, "FrameReceiver", None)
    if base is None or not hasattr(base, "get_frame"):
        return False
    if base is not BulkFrameReceiver:
        aiormq.connection.FrameReceiver = BulkFrameReceiver  # type: ignore[misc]
    return True
