"""What RabbitMQ spends per message for each way the bridge could hand it the same work.

    python -m bench.amqp_patterns --broker 4.4            # the 4.4 preview node (AMQP 5644)
    python -m bench.amqp_patterns --broker 4.3 --runs 5 --only pub,con
    python -m bench.amqp_patterns --broker 4.0 --messages 20000 --json /tmp/patterns.json
    python -m bench.amqp_patterns --broker system --only fan   # 3.10.8: no AMQP 1.0 there

A measurement outside the bridge: this process plays the bridge's AMQP side with a raw AMQP 0-9-1
client (the bridge's own codec for publishes and acks: ``stomp_bridge.amqp.codec``; pamqp for the
handshake and RPCs) and, on RabbitMQ 4.x, an AMQP 1.0 client (python-qpid-proton), and reads the
CPU time of the RabbitMQ node (its beam.smp, found by the AMQP port it listens on; the 4.x nodes
run in chroots, ``scripts/rabbitmq4``) from /proc over the timed part of each scenario. Every
scenario hands RabbitMQ the same work (``--messages`` messages of ``--size`` bytes with the
properties the bridge gives a plain SEND); they differ only in how:

* ``pub-*``: ``--sessions`` publishers (4), a window of ``--window`` (100) unconfirmed publishes
  each, to one durable classic queue no one consumes. ``k1`` / ``k10`` / ``k100``: publishes per
  socket write (the bridge writes one batch per chunk of client bytes, so K is how many SENDs a
  client's chunk held). ``conn``: one connection per session (the bridge's layout for a login's
  first 16 sessions, ``amqp_min_connections_per_login``); ``chan``: one connection, a channel per
  session (later sessions, up to ``amqp_channels_per_connection``); ``mux``: every session's
  publishes on one channel of one connection; ``chan-co``: ``chan`` with the sessions' writes of
  one pass joined into one socket write. ``np``: non-persistent, confirms on (the bridge
  always confirms: receipts, and a nack or return stops the ledger); ``nc``: non-persistent
  without confirms (what confirms cost); ``p``: persistent (delivery mode 2), confirms.
* ``con-*``: one consumer of a queue filled beforehand (the fill is not timed). ``each``: one
  basic.ack per delivery, the acks of one socket read in one write (client-individual today);
  ``each-w``: one write per ack; ``multi``: one multiple ack per quarter of the prefetch (the
  bridge's ack:auto window: ``auto_ack_window`` 500, flushed at 125); ``noack``: an auto-ack
  consumer (``no_ack``: RabbitMQ settles on sending). ``pNNN``: prefetch.
* ``fan-*``: one publisher (window 100, 10 per write) to a topic exchange; ``qM``: M queues bound
  to the key, one consumer each on 16 connections at most (one subscriber's queue each, as the
  bridge does today, each consumer as today's ack:auto, ``multi``, or ``noack``); ``edge``: one
  queue bound and one consumer (fan-out at the edge: the copies are made outside RabbitMQ). The
  figure is RabbitMQ's CPU per *published* message.
* ``a1-*`` (RabbitMQ 4.x): AMQP 1.0, which 4.x speaks natively on its AMQP port, to and from the
  same queue (address ``/queues/NAME``), with python-qpid-proton: ``a1-pub-np`` / ``a1-pub-p``
  unsettled transfers (RabbitMQ settles each once the queue has it: the confirm), one connection
  per session; ``a1-con-accept``: credit 500, each delivery accepted (proton settles one by one);
  ``a1-con-settled``: pre-settled deliveries (at-most-once: the auto-ack of AMQP 1.0).
  ``--proton-messages`` each (5,000: proton costs 80-100 µs of client CPU per message, so it hands
  RabbitMQ about one frame per read). ``a1r-*``: the same with ``bench.amqp1_raw``, a minimal
  AMQP 1.0 client as quick as the 0-9-1 one: ``a1r-pub-np-k1`` / ``-k10`` / ``a1r-pub-p-k10``
  (transfers per write), ``a1r-con-each`` (a disposition per delivery), ``a1r-con-range`` (one
  ranged disposition per read), ``a1r-con-settled`` (pre-settled), credit 500.

Each scenario is run once per round, the rounds interleave every scenario (the order rotates each
round), and each round's figures are divided by that round's baseline (``pub-np-k1-conn``,
``con-each-p500``, ``fan-q10-multi`` …: the pattern the bridge uses today) before the median
is taken: the machine is shared, so compare ratios within one run. ``idle`` measures the node's
own background (other users' connections, its timers) over one second per round: a node that
other people's tests use shows it there. The client's own CPU per message (this process:
``time.process_time``) is printed too: what the bridge would pay for the same AMQP work on its
side. Run by hand; the numbers go into docs/performance.md, never into assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import struct
import sys
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import pamqp.frame
import pamqp.header
from pamqp import commands as spec

from bench.procstat import cpu_split
from stomp_bridge.amqp.codec import encode_ack, publish_frames
from testkit.bridgeproc import find_listener

BROKERS = {"4.3": 5643, "4.0": 5640, "system": 5672, "4.4": 5644}
BROKERS_PORT = [5643]  # the run's broker, for a clean-up on a connection of its own
HOST = "127.0.0.1"
TIMEOUT = 120.0  # seconds one scenario may take before it is abandoned
_HEAD = struct.Struct(">BHI")
_CM = struct.Struct(">HH")
_CONFIRM = struct.Struct(">QB")
_BODY_SIZE = struct.Struct(">Q")
_Q = struct.Struct(">Q")


class PatternError(Exception):
    """RabbitMQ refused something (a channel or connection close), or a scenario stalled."""


# -- a raw AMQP 0-9-1 connection -----------------------------------------------------------


class Chan:
    """One channel of a :class:`Conn`: its RPC replies, confirms and deliveries."""

    def __init__(self, conn: Conn, number: int) -> None:
        self.conn = conn
        self.number = number
        self.replies: deque[asyncio.Future] = deque()
        self.seq = 0  # the last publish's number (confirm mode)
        self.low = 1  # every publish below this one is confirmed
        self.owners: dict[int, Publisher] = {}  # unconfirmed publish -> its session
        self.consumer: Consumer | None = None
        self.content_left = 0  # body bytes of the delivery being received
        self.delivery_tag = 0
        self.touched = False

    def write(self, data: bytes) -> None:
        conn = self.conn
        if conn.coalesce:
            conn.pending.append(data)
        else:
            conn.transport.write(data)

    async def rpc(self, method: Any) -> Any:
        future = asyncio.get_running_loop().create_future()
        self.replies.append(future)
        self.write(pamqp.frame.marshal(method, self.number))
        return await asyncio.wait_for(future, TIMEOUT)

    def confirm(self, tag: int, multiple: bool) -> None:
        owners = self.owners
        if multiple:
            for seq in range(self.low, tag + 1):
                owner = owners.pop(seq, None)
                if owner is not None:
                    owner.confirmed()
            self.low = max(self.low, tag + 1)
        else:
            owner = owners.pop(tag, None)
            if owner is not None:
                owner.confirmed()
        self.touched = True

    def delivered(self) -> None:
        consumer = self.consumer
        if consumer is not None:
            consumer.delivered(self.delivery_tag)
        self.touched = True


class Conn(asyncio.Protocol):
    """One AMQP 0-9-1 connection: handshake and RPCs with pamqp, the per-message frames
    (confirms, deliveries) cut from the bytes here, and a batch end per socket read, where
    publishers refill their windows and consumers write their acks (as the bridge does)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.buf = bytearray()
        self.chans: dict[int, Chan] = {0: Chan(self, 0)}
        self.lost: asyncio.Future = asyncio.get_event_loop().create_future()
        self.writable = asyncio.Event()
        self.writable.set()
        self.error: str | None = None
        # coalesce: every channel's writes of one pass go out in one socket write (flush())
        self.coalesce = False
        self.pending: list[bytes] = []

    def flush(self) -> None:
        if self.pending:
            pending, self.pending = self.pending, []
            self.transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    @classmethod
    async def open(cls, port: int, name: str = "bench.amqp_patterns") -> Conn:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(cls, HOST, port)
        chan0 = conn.chans[0]
        started = loop.create_future()
        chan0.replies.append(started)
        conn.transport.write(pamqp.header.ProtocolHeader().marshal())
        await asyncio.wait_for(started, TIMEOUT)
        tune = loop.create_future()
        chan0.replies.append(tune)
        conn.transport.write(pamqp.frame.marshal(spec.Connection.StartOk(
            client_properties={"connection_name": name, "product": "bench.amqp_patterns"},
            mechanism="PLAIN", response="\0guest\0guest"), 0))
        tuned = await asyncio.wait_for(tune, TIMEOUT)
        conn.frame_max = tuned.frame_max or 131072
        conn.transport.write(pamqp.frame.marshal(spec.Connection.TuneOk(
            channel_max=tuned.channel_max, frame_max=conn.frame_max, heartbeat=0), 0))
        await chan0.rpc(spec.Connection.Open(virtual_host="/"))
        return conn

    async def channel(self, confirms: bool = False, prefetch: int = 0) -> Chan:
        number = len(self.chans)
        chan = self.chans[number] = Chan(self, number)
        await chan.rpc(spec.Channel.Open())
        if confirms:
            await chan.rpc(spec.Confirm.Select())
        if prefetch:
            await chan.rpc(spec.Basic.Qos(prefetch_count=prefetch))
        return chan

    async def close(self) -> None:
        if self.transport.is_closing():
            return
        try:
            await asyncio.wait_for(self.chans[0].rpc(
                spec.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)), 10)
        except (asyncio.TimeoutError, PatternError, ConnectionError):
            pass
        self.transport.close()

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            import socket
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(self.error or f"RabbitMQ closed the connection ({exc})")
        if not self.lost.done():
            self.lost.set_result(None)

    def fail(self, text: str) -> None:
        self.error = self.error or text
        for chan in self.chans.values():
            while chan.replies:
                future = chan.replies.popleft()
                if not future.done():
                    future.set_exception(PatternError(text))
            if chan.consumer is not None:
                chan.consumer.failed(text)
            for owner in set(chan.owners.values()):
                owner.failed(text)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        chans = self.chans
        size_all = len(buf)
        pos = 0
        touched = []
        while size_all - pos >= 7:
            kind, number, size = _HEAD.unpack_from(buf, pos)
            end = pos + 8 + size
            if end > size_all:
                break
            chan = chans[number]
            if kind == 3:  # a body frame
                chan.content_left -= size
                if chan.content_left <= 0:
                    chan.delivered()
                    touched.append(chan)
            elif kind == 1:
                class_id, method_id = _CM.unpack_from(buf, pos + 7)
                if class_id == 60 and method_id == 80:  # basic.ack: a confirm
                    tag, bits = _CONFIRM.unpack_from(buf, pos + 11)
                    chan.confirm(tag, bool(bits & 1))
                    touched.append(chan)
                elif class_id == 60 and method_id == 60:  # basic.deliver
                    at = pos + 11
                    at += 1 + buf[at]  # consumer tag
                    chan.delivery_tag = _Q.unpack_from(buf, at)[0]
                else:
                    self._method(chan, bytes(buf[pos:end]))
            elif kind == 2:  # content header: the body's size
                chan.content_left = _BODY_SIZE.unpack_from(buf, pos + 11)[0]
                if chan.content_left == 0:
                    chan.delivered()
                    touched.append(chan)
            pos = end
        del buf[:pos]
        for chan in touched:
            if chan.touched:
                chan.touched = False
                if chan.consumer is not None:
                    chan.consumer.batch_end()
        if PUBLISHERS_TOUCHED:
            publishers = list(PUBLISHERS_TOUCHED)
            PUBLISHERS_TOUCHED.clear()
            for publisher in publishers:
                publisher.batch_end()
        if self.pending:
            self.flush()

    def _method(self, chan: Chan, frame: bytes) -> None:
        _, _, method = pamqp.frame.unmarshal(frame)
        if isinstance(method, spec.Connection.Close):
            self.transport.write(pamqp.frame.marshal(spec.Connection.CloseOk(), 0))
            self.fail(f"connection closed by RabbitMQ: {method.reply_code} {method.reply_text}")
            return
        if isinstance(method, spec.Channel.Close):
            self.transport.write(pamqp.frame.marshal(spec.Channel.CloseOk(), chan.number))
            self.fail(f"channel {chan.number} closed by RabbitMQ: {method.reply_code} {method.reply_text}")
            return
        if isinstance(method, spec.Basic.Nack):
            self.fail(f"RabbitMQ nacked publish {method.delivery_tag} on channel {chan.number}")
            return
        if isinstance(method, (spec.Basic.ConsumeOk, spec.Basic.CancelOk, spec.Basic.QosOk)) or chan.replies:
            if chan.replies:
                future = chan.replies.popleft()
                if not future.done():
                    future.set_result(method)
            return
        if isinstance(method, spec.Connection.Blocked):
            self.fail("RabbitMQ blocked the connection (a resource alarm): the figures would be wrong")


