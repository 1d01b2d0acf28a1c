"""The bulk reader's decoding and framing, checked against pamqp's encoder (no broker)."""


import pamqp.frame
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands as spec
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from stomp_bridge.amqp.codec import decode_confirm, decode_content_header, decode_deliver, decode_return
from stomp_bridge.amqp.delivery import Delivery
from stomp_bridge.amqp.reader import BulkFrameReceiver, ChannelHooks, Hooks, current_hooks

PROPS = {
    "content_type": "text/plain",
    "headers": {"k": "v", "n": 7},
    "delivery_mode": 2,
    "priority": 3,
    "correlation_id": "c",
    "reply_to": "amq.gen-1",
    "timestamp": 1700000000,
    "message_type": "t",
    "app_id": "a",
}


def deliver_frames(channel: int, tag: int, body: bytes, props: dict | None = None, frame_max: int = 4096):
    from datetime import datetime, timezone

    p = dict(props or {})
    if "timestamp" in p:
        p["timestamp"] = datetime.fromtimestamp(p["timestamp"], tz=timezone.utc)
    out = [
        pamqp.frame.marshal(
            spec.Basic.Deliver(consumer_tag="T_1", delivery_tag=tag, redelivered=tag % 2 == 0,
                               exchange="amq.topic", routing_key="a.b"), channel),
        pamqp.frame.marshal(ContentHeader(0, len(body), spec.Basic.Properties(**p)), channel),
    ]
    for start in range(0, len(body), frame_max - 8):
        out.append(pamqp.frame.marshal(ContentBody(body[start : start + frame_max - 8]), channel))
    return b"".join(out)


def test_deliver_arguments_decode_like_pamqp():
    raw = pamqp.frame.marshal(
        spec.Basic.Deliver(consumer_tag="T_sub", delivery_tag=2**40, redelivered=True,
                           exchange="ex", routing_key="k/é"), 1)
    assert decode_deliver(raw[7:-1]) == ("T_sub", 2**40, True, "ex", "k/é")


@pytest.mark.parametrize("frame,expected", [
    (spec.Basic.Ack(delivery_tag=9, multiple=True), (9, True)),
    (spec.Basic.Nack(delivery_tag=3, multiple=False, requeue=True), (3, False)),
])
def test_confirms_decode(frame, expected):
    assert decode_confirm(pamqp.frame.marshal(frame, 1)[7:-1]) == expected


def test_content_header_decodes_every_set_property():
    from datetime import datetime, timezone

    props = dict(PROPS, timestamp=datetime.fromtimestamp(PROPS["timestamp"], tz=timezone.utc))
    raw = pamqp.frame.marshal(ContentHeader(0, 12, spec.Basic.Properties(**props)), 1)
    assert decode_content_header(raw[7:-1]) == (12, PROPS)


def feed(receiver: BulkFrameReceiver, data: bytes, chunk: int) -> None:
    for start in range(0, len(data), chunk):
        receiver._buf += data[start : start + chunk]
        receiver._parse()


def make_receiver(channel: int = 1):
    hooks = Hooks()
    got: list = []
    hooks.channels[channel] = ChannelHooks(
        on_delivery=lambda delivery: got.append(("deliver", delivery)),
        on_confirm=lambda *args: got.append(("confirm", args)),
        on_return=lambda *args: got.append(("return", args)),
    )
    token = current_hooks.set(hooks)
    try:
        receiver = BulkFrameReceiver(reader=None)  # _parse is fed directly; nothing is read
    finally:
        current_hooks.reset(token)
    return receiver, got


@settings(max_examples=60, deadline=None)
@given(bodies=st.lists(st.binary(max_size=10000), min_size=1, max_size=4), chunk=st.integers(1, 5000))
def test_deliveries_split_anyhow_reach_the_hook_whole_and_in_order(bodies, chunk):
    receiver, got = make_receiver()
    stream = b"".join(deliver_frames(1, i + 1, body, PROPS) for i, body in enumerate(bodies))
    stream += pamqp.frame.marshal(spec.Basic.Ack(delivery_tag=5, multiple=True), 1)
    feed(receiver, stream, chunk)
    assert [g[1].body for g in got if g[0] == "deliver"] == bodies
    assert isinstance(got[0][1], Delivery)
    assert got[0][1][:5] == ("T_1", 1, False, "amq.topic", "a.b")
    assert got[0][1].properties == PROPS
    assert got[-1] == ("confirm", (5, True, False))
    assert not receiver._frames and not receiver._buf


