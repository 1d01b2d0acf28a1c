"""RabbitMQ's stream protocol for streams and super streams, through rstream, for one Spark task.

The STOMP path gets a stream one message at a time (RabbitMQ hands the bridge one AMQP message
per delivery); the stream protocol hands over whole chunks, thousands of messages at once, with
the offset of their first message. ``StreamSession`` is a blocking face on rstream's asyncio
``Client``: its own event loop, run only while the task waits for the broker, so nothing keeps
running when the task ends (as ``client.StompClient``). Offsets, data loss and read timeouts mean
what they mean on the STOMP path (``reading``):

- a range ``[lo, hi)`` is read by subscribing at ``offset lo``; the chunk holding ``lo`` comes
  first, offsets below ``lo`` are skipped; a first offset above ``lo`` is data loss, so is a
  stream deleted under the read (RabbitMQ's metadata update);
- the tail is the last chunk's first offset plus its count (a subscription at ``last`` with one
  credit), the first offset the first chunk's: exact, no idle probe (rstream 1.1 has no
  StreamStats command). Only an empty stream waits ``tailIdleMs`` for a chunk that does not come;
- a super stream's partitions are the broker's own answer (the Partitions command).

Publishing: one named producer per stream and task, publishing ids that make a retried task's
rows duplicates RabbitMQ drops (``publisher_name``, docs/spark.md), every message confirmed.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Iterator

from stomp_bridge.spark.client import StompClientError
from stomp_bridge.spark.partitions import DataLoss

try:  # the [spark] extra brings rstream; the STOMP path runs without it
    from rstream import constants as _constants
    from rstream import exceptions as _exceptions
    from rstream import schema as _schema
    from rstream.client import Client as _Client
except ImportError:  # pragma: no cover
    _Client = None

def available() -> bool:
    return _Client is not None


def decode_slowly(message: bytes):
    """What ``amqp10.decode`` gives, by rstream's own decoder: for encodings that one does not read."""
    from rstream import amqp_decoder

    m = amqp_decoder(bytes(message))
    props = m.properties
    body = m.body if isinstance(m.body, (bytes, bytearray)) else (
        b"".join(m.body) if isinstance(m.body, list) else str(m.value if m.value is not None else m.body).encode())
    headers = {str(k.decode() if isinstance(k, bytes) else k): str(v.decode() if isinstance(v, bytes) else v)
               for k, v in (m.application_properties or {}).items() if v is not None}
    message_id = created = None
    if props is not None:
        if getattr(props, "message_id", None) is not None:
            message_id = str(props.message_id)
        if getattr(props, "creation_time", None) is not None:
            created = int(props.creation_time)
        if getattr(props, "content_type", None) is not None:
            ct = props.content_type
            headers["content-type"] = ct.decode() if isinstance(ct, bytes) else str(ct)
    return bytes(body), headers or None, message_id, created, None


DELETED = object()  # put on a read's queue when RabbitMQ says the stream is gone


class StreamProtocolError(StompClientError):
    """The stream port refused, failed or did not answer."""


class StreamMissing(StreamProtocolError):
    """The stream does not exist."""