# Publishers whose confirms arrived in the current read: they refill once, at its end.
PUBLISHERS_TOUCHED: set[Publisher] = set()


class Publisher:
    """One session's publishes: ``count`` messages on ``chan``, at most ``window`` unconfirmed,
    ``per_write`` of them per socket write."""

    def __init__(self, chan: Chan, exchange: str, key: str, count: int, window: int, per_write: int,
                 props: dict[str, Any], body: bytes, done: Callable[[], None]) -> None:
        self.chan = chan
        self.exchange, self.key = exchange, key
        self.left = count
        self.window, self.per_write = window, per_write
        self.props, self.body = props, body
        self.outstanding = 0
        self.done = done
        self.error: str | None = None

    def start(self) -> None:
        self.fill()

    def fill(self) -> None:
        chan = self.chan
        number, frame_max = chan.number, chan.conn.frame_max
        owners = chan.owners
        while self.left and self.outstanding + min(self.per_write, self.left) <= self.window:
            k = min(self.per_write, self.left)
            out: list[bytes | memoryview] = []
            for _ in range(k):
                publish_frames(out, number, self.exchange, self.key, self.props, self.body, frame_max)
                chan.seq += 1
                owners[chan.seq] = self
            self.left -= k
            self.outstanding += k
            chan.write(out[0] if k == 1 else b"".join(out))  # type: ignore[arg-type]
        if not self.left and not self.outstanding:
            self.done()

    def confirmed(self) -> None:
        self.outstanding -= 1
        PUBLISHERS_TOUCHED.add(self)

    def batch_end(self) -> None:
        self.fill()

    def failed(self, text: str) -> None:
        self.error = text
        self.done()


