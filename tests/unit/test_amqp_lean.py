"""The lean channel (amqp/lean.py) against a fake socket: what it writes, and what RabbitMQ's
answers (fed through the bulk reader's hooks, as method payloads) do to the callers waiting."""

from __future__ import annotations

import asyncio

import aiormq.exceptions as amqp_exc
import pamqp.frame
import pytest
from pamqp import commands as spec

from stomp_bridge.amqp.codec import decode_method
from stomp_bridge.amqp.lean import GetResult, LeanChannel
from stomp_bridge.amqp.reader import Hooks
from tests.unit.fake_rabbit import FakeConnection

NUMBER = 7


class FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0


class Socket(Hooks):
    """The connection's hooks (reader.Hooks) on a fake socket, with what was written decoded."""

    def __init__(self) -> None:
        super().__init__()
        self.transport = FakeTransport()

    def methods(self) -> list:
        """Every method written so far, decoded (and forgotten)."""
        out = []
        for data in self.transport.written:
            while data:
                consumed, channel, frame = pamqp.frame.unmarshal(data)
                assert channel == NUMBER
                out.append(frame)
                data = data[consumed:]
        self.transport.written.clear()
        return out


def payload(method) -> bytes:
    """A method as the bulk reader hands it over: the frame's payload."""
    data = pamqp.frame.marshal(method, NUMBER)
    return data[7:-1]


async def opened() -> tuple[LeanChannel, Socket, dict, dict]:
    socket = Socket()
    channels: dict = {}
    sessions: dict = {}
    opening = asyncio.ensure_future(LeanChannel.open(FakeConnection(), NUMBER, socket, channels, sessions))
    await asyncio.sleep(0)
    assert [type(m) for m in socket.methods()] == [spec.Channel.Open]
    assert channels[NUMBER].on_method is not None and sessions[NUMBER] is not None  # routed, number held
    channels[NUMBER].on_method(payload(spec.Channel.OpenOk()))
    await asyncio.sleep(0)
    assert [type(m) for m in socket.methods()] == [spec.Confirm.Select]
    channels[NUMBER].on_method(payload(spec.Confirm.SelectOk()))
    channel = await opening
    return channel, socket, channels, sessions


async def test_rpc_replies_resolve_their_callers_in_the_order_sent():
    channel, socket, channels, _ = await opened()
    declare = asyncio.ensure_future(channel.queue_declare("q", durable=True, arguments={"x-queue-type": "quorum"}))
    bind = asyncio.ensure_future(channel.queue_bind("q", "amq.topic", routing_key="a.b"))
    await asyncio.sleep(0)
    sent = socket.methods()
    assert [type(m) for m in sent] == [spec.Queue.Declare, spec.Queue.Bind]
    assert sent[0].queue == "q" and sent[0].durable and sent[0].arguments == {"x-queue-type": "quorum"}
    assert sent[1].routing_key == "a.b"
    channel.hooks.on_method(payload(spec.Queue.DeclareOk(queue="q", message_count=3, consumer_count=0)))
    channel.hooks.on_method(payload(spec.Queue.BindOk()))
    assert (await declare).message_count == 3
    assert isinstance(await bind, spec.Queue.BindOk)


async def test_a_method_over_rabbitmqs_frame_max_is_refused_unsent():
    """RabbitMQ closes the whole connection, which other sessions share, on a frame over its
    frame_max: such a method (a queue's arguments from a client's headers) is never sent."""
    channel, socket, _, _ = await opened()
    with pytest.raises(ValueError, match="Queue.Declare would take .* over RabbitMQ's frame_max of 131072"):
        await channel.queue_declare("q", arguments={"x-dead-letter-exchange": "x" * 140_000})
    assert socket.methods() == []
    declare = asyncio.ensure_future(channel.queue_declare("q", arguments={"x-dead-letter-exchange": "x" * 1000}))
    await asyncio.sleep(0)
    assert [type(m) for m in socket.methods()] == [spec.Queue.Declare]  # the channel goes on
    channel.hooks.on_method(payload(spec.Queue.DeclareOk(queue="q", message_count=0, consumer_count=0)))
    assert (await declare).queue == "q"


async def test_exchange_declare_sends_a_durable_exchange_with_its_arguments_and_takes_declare_ok():
    """The scheduled-delivery levels: headers exchanges with an alternate exchange each."""
    channel, socket, _, _ = await opened()
    declare = asyncio.ensure_future(channel.exchange_declare(
        "stomp-bridge.delay.3", exchange_type="headers", durable=True, arguments={"alternate-exchange": "x"}))
    await asyncio.sleep(0)
    [sent] = socket.methods()
    assert (sent.exchange, sent.exchange_type, sent.durable, sent.arguments) == (
        "stomp-bridge.delay.3", "headers", True, {"alternate-exchange": "x"})
    channel.hooks.on_method(payload(spec.Exchange.DeclareOk()))
    assert isinstance(await declare, spec.Exchange.DeclareOk)


async def test_a_channel_close_from_rabbitmq_fails_what_waits_as_aiormq_would_and_is_answered():
    channel, socket, _, _ = await opened()
    consume = asyncio.ensure_future(channel.basic_consume("missing", None, consumer_tag="T_1"))
    await asyncio.sleep(0)
    socket.methods()
    channel.hooks.on_method(payload(spec.Channel.Close(reply_code=404, reply_text="NOT_FOUND - no queue 'missing'",
                                                       class_id=60, method_id=20)))
    with pytest.raises(amqp_exc.ChannelNotFoundEntity, match="no queue 'missing'"):
        await consume
    assert [type(m) for m in socket.methods()] == [spec.Channel.CloseOk]
    assert channel.is_closed and channel.closing.done()
    assert isinstance(channel.closing.exception(), amqp_exc.ChannelNotFoundEntity)
    with pytest.raises(amqp_exc.ChannelInvalidStateError):
        await channel.basic_qos(prefetch_count=1)  # nothing is sent on a closed channel
    assert socket.methods() == []


