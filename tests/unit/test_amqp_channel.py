"""One session's AMQP channel (amqp/channel.py, writer.py, autoacker.py) against a fake RabbitMQ
at the frame level (tests/unit/fake_rabbit.py): what it writes, when, and what it tells the
session. The same paths against a real RabbitMQ: tests/integration/test_messaging.py,
test_ack.py, test_shared_connections.py, test_broker_failures.py, test_streams.py."""

from __future__ import annotations

import asyncio
import datetime
import inspect
from typing import Any

import pytest
from pamqp import commands as spec

from stomp_bridge.amqp import abc
from stomp_bridge.amqp.channel import AmqpSession
from stomp_bridge.amqp.consumer import properties_dict
from stomp_bridge.amqp.delivery import Delivery
from stomp_bridge.protocol.errors import BrokerError, StompError
from tests.unit.fake_rabbit import FakeRabbit, Rabbits


class Events:
    """abc.ChannelEvents, recorded."""

    def __init__(self) -> None:
        self.log: list[tuple] = []

    def delivered(self, delivery: Delivery) -> None:
        self.log.append(("delivered", delivery.consumer_tag, delivery.delivery_tag, delivery.body))

    def confirmed(self, tag: int, multiple: bool, nack: bool) -> None:
        self.log.append(("confirmed", tag, multiple, nack))

    def returned(self, reply_code: int, reply_text: str, exchange: str, routing_key: str) -> None:
        self.log.append(("returned", reply_code, reply_text, exchange, routing_key))

    def cancelled(self, consumer_tag: str) -> None:
        self.log.append(("cancelled", consumer_tag))

    def closed(self, error: StompError) -> None:
        self.log.append(("closed", error.message, error.detail))

    def batch_ended(self) -> None:
        self.log.append(("batch_ended",))


async def session(rabbits: Rabbits | None = None, **options: Any) -> tuple[AmqpSession, FakeRabbit, Events]:
    """A listening session on a fresh fake connection; separate publishers off unless asked."""
    rabbits = rabbits or Rabbits()
    options.setdefault("separate_publishers", False)
    pool = rabbits.pool(**options)
    amqp = await AmqpSession.open(pool, "guest", "guest", "/", client_name="test")
    rabbit = rabbits.made[-1]
    assert [type(m) for m in rabbit.methods()] == [spec.Channel.Open, spec.Confirm.Select]
    events = Events()
    amqp.listen(events)
    return amqp, rabbit, events


def deliver(rabbit: FakeRabbit, number: int, consumer_tag: str, *tags: int) -> None:
    """One socket read that brought these deliveries, as the bulk reader hands them over."""
    hooks = rabbit.channel(number)
    for tag in tags:
        hooks.on_delivery(Delivery(consumer_tag, tag, False, "", "q", {}, b"m%d" % tag))
    hooks.on_batch_end()


# -- the interface ------------------------------------------------------------------------------

def _members(protocol: type) -> dict[str, Any]:
    names = [n for n in vars(protocol) if not n.startswith("_")] + list(protocol.__annotations__)
    return {n: getattr(protocol, n, None) for n in names}


def test_amqp_session_has_every_member_of_session_channel_with_its_parameters() -> None:
    missing, differing = [], []
    for name, member in _members(abc.SessionChannel).items():
        if name not in AmqpSession.__slots__ and not hasattr(AmqpSession, name):
            missing.append(name)
        elif callable(member) and not isinstance(member, property):
            want = list(inspect.signature(member).parameters)
            have = list(inspect.signature(getattr(AmqpSession, name)).parameters)
            if want != have:
                differing.append(f"{name}: {have} != {want}")
    assert not missing and not differing, (missing, differing)


async def test_nothing_reaches_the_session_before_it_listens_then_every_event_does() -> None:
    rabbits = Rabbits()
    amqp = await AmqpSession.open(rabbits.pool(separate_publishers=False), "guest", "guest", "/", client_name="t")
    rabbit = rabbits.made[-1]
    number = amqp.channel.number
    deliver(rabbit, number, "T_1", 1)  # no listener yet: dropped, and no error
    events = Events()
    amqp.listen(events)
    hooks = rabbit.channel(number)
    deliver(rabbit, number, "T_1", 2)
    hooks.on_return(312, "NO_ROUTE", "amq.topic", "nobody")
    hooks.on_confirm(3, True, False)
    rabbit.send(number, spec.Basic.Cancel(consumer_tag="T_1"))
    assert events.log == [
        ("delivered", "T_1", 2, b"m2"), ("batch_ended",),
        ("returned", 312, "NO_ROUTE", "amq.topic", "nobody"),
        ("confirmed", 3, True, False),
        ("cancelled", "T_1"),
    ]