def ssl_context(options) -> ssl.SSLContext | None:
    if not options.tls:
        return None
    context = ssl.create_default_context(cafile=options.tls_ca_file)
    if not options.tls_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class StreamSession:
    """One stream-protocol connection; use as a context manager."""

    def __init__(self, options) -> None:
        if _Client is None:
            raise StreamProtocolError("protocol=stream needs rstream: install the [spark] extra "
                                      "(pip install 'stomp-bridge[spark]') or set option protocol=stomp")
        self.options = options
        self.loop = asyncio.new_event_loop()
        self.client = None
        self._next_id = 0

    def frame_max(self, default: int) -> int:
        """The frame size RabbitMQ and rstream agreed at the handshake. rstream keeps it only in
        a private attribute (``Client._frame_max``, rstream 1.1): read here alone, and
        tests/unit/test_spark_arrow.py fails when rstream stops setting it."""
        return getattr(self.client, "_frame_max", default) or default

    @property
    def where(self) -> str:
        return f"{self.options.stream_host}:{self.options.stream_port}"

    def run(self, coro, timeout: float | None = None):
        wait = self.options.read_timeout if timeout is None else timeout
        try:
            return self.loop.run_until_complete(asyncio.wait_for(coro, wait))
        except asyncio.TimeoutError:
            raise StreamProtocolError(f"the stream port {self.where} did not answer within {wait:g} s "
                                      "(raise readTimeoutMs if the broker is slow)") from None
        except _exceptions.StreamDoesNotExist:
            raise
        except _exceptions.ServerError as exc:
            raise StreamProtocolError(f"the stream port {self.where} refused: {type(exc).__name__} {exc}") from exc
        except OSError as exc:
            raise StreamProtocolError(f"connection to the stream port {self.where} failed: {exc}") from exc

    def __enter__(self) -> "StreamSession":
        o = self.options
        client = _Client(host=o.stream_host, port=o.stream_port, ssl_context=ssl_context(o),
                         frame_max=8 * 1024 * 1024, heartbeat=60, connection_name="stomp-bridge-spark")
        try:
            self.run(client.start(), o.connect_timeout)
        except BaseException:
            self.loop.close()
            raise
        try:
            self.run(client.authenticate(vhost=o.vhost, username=o.login or "guest",
                                         password=o.passcode or "guest"), o.connect_timeout)
        except StreamProtocolError as exc:
            try:
                self.loop.run_until_complete(asyncio.wait_for(client.close(), 5))
            except Exception:
                pass
            self.loop.close()
            raise StreamProtocolError(f"the stream port {self.where} refused the login of "
                                      f"{o.login or 'guest'!r} on vhost {o.vhost!r}: {exc.__cause__ or exc}") from None
        except BaseException:
            self.loop.close()
            raise
        self.client = client
        return self

    def __exit__(self, *exc) -> None:
        client, self.client = self.client, None
        try:
            if client is not None:
                try:
                    self.loop.run_until_complete(asyncio.wait_for(client.close(), 5))
                except Exception:
                    pass
            for task in asyncio.all_tasks(self.loop):
                task.cancel()
            self.loop.run_until_complete(asyncio.sleep(0))
        finally:
            self.loop.close()

    # -- reading --------------------------------------------------------------------------

    def _subscription(self, stream: str, kind: str, value: int | None, credit: int) -> tuple[int, asyncio.Queue]:
        """Subscribe; Deliver frames (and DELETED) go to the returned queue."""
        client = self.client
        self._next_id += 1
        sub = self._next_id
        queue: asyncio.Queue = asyncio.Queue()

        async def on_deliver(frame) -> None:
            if frame.subscription_id == sub:
                queue.put_nowait(frame)

        def on_metadata(frame) -> None:
            if frame.metadata_info.stream == stream:
                queue.put_nowait(DELETED)

        client.add_handler(_schema.Deliver, lambda frame: None, name=str(sub))
        client.add_handler(_schema.MetadataUpdate, on_metadata, name=f"meta-{sub}")
        self.run(client.run_queue_listener_task(subscriber_id=sub, handler=on_deliver))
        spec = _schema.OffsetSpec.from_params(getattr(_constants.OffsetType, kind.upper()), value)
        try:
            self.run(client.subscribe(stream=stream, subscription_id=sub, offset_spec=spec, initial_credit=credit))
        except _exceptions.StreamDoesNotExist:
            raise StreamMissing(f"the stream port {self.where} answered NOT_FOUND - no queue '{stream}' "
                                f"in vhost '{self.options.vhost}' (no such stream)") from None
        return sub, queue

    def _end(self, sub: int) -> None:
        client = self.client
        try:
            self.run(client.unsubscribe(sub), 5)
        except StompClientError:
            pass
        self.run(client.stop_queue_listener_task(sub), 5)
        client.remove_handler(_schema.Deliver, name=str(sub))
        client.remove_handler(_schema.MetadataUpdate, name=f"meta-{sub}")

    def _next(self, queue: asyncio.Queue, timeout: float):
        try:
            return self.loop.run_until_complete(asyncio.wait_for(queue.get(), timeout))
        except asyncio.TimeoutError:
            return None

    def one_chunk(self, stream: str, kind: str, value: int | None, idle: float):
        """The first chunk a subscription gets (None within ``idle``: nothing there)."""
        sub, queue = self._subscription(stream, kind, value, 1)
        try:
            while True:
                frame = self._next(queue, idle)
                if frame is None or frame is DELETED:
                    return None
                if frame.chunk_type == 0 and frame.num_records > 0:  # user messages, not tracking
                    return frame
                self.loop.run_until_complete(self.client.credit(sub, 1))
        finally:
            self._end(sub)

    def tail(self, stream: str, idle: float) -> int:
        """The stream's last offset (-1: empty)."""
        frame = self.one_chunk(stream, "last", None, idle)
        return -1 if frame is None else frame.chunk_first_offset + frame.num_records - 1

    def first(self, stream: str, idle: float) -> int | None:
        frame = self.one_chunk(stream, "first", None, idle)
        return None if frame is None else frame.chunk_first_offset

    def first_at(self, stream: str, timestamp_s: int, idle: float) -> int | None:
        """The first offset of the first chunk written at or after ``timestamp_s``."""
        frame = self.one_chunk(stream, "timestamp", timestamp_s * 1000, idle)
        return None if frame is None else frame.chunk_first_offset

    def exists(self, stream: str) -> bool:
        return self.run(self.client.stream_exists(stream))

    def partitions(self, super_stream: str) -> list[str]:
        """The super stream's partitions in order, [] if there is no such super stream."""
        try:
            return list(self.run(self.client.partitions(super_stream)) or [])
        except StreamProtocolError:
            return []

    def route(self, key: str, super_stream: str) -> list[str]:
        """The partitions the super stream's bindings give ``key`` ([]: none takes it)."""
        try:
            return list(self.run(self.client.route(key, super_stream)) or [])
        except StreamProtocolError:
            return []

    def chunks(self, stream: str, lo: int, hi: int, lost=None, credit: int = 10) -> Iterator[tuple]:
        """``(Deliver frame, start, stop)`` for every chunk that holds ``[lo, hi)``: its entries
        ``start`` to ``stop`` (exclusive) are the range's; data loss goes to ``lost``."""
        if hi <= lo:
            return
        sub, queue = self._subscription(stream, "offset", lo, credit)
        wait = self.options.read_timeout
        try:
            nxt = lo
            while nxt < hi:
                frame = self._next(queue, wait)
                if frame is None:
                    raise StreamProtocolError(
                        f"reading offsets [{lo}, {hi}) of stream {stream}: nothing arrived for {wait:g} s after "
                        f"offset {nxt - 1}; was the stream deleted and created again? (raise readTimeoutMs "
                        "if the broker is only slow)")
                if frame is DELETED:
                    if lost is not None:
                        lost(DataLoss(stream, nxt, None))
                    return
                self.loop.run_until_complete(self.client.credit(sub, 1))
                if frame.chunk_type != 0:  # a tracking or trailer chunk, no messages
                    continue
                first = frame.chunk_first_offset
                end = first + frame.num_records
                if end <= nxt:
                    continue
                if first > nxt and lost is not None:
                    lost(DataLoss(stream, nxt, first))
                start = max(nxt - first, 0)
                stop = min(hi - first, frame.num_records)
                yield frame, start, stop
                nxt = first + stop if stop > start else end
        finally:
            if self.client is not None and self.client.is_connection_alive():
                self._end(sub)

    # -- publishing -----------------------------------------------------------------------

    def publisher(self, stream: str, name: str) -> "StreamPublisher":
        self._next_id += 1
        return StreamPublisher(self, stream, name, self._next_id)


