"""The lean publish encoder produces exactly what pamqp produces (with long table integers)."""

from datetime import datetime, timezone

import pamqp.decode
import pamqp.encode
import pamqp.frame
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands as spec
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from stomp_bridge.amqp.codec import encode_ack, encode_nack, publish_frames
from stomp_bridge.amqp.connect import install

install()  # the references below are pamqp's encoding as a running bridge has it (integers as longs)

FRAME_MAX = 4096


def encode_publish(*args, **kwargs) -> bytes:
    """One publish as the socket gets it: publish_frames' parts, joined."""
    out: list = []
    publish_frames(out, *args, **kwargs)
    return b"".join(out)


def reference(channel, exchange, routing_key, props, body, frame_max=FRAME_MAX):
    props = dict(props)
    if isinstance(props.get("timestamp"), int):
        props["timestamp"] = datetime.fromtimestamp(props["timestamp"], tz=timezone.utc)
    out = [
        pamqp.frame.marshal(spec.Basic.Publish(exchange=exchange, routing_key=routing_key), channel),
        pamqp.frame.marshal(ContentHeader(0, len(body), spec.Basic.Properties(**props)), channel),
    ]
    step = frame_max - 8
    for start in range(0, len(body), step):
        out.append(pamqp.frame.marshal(ContentBody(body[start : start + step]), channel))
    return b"".join(out)


CASES = [
    ("", "q", {}, b""),
    ("amq.topic", "a.b.c", {"delivery_mode": 2, "headers": {}}, b"hello"),
    (
        "x",
        "rk",
        {
            "content_type": "text/plain",
            "content_encoding": "gzip",
            "headers": {"receipt": "7", "n": 10, "big": 1 << 40, "neg": -3},
            "delivery_mode": 2,
            "priority": 5,
            "correlation_id": "c-1",
            "reply_to": "amq.gen-xyz",
            "expiration": "60000",
            "message_id": "m-1",
            "timestamp": 1700000000,
            "message_type": "order",
            "user_id": "guest",
            "app_id": "shop",
        },
        b"\x00\x01" * 5000,  # several body frames
    ),
    ("", "ünïcode", {"headers": {"clé": "välue"}}, b"x" * (FRAME_MAX - 8)),
]


@pytest.mark.parametrize(("exchange", "routing_key", "props", "body"), CASES, ids=["bare", "persistent", "all-properties", "unicode"])
def test_publish_frames_match_pamqp(exchange, routing_key, props, body):
    assert encode_publish(3, exchange, routing_key, props, body, FRAME_MAX) == reference(
        3, exchange, routing_key, props, body
    )


text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)


@settings(max_examples=200, deadline=None)
@given(
    routing_key=text,
    headers=st.dictionaries(text.filter(bool), st.one_of(text, st.integers(-(1 << 63), (1 << 63) - 1))),
    body=st.binary(max_size=3 * FRAME_MAX),
    persistent=st.booleans(),
)
def test_any_publish_matches_pamqp(routing_key, headers, body, persistent):
    props = {"headers": headers}
    if persistent:
        props["delivery_mode"] = 2
    assert encode_publish(1, "ex", routing_key, props, body, FRAME_MAX) == reference(
        1, "ex", routing_key, props, body
    )


def test_short_string_over_255_bytes_is_refused():
    with pytest.raises(ValueError, match="routing key"):
        encode_publish(1, "", "k" * 256, {}, b"", FRAME_MAX)


@pytest.mark.parametrize("tag", [1, 2**32 + 7])
@pytest.mark.parametrize("multiple", [False, True])
@pytest.mark.parametrize("requeue", [False, True])
def test_ack_and_nack_frames_match_pamqp(tag, multiple, requeue):
    assert encode_ack(2, tag, multiple) == pamqp.frame.marshal(
        spec.Basic.Ack(delivery_tag=tag, multiple=multiple), 2
    )
    assert encode_nack(2, tag, multiple, requeue) == pamqp.frame.marshal(
        spec.Basic.Nack(delivery_tag=tag, multiple=multiple, requeue=requeue), 2
    )