async def test_a_channel_error_closes_the_session_once_with_the_plugins_error() -> None:
    amqp, rabbit, events = await session()
    number = amqp.channel.number
    rabbit.send(number, spec.Channel.Close(class_id=0, method_id=0, reply_code=404, reply_text="NOT_FOUND - no queue 'q'"))
    await asyncio.sleep(0)  # the channel's closing future calls back one loop pass later
    assert events.log == [("closed", "not_found", "NOT_FOUND - no queue 'q'")]
    assert any(isinstance(m, spec.Channel.CloseOk) for m in rabbit.methods(number)), "RabbitMQ waits for close-ok"
    amqp.connection_lost(ConnectionError("and then the connection"))
    assert len(events.log) == 1


async def test_a_channel_error_during_an_rpc_reaches_its_caller_first() -> None:
    """The plugin words some refusals after the command that caused them: the RPC's caller
    has that command, so it hears first; the channel's end reaches the listener after it."""
    amqp, rabbit, events = await session()
    rabbit.answers[spec.Queue.Bind] = lambda m: spec.Channel.Close(
        class_id=0, method_id=0, reply_code=403, reply_text="ACCESS_REFUSED - write access to exchange 'x' refused")
    with pytest.raises(BrokerError) as refused:
        await amqp.bind("q", "x", "k")
    assert refused.value.message == "access_refused"
    assert events.log == []
    await asyncio.sleep(0)
    assert events.log == [("closed", "access_refused", "ACCESS_REFUSED - write access to exchange 'x' refused")]


async def test_a_connection_lost_fails_the_rpc_in_flight_and_ends_the_session() -> None:
    amqp, rabbit, events = await session()
    rabbit.answers.pop(spec.Queue.Declare)  # RabbitMQ never answers
    declaring = asyncio.ensure_future(amqp.declare_queue("q"))
    await asyncio.sleep(0)
    amqp.connection_lost(ConnectionResetError("reset"))
    with pytest.raises(BrokerError, match="Broker connection lost"):
        await declaring
    assert events.log == []  # the RPC's caller has the reason


# -- publishing: numbered, batched, RPCs after the batch ------------------------------------------

async def test_publishes_are_batched_and_one_flush_writes_them_in_one_go() -> None:
    amqp, rabbit, _ = await session()
    writes = rabbit.transport.writes
    for i in range(3):
        amqp.publish("amq.topic", f"k{i}", {"delivery_mode": 2}, b"body", mandatory=i == 1)
    assert rabbit.transport.writes == writes, "nothing leaves before flush"
    await amqp.flush()
    assert rabbit.transport.writes == writes + 1
    publishes = rabbit.methods()
    assert [(m.routing_key, m.mandatory) for m in publishes] == [("k0", False), ("k1", True), ("k2", False)]


async def test_an_rpc_writes_the_batch_before_its_method() -> None:
    amqp, rabbit, _ = await session()
    amqp.publish("", "q", {}, b"first")
    amqp.ack(7)
    await amqp.declare_queue("q", durable=True)
    assert [type(m) for m in rabbit.methods()] == [spec.Basic.Publish, spec.Basic.Ack, spec.Queue.Declare]


async def test_acks_and_nacks_of_the_client_go_out_as_it_sent_them() -> None:
    amqp, rabbit, _ = await session()
    amqp.ack(1)
    amqp.nack(2, requeue=False)
    amqp.ack(4, multiple=True)
    amqp.flush_nowait()
    assert [(type(m).__name__, m.delivery_tag, m.multiple) for m in rabbit.methods()] == [
        ("Ack", 1, False), ("Nack", 2, False), ("Ack", 4, True)]


# -- the writer's decisions ---------------------------------------------------------------------