def test_other_channels_and_other_methods_go_to_aiormq_in_order():
    receiver, got = make_receiver(channel=1)
    stream = (
        pamqp.frame.marshal(spec.Basic.ConsumeOk(consumer_tag="T_1"), 1)
        + deliver_frames(2, 1, b"other channel")
        + pamqp.frame.marshal(spec.Channel.Close(reply_code=404, reply_text="NOT_FOUND - x", class_id=0, method_id=0), 1)
    )
    feed(receiver, stream, 3)
    kinds = [type(frame).__name__ for _, _, frame in receiver._frames]
    assert kinds == ["ConsumeOk", "Deliver", "ContentHeader", "ContentBody", "Close"]
    assert got == []


def test_return_arguments_decode_like_pamqp():
    raw = pamqp.frame.marshal(
        spec.Basic.Return(reply_code=312, reply_text="NO_ROUTE", exchange="amq.direct", routing_key="nobody"), 1)
    assert decode_return(raw[7:-1]) == (312, "NO_ROUTE", "amq.direct", "nobody")


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_a_returned_message_reaches_its_hook_before_the_confirm_that_follows_it(chunk):
    """RabbitMQ sends basic.return before the basic.ack of the same mandatory publish; through
    aiormq the ack would overtake the return and a RECEIPT go out for a dropped message."""
    receiver, got = make_receiver()
    stream = (
        pamqp.frame.marshal(spec.Basic.Return(reply_code=312, reply_text="NO_ROUTE", exchange="amq.direct",
                                              routing_key="nobody"), 1)
        + pamqp.frame.marshal(ContentHeader(0, 5, spec.Basic.Properties(delivery_mode=2)), 1)
        + pamqp.frame.marshal(ContentBody(b"lost?"), 1)
        + pamqp.frame.marshal(spec.Basic.Ack(delivery_tag=1, multiple=False), 1)
        + deliver_frames(1, 1, b"after")
    )
    feed(receiver, stream, chunk)
    assert got[0] == ("return", (312, "NO_ROUTE", "amq.direct", "nobody"))
    assert got[1] == ("confirm", (1, False, False))
    assert got[2][0] == "deliver" and got[2][1].body == b"after"
    assert not receiver._frames


def test_a_frame_without_its_end_byte_is_refused():
    import aiormq.exceptions

    receiver, _ = make_receiver()
    data = bytearray(pamqp.frame.marshal(spec.Basic.Ack(delivery_tag=1), 1))
    data[-1] = 0
    with pytest.raises(aiormq.exceptions.InvalidFrameError):
        feed(receiver, bytes(data), 100)


def test_channels_sharing_a_connection_each_get_their_own_frames_even_interleaved():
    receiver, _ = make_receiver(channel=9)  # a third channel that gets nothing
    got: dict[int, list] = {1: [], 2: []}
    ends: list[int] = []
    for number in (1, 2):
        receiver.hooks.channels[number] = ChannelHooks(
            on_delivery=lambda delivery, n=number: got[n].append(delivery.body),
            on_confirm=lambda *args, n=number: got[n].append(args),
            on_batch_end=lambda n=number: ends.append(n),
        )
    one = deliver_frames(1, 1, b"a" * 5000, frame_max=1024)
    two = deliver_frames(2, 1, b"b" * 3000, frame_max=1024)
    # Frame by frame, alternating channels: content of one channel may be interleaved with another's.
    split = lambda data: [pamqp.frame.marshal(f, ch) for _, ch, f in _frames(data)]
    stream = b"".join(a + b for a, b in zip(split(one), split(two))) + b"".join(split(one)[len(split(two)):])
    stream += pamqp.frame.marshal(spec.Basic.Ack(delivery_tag=3, multiple=False), 2)
    feed(receiver, stream, len(stream))
    assert got[1] == [b"a" * 5000]
    assert got[2] == [b"b" * 3000, (3, False, False)]
    assert not receiver._frames


def _frames(data: bytes):
    out = []
    while data:
        consumed, channel, frame = pamqp.frame.unmarshal(data)
        out.append((consumed, channel, frame))
        data = data[consumed:]
    return out