async def test_close_waits_for_close_ok():
    channel, socket, _, _ = await opened()
    closing = asyncio.ensure_future(channel.close())
    await asyncio.sleep(0)
    assert [type(m) for m in socket.methods()] == [spec.Channel.Close]
    assert not closing.done()
    channel.hooks.on_method(payload(spec.Channel.CloseOk()))
    await closing
    assert channel.is_closed


async def test_connection_lost_fails_what_waits_and_a_close_in_progress_ends():
    channel, socket, _, _ = await opened()
    cancel = asyncio.ensure_future(channel.basic_cancel("T_1"))
    await asyncio.sleep(0)
    lost = ConnectionResetError("gone")
    channel.connection_lost(lost)
    with pytest.raises(ConnectionResetError):
        await cancel
    await channel.close()  # already closed: returns at once


async def test_basic_cancel_from_rabbitmq_reaches_on_cancel_and_get_returns_content_or_empty():
    channel, socket, _, _ = await opened()
    cancelled = []
    channel.on_cancel = cancelled.append
    channel.hooks.on_method(payload(spec.Basic.Cancel(consumer_tag="T_9", nowait=True)))
    assert cancelled == ["T_9"]
    empty = asyncio.ensure_future(channel.basic_get("q"))
    got = asyncio.ensure_future(channel.basic_get("q"))
    await asyncio.sleep(0)
    channel.hooks.on_method(payload(spec.Basic.GetEmpty()))
    get_ok = decode_method(payload(spec.Basic.GetOk(delivery_tag=5, exchange="", routing_key="q", message_count=0)))
    channel.hooks.on_get(get_ok, {"headers": {"a": "b"}}, b"body")
    assert isinstance(await empty, spec.Basic.GetEmpty)
    result = await got
    assert isinstance(result, GetResult) and result.delivery.delivery_tag == 5
    assert result.properties == {"headers": {"a": "b"}} and result.body == b"body"


async def test_an_unexpected_reply_fails_the_caller_instead_of_answering_it_wrongly():
    channel, _, _, _ = await opened()
    qos = asyncio.ensure_future(channel.basic_qos(prefetch_count=10))
    await asyncio.sleep(0)
    channel.hooks.on_method(payload(spec.Queue.DeleteOk(message_count=0)))
    with pytest.raises(amqp_exc.InvalidFrameError, match="expected QosOk"):
        await qos


async def test_a_failed_open_gives_back_the_number_and_the_route():
    socket = Socket()
    channels: dict = {}
    sessions: dict = {}
    opening = asyncio.ensure_future(LeanChannel.open(FakeConnection(), NUMBER, socket, channels, sessions))
    await asyncio.sleep(0)
    channels[NUMBER].on_method(payload(spec.Channel.Close(reply_code=403, reply_text="ACCESS_REFUSED - no",
                                                          class_id=20, method_id=10)))
    with pytest.raises(amqp_exc.ChannelAccessRefused):
        await opening
    assert channels == {} and sessions == {}


async def test_an_open_that_times_out_keeps_its_number_held_and_absorbs_the_late_reply():
    """RabbitMQ may still open the channel: the number must not be offered again on this
    connection (a second channel.open on it closes the whole shared connection)."""
    socket = Socket()
    channels: dict = {}
    sessions: dict = {}
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(LeanChannel.open(FakeConnection(), NUMBER, socket, channels, sessions), 0.01)
    assert NUMBER in sessions and NUMBER in channels
    channels[NUMBER].on_method(payload(spec.Channel.OpenOk()))  # late: nobody waits, nothing breaks
    assert sessions[NUMBER].is_closed


async def test_a_reply_failed_while_its_method_waited_for_the_writer_leaves_no_unretrieved_exception():
    """Seen in the cluster's load test: the connection dies while an RPC's method still waits
    for room in aiormq's write queue (its reply future already failed by connection_lost), and
    the caller gives up (wait_for's timeout, the session's end). Nobody awaits that reply, and
    asyncio must not log "Future exception was never retrieved" (a record at ERROR)."""
    import gc

    channel, socket, _, _ = await opened()
    queue = asyncio.Queue(maxsize=1)
    queue.put_nowait(object())  # the writer is stuck: the next method waits for room
    channel.connection.write_queue = queue
    loop = asyncio.get_running_loop()
    logged: list[dict] = []
    loop.set_exception_handler(lambda _loop, context: logged.append(context))
    try:
        declare = asyncio.ensure_future(channel.queue_declare("q"))
        await asyncio.sleep(0)
        channel.connection_lost(ConnectionResetError("reset"))
        declare.cancel()
        with pytest.raises(asyncio.CancelledError):
            await declare
        del declare
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert [c["message"] for c in logged] == []


async def test_an_open_channel_with_no_rpc_waiting_holds_no_large_container():
    """One channel per connection, thousands of idle connections: the RPC queue, empty between
    RPCs, must not be a deque (~600 bytes empty) but a small list."""
    import sys

    channel, _, _, _ = await opened()
    assert not channel._replies
    assert sys.getsizeof(channel._replies) < 100