async def test_a_busy_socket_sends_the_batch_through_aiormqs_queue_with_a_drain_future() -> None:
    amqp, rabbit, _ = await session()
    rabbit.transport.buffered = 1  # RabbitMQ has not read what we wrote last
    writes = rabbit.transport.writes
    amqp.publish("", "q", {}, b"x")
    await amqp.flush()
    assert rabbit.transport.writes == writes
    frame = rabbit.connection.write_queue.get_nowait()
    assert frame.drain_future is not None, "aiormq's writer waits for the socket to drain after it"
    rabbit.received(frame.payload)
    assert [type(m) for m in rabbit.methods()] == [spec.Basic.Publish]


async def test_a_large_body_behind_unsent_bytes_is_written_unjoined_until_write_behind() -> None:
    """write_behind: nothing waits in aiormq's queue, so the batch keeps its place written to the
    socket at once, from the client's buffer (no join), while RabbitMQ has fewer than
    WRITE_BEHIND unsent bytes; past it, or behind a queued frame, it is joined and queued (the
    queue's bound is the backpressure)."""
    from stomp_bridge.amqp.codec import LARGE_BODY
    from stomp_bridge.amqp.writer import WRITE_BEHIND

    amqp, rabbit, _ = await session()
    rabbit.transport.buffered = WRITE_BEHIND  # RabbitMQ has not read all we wrote last
    writes = rabbit.transport.writes
    body = bytearray(b"L" * (3 * LARGE_BODY))
    amqp.publish("", "q", {}, body)
    await amqp.flush()
    assert rabbit.transport.writes == writes + 1  # one writelines, not the queue
    assert [type(m) for m in rabbit.methods()] == [spec.Basic.Publish]
    assert rabbit.connection.write_queue.empty()
    rabbit.transport.buffered = WRITE_BEHIND + 1  # RabbitMQ is behind: through the queue
    amqp.publish("", "q", {}, body)
    await amqp.flush()
    assert rabbit.transport.writes == writes + 1
    queued = rabbit.connection.write_queue.get_nowait()
    assert len(queued.payload) > len(body) and queued.drain_future is not None
    rabbit.transport.buffered = 1
    rabbit.connection.write_queue.put_nowait(object())  # something waits in aiormq's queue
    amqp.publish("", "q", {}, body)
    await amqp.flush()
    assert rabbit.transport.writes == writes + 1  # behind it, in order
    rabbit.connection.write_queue.get_nowait()
    assert len(rabbit.connection.write_queue.get_nowait().payload) > len(body)


async def test_a_full_write_queue_holds_the_flush_and_a_lost_connection_ends_the_wait() -> None:
    amqp, rabbit, _ = await session()
    rabbit.transport.buffered = 1
    queue = rabbit.connection.write_queue
    while not queue.full():
        queue.put_nowait(object())
    amqp.publish("", "q", {}, b"x")
    flushing = asyncio.ensure_future(amqp.flush())
    await asyncio.sleep(0.01)
    assert not flushing.done(), "the session must stop reading its client while RabbitMQ does not read"
    queue.get_nowait()  # aiormq's writer took a frame
    await asyncio.wait_for(flushing, 1)
    amqp.publish("", "q", {}, b"y")
    flushing = asyncio.ensure_future(amqp.flush())
    await asyncio.sleep(0.01)
    assert not flushing.done()
    rabbit.connection.closing.set_exception(ConnectionResetError("gone"))
    with pytest.raises(BrokerError, match="Broker connection lost"):
        await asyncio.wait_for(flushing, 1)


async def test_a_blocked_connection_holds_publishes_but_not_acks() -> None:
    """A resource alarm (connection.blocked): a batch that publishes waits for unblocked; the
    acks of the session's consumers still go."""
    amqp, rabbit, _ = await session()
    rabbit.connection.unblocked.clear()
    amqp.ack(1)
    await asyncio.wait_for(amqp.flush(), 1)
    assert [type(m) for m in rabbit.methods()] == [spec.Basic.Ack]
    amqp.publish("", "q", {}, b"x")
    flushing = asyncio.ensure_future(amqp.flush())
    await asyncio.sleep(0.01)
    assert not flushing.done() and rabbit.methods() == []
    rabbit.connection.unblocked.set()
    await asyncio.wait_for(flushing, 1)
    assert [type(m) for m in rabbit.methods()] == [spec.Basic.Publish]


