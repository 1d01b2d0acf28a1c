"""Serializer: per-version escaping, content-length, and round trips through the parser."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stomp_bridge.protocol import frames
from stomp_bridge.protocol.frames import (
    CLIENT_COMMANDS,
    SERVER_COMMANDS,
    UNESCAPED_COMMANDS,
    Frame,
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


_text = st.text(_chars(), max_size=20)
_commands = st.sampled_from(sorted(CLIENT_COMMANDS | SERVER_COMMANDS))


def _representable(command: str, version: str):
    """Headers that ``version`` can carry for ``command``."""
    if version == "1.0" or command in UNESCAPED_COMMANDS:
        names = st.text(_chars("\n\r:"), min_size=1, max_size=12)
        values = st.text(_chars("\n\r"), max_size=20)
    elif version == "1.1":
        names = st.text(_chars("\r"), min_size=1, max_size=12)
        values = st.text(_chars("\r"), max_size=20)
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


@pytest.mark.parametrize("receipt_id", ["r-1", "message-12345", "", "ünï", "a b", "x\x00y"])
@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_receipt_fast_path_is_what_serialize_writes(receipt_id, version):
    expected = serialize(Frame("RECEIPT", {"receipt-id": receipt_id}), "1.2" if version == "1.0" else version)
    assert receipt_frame(receipt_id) == expected


@pytest.mark.parametrize("receipt_id", ["a:b", "a\\b", "a\nb", "a\rb"])
def test_receipt_ids_that_need_escaping_take_the_general_path(receipt_id):
    assert receipt_frame(receipt_id) is None