def test_a_mandatory_publish_sets_the_mandatory_bit():
    plain = encode_publish(1, "amq.direct", "k", {}, b"x", 131072)
    mandatory = encode_publish(1, "amq.direct", "k", {}, b"x", 131072, mandatory=True)
    method = pamqp.frame.unmarshal(mandatory)[2]
    assert method.mandatory is True and method.exchange == "amq.direct" and method.routing_key == "k"
    assert pamqp.frame.unmarshal(plain)[2].mandatory is False  # and the cache keeps them apart


# -- the hot path's shortcuts give what the general code gives ------------------------------

_table_values = st.one_of(
    st.text(max_size=40),
    st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1),
    st.booleans(),
    st.binary(max_size=20).filter(lambda b: _not_utf8(b)),
)


def _not_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


@settings(max_examples=300)
@given(st.dictionaries(st.text(min_size=1, max_size=20).filter(lambda k: len(k.encode()) < 256), _table_values,
                       max_size=8), st.binary(max_size=4))
def test_decode_table_reads_what_pamqp_reads(table, trailing):
    """Long strings and longs are read by the bridge's own loop; anything else (a bool here)
    sends the whole table to pamqp; a long string that is not UTF-8 stays bytes either way."""
    from stomp_bridge.amqp.codec import decode_table, field_table

    entries = []
    for key, value in table.items():
        name = bytes((len(key.encode()),)) + key.encode()
        if isinstance(value, bytes):  # a longstr that is not UTF-8 (pamqp would write 'x')
            entries.append(name + b"S" + len(value).to_bytes(4, "big") + value)
        elif isinstance(value, bool):
            entries.append(name + pamqp.encode.encode_table_value(value))
        else:
            entries.append(name + field_table({key: value})[4 + len(name):])
    encoded = len(b"".join(entries)).to_bytes(4, "big") + b"".join(entries)
    payload = b"\x01\x02" + encoded + trailing
    consumed, expected = pamqp.decode.field_table(payload[2:])
    assert decode_table(payload, 2) == (expected, 2 + consumed)


def test_decode_table_leaves_a_truncated_table_to_pamqp_which_refuses_it():
    from stomp_bridge.amqp.codec import decode_table, field_table

    encoded = field_table({"a": "b" * 10})
    with pytest.raises(ValueError):
        decode_table(encoded[:-3], 0)


@pytest.mark.parametrize("props", [
    {"headers": {"receipt": "1"}},
    {"headers": {"receipt": "1"}, "delivery_mode": 2},
    {"headers": {}, "delivery_mode": 1},
    {"delivery_mode": 2, "priority": 3},
    {"headers": {"a": "b"}, "priority": 0},
    {},
])
def test_content_header_round_trip_for_the_common_and_other_shapes(props):
    from stomp_bridge.amqp.codec import _CONTENT_PREFIX, decode_content_header, encode_properties

    flags, encoded = encode_properties(props)
    size, decoded = decode_content_header(_CONTENT_PREFIX.pack(60, 0, 5, flags) + encoded)
    assert size == 5
    assert decoded == {k: v for k, v in props.items()}
    assert list(decoded) == [k for k in ("headers", "delivery_mode", "priority") if k in props]