async def test_nothing_is_written_on_a_channel_rabbitmq_closed() -> None:
    """A frame on a closed channel's number would make RabbitMQ close the whole shared connection."""
    amqp, rabbit, _ = await session()
    number = amqp.channel.number
    rabbit.channel(number).closed = True  # channel.close read; our close-ok not yet written
    amqp.publish("", "q", {}, b"x")
    amqp.ack(3)
    await amqp.flush()
    amqp.ack(4)
    amqp.flush_nowait()
    assert rabbit.methods() == []


# -- ack:auto: the bridge acks for a client that keeps up -----------------------------------------

async def test_the_channels_deliveries_leave_what_autoack_delivered_would_pending() -> None:
    """The channel's per-delivery path inlines AutoAck.delivered: held to it, delivery by delivery."""
    from stomp_bridge.amqp.autoack import AutoAck

    amqp, rabbit, _ = await session(auto_ack_window=100)
    await amqp.consume("q", "T_auto", no_ack=True)
    await amqp.consume("q2", "T_client", no_ack=False)
    reference = AutoAck(100)
    reference.add_consumer("T_auto")
    for tag, number in [("T_auto", 1), ("T_client", 2), ("T_auto", 3), ("T_other", 4)]:
        deliver(rabbit, amqp.channel.number, tag, number)
        reference.delivered(tag, number)
        assert amqp._auto.pending == reference.pending  # noqa: SLF001 - the state the two keep

async def test_ack_auto_is_consumed_with_manual_acks_and_a_window_acked_by_the_bridge() -> None:
    amqp, rabbit, _ = await session(auto_ack_window=4)  # a quarter of the window: one delivery
    await amqp.consume("q", "T_auto", no_ack=True)
    qos, consume = rabbit.methods()
    assert qos.prefetch_count == 4 and consume.no_ack is False
    deliver(rabbit, amqp.channel.number, "T_auto", 1)
    assert [(type(m).__name__, m.delivery_tag) for m in rabbit.methods()] == [("Ack", 1)]


async def test_ack_auto_waits_while_the_clients_socket_is_full() -> None:
    amqp, rabbit, events = await session(auto_ack_window=4)
    drained = asyncio.Event()

    async def writable() -> None:
        await drained.wait()

    writable.is_open = drained.is_set  # type: ignore[attr-defined]
    amqp.listen(events, writable)
    await amqp.consume("q", "T_auto", no_ack=True)
    rabbit.methods()
    deliver(rabbit, amqp.channel.number, "T_auto", 1, 2)
    await asyncio.sleep(0)
    assert rabbit.methods() == [], "a client that does not read gets no more than the window"
    drained.set()
    await asyncio.sleep(0.01)
    assert [(m.delivery_tag, m.multiple) for m in rabbit.methods()] == [(2, True)]


async def test_a_client_ack_consumer_on_the_channel_makes_the_bridges_acks_individual() -> None:
    """A multiple ack of ours would settle the client-ack consumer's deliveries too."""
    amqp, rabbit, _ = await session(auto_ack_window=4)
    await amqp.consume("q1", "T_auto", no_ack=True)
    await amqp.consume("q2", "T_client", no_ack=False, prefetch=10)
    rabbit.methods()
    deliver(rabbit, amqp.channel.number, "T_auto", 1, 2)
    assert [(m.delivery_tag, m.multiple) for m in rabbit.methods()] == [(1, False), (2, False)]


async def test_close_acks_what_the_client_got_then_closes_the_channel_and_the_connection() -> None:
    amqp, rabbit, _ = await session(auto_ack_window=400)  # acks wait for the timer
    await amqp.consume("q", "T_auto", no_ack=True)
    rabbit.methods()
    deliver(rabbit, amqp.channel.number, "T_auto", 1)
    assert rabbit.methods() == []
    rabbit.transport.buffered = 1  # the close's acks go through aiormq's queue
    closing = asyncio.ensure_future(amqp.close())
    await asyncio.sleep(0)
    frame = rabbit.connection.write_queue.get_nowait()
    rabbit.received(frame.payload)
    rabbit.transport.buffered = 0
    await asyncio.wait_for(closing, 1)
    assert [type(m) for m in rabbit.methods()] == [spec.Basic.Ack, spec.Channel.Close]
    assert rabbit.connection.is_closed, "the last session out closes the shared connection"