async def publish_unconfirmed(chan: Chan, exchange: str, key: str, count: int, per_write: int,
                              props: dict[str, Any], body: bytes) -> None:
    """``count`` publishes without confirms, ``per_write`` per write, as fast as the socket takes
    them (its write buffer's high-water mark is the only pacing)."""
    conn = chan.conn
    left = count
    while left:
        k = min(per_write, left)
        out: list[bytes | memoryview] = []
        for _ in range(k):
            publish_frames(out, chan.number, exchange, key, props, body, conn.frame_max)
        chan.write(out[0] if k == 1 else b"".join(out))  # type: ignore[arg-type]
        left -= k
        if not conn.writable.is_set():
            await conn.writable.wait()
        if conn.error:
            raise PatternError(conn.error)


class Consumer:
    """One consumer on ``chan``: counts ``expected`` deliveries and acknowledges them as
    ``mode`` says (``noack``, ``each``, ``each-w``, ``multi``), at each socket read's end."""

    def __init__(self, chan: Chan, mode: str, expected: int, every: int, done: Callable[[], None]) -> None:
        self.chan = chan
        self.mode = mode
        self.expected = expected
        self.every = every
        self.received = 0
        self.pending: list[int] = []
        self.done = done
        self.finished = expected == 0
        self.error: str | None = None
        chan.consumer = self

    def delivered(self, delivery_tag: int) -> None:
        self.received += 1
        if self.mode != "noack":
            self.pending.append(delivery_tag)
        elif self.received == self.expected:
            self.finish()

    def batch_end(self) -> None:
        pending = self.pending
        if not pending:
            return
        number = self.chan.number
        mode = self.mode
        last = self.received >= self.expected
        if mode == "each":
            self.chan.write(b"".join([encode_ack(number, tag, False) for tag in pending]))
        elif mode == "each-w":
            write = self.chan.write
            for tag in pending:
                write(encode_ack(number, tag, False))
        elif mode == "multi":
            if len(pending) < self.every and not last:
                return
            self.chan.write(encode_ack(number, pending[-1], True))
        self.pending = []
        if last:
            self.finish()

    def finish(self) -> None:
        if not self.finished:
            self.finished = True
            self.done()

    def failed(self, text: str) -> None:
        self.error = text
        self.finish()


