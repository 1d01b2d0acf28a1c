"""FrameParser: grammar, per-version unescaping, limits, incremental feeding, fuzzing."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stomp_bridge.protocol.errors import FrameTooLarge, ProtocolError, StompError
from stomp_bridge.protocol.frames import Frame, serialize
from stomp_bridge.protocol.parser import MAX_COMMAND_LENGTH, FrameParser, Limits


def parse(data: bytes, version: str = "1.2", limits: Limits = Limits()) -> list[Frame]:
    return FrameParser(limits, version).frames(data)


def parse_bytewise(data: bytes, version: str = "1.2", limits: Limits = Limits()) -> list[Frame]:
    parser = FrameParser(limits, version)
    out = []
    for i in range(len(data)):
        out.extend(parser.frames(data[i : i + 1]))
    return out


# --- grammar --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        (b"SEND\ndestination:/q\n\nhello\0", Frame("SEND", {"destination": "/q"}, b"hello")),
        (b"DISCONNECT\n\n\0", Frame("DISCONNECT", {}, b"")),
        (b"SEND\r\nk:v\r\n\r\nbody\0", Frame("SEND", {"k": "v"}, b"body")),
        (b"SEND\nk:v\r\n\nbody\0", Frame("SEND", {"k": "v"}, b"body")),
        (b"SEND\nk:a:b:c\n\n\0", Frame("SEND", {"k": "a:b:c"}, b"")),
        (b"SEND\nk:\n\n\0", Frame("SEND", {"k": ""}, b"")),
        (b"SEND\n k : v \n\n\0", Frame("SEND", {" k ": " v "}, b"")),
        (b"SEND\nk:v\n\nline1\nline2\r\n\0", Frame("SEND", {"k": "v"}, b"line1\nline2\r\n")),
        (b"FOO\n\n\0", Frame("FOO", {}, b"")),
        ("SEND\nclé:värde\n\n\0".encode(), Frame("SEND", {"clé": "värde"}, b"")),
    ],
)
def test_well_formed_frames_parse(wire, expected):
    assert parse(wire) == [expected]
    assert parse_bytewise(wire) == [expected]


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_crlf_line_endings_are_accepted_in_every_version(version):
    wire = b"SEND\r\ndestination:/queue/a\r\nreceipt:r\r\n\r\nbody\r\n\0"
    expected = Frame("SEND", {"destination": "/queue/a", "receipt": "r"}, b"body\r\n")
    assert parse(wire, version) == [expected]


def test_a_nul_inside_a_header_line_belongs_to_the_header_as_in_the_plugin():
    # Only the body ends at NUL (rabbit_stomp_frame reads headers up to LF); what such a
    # header may do on the way out is frames.serialize's business.
    assert parse(b"SEND\nk:a\0b\nn\0:v\n\nbody\0") == [Frame("SEND", {"k": "a\0b", "n\0": "v"}, b"body")]


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_lone_cr_in_a_header_is_refused_in_every_version(version):
    with pytest.raises(ProtocolError, match="Invalid header"):
        parse(b"SEND\nk:a\rb\n\n\0", version)


def test_repeated_header_first_value_wins():
    assert parse(b"SEND\nk:first\nk:second\nk:third\n\n\0")[0].headers == {"k": "first"}


@pytest.mark.parametrize("noise", [b"\n", b"\r\n", b"\n\n\r\n\n", b"\0", b"\0\n\r\n"])
def test_eols_between_frames_are_heartbeats(noise):
    wire = noise + b"ACK\nid:1\n\n\0" + noise + b"NACK\nid:2\n\n\0" + noise
    expected = [Frame("ACK", {"id": "1"}), Frame("NACK", {"id": "2"})]
    assert parse(wire) == expected
    assert parse_bytewise(wire) == expected


def test_heartbeats_alone_yield_nothing_and_are_not_kept():
    parser = FrameParser()
    assert parser.frames(b"\n" * 10_000 + b"\r\n" * 100) == []
    assert parser.buffered == 0


def test_cr_split_from_its_lf_is_kept_until_the_lf_arrives():
    parser = FrameParser()
    assert parser.frames(b"\r") == []
    assert parser.buffered == 1
    assert parser.frames(b"\nSEND\n\n\0") == [Frame("SEND", {})]


def test_body_without_content_length_ends_at_first_nul():
    wire = b"SEND\n\nab\0SEND\n\ncd\0"
    assert parse(wire) == [Frame("SEND", {}, b"ab"), Frame("SEND", {}, b"cd")]


def test_content_length_body_may_contain_nul():
    wire = b"SEND\ncontent-length:5\n\na\0b\0c\0"
    expected = [Frame("SEND", {"content-length": "5"}, b"a\0b\0c")]
    assert parse(wire) == expected
    assert parse_bytewise(wire) == expected


def test_content_length_is_honoured_on_every_command():
    assert parse(b"MESSAGE\ncontent-length:2\n\n\0\0\0")[0].body == b"\0\0"


@pytest.mark.parametrize("value", ["0", " 3 ", "\t3", "003"])
def test_content_length_tolerates_blanks_and_leading_zeros(value):
    body = b"" if value == "0" else b"abc"
    wire = b"SEND\ncontent-length:" + value.encode() + b"\n\n" + body + b"\0"
    assert parse(wire)[0].body == body


def test_parsed_frame_leaves_following_bytes_buffered():
    parser = FrameParser()
    parser.feed(b"SEND\n\na\0SEND\n\nb")
    assert parser.next_frame() == Frame("SEND", {}, b"a")
    assert parser.buffered == len(b"SEND\n\nb")
    assert parser.next_frame() is None


# --- per-version unescaping -----------------------------------------------------


@pytest.mark.parametrize(
    ("version", "raw", "expected"),
    [
        ("1.0", b"a\\nb\\cc\\\\d\\re\\t", "a\\nb\\cc\\\\d\\re\\t"),
        ("1.1", b"a\\nb\\cc\\\\d", "a\nb:c\\d"),
        ("1.2", b"a\\nb\\cc\\\\d\\re", "a\nb:c\\d\re"),
    ],
)
def test_header_unescaping_per_version(version, raw, expected):
    frame = parse(b"SEND\n" + raw + b":" + raw + b"\n\n\0", version)[0]
    assert frame.headers == {expected: expected}


@pytest.mark.parametrize(
    ("version", "raw"),
    [("1.1", b"\\r"), ("1.1", b"\\t"), ("1.2", b"\\t"), ("1.2", b"x\\"), ("1.2", b"\\ ")],
)
def test_undefined_escape_is_a_protocol_error(version, raw):
    with pytest.raises(ProtocolError) as info:
        parse(b"SEND\nk:" + raw + b"\n\n\0", version)
    assert info.value.message == "Invalid escape sequence"


@pytest.mark.parametrize("command", [b"CONNECT", b"STOMP", b"CONNECTED"])
def test_connect_headers_are_not_unescaped(command):
    frame = parse(command + b"\nlogin:a\\cb\npasscode:p\\t\\\n\n\0")[0]
    assert frame.headers == {"login": "a\\cb", "passcode": "p\\t\\"}


def test_frames_after_connect_use_the_version_set_between_frames():
    parser = FrameParser(version="1.2")
    parser.feed(b"CONNECT\naccept-version:1.0\n\n\0SEND\nk:a\\tb\n\n\0")
    assert parser.next_frame().command == "CONNECT"
    parser.version = "1.0"
    assert parser.next_frame() == Frame("SEND", {"k": "a\\tb"})


def test_limits_replaced_between_frames_apply_to_the_next_frame():
    parser = FrameParser(Limits(max_frame_size=100))
    parser.feed(b"CONNECT\n\n\0SEND\n\n" + b"x" * 50 + b"\0")
    assert parser.next_frame().command == "CONNECT"
    parser.limits = Limits(max_frame_size=20)
    with pytest.raises(FrameTooLarge):
        parser.next_frame()


def test_unknown_version_is_refused():
    with pytest.raises(ValueError):
        FrameParser(version="1.3")


# --- malformed input ------------------------------------------------------------


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        (b"SEND\nno-colon\n\n\0", "Invalid header"),
        (b"SEND\n:value\n\n\0", "Invalid header"),
        (b"SEND\nk:a\rb\n\n\0", "Invalid header"),
        (b"SEND\nk:\xff\xfe\n\n\0", "Invalid header"),
        (b"SEND\n\xc3\x28:v\n\n\0", "Invalid header"),
        (b"SE ND\n\n\0", "Invalid command"),
        (b"SEND\rX\n\n\0", "Invalid command"),
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "Invalid command"),
        (b"\xffSEND\n\n\0", "Invalid command"),
        (b"1SEND\n\n\0", "Invalid command"),
        (b"\rX", "Invalid frame"),
        (b"SEND\ncontent-length:abc\n\n\0", "Invalid content-length"),
        (b"SEND\ncontent-length:-1\n\n\0", "Invalid content-length"),
        (b"SEND\ncontent-length:1.5\n\n\0", "Invalid content-length"),
        (b"SEND\ncontent-length:\n\n\0", "Invalid content-length"),
        (b"SEND\ncontent-length:\xd9\xa3\n\n\0", "Invalid content-length"),  # Arabic-Indic 3
        (b"SEND\ncontent-length:2\n\nabc\0", "Missing frame terminator"),
        (b"SEND\ncontent-length:0\n\nx\0", "Missing frame terminator"),
    ],
)
def test_malformed_input_raises_protocol_error(wire, message):
    for parse_fn in (parse, parse_bytewise):
        with pytest.raises(ProtocolError) as info:
            parse_fn(wire)
        assert info.value.message == message
        assert info.value.detail
        assert not isinstance(info.value, FrameTooLarge)


def test_overlong_command_line_is_refused_before_its_eol():
    parser = FrameParser()
    with pytest.raises(ProtocolError, match="Invalid command"):
        parser.frames(b"A" * (MAX_COMMAND_LENGTH + 1))


# --- limits ---------------------------------------------------------------------

SMALL = Limits(max_frame_size=1024, max_headers=5, max_header_length=64)


def _feed_until_error(parser: FrameParser, chunks) -> int:
    """Feed chunks until the parser raises; return the most it ever buffered."""
    high = 0
    with pytest.raises(FrameTooLarge) as info:
        for chunk in chunks:
            parser.feed(chunk)
            high = max(high, parser.buffered)
            parser.next_frame()
    assert info.value.message and info.value.detail
    return high


def test_frame_at_the_size_limit_is_accepted():
    wire = serialize(Frame("SEND", {}, b"x" * 100))
    assert parse(wire, limits=Limits(max_frame_size=len(wire)))[0].body == b"x" * 100
    unsized = wire.replace(b"content-length:100\n", b"")
    assert parse(unsized, limits=Limits(max_frame_size=len(unsized)))[0].body == b"x" * 100


def test_frame_one_byte_over_the_limit_is_too_large():
    wire = serialize(Frame("SEND", {}, b"x" * 100))
    with pytest.raises(FrameTooLarge, match="Frame too large"):
        parse(wire, limits=Limits(max_frame_size=len(wire) - 1))
    unsized = wire.replace(b"content-length:100\n", b"")
    with pytest.raises(FrameTooLarge, match="Frame too large"):
        parse(unsized, limits=Limits(max_frame_size=len(unsized) - 1))


def test_unterminated_body_fails_once_buffer_passes_the_limit():
    parser = FrameParser(SMALL)
    chunks = [b"SEND\n\n"] + [b"x" * 100] * 1000
    high = _feed_until_error(parser, chunks)
    assert high <= SMALL.max_frame_size + 100


def test_unterminated_body_fed_bytewise_fails_at_the_limit():
    parser = FrameParser(SMALL)
    high = _feed_until_error(parser, (b"x" if i else b"SEND\n\n" for i in range(10_000)))
    assert high <= SMALL.max_frame_size


def test_huge_content_length_fails_before_the_body_arrives():
    parser = FrameParser(SMALL)
    parser.feed(b"SEND\ncontent-length:999999999999999999999999999999999999\n\n")
    with pytest.raises(FrameTooLarge, match="Frame too large"):
        parser.next_frame()
    parser = FrameParser(SMALL)
    parser.feed(b"SEND\ncontent-length:1025\n\n")
    with pytest.raises(FrameTooLarge):
        parser.next_frame()


def test_endless_header_block_fails_at_the_frame_limit():
    parser = FrameParser(Limits(max_frame_size=1024, max_headers=10**6))
    high = _feed_until_error(parser, [b"SEND\n"] + [b"k:v\n"] * 10_000)
    assert high <= 1024 + 4


def test_too_many_headers():
    headers = b"".join(b"h%d:v\n" % i for i in range(6))
    with pytest.raises(FrameTooLarge, match="Too many headers"):
        parse(b"SEND\n" + headers + b"\n\0", limits=SMALL)
    assert parse(b"SEND\n" + headers[: headers.index(b"h5")] + b"\n\0", limits=SMALL)


def test_repeated_headers_count_towards_max_headers():
    with pytest.raises(FrameTooLarge, match="Too many headers"):
        parse(b"SEND\n" + b"k:v\n" * 6 + b"\n\0", limits=SMALL)


def test_long_header_line():
    ok = b"k:" + b"v" * 62
    assert parse(b"SEND\n" + ok + b"\r\n\n\0", limits=SMALL)
    with pytest.raises(FrameTooLarge, match="Header too long"):
        parse(b"SEND\n" + ok + b"v\n\n\0", limits=SMALL)


def test_long_header_line_fails_before_its_eol():
    parser = FrameParser(SMALL)
    high = _feed_until_error(parser, [b"SEND\nk:"] + [b"v"] * 1000)
    assert high <= 5 + SMALL.max_header_length + 1


@settings(max_examples=60, deadline=None)
@given(st.binary(min_size=1, max_size=3000), st.integers(min_value=1, max_value=200))
def test_buffer_stays_below_max_frame_size_after_each_drain(data, chunk):
    parser = FrameParser(Limits(max_frame_size=512, max_headers=8, max_header_length=64))
    try:
        for i in range(0, len(data), chunk):
            parser.feed(data[i : i + chunk])
            while parser.next_frame() is not None:
                pass
            assert parser.buffered <= 512
    except StompError:
        pass


def test_a_partial_header_line_is_measured_from_its_own_start_not_the_chunks():
    # Found by atheris: the line-length check for a header line still in flight
    # counted from where the read began, so earlier complete lines in the same
    # chunk made a legal line "too long" (whole input refused, same bytes fed
    # one at a time accepted).
    limits = Limits(max_header_length=48)
    head = b"SEND\n" + b"a:" + b"x" * 40 + b"\n" + b"b:" + b"y" * 46
    whole = FrameParser(limits)
    whole.feed(head)
    assert whole.next_frame() is None
    whole.feed(b"\n\n\0")
    assert whole.next_frame() is not None


# --- incremental feeding --------------------------------------------------------

_wire_frames = st.lists(
    st.builds(
        Frame,
        st.sampled_from(["SEND", "MESSAGE", "ACK", "CONNECT", "ERROR"]),
        st.dictionaries(
            st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=8).filter(
                lambda n: n != "content-length"
            ),
            st.text(st.characters(blacklist_categories=("Cs",)), max_size=12),
            max_size=4,
        ),
        st.binary(max_size=40),
    ).filter(lambda f: f.command != "CONNECT" or not f.headers),
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(_wire_frames, st.data())
def test_any_split_of_the_stream_parses_to_the_same_frames(frames, data):
    wire = b"\r\n".join(serialize(f) for f in frames) + b"\n"
    whole = parse(wire)
    assert len(whole) == len(frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=12)))
    parser = FrameParser()
    got = []
    for a, b in zip([0, *cuts], [*cuts, len(wire)]):
        got.extend(parser.frames(wire[a:b]))
    assert got == whole
    assert parse_bytewise(wire) == whole


def test_bytewise_feeding_is_linear_not_quadratic():
    body = b"x" * 200_000
    wire = b"SEND\nk:" + b"v" * 60_000 + b"\n\n" + body + b"\0"
    start = time.perf_counter()
    assert parse_bytewise(wire, limits=Limits(max_header_length=100_000))[0].body == body
    assert time.perf_counter() - start < 5


# --- fuzzing --------------------------------------------------------------------

_fragments = st.sampled_from(
    [b"\n", b"\r", b"\r\n", b"\0", b":", b"\\", b"\\n", b"\\c", b"\\r", b"\\t", b"SEND", b"CONNECT",
     b"content-length:", b"3", b"-1", b"k:v", b"\xff", b"\xc3"]  # fmt: skip
)
_garbage = st.one_of(st.binary(max_size=200), st.lists(_fragments, max_size=40).map(b"".join))


@settings(max_examples=300, deadline=None)
@given(_garbage, st.sampled_from(["1.0", "1.1", "1.2"]))
def test_fuzz_only_stomp_errors_escape(data, version):
    limits = Limits(max_frame_size=128, max_headers=4, max_header_length=32)
    for parse_fn in (parse, parse_bytewise):
        try:
            for frame in parse_fn(data, version, limits):
                assert isinstance(frame.command, str) and isinstance(frame.body, bytes)
        except StompError:
            pass


# -- large bodies: collected as the chunks that bring them, joined once ----------------------

_large_bodies = st.lists(
    st.tuples(st.integers(0, 3 * 65536), st.booleans()),  # body size, a NUL in the body
    min_size=1, max_size=3,
)


@settings(max_examples=60, deadline=None)
@given(_large_bodies, st.data())
def test_large_bodies_split_anywhere_parse_to_the_same_frames_and_bytes_held(sizes, data):
    frames = [
        Frame("SEND", {"destination": f"/queue/{i}"},
              (bytes(range(256)) * (size // 256 + 1))[:size] if with_nul else b"y" * size)
        for i, (size, with_nul) in enumerate(sizes)
    ]
    eol = data.draw(st.sampled_from([b"", b"\n"]))  # the next frame right after the NUL, or an EOL first
    wire = eol.join(serialize(f) for f in frames) + eol
    whole = parse(wire)
    assert [(f.headers["destination"], f.body) for f in whole] == [(f.headers["destination"], f.body) for f in frames]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=20)))
    parser = FrameParser()
    got, fed = [], 0
    for a, b in zip([0, *cuts], [*cuts, len(wire)]):
        got.extend(parser.frames(wire[a:b]))
        fed += b - a
        returned = sum(len(serialize(f)) + len(eol) for f in got)  # each frame and the EOL after it
        # every byte fed is either in a returned frame or still held (the EOL noise is dropped)
        assert parser.buffered <= fed - returned + len(eol)
    assert got == whole


def test_a_large_body_without_its_nul_is_refused_where_it_should_end():
    body = b"z" * 100_000
    wire = b"SEND\ndestination:/queue/a\ncontent-length:%d\n\n" % len(body) + body + b"X"
    parser = FrameParser()
    parser.feed(wire[:50_000])
    assert parser.next_frame() is None
    parser.feed(wire[50_000:])
    with pytest.raises(ProtocolError, match="Missing frame terminator"):
        parser.next_frame()


def test_a_large_body_is_received_into_a_buffer_of_its_own_not_the_parsers():
    """Each chunk is copied to its place in a buffer of the body's size (allocated once); the
    parser's buffer never holds the body, and the frame's body is that buffer."""
    body = b"q" * 300_000
    wire = b"SEND\ndestination:/queue/a\ncontent-length:%d\n\n" % len(body) + body + b"\0"
    parser = FrameParser()
    for i in range(0, len(wire), 65536):
        parser.feed(wire[i : i + 65536])
        if i + 65536 < len(wire):
            assert parser.next_frame() is None
            assert len(parser._buf) == 0 and parser.buffered == i + 65536
    assert parser.next_frame() == Frame("SEND", {"destination": "/queue/a", "content-length": str(len(body))}, body)
    assert parser.buffered == 0


@pytest.mark.parametrize("read", [1, 4096, 65536, 10**7])
def test_a_socket_reads_a_large_body_straight_into_its_window(read):
    """body_window / body_filled (the TCP link's get_buffer): the window is where the body's
    next bytes and its NUL go; what follows the NUL arrives through feed as usual."""
    body = bytes(i % 249 for i in range(200_000))
    head = b"SEND\ndestination:/queue/a\ncontent-length:%d\n\n" % len(body)
    parser = FrameParser()
    assert parser.body_window() is None  # no large body being received
    parser.feed(head + body[:25_000])  # an eighth of it: the body's buffer is made
    assert parser.next_frame() is None
    rest = body[25_000:] + b"\0"
    windows = []
    while rest:
        window = parser.body_window()
        assert window is not None and len(window) == len(rest)
        windows.append(window.obj)
        size = min(read, len(rest))
        window[:size] = rest[:size]  # what recv_into does
        window.release()
        parser.body_filled(size)
        rest = rest[size:]
        if rest:
            assert parser.next_frame() is None
    assert parser.body_window() is None
    assert len({id(obj) for obj in windows}) == 1  # one buffer, allocated once
    parser.feed(b"\nSEND\ndestination:/queue/b\n\nnext\0")
    assert [f.body for f in iter(parser.next_frame, None)] == [body, b"next"]


@pytest.mark.parametrize("split", [False, True])
def test_a_head_alone_never_makes_the_parser_allocate_its_content_length(split):
    """A client that sends a head declaring 4 MiB, and a little of the body, costs what it sent
    (the body's buffer comes once an eighth of it has): not 4 MiB per connection for a few
    hundred bytes."""
    length = 4 * 1024 * 1024 - 1000
    head = b"SEND\ndestination:/queue/a\ncontent-length:%d\n\n" % length
    parser = FrameParser()
    sent = head + b"x" * (length // 8 - 1)
    for part in ([sent[:100], sent[100:]] if split else [sent]):  # the head alone, then the rest
        parser.feed(part)
        assert parser.next_frame() is None
        assert parser.large_body is None
    assert parser.large_body is None and parser.buffered == len(sent)
    parser.feed(b"x")  # the eighth: from here on the body goes to a buffer of its size
    assert parser.next_frame() is None
    assert parser.large_body is not None and len(parser.large_body) == length + 1
    parser.feed(b"x" * (length - length // 8) + b"\0")
    assert len(parser.next_frame().body) == length


def test_the_body_window_path_gives_the_same_frame_and_checks_the_nul():
    body = b"w" * 100_000
    head = b"SEND\ndestination:/queue/a\ncontent-length:%d\n\n" % len(body)
    for terminator, ok in ((b"\0", True), (b"X", False)):
        parser = FrameParser()
        parser.feed(head + body[:70_000])
        assert parser.next_frame() is None
        window = parser.body_window()
        window[:] = body[70_000:] + terminator
        window.release()
        parser.body_filled(30_001)
        if ok:
            frame = parser.next_frame()
            assert frame == Frame("SEND", {"destination": "/queue/a", "content-length": "100000"}, body)
            assert type(frame.body) is bytearray and parser.buffered == 0
        else:
            with pytest.raises(ProtocolError, match="Missing frame terminator"):
                parser.next_frame()


def test_a_chunk_past_a_large_bodys_nul_keeps_the_next_frames_bytes():
    body = b"v" * 70_000
    first = b"SEND\ndestination:/queue/a\ncontent-length:%d\n\n" % len(body) + body + b"\0"
    second = b"SEND\ndestination:/queue/b\n\nafter\0"
    parser = FrameParser()
    parser.feed(first[:20_000])
    assert parser.next_frame() is None
    parser.feed(memoryview(first[20_000:] + second))  # a view of a reused read buffer: copied
    assert [f.body for f in iter(parser.next_frame, None)] == [body, b"after"]


@pytest.mark.parametrize("pending", [b"SEND\ndestination:/queue/a\n\n" + b"x" * 1000,  # in the buffer
                                     b"SEND\ncontent-length:3000000\n\n" + b"x" * 2_000_000])  # collected parts
def test_clear_drops_a_frame_in_progress_and_the_parser_starts_afresh(pending):
    """The connection's end: what a frame in progress holds (up to max_frame_size) is freed at
    once, not when the garbage collector reaches the connection's objects."""
    parser = FrameParser()
    parser.feed(pending)
    assert parser.next_frame() is None and parser.buffered >= 1000
    parser.clear()
    assert parser.buffered == 0
    assert parser.frames(b"ACK\nid:1\n\n\0") == [Frame("ACK", {"id": "1"}, b"")]


def test_a_chunk_that_begins_a_large_frame_puts_its_body_part_straight_into_the_bodys_buffer():
    body = bytes(i % 239 for i in range(500_000))
    wire = b"SEND\ndestination:/queue/a\ncontent-length:%d\n\n" % len(body) + body + b"\0"
    parser = FrameParser()
    parser.feed(memoryview(wire[:200_000]))  # the link's read buffer: not kept
    assert len(parser._buf) == 0 and parser.large_body is not None  # the head parsed, not buffered
    assert parser.next_frame() is None
    parser.feed(wire[200_000:] + b"ACK\nid:1\n\n\0")
    assert [f.body for f in iter(parser.next_frame, None)] == [body, b""]


@pytest.mark.parametrize("chunk", [
    b"SEND\ndestination:/queue/a\ncontent-length:9x\n\n" + b"x" * 70_000,  # an error: next_frame says it
    b"SEND\ndestination:/queue/a\ncontent-length:99999999\n\n" + b"x" * 70_000,  # over max_frame_size
    b"SEND\ndestination:/queue/a\nfoo:a\\tb\ncontent-length:80000\n\n" + b"x" * 70_000,  # bad escape
    b"\n\nSEND\ncontent-length:80000\n\n" + b"x" * 70_000,  # heart-beats first
    b"SEND\ncontent-length:10\n\n0123456789\0" + b"SEND\n\n" + b"x" * 70_000,  # a small frame first
    b"SEND\ncontent-length:70000\n\n" + b"x" * 70_000 + b"\0",  # all of it
])
def test_a_large_chunk_the_head_shortcut_does_not_take_parses_as_before(chunk):
    def outcome(feed):
        parser = FrameParser()
        feed(parser)
        try:
            return [(f.command, f.headers, bytes(f.body)) for f in iter(parser.next_frame, None)]
        except StompError as exc:
            return (type(exc), exc.message)

    expected = outcome(lambda parser: [parser.feed(chunk[i : i + 100]) for i in range(0, len(chunk), 100)])
    assert outcome(lambda parser: parser.feed(memoryview(chunk))) == expected