# -- exclusive queues, basic.get, the side channel -------------------------------------------------

async def test_another_sessions_exclusive_queue_gets_rabbitmqs_resource_locked() -> None:
    rabbits = Rabbits()
    owner, rabbit, _ = await session(rabbits)
    other = await AmqpSession.open(owner.pool, "guest", "guest", "/", client_name="t2")
    assert other.shared is owner.shared
    await owner.declare_queue("mine", exclusive=True)
    with pytest.raises(BrokerError, match="RESOURCE_LOCKED"):
        await other.consume("mine", "T_1", no_ack=False)
    await owner.delete_queue("mine")
    await other.consume("mine", "T_1", no_ack=False)  # free once deleted


async def test_get_returns_a_delivery_or_none() -> None:
    amqp, rabbit, _ = await session()
    assert await amqp.get("q") is None
    rabbit.answers[spec.Basic.Get] = lambda m: spec.Basic.GetOk(delivery_tag=5, exchange="", routing_key="q")
    got = await amqp.get("q")
    assert got == Delivery("", 5, False, "", "q", {"content_type": "text/plain"}, b"got")


def holding(rabbit: FakeRabbit, count: int) -> None:
    """The fake queue holds ``count`` messages: a passive declare says so, and a consumer on a side
    channel gets the first."""
    rabbit.answers[spec.Queue.Declare] = lambda m: spec.Queue.DeclareOk(queue=m.queue, message_count=count,
                                                                         consumer_count=0)
    loop = asyncio.get_running_loop()

    def consume(m: Any) -> Any:
        side = max(rabbit.hooks.channels)
        loop.call_soon(lambda: rabbit.channel(side).on_delivery(
            Delivery(m.consumer_tag, 1, False, "", "q", {"content_type": "text/plain"}, b"got")))
        return spec.Basic.ConsumeOk(consumer_tag=m.consumer_tag)

    rabbit.answers[spec.Basic.Consume] = consume


async def test_peek_and_queue_exists_use_a_side_channel_that_a_404_closes_not_the_sessions() -> None:
    """A peek reads the bridge's own one-message queues, which a client may have made a stream:
    no basic.get (a stream refuses it with a connection error), a consumer with one message of
    prefetch where a passive declare counted one."""
    amqp, rabbit, events = await session()
    number = amqp.channel.number
    holding(rabbit, 1)
    assert await amqp.peek("q") == ({"content_type": "text/plain"}, b"got")
    frames = rabbit.frames[:]
    side = {n for n, _ in frames} - {number}
    assert len(side) == 1
    methods = rabbit.methods()
    assert [type(m) for m in methods] == [
        spec.Channel.Open, spec.Queue.Declare, spec.Basic.Qos, spec.Basic.Consume, spec.Channel.Close], \
        "no confirm.select, no basic.get; the close requeues"
    assert methods[1].passive and methods[2].prefetch_count == 1 and not methods[3].no_ack
    assert rabbit.channel(side.pop()) is None and set(amqp.shared.sessions) == {number}, "the number is free again"
    holding(rabbit, 0)
    assert await amqp.peek("q") is None
    assert [type(m) for m in rabbit.methods()] == [spec.Channel.Open, spec.Queue.Declare, spec.Channel.Close]
    rabbit.answers[spec.Queue.Declare] = lambda m: spec.Channel.Close(
        class_id=0, method_id=0, reply_code=404, reply_text="NOT_FOUND - no queue")
    assert await amqp.queue_exists("gone") is False
    assert events.log == [] and not amqp.channel.is_closed