# -- measuring ---------------------------------------------------------------------------


class Node:
    """The RabbitMQ node's beam process, and this process's CPU beside it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def cpu(self) -> float:
        return sum(cpu_split(self.pid))


class Timed:
    """RabbitMQ's and this process's CPU seconds, and the wall time, between start() and stop()."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def start(self) -> None:
        self.rabbit0 = self.node.cpu()
        self.client0 = time.process_time()
        self.wall0 = time.perf_counter()

    def stop(self, messages: int, **extra: Any) -> dict[str, Any]:
        wall = time.perf_counter() - self.wall0
        rabbit = self.node.cpu() - self.rabbit0
        client = time.process_time() - self.client0
        return {
            "messages": messages,
            "rabbit_us": rabbit * 1e6 / messages,
            "client_us": client * 1e6 / messages,
            "rate": messages / wall if wall else 0.0,
            "wall_s": wall,
            **extra,
        }


def bridge_props(persistent: bool) -> dict[str, Any]:
    """What ``headers.properties_from_send`` makes of a plain SEND (destination, receipt)."""
    props: dict[str, Any] = {"headers": {}}
    if persistent:
        props["delivery_mode"] = 2
    return props


class Run:
    """Shared state of one run: the node, the sizes, the unique names."""

    def __init__(self, args: argparse.Namespace, node: Node) -> None:
        self.args = args
        self.node = node
        self.port = BROKERS_PORT[0] = BROKERS[args.broker]
        self.tag = f"bench.patterns.{os.getpid()}.{uuid.uuid4().hex[:6]}"
        self.body = b"x" * args.size
        self.count = 0

    def name(self, what: str) -> str:
        self.count += 1
        return f"{self.tag}.{what}.{self.count}"

    async def settle(self) -> None:
        """Let RabbitMQ finish what the set-up started (declares, deletes, GC) before a mark."""
        await asyncio.sleep(self.args.settle)

    async def admin(self) -> tuple[Conn, Chan]:
        conn = await Conn.open(self.port, "bench.amqp_patterns admin")
        return conn, await conn.channel()


async def cleanup(admin: Conn, method: Any) -> None:
    """Delete what a scenario made (on the admin connection's channel 1, or a new one if RabbitMQ
    closed it), never raising over the scenario's own error."""
    try:
        if admin.transport.is_closing() or admin.error:
            admin = await Conn.open(BROKERS_PORT[0], "bench.amqp_patterns cleanup")
            await admin.channel()
        await admin.chans[1].rpc(method)
    except Exception as exc:  # noqa: BLE001
        print(f"  clean-up {type(method).__name__} failed: {exc}", file=sys.stderr)
    finally:
        await admin.close()


async def wait_all(futures: list[asyncio.Future], what: str) -> None:
    try:
        await asyncio.wait_for(asyncio.gather(*futures), TIMEOUT)
    except asyncio.TimeoutError:
        raise PatternError(f"{what}: not done within {TIMEOUT:.0f} s") from None


async def scenario_publish(run: Run, layout: str, per_write: int, persistent: bool, confirms: bool,
                           coalesce: bool = False) -> dict:
    """``coalesce`` (layout ``chan``): the sessions' writes of one pass joined into one socket
    write per connection, as the bridge could join the batches of the sessions sharing one."""
    args = run.args
    sessions, total = args.sessions, args.messages
    admin, achan = await run.admin()
    queue = run.name("q")
    await achan.rpc(spec.Queue.Declare(queue=queue, durable=True))
    conns: list[Conn] = []
    try:
        if layout == "conn":
            conns = [await Conn.open(run.port) for _ in range(sessions)]
            chans = [await c.channel(confirms) for c in conns]
        elif layout == "chan":
            conns = [await Conn.open(run.port)]
            chans = [await conns[0].channel(confirms) for _ in range(sessions)]
            conns[0].coalesce = coalesce
        else:  # mux: every session on one channel
            conns = [await Conn.open(run.port)]
            one = await conns[0].channel(confirms)
            chans = [one] * sessions
        per = total // sessions
        props = bridge_props(persistent)
        await run.settle()
        timed = Timed(run.node)
        if confirms:
            loop = asyncio.get_running_loop()
            futures = [loop.create_future() for _ in range(sessions)]
            pubs = [Publisher(chan, "", queue, per, args.window, per_write, props, run.body,
                              (lambda f=f: f.done() or f.set_result(None))) for chan, f in zip(chans, futures)]
            timed.start()
            for p in pubs:
                p.start()
            for c in conns:
                c.flush()
            await wait_all(futures, "publishing")
            errors = [p.error for p in pubs if p.error]
            if errors:
                raise PatternError(errors[0])
        else:
            timed.start()
            await asyncio.gather(*(publish_unconfirmed(chan, "", queue, per, per_write, props, run.body)
                                   for chan in chans))
            # Done when the queue holds them all (RabbitMQ's channel and queue processes both).
            deadline = time.monotonic() + TIMEOUT
            while True:
                ok = await achan.rpc(spec.Queue.Declare(queue=queue, durable=True, passive=True))
                if ok.message_count >= per * sessions:
                    break
                if time.monotonic() > deadline:
                    raise PatternError(f"queue holds {ok.message_count} of {per * sessions}")
                await asyncio.sleep(0.01)
        result = timed.stop(per * sessions)
        ok = await achan.rpc(spec.Queue.Declare(queue=queue, durable=True, passive=True))
        if ok.message_count != per * sessions:
            raise PatternError(f"queue holds {ok.message_count}, expected {per * sessions}")
        return result
    finally:
        for c in conns:
            await c.close()
        await cleanup(admin, spec.Queue.Delete(queue=queue))


