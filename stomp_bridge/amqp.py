"""The AMQP 0-9-1 side of one STOMP connection.

aiormq owns the socket, the handshake, heart-beats and RPCs (declare, bind,
consume, qos). The per-message paths bypass its generic API, which costs a
lock, a future and a random ``message_id`` per publish and a task per delivery:

* publishes and acks are encoded by ``amqp_codec`` into a batch that is handed
  to aiormq's writer once per chunk of client bytes (``flush``); publisher
  confirms are tracked by delivery-tag ranges in the session, not by futures;
* deliveries and confirms are cut out of the socket's bytes by
  ``amqp_reader`` and handed synchronously to ``on_delivery``/``on_confirm``
  (aiormq's channel reader is the fallback if that reader cannot be installed).

One channel per STOMP connection: every STOMP error ends the connection, so a
channel error never has to be survived.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import Any

import aiormq
import aiormq.exceptions as amqp_exc
import pamqp.encode
from aiormq.abc import ChannelFrame
from pamqp import commands as spec
from pamqp.header import ContentHeader

from .amqp_codec import encode_ack, encode_nack, encode_publish
from .amqp_reader import DeliveryHook, Hooks, current_hooks, install
from .endpoints import Endpoints
from .protocol.errors import AccessRefused, BrokerError, ProtocolError, StompError

log = logging.getLogger(__name__)


def _table_integer_as_long(value: int) -> bytes:
    """Encode every integer in an AMQP field table as a signed 64-bit long.

    pamqp picks the smallest type (``x-max-length: 10`` as a byte), but
    RabbitMQ compares argument *types* when a queue is declared again, and the
    STOMP plugin sends longs: a queue the plugin declared would otherwise be
    "inequivalent" when the bridge declares it, and the other way round.
    """
    if -(1 << 63) <= value < (1 << 63):
        return b"l" + pamqp.encode.long_long_int(value)
    raise TypeError(f"Unsupported numeric value: {value}")


pamqp.encode.table_integer = _table_integer_as_long
BULK_READER = install()


def broker_error(exc: BaseException) -> StompError:
    """Turn an aiormq exception into the ERROR the plugin would send.

    The plugin names the AMQP error (``not_found``, ``precondition_failed`` …)
    in the ``message`` header and quotes RabbitMQ's reply text in the body.
    """
    if isinstance(exc, StompError):
        return exc
    text = ""
    for arg in exc.args:  # aiormq puts the reply text first or after the reply code
        candidate = getattr(arg, "reply_text", arg)
        if isinstance(candidate, str) and candidate:
            text = candidate
            break
    if " - " in text:
        name = text.split(" - ", 1)[0].strip().lower()
        return BrokerError(name, text)
    if isinstance(exc, (amqp_exc.AMQPConnectionError, ConnectionError, OSError)):
        return BrokerError(
            "Broker connection lost",
            f"The connection to RabbitMQ closed ({exc!r}). Reconnect to retry.",
        )
    return BrokerError("Processing error", text or repr(exc))


def _vhost_url(base_url: str, login: str, passcode: str, vhost: str) -> str:
    """The broker URL with the STOMP client's own credentials and vhost."""
    parts = urllib.parse.urlsplit(base_url)
    host = parts.hostname or "localhost"
    if ":" in host:
        host = f"[{host}]"
    netloc = (
        f"{urllib.parse.quote(login, safe='')}:{urllib.parse.quote(passcode, safe='')}@{host}"
    )
    if parts.port:
        netloc += f":{parts.port}"
    path = "/" + urllib.parse.quote(vhost, safe="")
    return urllib.parse.urlunsplit((parts.scheme, netloc, path, parts.query, ""))


