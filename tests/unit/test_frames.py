"""Serializer: per-version escaping, content-length, and round trips through the parser."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stomp_bridge.protocol import frames
from stomp_bridge.protocol.frames import (
    CLIENT_COMMANDS,
    END,
    END_LF,
    SERVER_COMMANDS,
    UNESCAPED_COMMANDS,
    Frame,
    encode_frame,
    receipt_frame,
    serialize,
)
from stomp_bridge.protocol.parser import FrameParser

SPECIAL = "a\\b\nc:d\re"


@pytest.mark.parametrize(
    ("version", "command", "wire_value"),
    [
        ("1.2", "MESSAGE", b"a\\\\b\\nc\\cd\\re"),
        ("1.2", "ERROR", b"a\\\\b\\nc\\cd\\re"),
        ("1.1", "MESSAGE", None),  # 1.1 has no escape for CR
    ],
)
def test_header_value_escaping_per_version(version, command, wire_value):
    frame = Frame(command, {"k": SPECIAL})
    if wire_value is None:
        with pytest.raises(ValueError):
            serialize(frame, version)
    else:
        assert serialize(frame, version) == command.encode() + b"\nk:" + wire_value + b"\n\n\0"


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("1.0", b"MESSAGE\nk:a\\b:c\n\n\0"),
        ("1.1", b"MESSAGE\nk:a\\\\b\\cc\n\n\0"),
        ("1.2", b"MESSAGE\nk:a\\\\b\\cc\n\n\0"),
    ],
)
def test_backslash_and_colon_escaped_from_1_1_on(version, expected):
    assert serialize(Frame("MESSAGE", {"k": "a\\b:c"}), version) == expected


def test_header_names_are_escaped_too():
    assert serialize(Frame("MESSAGE", {"a:b\\": "v"})) == b"MESSAGE\na\\cb\\\\:v\n\n\0"


@pytest.mark.parametrize("command", sorted(UNESCAPED_COMMANDS))
@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_connect_and_connected_are_never_escaped(command, version):
    frame = Frame(command, {"host": "a\\b:c"})
    assert serialize(frame, version) == command.encode() + b"\nhost:a\\b:c\n\n\0"


@pytest.mark.parametrize(
    ("version", "command", "headers"),
    [
        ("1.0", "MESSAGE", {"k": "line\nbreak"}),
        ("1.0", "MESSAGE", {"k": "cr\r"}),
        ("1.0", "MESSAGE", {"a:b": "v"}),
        ("1.2", "CONNECTED", {"server": "x\ny"}),
        ("1.1", "MESSAGE", {"k\r": "v"}),
    ],
)
def test_unrepresentable_header_raises_instead_of_breaking_framing(version, command, headers):
    with pytest.raises(ValueError):
        serialize(Frame(command, headers), version)


def test_colon_in_value_is_kept_raw_without_escaping():
    assert serialize(Frame("MESSAGE", {"k": "a:b"}), "1.0") == b"MESSAGE\nk:a:b\n\n\0"


def test_unknown_version_raises():
    with pytest.raises(ValueError):
        serialize(Frame("MESSAGE", {}), "2.0")


def test_content_length_added_for_non_empty_body():
    wire = serialize(Frame("MESSAGE", {"destination": "/queue/a"}, b"hi\0there"))
    assert wire == b"MESSAGE\ndestination:/queue/a\ncontent-length:8\n\nhi\0there\0"


def test_given_content_length_is_replaced_by_real_length():
    wire = serialize(Frame("SEND", {"content-length": "999", "x": "y"}, b"abc"))
    assert wire == b"SEND\nx:y\ncontent-length:3\n\nabc\0"


def test_empty_body_has_no_content_length():
    assert serialize(Frame("RECEIPT", {"receipt-id": "7", "content-length": "5"})) == (
        b"RECEIPT\nreceipt-id:7\n\n\0"
    )


def test_headers_are_utf8():
    assert serialize(Frame("MESSAGE", {"ключ": "値"})) == "MESSAGE\nключ:値\n\n\0".encode()


def test_command_sets_and_heartbeat():
    assert CLIENT_COMMANDS == {
        "CONNECT", "STOMP", "SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK",
        "BEGIN", "COMMIT", "ABORT", "DISCONNECT",
    }  # fmt: skip
    assert SERVER_COMMANDS == {"CONNECTED", "MESSAGE", "RECEIPT", "ERROR"}
    assert frames.SEND == "SEND" and frames.MESSAGE == "MESSAGE"
    assert frames.heartbeat == b"\n"


# --- round trips ----------------------------------------------------------------

def _chars(excluded: str = "") -> st.SearchStrategy[str]:
    return st.characters(blacklist_categories=("Cs",), blacklist_characters=excluded)


# No version carries NUL in a header (see the injection tests below).
_text = st.text(_chars("\0"), max_size=20)
_commands = st.sampled_from(sorted(CLIENT_COMMANDS | SERVER_COMMANDS))


def _representable(command: str, version: str):
    """Headers that ``version`` can carry for ``command``."""
    if version == "1.0" or command in UNESCAPED_COMMANDS:
        names = st.text(_chars("\0\n\r:"), min_size=1, max_size=12)
        values = st.text(_chars("\0\n\r"), max_size=20)
    elif version == "1.1":
        names = st.text(_chars("\0\r"), min_size=1, max_size=12)
        values = st.text(_chars("\0\r"), max_size=20)
    else:
        names, values = _text.filter(bool), _text
    return st.dictionaries(names.filter(lambda n: n != "content-length"), values, max_size=6)


@st.composite
def frame_and_version(draw):
    version = draw(st.sampled_from(["1.0", "1.1", "1.2"]))
    command = draw(_commands)
    headers = draw(_representable(command, version))
    body = draw(st.binary(max_size=64))
    return Frame(command, headers, body), version


@settings(max_examples=300, deadline=None)
@given(frame_and_version())
def test_serialize_then_parse_round_trips(case):
    frame, version = case
    parsed = FrameParser(version=version).frames(serialize(frame, version))
    expected = dict(frame.headers)
    if frame.body:
        expected["content-length"] = str(len(frame.body))
    assert parsed == [Frame(frame.command, expected, frame.body)]


@settings(max_examples=100, deadline=None)
@given(st.lists(frame_and_version(), min_size=1, max_size=5))
def test_serialized_frames_back_to_back_parse_in_order(cases):
    # One parser per version, since the version is fixed for a connection.
    for version in ("1.0", "1.1", "1.2"):
        chosen = [f for f, v in cases if v == version]
        wire = frames.heartbeat.join(serialize(f, version) for f in chosen)
        parsed = FrameParser(version=version).frames(wire)
        assert [(f.command, f.body) for f in parsed] == [(f.command, f.body) for f in chosen]


@pytest.mark.parametrize("receipt_id", ["r-1", "message-12345", "", "ünï", "a b"])
@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_receipt_fast_path_is_what_serialize_writes(receipt_id, version):
    expected = serialize(Frame("RECEIPT", {"receipt-id": receipt_id}), "1.2" if version == "1.0" else version)
    assert receipt_frame(receipt_id) == expected


@pytest.mark.parametrize("receipt_id", ["a:b", "a\\b", "a\nb", "a\rb", "x\x00y"])
def test_receipt_ids_that_need_escaping_or_leaving_out_take_the_general_path(receipt_id):
    assert receipt_frame(receipt_id) is None


# --- header injection: no header can change a frame's structure ------------------------
#
# MESSAGE headers come from other clients (a STOMP producer's SEND headers, an AMQP
# producer's headers table, properties and routing key). Escaping keeps EOLs and colons
# inside their header; NUL has no escape in any version, and a client that reads a frame up
# to its NUL (stomp.py, PHP's stomp) would end the frame there and read what follows as a
# frame of the producer's making. An empty name is outside the grammar
# (header-name = 1*<any OCTET except CR or LF or ":">) and makes strict parsers refuse the
# frame. Such headers are left out.

INJECTED = "x\0MESSAGE\nsubscription:s-1\ndestination:/queue/forged\n\nforged body"


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest.mark.parametrize(
    "headers",
    [
        {"destination": "/queue/a", "evil": INJECTED, "after": "ok"},
        {"destination": "/queue/a", "ev\0il": "v", "after": "ok"},
        {"destination": "/queue/a", "\0": "", "after": "ok"},
        {"destination": "/queue/a", "": "forged", "after": "ok"},
    ],
    ids=["nul-in-value", "nul-in-name", "nul-name", "empty-name"],
)
def test_header_stomp_cannot_carry_is_left_out_in_every_version(version, headers):
    wire = serialize(Frame("MESSAGE", headers, b"body"), version)
    assert wire == b"MESSAGE\ndestination:/queue/a\nafter:ok\ncontent-length:4\n\nbody\0"


@pytest.mark.parametrize("command", sorted(UNESCAPED_COMMANDS))
def test_nul_is_left_out_of_unescaped_frames_too(command):
    assert serialize(Frame(command, {"a": "1\0", "b": "2"}), "1.2") == command.encode() + b"\nb:2\n\n\0"


def test_a_nul_free_frame_costs_no_copy_of_its_headers():
    """The hot path: one scan over names and values, nothing rebuilt (RECEIPT fast path too)."""
    headers = {"destination": "/queue/a", "message-id": "T_s@@session-x@@1", "k": "v"}
    assert serialize(Frame("MESSAGE", headers)) == (
        b"MESSAGE\ndestination:/queue/a\nmessage-id:T_s@@session-x@@1\nk:v\n\n\0"
    )
    assert receipt_frame("r-1") == b"RECEIPT\nreceipt-id:r-1\n\n\0"


def _any_text() -> st.SearchStrategy[str]:
    specials = st.sampled_from(["\0", "\n", "\r", ":", "\\", "\r\n", "\n\n", "\\c", "\\n"])
    return st.lists(st.one_of(specials, st.text(_chars(), max_size=4)), max_size=6).map("".join)


def _nul_reader(wire: bytes) -> list[bytes]:
    """What a client that reads up to NUL sees (stomp.py without content-length): the frames,
    trailing EOLs dropped."""
    return [part for part in wire.split(b"\0") if part.strip(b"\r\n")]


@settings(max_examples=500, deadline=None)
@given(
    st.sampled_from(["1.0", "1.1", "1.2"]),
    st.dictionaries(_any_text(), _any_text(), max_size=6),
    st.binary(max_size=16).map(lambda b: b.replace(b"\0", b"")),
)
def test_no_header_changes_the_structure_of_a_message_frame(version, headers, body):
    """Whatever the headers, a consumer of any version and any reading strategy sees one
    MESSAGE with the headers that can be carried, each in its own line."""
    wire_version = "1.2" if version == "1.0" else version  # what the session sends a 1.0 client
    frame = Frame("MESSAGE", {"destination": "/queue/a", **headers}, body)
    try:
        wire = serialize(frame, wire_version)
    except ValueError:  # 1.1 cannot carry CR: the session sends such a frame with 1.2 escaping
        assert wire_version == "1.1" and any("\r" in k + v for k, v in headers.items())
        wire = serialize(frame, "1.2")
        wire_version = "1.2"
    kept = {k: v for k, v in frame.headers.items() if k and "\0" not in k + v and k != "content-length"}
    head, _, rest = wire.partition(b"\n\n")
    assert b"\0" not in head and b"\r" not in head
    assert len(head.split(b"\n")) == 1 + len(kept) + (1 if body else 0)
    assert all(line.partition(b":")[0] for line in head.split(b"\n")[1:])
    assert rest == body + b"\0"
    assert _nul_reader(wire) == [wire[:-1]]
    expected = dict(kept, **({"content-length": str(len(body))} if body else {}))
    assert FrameParser(version=wire_version).frames(wire) == [Frame("MESSAGE", expected, body)]


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest.mark.parametrize("end", [b"\0", b"\0\n"])
def test_a_vectored_frame_is_the_same_bytes_with_its_body_not_copied(version, end):
    from stomp_bridge.protocol.frames import VECTORED_BODY, flatten, joined

    body = bytearray(b"\0m" * VECTORED_BODY)
    frame = Frame("MESSAGE", {"destination": "/queue/a", "content-length": "1", "x": "a:b"}, body)
    head, same_body, tail = serialize(frame, version, end, vectored=True)
    assert same_body is body and tail == end
    assert head + body + end == serialize(frame, version, end)
    frames = [b"RECEIPT\nreceipt-id:1\n\n\0", (head, body, end), (head, body, end), b"\n"]
    pieces = flatten(frames)
    assert [type(p) for p in pieces] == [bytes, bytearray, bytes, bytearray, bytes]
    assert b"".join(pieces) == joined(frames) == frames[0] + (head + body + end) * 2 + b"\n"
    assert joined([b"a", b"b"]) == b"ab"


_texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=10)


@given(st.dictionaries(_texts, _texts, max_size=5), st.dictionaries(_texts, _texts, max_size=5),
       st.binary(max_size=30), st.sampled_from(["1.0", "1.1", "1.2"]), st.sampled_from([END, END_LF]))
def test_a_message_in_two_parts_is_the_message_in_one(first, rest, body, version, end):
    """Fan-out at the edge writes a MESSAGE as its first headers and a rest encoded once: the same
    bytes as the frame encoded whole, or the same refusal (a CR 1.1 cannot escape)."""
    from stomp_bridge.protocol.frames import message_parts

    rest = {k: v for k, v in rest.items() if k not in first}
    try:
        whole = encode_frame("MESSAGE", {**first, **rest}, body, version, end)
    except ValueError:
        with pytest.raises(ValueError):
            message_parts(first, rest, body, version, end)
        return
    assert b"".join(message_parts(first, rest, body, version, end)) == whole
