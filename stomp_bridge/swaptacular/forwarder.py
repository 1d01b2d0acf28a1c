"""``stomp-bridge forward``: a local RabbitMQ queue to a Swaptacular peer's STOMP server.

At-least-once: a message is acked to RabbitMQ only after the peer's RECEIPT
that covers it (a RECEIPT confirms its message and every earlier one on the
connection, so one ``basic.ack multiple`` settles them all). Whatever was not
receipted when a connection ends (peer ERROR, network loss, kill) stays
unacked and RabbitMQ delivers it again to the next connection; a peer may see
a message twice, never zero times.

The in-flight window is the channel's prefetch (``swpt_forward_window``):
RabbitMQ stops delivering while that many messages wait for receipts. Each
connection picks a server at random from the peer's manifest and reconnects
with a backoff that doubles up to ``swpt_forward_max_backoff``. AMQP ``type``
and ``content_type`` travel as the STOMP ``type`` and ``content-type``
headers; a message without ``type`` cannot be a Swaptacular message and is
rejected (dead-lettered if the queue has a dead-letter exchange), with an
ERROR log, instead of blocking the queue.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import ssl

from stomp_bridge.amqp.consumer import QueueConsumer
from stomp_bridge.amqp.errors import describe
from stomp_bridge.swaptacular.certlogin import amqp_client_context
from stomp_bridge.swaptacular.manifest import Manifest
from stomp_bridge.protocol.errors import StompError
from stomp_bridge.protocol.frames import Frame, serialize
from stomp_bridge.protocol.parser import FrameParser, Limits
from stomp_bridge.settings import Settings
from stomp_bridge.tls import build_client_context

log = logging.getLogger(__name__)

BASE_BACKOFF = 0.5
RECEIPT_TIMEOUT = 30.0  # seconds a sent message may wait for its RECEIPT before reconnecting
READ_TICK = 1.0


class ForwardError(Exception):
    """This connection to the peer cannot go on; reconnect."""


class Forwarder:
    def __init__(self, settings: Settings, manifest: Manifest, *, rng: random.Random | None = None) -> None:
        missing = [
            name for name in ("swpt_forward_queue", "swpt_node_id", "tls_cert_file", "tls_key_file", "tls_ca_file")
            if not getattr(settings, name)
        ]
        if missing:
            raise ValueError(f"stomp-bridge forward needs {', '.join(missing)}")
        self.settings = settings
        self.manifest = manifest
        self.node = manifest.for_node(settings.swpt_node_id or "")
        # Swaptacular: mutual TLS 1.3, the server's chain verified, no hostname verification.
        self.tls = build_client_context(
            settings.tls_cert_file, settings.tls_key_file, settings.tls_ca_file,
            min_version="1.3", check_hostname=False,
        )
        self.amqp_url = settings.amqp_url.split(",")[0].strip()
        self.amqp_context = amqp_client_context(settings)
        self.rng = rng or random.Random()
        self.forwarded = 0  # messages receipted by the peer and acked to RabbitMQ
        self.connections = 0

    async def run(self, stop: asyncio.Event) -> None:
        delay = BASE_BACKOFF
        while not stop.is_set():
            before = self.forwarded
            try:
                await self._connection(stop)
            except (ForwardError, StompError, OSError, ssl.SSLError, asyncio.TimeoutError) as exc:
                log.warning("forwarding interrupted; reconnecting", extra={"error": describe(exc),
                                                                             "retry_in": round(delay, 2)})
            if stop.is_set():
                break
            if self.forwarded != before:
                delay = BASE_BACKOFF
            try:
                await asyncio.wait_for(stop.wait(), delay * (0.5 + self.rng.random()))
            except asyncio.TimeoutError:
                pass
            delay = min(delay * 2, self.settings.swpt_forward_max_backoff)

    async def _connection(self, stop: asyncio.Event) -> None:
        s = self.settings
        amqp = await QueueConsumer.open(
            self.amqp_url, prefetch=s.swpt_forward_window, client_name="stomp-bridge forward",
            heartbeat=s.amqp_heartbeat, timeout=s.amqp_connect_timeout, context=self.amqp_context,
        )
        writer: asyncio.StreamWriter | None = None
        try:
            host, port = self.manifest.choose_server(self.rng)
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=self.tls, server_hostname=host),
                s.amqp_connect_timeout,
            )
            self.connections += 1
            parser = FrameParser(Limits(max_frame_size=1024 * 1024, max_headers=1000, max_header_length=65536))
            headers = {"accept-version": "1.2", "host": self.node["host"], "heart-beat": "0,0"}
            for key in ("login", "passcode"):
                if key in self.node:
                    headers[key] = self.node[key]
            writer.write(serialize(Frame("CONNECT", headers), "1.2"))
            frame = await asyncio.wait_for(_next_frame(reader, parser), s.connect_timeout)
            if frame.command != "CONNECTED":
                raise ForwardError(_describe(frame))
            log.info("forwarding", extra={"peer": f"{host}:{port}", "queue": s.swpt_forward_queue})
            await self._pump(amqp, reader, writer, parser, stop)
        finally:
            if writer is not None:
                writer.close()
            await amqp.close()  # unacked messages go back to the queue

    async def _pump(
        self, amqp: QueueConsumer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
        parser: FrameParser, stop: asyncio.Event,
    ) -> None:
        inflight: collections.deque[tuple[int, int, float]] = collections.deque()  # (receipt, tag, sent at)
        loop = asyncio.get_running_loop()
        drained = asyncio.Event()  # set whenever a RECEIPT leaves nothing in flight

        async def send() -> None:
            seq = 0
            destination = self.node["destination"]
            while True:
                message = await amqp.next()
                props = message.properties
                tag = message.delivery_tag
                if not props.get("message_type"):
                    log.error("message without AMQP type rejected (Swaptacular needs one)",
                              extra={"queue": self.settings.swpt_forward_queue})
                    await amqp.reject(tag, requeue=False)
                    continue
                seq += 1
                headers = {
                    "destination": destination,
                    "type": props["message_type"],
                    "content-type": props.get("content_type") or "application/json",
                    "persistent": "true",
                    "receipt": str(seq),
                }
                writer.write(serialize(Frame("SEND", headers, message.body), "1.2"))
                inflight.append((seq, tag, loop.time()))
                await writer.drain()

        async def receive() -> None:
            while True:
                try:
                    frames = await asyncio.wait_for(_read_frames(reader, parser), READ_TICK)
                except asyncio.TimeoutError:
                    if inflight and loop.time() - inflight[0][2] > RECEIPT_TIMEOUT:
                        raise ForwardError(f"no RECEIPT within {RECEIPT_TIMEOUT:g} s") from None
                    continue
                last = None
                count = 0
                error = None
                for frame in frames:  # one ack for every RECEIPT that arrived together
                    if frame.command == "ERROR":
                        error = ForwardError(_describe(frame))
                        break
                    if frame.command != "RECEIPT":
                        continue
                    try:
                        receipt = int(frame.headers.get("receipt-id", ""))
                    except ValueError:
                        raise ForwardError(f"RECEIPT for an id we never sent: {frame.headers}") from None
                    while inflight and inflight[0][0] <= receipt:
                        last = inflight.popleft()[1]
                        count += 1
                if last is not None:
                    await amqp.ack(last, multiple=True)
                    self.forwarded += count
                if error is not None:  # after acking what the peer receipted before it
                    raise error
                if not inflight:
                    drained.set()

        async def stopping() -> None:
            await stop.wait()
            await amqp.cancel()
            if inflight:  # let the receipts for what was sent arrive
                drained.clear()
                try:
                    await asyncio.wait_for(drained.wait(), self.settings.shutdown_grace)
                except asyncio.TimeoutError:
                    pass

        await amqp.consume(self.settings.swpt_forward_queue)
        tasks = [asyncio.ensure_future(c) for c in (send(), receive(), stopping())]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # raises the reason the connection ended
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def _next_frame(reader: asyncio.StreamReader, parser: FrameParser) -> Frame:
    while True:
        frame = parser.next_frame()
        if frame is not None:
            return frame
        data = await reader.read(65536)
        if not data:
            raise ForwardError("the peer closed the connection")
        parser.feed(data)


async def _read_frames(reader: asyncio.StreamReader, parser: FrameParser) -> list[Frame]:
    """Every frame complete after the next read (at least one)."""
    while not (frames := parser.frames()):
        data = await reader.read(65536)
        if not data:
            raise ForwardError("the peer closed the connection")
        parser.feed(data)
    return frames


def _describe(frame: Frame) -> str:
    return f"peer sent {frame.command} {frame.headers.get('message', '')!r}: " + frame.body.decode(
        "utf-8", "replace"
    ).strip()