async def test_is_stream_asks_only_what_a_stream_refuses_on_the_channel() -> None:
    amqp, rabbit, events = await session()
    holding(rabbit, 3)  # a stream counts no messages, as a rule: one that holds some is none (not exact)
    assert await amqp.is_stream("q") is False
    assert [type(m) for m in rabbit.methods()] == [spec.Channel.Open, spec.Queue.Declare, spec.Channel.Close]
    holding(rabbit, 0)
    rabbit.answers[spec.Basic.Consume] = lambda m: spec.Basic.ConsumeOk(consumer_tag=m.consumer_tag)
    assert await amqp.is_stream("q") is False
    methods = rabbit.methods()
    assert [type(m) for m in methods] == [spec.Channel.Open, spec.Queue.Declare, spec.Basic.Consume, spec.Channel.Close]
    assert not methods[2].no_ack, "an auto-ack consume is what a stream refuses with a connection error"
    rabbit.answers[spec.Basic.Consume] = lambda m: spec.Channel.Close(
        class_id=60, method_id=20, reply_code=406,
        reply_text="PRECONDITION_FAILED - consumer prefetch count is not set for stream queue 'q' in vhost '/'")
    assert await amqp.is_stream("q") is True
    assert events.log == [] and not amqp.channel.is_closed


async def test_an_exact_is_stream_of_a_queue_that_counts_messages_asks_on_a_connection_of_its_own() -> None:
    """3.10.8's streams count messages now and then: for a NACK (exact) a basic.get tells, on a
    connection apart, where a stream's refusal (a connection error) costs nothing shared."""
    rabbits = Rabbits()
    asked: list[str] = []

    class Apart:
        def __init__(self, answer: object) -> None:
            self.answer = answer

        async def get(self, queue: str) -> object:
            asked.append(queue)
            if isinstance(self.answer, Exception):
                raise self.answer
            return self.answer

        async def finish(self, reason: str) -> None:
            asked.append("finished")

    answers = [BrokerError("not_implemented", "NOT_IMPLEMENTED - basic.get not supported by stream queues queue 's'"),
               None]

    async def apart(*args: object, **kwargs: object) -> Apart:
        return Apart(answers.pop(0))

    pool = rabbits.pool(separate_publishers=False)
    pool.apart = apart
    amqp = await AmqpSession.open(pool, "guest", "guest", "/", client_name="test")
    rabbit = rabbits.made[-1]
    amqp.listen(Events())
    holding(rabbit, 5)
    assert await amqp.is_stream("s") is False and asked == []  # not exact: no connection opened
    assert await amqp.is_stream("s", exact=True) is True
    assert await amqp.is_stream("q", exact=True) is False  # a classic queue's get-empty (or get-ok)
    assert asked == ["s", "finished", "q", "finished"]


# -- the publishing channel on a publishing connection --------------------------------------------

async def test_with_separate_publishers_publishes_and_their_confirms_use_a_connection_of_their_own() -> None:
    rabbits = Rabbits()
    amqp, rabbit, events = await session(rabbits, separate_publishers=True)
    assert not amqp.publisher_ready
    await amqp.open_publisher()
    assert amqp.publisher_ready and len(rabbits.made) == 2
    publishing = rabbits.made[1]
    assert [type(m) for m in publishing.methods()] == [spec.Channel.Open, spec.Confirm.Select]
    amqp.publish("", "q", {}, b"x")
    amqp.ack(9)
    await amqp.flush()
    assert [type(m) for m in rabbit.methods()] == [spec.Basic.Ack]
    assert [type(m) for m in publishing.methods()] == [spec.Basic.Publish]
    (out,) = [n for n in publishing.hooks.channels]
    publishing.channel(out).on_confirm(1, False, False)
    assert events.log == [("confirmed", 1, False, False)]


async def test_without_a_publishing_connection_the_session_publishes_on_its_own_channel() -> None:
    rabbits = Rabbits()
    amqp, rabbit, _ = await session(rabbits, separate_publishers=True)
    rabbits.fail = ConnectionRefusedError("the user's connection limit")
    await amqp.open_publisher()
    assert amqp.publisher_ready
    amqp.publish("", "q", {}, b"x")
    await amqp.flush()
    assert [type(m) for m in rabbit.methods()] == [spec.Basic.Publish]


# -- properties of deliveries aiormq decoded (the forwarder's consumer) ---------------------------

def test_properties_dict_keeps_what_is_set_with_timestamps_as_epoch_seconds() -> None:
    stamp = datetime.datetime(2024, 1, 2, 3, 4, 5)  # pamqp decodes a naive UTC datetime
    props = spec.Basic.Properties(content_type="application/json", message_type="T", timestamp=stamp)
    found = properties_dict(props)
    assert (found["content_type"], found["message_type"], found["timestamp"]) == ("application/json", "T", 1704164645)
    assert "reply_to" not in found and "headers" not in found