async def fill(run: Run, chan: Chan, queue: str, count: int) -> None:
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    p = Publisher(chan, "", queue, count, 1000, 100, bridge_props(False), run.body,
                  lambda: future.done() or future.set_result(None))
    p.start()
    await wait_all([future], "filling")
    if p.error:
        raise PatternError(p.error)


async def scenario_consume(run: Run, mode: str, prefetch: int, every: int = 0) -> dict:
    """``every``: deliveries per multiple ack (``multi``; a quarter of the prefetch unless given)."""
    total = run.args.messages
    admin, achan = await run.admin()
    queue = run.name("q")
    await achan.rpc(spec.Queue.Declare(queue=queue, durable=True))
    conn = None
    try:
        filler = await admin.channel(confirms=True)
        await fill(run, filler, queue, total)
        conn = await Conn.open(run.port)
        chan = await conn.channel(prefetch=0 if mode == "noack" else prefetch)
        await run.settle()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        consumer = Consumer(chan, mode, total, every or max(1, prefetch // 4), lambda: future.done() or future.set_result(None))
        timed = Timed(run.node)
        timed.start()
        await chan.rpc(spec.Basic.Consume(queue=queue, consumer_tag="c", no_ack=mode == "noack"))
        await wait_all([future], "consuming")
        if consumer.error:
            raise PatternError(consumer.error)
        # One round trip on the channel: RabbitMQ has read every ack before it answers.
        await chan.rpc(spec.Basic.Qos(prefetch_count=0 if mode == "noack" else prefetch))
        result = timed.stop(total)
        ok = await achan.rpc(spec.Queue.Declare(queue=queue, durable=True, passive=True))
        if ok.message_count:
            raise PatternError(f"{ok.message_count} messages left in the queue")
        return result
    finally:
        if conn is not None:
            await conn.close()
        await cleanup(admin, spec.Queue.Delete(queue=queue))


async def scenario_fanout(run: Run, queues: int, mode: str, published: int) -> dict:
    """``published`` messages to a topic exchange with ``queues`` queues bound, each consumed."""
    admin, achan = await run.admin()
    exchange = run.name("x")
    await achan.rpc(spec.Exchange.Declare(exchange=exchange, exchange_type="topic", durable=False))
    conns: list[Conn] = []
    try:
        conns = [await Conn.open(run.port) for _ in range(min(queues, 16))]
        loop = asyncio.get_running_loop()
        futures = []
        consumers = []
        for i in range(queues):
            conn = conns[i % len(conns)]
            chan = await conn.channel(prefetch=0 if mode == "noack" else 500)
            queue = run.name("s")
            await chan.rpc(spec.Queue.Declare(queue=queue, exclusive=True, auto_delete=True))
            await chan.rpc(spec.Queue.Bind(queue=queue, exchange=exchange, routing_key="fan.key"))
            f = loop.create_future()
            futures.append(f)
            consumers.append(Consumer(chan, mode, published, 125, lambda f=f: f.done() or f.set_result(None)))
            await chan.rpc(spec.Basic.Consume(queue=queue, consumer_tag="c", no_ack=mode == "noack"))
        pconn = await Conn.open(run.port)
        conns.append(pconn)
        pchan = await pconn.channel(confirms=True)
        await run.settle()
        pf = loop.create_future()
        pub = Publisher(pchan, exchange, "fan.key", published, 100, 10, bridge_props(False), run.body,
                        lambda: pf.done() or pf.set_result(None))
        timed = Timed(run.node)
        timed.start()
        pub.start()
        await wait_all([pf, *futures], "fan-out")
        for c in consumers:
            if c.error:
                raise PatternError(c.error)
        if pub.error:
            raise PatternError(pub.error)
        for c in consumers[: min(queues, 16)]:  # a round trip per connection: its acks are read
            await c.chan.rpc(spec.Basic.Qos(prefetch_count=0 if mode == "noack" else 500))
        return timed.stop(published, deliveries=published * queues)
    finally:
        for c in conns:
            await c.close()
        await cleanup(admin, spec.Exchange.Delete(exchange=exchange))


async def scenario_idle(run: Run) -> dict:
    timed = Timed(run.node)
    timed.start()
    await asyncio.sleep(1.0)
    result = timed.stop(1)
    return {**result, "rabbit_us": result["rabbit_us"], "messages": 1}


# -- AMQP 1.0 (python-qpid-proton) -------------------------------------------------------------


def amqp1_publish(run: Run, queue: str, persistent: bool) -> dict:
    from proton import Message
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    args = run.args
    per = args.proton_messages // args.sessions
    url = f"amqp://{HOST}:{run.port}"
    body = run.body
    timed = Timed(run.node)

    class Publisher1(MessagingHandler):
        def __init__(self) -> None:
            super().__init__(auto_settle=True)
            self.sent: dict[Any, int] = {}
            self.accepted = 0
            self.open = 0
            self.error: str | None = None
            self.conns: list[Any] = []

        def on_start(self, event: Any) -> None:
            for _ in range(args.sessions):
                conn = event.container.connect(url, user="guest", password="guest", allowed_mechs="PLAIN",
                                               allow_insecure_mechs=True)
                self.conns.append(conn)
                sender = event.container.create_sender(conn, f"/queues/{queue}")
                self.sent[sender] = 0

        def on_link_opened(self, event: Any) -> None:
            if event.link.is_sender:
                self.open += 1
                if self.open == args.sessions:
                    timed.start()
                    for sender in self.sent:
                        self.send(sender)

        def on_sendable(self, event: Any) -> None:
            if self.open == args.sessions:
                self.send(event.sender)

        def send(self, sender: Any) -> None:
            sent = self.sent[sender]
            while sender.credit and sent < per and sender.unsettled < args.window:
                sender.send(Message(body=body, inferred=True, durable=persistent))
                sent += 1
            self.sent[sender] = sent

        def on_accepted(self, event: Any) -> None:
            self.accepted += 1
            if self.accepted == per * args.sessions:
                self.result = timed.stop(per * args.sessions)
                for conn in self.conns:
                    conn.close()
            elif self.sent[event.link] < per:
                self.send(event.link)

        def on_rejected(self, event: Any) -> None:
            self.error = f"RabbitMQ rejected a transfer: {event.delivery.remote.condition}"
            for conn in self.conns:
                conn.close()

        on_released = on_rejected

        def on_transport_error(self, event: Any) -> None:
            self.error = f"AMQP 1.0 transport error: {event.transport.condition}"

    handler = Publisher1()
    Container(handler).run()
    if handler.error:
        raise PatternError(handler.error)
    return handler.result


def amqp1_consume(run: Run, queue: str, settled: bool) -> dict:
    from proton.handlers import MessagingHandler
    from proton.reactor import AtMostOnce, Container

    total = run.args.proton_messages
    url = f"amqp://{HOST}:{run.port}"
    timed = Timed(run.node)

    class Consumer1(MessagingHandler):
        def __init__(self) -> None:
            super().__init__(prefetch=500, auto_accept=False)
            self.received = 0
            self.error: str | None = None

        def on_start(self, event: Any) -> None:
            self.conn = event.container.connect(url, user="guest", password="guest", allowed_mechs="PLAIN",
                                                allow_insecure_mechs=True)
            timed.start()
            options = [AtMostOnce()] if settled else []
            event.container.create_receiver(self.conn, f"/queues/{queue}", options=options)

        def on_message(self, event: Any) -> None:
            self.received += 1
            if not settled:
                self.accept(event.delivery)
            if self.received == total:
                # proton writes the disposition before the detach (its transport's order)
                event.receiver.close()

        def on_link_closed(self, event: Any) -> None:
            # RabbitMQ answered our detach: it has read every disposition before it.
            self.result = timed.stop(total)
            self.conn.close()

        def on_transport_error(self, event: Any) -> None:
            self.error = f"AMQP 1.0 transport error: {event.transport.condition}"

    handler = Consumer1()
    Container(handler).run()
    if handler.error:
        raise PatternError(handler.error)
    return handler.result


async def scenario_a1_publish(run: Run, persistent: bool) -> dict:
    admin, achan = await run.admin()
    queue = run.name("q")
    await achan.rpc(spec.Queue.Declare(queue=queue, durable=True))
    try:
        await run.settle()
        # proton runs its own loop: this one waits (idle) in the thread's meantime.
        result = await asyncio.to_thread(amqp1_publish, run, queue, persistent)
        ok = await achan.rpc(spec.Queue.Declare(queue=queue, durable=True, passive=True))
        expected = run.args.proton_messages // run.args.sessions * run.args.sessions
        if ok.message_count != expected:
            raise PatternError(f"queue holds {ok.message_count}, expected {expected}")
        return result
    finally:
        await cleanup(admin, spec.Queue.Delete(queue=queue))


async def scenario_a1_consume(run: Run, settled: bool) -> dict:
    admin, achan = await run.admin()
    queue = run.name("q")
    await achan.rpc(spec.Queue.Declare(queue=queue, durable=True))
    try:
        filler = await admin.channel(confirms=True)
        await fill(run, filler, queue, run.args.proton_messages)
        await run.settle()
        result = await asyncio.to_thread(amqp1_consume, run, queue, settled)
        ok = await achan.rpc(spec.Queue.Declare(queue=queue, durable=True, passive=True))
        if ok.message_count:
            raise PatternError(f"{ok.message_count} messages left in the queue")
        return result
    finally:
        await cleanup(admin, spec.Queue.Delete(queue=queue))


async def scenario_a1r_publish(run: Run, persistent: bool, per_write: int) -> dict:
    """AMQP 1.0 with the raw client (``bench.amqp1_raw``): one connection per session."""
    from bench.amqp1_raw import Link1

    args = run.args
    admin, achan = await run.admin()
    queue = run.name("q")
    await achan.rpc(spec.Queue.Declare(queue=queue, durable=True))
    links: list[Any] = []
    try:
        links = [await Link1.open(run.port) for _ in range(args.sessions)]
        for link in links:
            await link.attach_sender(f"/queues/{queue}")
        per = args.messages // args.sessions
        await run.settle()
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in links]
        timed = Timed(run.node)
        timed.start()
        for link, f in zip(links, futures):
            link.start_publishing(per, args.window, per_write, run.body, persistent,
                                  lambda f=f: f.done() or f.set_result(None))
        await wait_all(futures, "AMQP 1.0 publishing")
        errors = [link.error for link in links if link.error]
        if errors:
            raise PatternError(errors[0])
        result = timed.stop(per * len(links))
        ok = await achan.rpc(spec.Queue.Declare(queue=queue, durable=True, passive=True))
        if ok.message_count != per * len(links):
            raise PatternError(f"queue holds {ok.message_count}, expected {per * len(links)}")
        return result
    finally:
        for link in links:
            await link.close()
        await cleanup(admin, spec.Queue.Delete(queue=queue))


async def scenario_a1r_consume(run: Run, settle: str, prefetch: int = 500) -> dict:
    from bench.amqp1_raw import Link1

    total = run.args.messages
    admin, achan = await run.admin()
    queue = run.name("q")
    await achan.rpc(spec.Queue.Declare(queue=queue, durable=True))
    link = None
    try:
        filler = await admin.channel(confirms=True)
        await fill(run, filler, queue, total)
        link = await Link1.open(run.port)
        await run.settle()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        link.on_done = lambda: future.done() or future.set_result(None)
        timed = Timed(run.node)
        timed.start()
        await link.attach_receiver(f"/queues/{queue}", settle, prefetch, total)
        link.transport.write(link.grant())
        await wait_all([future], "AMQP 1.0 consuming")
        if link.error:
            raise PatternError(link.error)
        await link.close()  # RabbitMQ answers the close after it read every disposition
        result = timed.stop(total)
        ok = await achan.rpc(spec.Queue.Declare(queue=queue, durable=True, passive=True))
        if ok.message_count:
            raise PatternError(f"{ok.message_count} messages left in the queue")
        return result
    finally:
        if link is not None:
            await link.close()
        await cleanup(admin, spec.Queue.Delete(queue=queue))


# -- the table ---------------------------------------------------------------------------


def table(args: argparse.Namespace) -> list[tuple[str, str, str, Callable[[Run], Any]]]:
    """(group, name, baseline of its group, scenario)."""
    rows: list[tuple[str, str, str, Callable[[Run], Any]]] = [("idle", "idle", "idle", scenario_idle)]
    base = "pub-np-k1-conn"
    for k in (1, 10, 100):
        rows.append(("pub", f"pub-np-k{k}-conn", base, lambda r, k=k: scenario_publish(r, "conn", k, False, True)))
    for layout in ("chan", "mux"):
        for k in (1, 10):
            rows.append(("pub", f"pub-np-k{k}-{layout}", base,
                         lambda r, k=k, lay=layout: scenario_publish(r, lay, k, False, True)))
    rows.append(("pub", "pub-np-k1-chan-co", base, lambda r: scenario_publish(r, "chan", 1, False, True, True)))
    rows.append(("pub", "pub-nc-k10-conn", base, lambda r: scenario_publish(r, "conn", 10, False, False)))
    pbase = "pub-p-k1-conn"
    for k in (1, 10, 100):
        rows.append(("pubp", f"pub-p-k{k}-conn", pbase, lambda r, k=k: scenario_publish(r, "conn", k, True, True)))
    for layout in ("chan", "mux"):
        rows.append(("pubp", f"pub-p-k10-{layout}", pbase,
                     lambda r, lay=layout: scenario_publish(r, lay, 10, True, True)))
    cbase = "con-each-p500"
    for mode in ("each", "each-w", "multi"):
        for prefetch in (100, 500, 2000):
            if mode == "each-w" and prefetch != 500:
                continue
            rows.append(("con", f"con-{mode}-p{prefetch}", cbase,
                         lambda r, m=mode, p=prefetch: scenario_consume(r, m, p)))
    rows.append(("con", "con-multi10-p500", cbase, lambda r: scenario_consume(r, "multi", 500, 10)))
    rows.append(("con", "con-noack", cbase, lambda r: scenario_consume(r, "noack", 0)))
    for m in args.fan:
        published = max(10, args.deliveries // m)
        fbase = f"fan-q{m}-multi"
        rows.append(("fan", f"fan-q{m}-multi", fbase, lambda r, m=m, n=published: scenario_fanout(r, m, "multi", n)))
        rows.append(("fan", f"fan-q{m}-noack", fbase, lambda r, m=m, n=published: scenario_fanout(r, m, "noack", n)))
    rows.append(("fan", "fan-edge-multi", "fan-edge-multi", lambda r: scenario_fanout(r, 1, "multi", 2000)))
    rows.append(("fan", "fan-edge-noack", "fan-edge-multi", lambda r: scenario_fanout(r, 1, "noack", 2000)))
    try:
        import proton  # noqa: F401 - python-qpid-proton, only for the a1-* rows
        have_proton = True
    except ImportError:
        have_proton = False
        print("python-qpid-proton is not installed (`.venv/bin/pip install python-qpid-proton`): "
              "no a1-* rows", file=sys.stderr)
    if args.broker != "system" and have_proton:
        rows.append(("pub", "a1-pub-np", base, lambda r: scenario_a1_publish(r, False)))
        rows.append(("pubp", "a1-pub-p", pbase, lambda r: scenario_a1_publish(r, True)))
        rows.append(("con", "a1-con-accept", cbase, lambda r: scenario_a1_consume(r, False)))
        rows.append(("con", "a1-con-settled", cbase, lambda r: scenario_a1_consume(r, True)))
    if args.broker != "system":
        for k in (1, 10):
            rows.append(("pub", f"a1r-pub-np-k{k}", base, lambda r, k=k: scenario_a1r_publish(r, False, k)))
        rows.append(("pubp", "a1r-pub-p-k10", pbase, lambda r: scenario_a1r_publish(r, True, 10)))
        for settle in ("each", "range", "settled"):
            rows.append(("con", f"a1r-con-{settle}", cbase, lambda r, st=settle: scenario_a1r_consume(r, st)))
    return rows


def selected(args: argparse.Namespace) -> list[tuple[str, str, str, Callable[[Run], Any]]]:
    rows = table(args)
    if not args.only:
        return rows
    wanted = args.only.split(",")
    keep = [r for r in rows if r[0] in wanted or r[1] in wanted or any(r[1].startswith(w) for w in wanted)]
    names = {r[1] for r in keep}
    # a group's baseline comes along, so that its ratios can be given
    for r in rows:
        if r[1] in {k[2] for k in keep} and r[1] not in names:
            keep.insert(0, r)
            names.add(r[1])
    if "idle" not in names:
        keep.insert(0, rows[0])
    return keep


async def main_async(args: argparse.Namespace) -> dict:
    port = BROKERS[args.broker]
    pid = find_listener(port)
    if pid is None:
        raise SystemExit(f"no RabbitMQ listens on {port} here (start it: bash scripts/rabbitmq4 start {args.broker})")
    node = Node(pid)
    run = Run(args, node)
    rows = selected(args)
    results: dict[str, list[dict]] = {name: [] for _, name, _, _ in rows}
    data = {"broker": args.broker, "pid": pid, "args": vars(args), "rows": [(g, n, b) for g, n, b, _ in rows],
            "results": results}
    print(f"RabbitMQ {args.broker} (AMQP {port}, beam pid {pid}); {args.messages} messages of {args.size} B, "
          f"{args.sessions} sessions, window {args.window}; {len(rows)} scenarios x {args.runs} runs",
          file=sys.stderr)
    for round_ in range(args.runs):
        shift = round_ % len(rows)
        for group, name, _, fn in rows[shift:] + rows[:shift]:
            try:
                result = await fn(run)
            except Exception as exc:  # noqa: BLE001 - one scenario's failure is reported, the run goes on
                print(f"  run {round_ + 1} {name}: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
                results[name].append({"error": f"{type(exc).__name__}: {exc}"})
                continue
            result["round"] = round_
            results[name].append(result)
            print(f"  run {round_ + 1} {name:<18} RabbitMQ {result['rabbit_us']:8.1f} µs/msg  "
                  f"client {result['client_us']:7.1f} µs/msg  {result['rate']:9.0f} msg/s", file=sys.stderr)
        if args.json:  # after every round: a run cut short keeps what it measured
            with open(args.json, "w") as f:
                json.dump(data, f, indent=1)
    return data


def report(data: dict) -> str:
    results = data["results"]
    lines = []
    idle = [r["rabbit_us"] for r in results.get("idle", []) if "error" not in r]
    if idle:
        lines.append(f"RabbitMQ {data['broker']}: node background (idle) {statistics.median(idle) / 1e4:.1f} % of a core "
                     f"(runs {min(idle) / 1e4:.1f}–{max(idle) / 1e4:.1f})")
    lines.append(f"{'scenario':<18} {'RabbitMQ µs/msg':>16} {'(min–max)':>15} {'ratio':>6} {'(min–max)':>12} "
                 f"{'client µs/msg':>14} {'msg/s':>8}")
    for group, name, base, in data["rows"]:
        if group == "idle":
            continue
        ok = [r for r in results[name] if "error" not in r]
        if not ok:
            lines.append(f"{name:<18} failed: {results[name][0]['error'] if results[name] else 'not run'}")
            continue
        us = [r["rabbit_us"] for r in ok]
        base_by_round = {r["round"]: r["rabbit_us"] for r in results.get(base, []) if "error" not in r}
        ratios = [r["rabbit_us"] / base_by_round[r["round"]] for r in ok if base_by_round.get(r["round"])]
        ratio = f"{statistics.median(ratios):6.2f} {min(ratios):5.2f}–{max(ratios):5.2f}" if ratios else f"{'':>19}"
        lines.append(
            f"{name:<18} {statistics.median(us):16.1f} {min(us):7.1f}–{max(us):7.1f} {ratio} "
            f"{statistics.median(r['client_us'] for r in ok):14.1f} {statistics.median(r['rate'] for r in ok):8.0f}"
        )
    return "\n".join(lines)


def markdown(data: dict) -> str:
    """The same figures as a Markdown table (for docs/performance.md)."""
    results = data["results"]
    lines = ["| scenario | RabbitMQ µs/msg (runs) | ratio to baseline (runs) | client µs/msg | msg/s |",
             "|---|---|---|---|---|"]
    for group, name, base in data["rows"]:
        ok = [r for r in results[name] if "error" not in r]
        if group == "idle" or not ok:
            continue
        us = [r["rabbit_us"] for r in ok]
        base_by_round = {r["round"]: r["rabbit_us"] for r in results.get(base, []) if "error" not in r}
        ratios = [r["rabbit_us"] / base_by_round[r["round"]] for r in ok if base_by_round.get(r["round"])]
        fmt = (lambda v: f"{v:,.0f}") if statistics.median(us) >= 100 else (lambda v: f"{v:.1f}")
        ratio = (f"{statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f})"
                 if ratios and name != base else "1 (baseline)")
        lines.append(f"| `{name}` | {fmt(statistics.median(us))} ({fmt(min(us))}–{fmt(max(us))}) | {ratio} | "
                     f"{statistics.median(r['client_us'] for r in ok):.1f} | "
                     f"{statistics.median(r['rate'] for r in ok):,.0f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", choices=sorted(BROKERS), default="4.3")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--proton-messages", type=int, default=5000,
                    help="messages of the python-qpid-proton scenarios (a1-*: 80-100 µs of client CPU each)")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--window", type=int, default=100)
    ap.add_argument("--fan", type=lambda s: [int(x) for x in s.split(",")], default=[10, 100, 1000],
                    help="queues bound to the topic, comma-separated")
    ap.add_argument("--deliveries", type=int, default=40000, help="fan-out: deliveries per scenario (published = this / M)")
    ap.add_argument("--settle", type=float, default=0.3, help="seconds between a scenario's set-up and its timed part")
    ap.add_argument("--only", default="", help="groups (pub, pubp, con, fan) or scenario names/prefixes, comma-separated")
    ap.add_argument("--json", default="")
    ap.add_argument("--markdown", action="store_true", help="the table in Markdown")
    ap.add_argument("--from-json", default="", help="print the report of an earlier run's --json, run nothing")
    args = ap.parse_args()
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    if args.from_json:
        with open(args.from_json) as f:
            data = json.load(f)
    else:
        data = asyncio.run(main_async(args))
    print(markdown(data) if args.markdown else report(data))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)


if __name__ == "__main__":
    main()
