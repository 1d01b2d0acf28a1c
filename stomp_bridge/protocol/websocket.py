"""STOMP over WebSocket: the handshake rules, without I/O.

The listener (``stomp_bridge/websocket.py``) asks these functions what to do
with an upgrade request; they follow RabbitMQ's web-stomp plugin
(``rabbit_web_stomp_handler``) where it has a rule, and say so.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence

# Registered at IANA for STOMP over WebSocket; "stomp" is what some older
# clients offer.
VERSIONED_SUBPROTOCOLS = ("v12.stomp", "v11.stomp", "v10.stomp")
SUBPROTOCOLS = (*VERSIONED_SUBPROTOCOLS, "stomp")


class HandshakeRefused(Exception):
    """An upgrade request the endpoint answers with an HTTP error instead of 101."""

    def __init__(self, status: int, text: str, limit: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text
        self.limit = limit  # the connections_refused metric's label


def select_subprotocol(offered: Sequence[str]) -> str | None:
    """The subprotocol to answer with, or None to answer with none.

    web-stomp picks the highest ``v1N.stomp`` the client offers and, when it
    offers none of those, accepts the connection without a subprotocol rather
    than refusing it; the STOMP version itself is negotiated by CONNECT's
    ``accept-version`` either way. The bare ``stomp`` is taken after those.
    """
    for name in SUBPROTOCOLS:
        if name in offered:
            return name
    return None


def origin_allowed(origin: str | None, allowed: Iterable[str]) -> bool:
    """Cross-site WebSocket hijacking guard: a browser always sends ``Origin``.

    An empty allow-list accepts any origin. A request without ``Origin`` does
    not come from a browser page (nothing to hijack) and is accepted. Entries
    match whole origins (``https://app.example.com``, ``null`` for file://
    pages), case-insensitively; ``*`` matches every origin.
    """
    allowed = [a.strip().rstrip("/").lower() for a in allowed]
    if not allowed or origin is None:
        return True
    origin = origin.strip().rstrip("/").lower()
    return "*" in allowed or origin in allowed


def basic_credentials(header: str | None) -> tuple[str, str] | None:
    """Login and passcode from an ``Authorization: Basic`` header; None without one.

    Raises :class:`HandshakeRefused` for a header that is not Basic or does
    not decode: web-stomp's ``use_http_auth`` would crash the handshake, the
    bridge says what is wrong instead.
    """
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        raise HandshakeRefused(
            401,
            f"Only HTTP Basic authentication is supported on this endpoint, not {scheme!r}.\n",
            "http_auth",
        )
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise HandshakeRefused(
            400, "The Authorization header is not valid Basic credentials (base64 of login:passcode).\n",
            "http_auth",
        ) from None
    login, colon, passcode = decoded.partition(":")
    if not colon:
        raise HandshakeRefused(
            400, "The Authorization header's credentials have no ':' between login and passcode.\n",
            "http_auth",
        )
    return login, passcode


def not_websocket_text(path: str) -> str:
    """What a plain HTTP GET (a person with a browser, a health checker) reads."""
    return (
        "stomp-bridge: this port speaks STOMP over WebSocket.\n"
        f"Connect a STOMP client (for example @stomp/stompjs) to ws://<this host>:<this port>{path}\n"
        "with the subprotocol v12.stomp. Health and metrics are on the bridge's HTTP port\n"
        "(/healthz, /readyz, /metrics).\n"
    )


def wrong_path_text(path: str, expected: str) -> str:
    return f"stomp-bridge: no WebSocket endpoint at {path}; STOMP over WebSocket is at {expected}\n"


def is_text(data: bytes) -> bool:
    """Whether a frame can go out as a WebSocket text message (valid UTF-8).

    web-stomp sends text messages (``ws_frame = text``); a body that is not
    UTF-8 would make a browser fail the connection (RFC 6455 §8.1), so such a
    frame goes out as a binary message instead.
    """
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
