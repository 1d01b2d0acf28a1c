"""The WebSocket handshake rules (stomp_bridge/protocol/websocket.py), table by table."""

from __future__ import annotations

import base64

import pytest

from stomp_bridge.protocol import websocket as rules


@pytest.mark.parametrize(
    "offered, chosen",
    [
        (["v10.stomp", "v11.stomp", "v12.stomp"], "v12.stomp"),
        (["v12.stomp", "v10.stomp"], "v12.stomp"),
        (["v11.stomp", "v10.stomp"], "v11.stomp"),
        (["v10.stomp"], "v10.stomp"),
        (["stomp", "v11.stomp"], "v11.stomp"),  # a versioned name wins over the bare one
        (["stomp"], "stomp"),
        (["v13.stomp"], None),
        (["V12.STOMP"], None),  # subprotocol names are case-sensitive (RFC 6455 §4.1)
        (["mqtt"], None),
        ([], None),
    ],
)
def test_select_subprotocol(offered, chosen):
    assert rules.select_subprotocol(offered) == chosen


@pytest.mark.parametrize(
    "origin, allowed, ok",
    [
        ("https://evil.example", [], True),  # empty list: any origin
        (None, ["https://app.example.com"], True),  # no Origin: not a browser
        ("https://app.example.com", ["https://app.example.com"], True),
        ("https://APP.example.com/", ["https://app.example.com"], True),
        ("https://app.example.com", [" https://app.example.com/ "], True),
        ("http://app.example.com", ["https://app.example.com"], False),  # scheme matters
        ("https://app.example.com:8443", ["https://app.example.com"], False),  # so does the port
        ("https://app.example.com.evil.net", ["https://app.example.com"], False),
        ("null", ["https://app.example.com"], False),  # a file:// or sandboxed page
        ("null", ["null"], True),
        ("https://anything", ["*"], True),
    ],
)
def test_origin_allowed(origin, allowed, ok):
    assert rules.origin_allowed(origin, allowed) is ok


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    "header, credentials",
    [
        (None, None),
        (f"Basic {b64('alice:secret')}", ("alice", "secret")),
        (f"basic {b64('alice:se:cret')}", ("alice", "se:cret")),  # the passcode may hold ':'
        (f"Basic {b64('alice:')}", ("alice", "")),
        (f"Basic {b64('jürgen:pässword')}", ("jürgen", "pässword")),
    ],
)
def test_basic_credentials(header, credentials):
    assert rules.basic_credentials(header) == credentials


@pytest.mark.parametrize(
    "header, status",
    [
        ("Bearer abc.def", 401),
        (f"Basic {b64('no-colon')}", 400),
        ("Basic not*base64", 400),
        ("Basic " + base64.b64encode(b"\xff\xfe:x").decode(), 400),
    ],
)
def test_basic_credentials_refuses_what_it_cannot_use(header, status):
    with pytest.raises(rules.HandshakeRefused) as err:
        rules.basic_credentials(header)
    assert err.value.status == status
    assert err.value.limit == "http_auth"
    assert err.value.text.endswith("\n")


@pytest.mark.parametrize(
    "data, text",
    [
        (b"MESSAGE\n\nhello\0", True),
        ("MESSAGE\n\ngrüße\0".encode(), True),
        (b"\n", True),
        (b"MESSAGE\ncontent-length:2\n\n\xff\xfe\0", False),
        ("MESSAGE\n\n€".encode()[:-1] + b"\0", False),  # a cut multi-byte sequence
    ],
)
def test_is_text(data, text):
    assert rules.is_text(data) is text


def test_help_texts_name_the_path():
    assert "/stomp" in rules.not_websocket_text("/stomp")
    assert "/ws" in rules.wrong_path_text("/other", "/ws")