def version_tuple(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


_PROPERTY_FIELDS = frozenset(spec.Basic.Properties.__slots__)


def properties_dict(props: spec.Basic.Properties) -> dict[str, Any]:
    """Only the properties that are set, timestamps as epoch seconds."""
    out = {}
    for name in _PROPERTY_FIELDS:
        value = getattr(props, name, None)
        if value is None:
            continue
        if isinstance(value, datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=timezone.utc)
            value = int(value.timestamp())
        out[name] = value
    return out


class AmqpSession:
    """The AMQP connection and channel that serve one STOMP connection."""

    def __init__(
        self, connection: aiormq.Connection, channel: aiormq.Channel, hooks: Hooks | None = None
    ) -> None:
        self.connection = connection
        self.channel = channel
        version = connection.server_properties.get("version", "0")
        self.broker_version_text = version.decode() if isinstance(version, bytes) else str(version)
        self.broker_version = version_tuple(self.broker_version_text)
        self.publish_seq = 0  # the broker numbers confirms from 1 on this channel
        self._batch: list[bytes] = []
        self._channel_number = channel.number
        self._frame_max = connection.connection_tune.frame_max or 131072
        self.on_delivery: DeliveryHook | None = None
        self.on_confirm: Callable[[int, bool, bool], None] | None = None
        self.on_closed: Callable[[StompError], None] | None = None
        self.on_cancelled: Callable[[str], None] | None = None
        self.on_batch_end: Callable[[], None] | None = None
        self._hooks = hooks
        self._closing = False
        # The lean paths: see the module docstring. With the bulk reader the
        # frames never reach aiormq's channel; the overrides are the fallback.
        if hooks is not None:
            hooks.on_delivery = self._deliver
            hooks.on_confirm = self._confirm
            hooks.on_batch_end = self._batch_end
            hooks.channel = channel.number
        channel._on_deliver_frame = self._on_deliver_frame  # type: ignore[method-assign]
        channel._on_confirm_frame = self._on_confirm_frame  # type: ignore[method-assign]
        channel.on_consumer_cancel_callbacks.add(self._on_cancel)
        channel.closing.add_done_callback(self._on_channel_closing)
        connection.closing.add_done_callback(self._on_channel_closing)

    @classmethod
    async def open(
        cls,
        endpoints: Endpoints,
        login: str,
        passcode: str,
        vhost: str,
        *,
        client_name: str,
        heartbeat: int = 60,
        timeout: float = 10.0,
    ) -> AmqpSession:
        """Log in as the STOMP user on the first RabbitMQ node that answers.

        A node that cannot be reached is skipped (and backs off); a refused
        login or vhost is the client's answer, from whichever node gave it.
        """
        failures = []
        for index in endpoints.order():
            try:
                connection, hooks = await cls._connect(
                    endpoints.urls[index], login, passcode, vhost, client_name, heartbeat, timeout
                )
            except AccessRefused:
                endpoints.succeeded(index)
                raise
            except (OSError, amqp_exc.AMQPError, asyncio.TimeoutError) as exc:
                endpoints.failed(index)
                host, port = endpoints.address(index)
                failures.append(f"{host}:{port}: {exc!r}")
                continue
            endpoints.succeeded(index)
            try:
                channel = await connection.channel(publisher_confirms=True)
            except BaseException:
                await connection.close()
                raise
            return cls(connection, channel, hooks if BULK_READER else None)
        raise BrokerError(
            "Broker unavailable",
            f"None of the {len(endpoints.urls)} RabbitMQ node(s) answered; try again later.",
            private="; ".join(failures),
        )

    @staticmethod
    async def _connect(
        base_url: str, login: str, passcode: str, vhost: str, client_name: str, heartbeat: int,
        timeout: float,
    ) -> tuple[aiormq.Connection, Hooks]:
        url = _vhost_url(base_url, login, passcode, vhost)
        sep = "&" if "?" in url else "?"
        url += f"{sep}heartbeat={heartbeat}"
        hooks = Hooks()
        token = current_hooks.set(hooks)
        try:
            connection = await asyncio.wait_for(
                aiormq.connect(
                    url,
                    client_properties={"connection_name": client_name, "product": "stomp-bridge"},
                ),
                timeout,
            )
        except (amqp_exc.ProbableAuthenticationError, amqp_exc.AuthenticationError) as exc:
            raise AccessRefused(
                "Bad CONNECT", f"Access refused for user '{login}'\n", private=str(exc)
            ) from exc
        except (amqp_exc.InvalidFrameError, amqp_exc.ConnectionNotAllowed) as exc:
            # RabbitMQ answers connection.open on an unknown or forbidden vhost
            # with connection.close (NOT_ALLOWED).
            raise AccessRefused(
                "Bad CONNECT", f"Virtual host '{vhost}' access denied", private=str(exc)
            ) from exc
        finally:
            current_hooks.reset(token)
        return connection, hooks

    # -- the lean per-message paths -------------------------------------------------

    def publish(self, exchange: str, routing_key: str, properties: dict[str, Any], body: bytes) -> int:
        """Queue a publish in the current batch; returns its confirm sequence number.

        ``properties`` are pamqp-named basic properties (see ``amqp_codec``).
        """
        self._batch.append(
            encode_publish(self._channel_number, exchange, routing_key, properties, body, self._frame_max)
        )
        self.publish_seq += 1
        return self.publish_seq

    def ack(self, delivery_tag: int, multiple: bool = False) -> None:
        self._batch.append(encode_ack(self._channel_number, delivery_tag, multiple))

    def nack(self, delivery_tag: int, multiple: bool = False, requeue: bool = True) -> None:
        self._batch.append(encode_nack(self._channel_number, delivery_tag, multiple, requeue))

    async def flush(self) -> None:
        """Hand the batch to aiormq's writer; waits only when its queue is full.

        That wait is the backpressure path: while RabbitMQ blocks the
        connection (resource alarm) the writer stops, the queue fills, and the
        session stops reading from the client.
        """
        if not self._batch:
            return
        # A drain future makes aiormq's writer wait for the socket to drain after
        # this write: when RabbitMQ stops reading (a resource alarm blocks
        # publishers), its queue fills and this flush waits, so the session stops
        # reading from the client instead of buffering without bound.
        frame = ChannelFrame(
            payload=b"".join(self._batch),
            should_close=False,
            drain_future=self.connection.loop.create_future(),
        )
        self._batch.clear()
        queue = self.connection.write_queue
        try:
            queue.put_nowait(frame)
        except asyncio.QueueFull:
            # Wait for room, but not past the connection's end: a dead writer never makes room.
            put = asyncio.ensure_future(queue.put(frame))
            closing = self.connection.closing
            await asyncio.wait((put, closing), return_when=asyncio.FIRST_COMPLETED)
            closing.cancel()  # only this observer; the connection is untouched
            if not put.done():
                put.cancel()
                raise BrokerError(
                    "Broker connection lost", "The connection to RabbitMQ closed; reconnect to retry."
                )

    def _deliver(
        self, consumer_tag: str, delivery_tag: int, redelivered: bool, exchange: str,
        routing_key: str, properties: dict[str, Any], body: bytes,
    ) -> None:
        callback = self.on_delivery
        if callback is not None:
            callback(consumer_tag, delivery_tag, redelivered, exchange, routing_key, properties, body)

    def _confirm(self, delivery_tag: int, multiple: bool, nack: bool) -> None:
        callback = self.on_confirm
        if callback is not None:
            callback(delivery_tag, multiple, nack)

    def set_backpressure(self, wait_writable: Callable[[], Awaitable[None]]) -> None:
        """Read from RabbitMQ only while ``wait_writable`` says the client keeps up."""
        if self._hooks is not None:
            self._hooks.wait_writable = wait_writable

    def _batch_end(self) -> None:
        callback = self.on_batch_end
        if callback is not None:
            callback()

    async def _on_deliver_frame(self, frame: spec.Basic.Deliver) -> None:
        header = await self.channel._get_frame()
        if not isinstance(header, ContentHeader):
            raise amqp_exc.InvalidFrameError(f"expected a content header, got {header!r}")
        message = await self.channel._read_content(frame, header)
        self._deliver(
            frame.consumer_tag or "", frame.delivery_tag or 0, bool(frame.redelivered),
            frame.exchange or "", frame.routing_key or "", properties_dict(header.properties),
            message.body,
        )

    async def _on_confirm_frame(self, frame: spec.Basic.Ack | spec.Basic.Nack) -> None:
        self._confirm(frame.delivery_tag or 0, bool(frame.multiple), isinstance(frame, spec.Basic.Nack))

    def _on_cancel(self, frame: spec.Basic.Cancel) -> None:
        if self.on_cancelled is not None and frame.consumer_tag:
            self.on_cancelled(frame.consumer_tag)

    def _on_channel_closing(self, future: asyncio.Future) -> None:
        if self._closing or self.on_closed is None:
            return
        if future.cancelled():
            exc: BaseException = ConnectionError("channel closed")
        else:
            exc = future.exception() or ConnectionError("channel closed")
        self.on_closed(broker_error(exc))

    # -- RPCs: the batch goes first so the broker sees frames in client order -------

    async def _rpc(self, coro_fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        await self.flush()
        try:
            return await coro_fn(*args, **kwargs)
        except StompError:
            raise
        except (amqp_exc.AMQPError, amqp_exc.ChannelInvalidStateError, ConnectionError) as exc:
            raise broker_error(exc) from exc
        except ValueError as exc:  # pamqp refuses a name or value it cannot encode
            raise ProtocolError("Invalid header", f"RabbitMQ cannot be sent this value: {exc}") from exc

    async def declare_queue(
        self,
        name: str,
        *,
        passive: bool = False,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> str:
        ok = await self._rpc(
            self.channel.queue_declare,
            name,
            passive=passive,
            durable=durable,
            exclusive=exclusive,
            auto_delete=auto_delete,
            arguments=arguments or None,
        )
        return ok.queue

    async def bind(self, queue: str, exchange: str, routing_key: str) -> None:
        await self._rpc(self.channel.queue_bind, queue, exchange, routing_key=routing_key)

    async def delete_queue(self, queue: str) -> None:
        await self._rpc(self.channel.queue_delete, queue)

    async def qos(self, prefetch_count: int) -> None:
        await self._rpc(self.channel.basic_qos, prefetch_count=prefetch_count)

    async def consume(
        self,
        queue: str,
        consumer_tag: str,
        *,
        no_ack: bool,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        await self._rpc(
            self.channel.basic_consume,
            queue,
            _unused_consumer,
            no_ack=no_ack,
            consumer_tag=consumer_tag,
            arguments=arguments or None,
        )

    async def cancel(self, consumer_tag: str) -> None:
        await self._rpc(self.channel.basic_cancel, consumer_tag)

    async def close(self) -> None:
        self._closing = True
        try:
            await self.flush()
        except Exception:  # noqa: BLE001 - closing anyway
            pass
        try:
            await asyncio.wait_for(self.connection.close(), timeout=5)
        except Exception as exc:  # noqa: BLE001 - the broker may already be gone
            log.debug("amqp close failed: %r", exc)


async def _unused_consumer(message: Any) -> None:  # pragma: no cover - never called
    """aiormq wants a callback per consumer; deliveries go through ``on_delivery``."""