def test_a_chunk_is_handled_in_the_sockets_data_received_and_aiormq_woken_only_for_its_frames():
    """A delivery and a confirm reach their session while the protocol takes the bytes, with no
    pass of the event loop in between (no task to wake); channel 0's frames and the end of the
    stream still reach aiormq's reader task through get_frame."""
    import asyncio

    import aiormq.exceptions
    from pamqp.heartbeat import Heartbeat

    async def scenario() -> None:
        reader = asyncio.StreamReader()
        protocol = asyncio.StreamReaderProtocol(reader)
        protocol.data_received(pamqp.frame.marshal(Heartbeat(), 0))  # before the receiver: kept
        hooks = Hooks()
        got: list = []
        hooks.channels[1] = ChannelHooks(
            on_delivery=lambda delivery: got.append(("deliver", delivery.body)),
            on_confirm=lambda *args: got.append(("confirm", args)),
            on_batch_end=lambda: got.append("batch end"),
        )
        token = current_hooks.set(hooks)
        try:
            receiver = BulkFrameReceiver(reader)
        finally:
            current_hooks.reset(token)
        assert isinstance((await receiver.get_frame())[2], Heartbeat)
        protocol.data_received(deliver_frames(1, 1, b"body")
                               + pamqp.frame.marshal(spec.Basic.Ack(delivery_tag=1), 1))
        assert got == [("deliver", b"body"), ("confirm", (1, False, False)), "batch end"]
        protocol.data_received(pamqp.frame.marshal(Heartbeat(), 0))
        assert isinstance((await asyncio.wait_for(receiver.get_frame(), 5))[2], Heartbeat)
        waiting = asyncio.ensure_future(receiver.get_frame())
        await asyncio.sleep(0)
        protocol.connection_lost(None)
        with pytest.raises(aiormq.exceptions.AMQPConnectionError):
            await asyncio.wait_for(waiting, 5)

    asyncio.run(scenario())


@pytest.mark.parametrize("chunk", [7, 4093, 70000, 10**7])
def test_a_large_delivery_is_assembled_in_one_buffer_of_its_size(chunk):
    from stomp_bridge.amqp.reader import LARGE_BODY

    receiver, got = make_receiver()
    large = bytes(i % 253 for i in range(3 * LARGE_BODY + 5))
    bodies = [large, b"small", large[::-1], b""]
    stream = b"".join(deliver_frames(1, i + 1, body, PROPS, frame_max=131072) for i, body in enumerate(bodies))
    stream += pamqp.frame.marshal(spec.Basic.Ack(delivery_tag=4, multiple=True), 1)
    feed(receiver, stream, chunk)
    delivered = [g[1].body for g in got if g[0] == "deliver"]
    assert delivered == bodies
    assert type(delivered[0]) is bytearray and len(delivered[0]) == len(large)  # filled in place
    assert type(delivered[1]) is bytes
    assert got[-1] == ("confirm", (4, True, False))
    assert not receiver._buf


def test_a_large_returned_message_still_reaches_its_hook():
    from stomp_bridge.amqp.reader import LARGE_BODY

    receiver, got = make_receiver()
    body = b"r" * (2 * LARGE_BODY)
    stream = pamqp.frame.marshal(spec.Basic.Return(reply_code=312, reply_text="NO_ROUTE", exchange="",
                                                   routing_key="nowhere"), 1)
    stream += pamqp.frame.marshal(ContentHeader(0, len(body), spec.Basic.Properties()), 1)
    for start in range(0, len(body), 4088):
        stream += pamqp.frame.marshal(ContentBody(body[start : start + 4088]), 1)
    feed(receiver, stream, 5000)
    assert got == [("return", (312, "NO_ROUTE", "", "nowhere"))]


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.sampled_from([0, 5, 4088, 4089, 70_000, 200_003]), min_size=1, max_size=4),
       cuts=st.lists(st.integers(1, 300_000), max_size=12))
def test_chunks_are_cut_where_they_are_and_only_a_spanning_frame_is_buffered(sizes, cuts):
    """_feed (the socket's data_received): complete frames are handled from the chunk itself;
    the buffer only ever holds the start of one frame the chunk ended in."""
    import asyncio

    async def scenario() -> None:
        receiver, got = make_receiver()
        receiver.started = True  # past the handshake, as every chunk after connection.start
        bodies = [bytes(i % 247 for i in range(size)) for size in sizes]
        stream = b"".join(deliver_frames(1, i + 1, body, PROPS, frame_max=4096 if i % 2 else 131072)
                          for i, body in enumerate(bodies))
        stream += pamqp.frame.marshal(spec.Basic.Ack(delivery_tag=9, multiple=False), 1)
        points = sorted({min(c, len(stream)) for c in cuts} | {len(stream)})
        start = 0
        for point in points:
            receiver._feed(stream[start:point])
            start = point
            assert len(receiver._buf) <= 131072 + 8  # never more than one frame's bytes
        assert receiver._error is None
        assert [g[1].body for g in got if g[0] == "deliver"] == bodies
        assert got[-1] == ("confirm", (9, False, False))
        assert not receiver._buf

    asyncio.run(scenario())
