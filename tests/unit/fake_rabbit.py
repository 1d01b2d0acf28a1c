"""RabbitMQ's side of shared AMQP connections, at the frame level, for unit tests of amqp/.

What the bridge writes to a :class:`FakeTransport` is decoded with pamqp and kept; RPCs are
answered (one event-loop pass later, as from a socket) through the bulk reader's hooks, the
same entry points ``reader.BulkFrameReceiver`` calls. A test may replace an answer, and sends
deliveries, confirms, returns and closes with :meth:`FakeRabbit.channel`'s hooks. The aiormq
connection is a stand-in with just what the bridge uses of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pamqp.frame
from pamqp import commands as spec

from stomp_bridge.amqp.pool import AmqpPool
from stomp_bridge.amqp.reader import ChannelHooks, Hooks


def payload(method: Any, number: int) -> bytes:
    """A method as the bulk reader hands it over: the frame's payload."""
    return pamqp.frame.marshal(method, number)[7:-1]


class FakeTransport:
    def __init__(self, rabbit: FakeRabbit) -> None:
        self.rabbit = rabbit
        self.writes = 0  # write() and writelines() calls: one per batch on the direct path
        self.buffered = 0  # get_write_buffer_size(): > 0 sends batches through aiormq's queue
        self.closing = False

    def write(self, data: bytes) -> None:
        self.writes += 1
        self.rabbit.received(bytes(data))

    def writelines(self, parts: list) -> None:
        self.writes += 1
        self.rabbit.received(b"".join(bytes(p) for p in parts))

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return self.buffered


class FakeConnection:
    """What the bridge uses of an aiormq connection."""

    def __init__(self, queue_size: int = 8) -> None:
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.url = SimpleNamespace(host="rabbit", port=5672)
        self.write_queue: asyncio.Queue = asyncio.Queue(queue_size)  # aiormq's writer's queue
        unblocked = asyncio.Event()
        unblocked.set()
        self.unblocked = unblocked
        setattr(self, "_Connection__connection_unblocked", unblocked)  # aiormq's name for it
        self.connection_tune = SimpleNamespace(frame_max=131072, channel_max=2047)
        self.server_properties = {"version": b"4.3.6"}
        self.closing = loop.create_future()
        self.is_closed = False
        self.secrets: list[str] = []

    async def update_secret(self, secret: str, reason: str = "") -> None:
        self.secrets.append(secret)

    async def close(self) -> None:
        self.is_closed = True


class FakeRabbit:
    """One connection's broker side (see the module docstring)."""

    def __init__(self) -> None:
        self.connection = FakeConnection()
        self.hooks = Hooks()
        self.hooks.transport = self.transport = FakeTransport(self)
        self.frames: list[tuple[int, Any]] = []  # (channel, frame) in the order written
        # Replies by the class of the method that asks: a function of the method (None: no answer).
        self.answers: dict[type, Callable[[Any], Any]] = {
            spec.Channel.Open: lambda m: spec.Channel.OpenOk(),
            spec.Confirm.Select: lambda m: spec.Confirm.SelectOk(),
            spec.Queue.Declare: lambda m: spec.Queue.DeclareOk(queue=m.queue or "amq.gen-1", message_count=0, consumer_count=0),
            spec.Queue.Bind: lambda m: spec.Queue.BindOk(),
            spec.Queue.Delete: lambda m: spec.Queue.DeleteOk(message_count=0),
            spec.Basic.Qos: lambda m: spec.Basic.QosOk(),
            spec.Basic.Consume: lambda m: spec.Basic.ConsumeOk(consumer_tag=m.consumer_tag),
            spec.Basic.Cancel: lambda m: spec.Basic.CancelOk(consumer_tag=m.consumer_tag),
            spec.Basic.Get: lambda m: spec.Basic.GetEmpty(),
            spec.Channel.Close: lambda m: spec.Channel.CloseOk(),
        }

    def received(self, data: bytes) -> None:
        while data:
            used, number, frame = pamqp.frame.unmarshal(data)
            data = data[used:]
            self.frames.append((number, frame))
            answer = self.answers.get(type(frame))
            reply = answer(frame) if answer is not None else None
            if reply is not None:
                if not isinstance(reply, spec.Basic.GetOk):
                    payload(reply, number)  # a reply pamqp cannot encode fails here, not silently later
                self.connection.loop.call_soon(self.send, number, reply)

    def send(self, number: int, method: Any) -> None:
        """A method from RabbitMQ on channel ``number``, as the bulk reader passes it on."""
        hooks = self.channel(number)
        if hooks is None:
            return  # the bridge forgot the channel: the reader would hand the frame to aiormq
        if isinstance(method, spec.Channel.Close):
            hooks.closed = True  # the reader marks it before anyone answers
        if isinstance(method, spec.Basic.GetOk):
            hooks.on_get(method, {"content_type": "text/plain"}, b"got")
            return
        hooks.on_method(payload(method, number))

    def channel(self, number: int) -> ChannelHooks | None:
        return self.hooks.channels.get(number)

    def methods(self, number: int | None = None) -> list[Any]:
        """The methods written (not content headers or bodies), on one channel or all; forgotten."""
        out = [f for n, f in self.frames if (number is None or n == number) and hasattr(f, "name")
               and f.name.split(".")[0] in ("Channel", "Confirm", "Queue", "Basic")]
        self.frames.clear()
        return out


class Rabbits:
    """The pool's opener: a fresh FakeRabbit per AMQP connection."""

    def __init__(self) -> None:
        self.made: list[FakeRabbit] = []
        self.fail: BaseException | None = None

    async def open(self, login: str, passcode: str, vhost: str, name: str, **tls: Any) -> tuple[Any, Hooks]:
        if self.fail is not None:
            raise self.fail
        rabbit = FakeRabbit()
        self.made.append(rabbit)
        return rabbit.connection, rabbit.hooks

    async def check(self, *args: Any, **kwargs: Any) -> None:
        """Every login check passes."""

    def pool(self, **options: Any) -> AmqpPool:
        return AmqpPool(self.open, self.check, **options)