class StreamPublisher:
    """One named producer on one stream: batches of messages, each confirmed by RabbitMQ.

    ``publish(messages, first_id)`` sends ``messages`` with publishing ids ``first_id``,
    ``first_id + 1``, ...; RabbitMQ drops (and confirms) an id it already has from this name, so
    a retried task that sends the same rows with the same ids adds nothing."""

    def __init__(self, session: StreamSession, stream: str, name: str, publisher_id: int) -> None:
        self.session, self.stream, self.name, self.id = session, stream, name, publisher_id % 256
        self.sent = self.confirmed = 0
        self.error: str | None = None
        self.done = asyncio.Event()
        client = session.client
        client.add_handler(_schema.PublishConfirm, self._on_confirm, name=f"pub-{self.id}")
        client.add_handler(_schema.PublishError, self._on_error, name=f"puberr-{self.id}")
        try:
            session.run(client.declare_publisher(stream=stream, reference=name, publisher_id=self.id))
        except _exceptions.StreamDoesNotExist:
            raise StreamMissing(f"the stream port {session.where} answered NOT_FOUND - no queue '{stream}' "
                                f"in vhost '{session.options.vhost}' (no such stream)") from None

    def _on_confirm(self, frame) -> None:
        if frame.publisher_id == self.id:
            self.confirmed += len(frame.publishing_ids)
            self.done.set()

    def _on_error(self, frame) -> None:
        if frame.publisher_id == self.id:
            codes = sorted({e.response_code for e in frame.errors})
            self.error = f"RabbitMQ refused {len(frame.errors)} message(s) for stream {self.stream} (code {codes})"
            self.done.set()

    def publish(self, messages: list[bytes], first_id: int) -> None:
        batch = [_schema.Message(publishing_id=first_id + i, filter_value=None, data=m)
                 for i, m in enumerate(messages)]
        self.session.run(self.session.client.send_publish_frame(_schema.Publish(publisher_id=self.id, messages=batch)))
        self.sent += len(batch)
        self._check()

    def wait(self, unconfirmed: int = 0) -> None:
        """Block until at most ``unconfirmed`` messages are not confirmed yet."""
        while self.sent - self.confirmed > unconfirmed and self.error is None:
            self.done.clear()
            self.session.run(self.done.wait())
        self._check()

    def _check(self) -> None:
        if self.error is not None:
            raise StreamProtocolError(self.error)

    def close(self) -> int:
        self.wait(0)
        try:
            self.session.run(self.session.client.delete_publisher(self.id), 5)
        except StompClientError:
            pass
        return self.confirmed