def test_a_large_body_is_framed_as_views_of_the_clients_buffer_not_copied():
    from stomp_bridge.amqp.codec import LARGE_BODY, publish_frames

    body = bytes(range(256)) * (3 * LARGE_BODY // 256)
    out: list = []
    assert publish_frames(out, 1, "", "q", {"headers": {}}, body, 131072) is True  # to be written unjoined
    views = [part for part in out if isinstance(part, memoryview)]
    assert views and all(view.obj is body for view in views)
    assert sum(map(len, views)) == len(body)
    assert b"".join(out) == reference(1, "", "q", {"headers": {}}, body, 131072)
    small: list = []
    assert publish_frames(small, 1, "", "q", {"headers": {}}, b"small", 131072) is False
    assert len(small) == 1  # one bytes per small publish: a batch joins cheaply


short_or_long = st.one_of(st.text(max_size=70), st.text(min_size=60, max_size=130), st.just("é" * 128))


@settings(max_examples=300, deadline=None)
@given(exchange=short_or_long, routing_key=short_or_long, header=short_or_long, content_type=short_or_long,
       reply_to=st.one_of(st.none(), short_or_long))
def test_the_cores_publish_check_refuses_exactly_what_the_codec_refuses(exchange, routing_key, header, content_type,
                                                                        reply_to):
    """The core numbers a publish before the driver encodes it, so it must refuse beforehand
    exactly what the codec would (protocol/headers.publish_problem), in the codec's words."""
    from stomp_bridge.protocol.headers import publish_problem

    props = {"content_type": content_type, "headers": {header: "v"}}
    if reply_to is not None:
        props["reply_to"] = reply_to
    try:
        publish_frames([], 1, exchange, routing_key, props, b"x", 131072)
        refused = None
    except ValueError as exc:
        refused = str(exc)
    assert publish_problem(exchange, routing_key, props) == refused


@settings(max_examples=200, deadline=None)
@given(frame_max=st.sampled_from([4096, 8192, 131072]), count=st.integers(0, 40),
       size=st.integers(0, 8000), char=st.sampled_from(["a", "é", "\u20ac", "\U0001f600"]),
       content_type=st.text(alphabet="abc/+-", max_size=100))
def test_the_publish_check_refuses_exactly_the_properties_over_one_frame(frame_max, count, size, char, content_type):
    """A content header frame over frame_max makes RabbitMQ close the whole connection; the core's
    check (protocol/headers.publish_problem) lets through exactly the properties whose frame, with
    the room kept for the bridge's own headers, fits."""
    from stomp_bridge.amqp.codec import encode_properties
    from stomp_bridge.protocol.headers import publish_problem

    props = {"content_type": content_type, "headers": {f"h{i}": char * (size // (i + 1)) for i in range(count)}}
    frame = 22 + len(encode_properties(props)[1])  # frame header, class/weight/size/flags, end
    problem = publish_problem("", "q", props, frame_max)
    assert (problem is None) == (frame + 512 <= frame_max), (frame, problem)


# The body framing at its edges: no body, one byte, a body that just fits one body frame
# (frame_max - 8: seven bytes of frame header and the end byte), one byte more (two frames),
# and several frames with a short last one; the small path (one joined bytes) and the large
# one (views of the body) alike, each byte for byte pamqp's frames.
@pytest.mark.parametrize("frame_max", [FRAME_MAX, 131072])
@pytest.mark.parametrize("size", ["0", "1", "frame_max-8", "frame_max-7", "3*frame_max+5"])
def test_body_frames_at_the_frame_size_edges_are_pamqps_bytes(frame_max, size):
    from stomp_bridge.amqp.codec import LARGE_BODY

    length = eval(size, {"frame_max": frame_max})  # noqa: S307 - the ids above
    body = bytes(i % 251 for i in range(length))
    props = {"headers": {"receipt": "r"}, "delivery_mode": 2}
    out: list = []
    vectored = publish_frames(out, 7, "amq.topic", "k", props, body, frame_max)
    assert b"".join(out) == reference(7, "amq.topic", "k", props, body, frame_max)
    assert vectored is (length >= LARGE_BODY)
    views = [part for part in out if isinstance(part, memoryview)]
    if length > frame_max - 8:  # more than one body frame: every body byte is a view of the body
        assert all(view.obj is body for view in views) and sum(map(len, views)) == length
