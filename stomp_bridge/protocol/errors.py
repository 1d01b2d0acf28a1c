"""Typed protocol failures.

Everything that should answer a frame with an ERROR is raised as a
:class:`StompError` and turned into the frame in exactly one place (the session).
Like the RabbitMQ plugin, an error carries a short ``message`` for the ERROR
frame's ``message`` header, a ``detail`` for its body, and an optional
``private`` string that only goes to the log (never to the client).

Whether the connection survives its ERROR is the plugin's choice, error by
error, and clients rely on it: ``fatal`` errors close it (a failed login, a
malformed frame, anything RabbitMQ refused on the channel), the others (its
``error/3``: a bad destination, header or transaction id, an unknown command or
subscription) leave it open. The ``close_on_error`` setting closes after every
ERROR instead, as STOMP 1.2 says a server MUST.
"""

from __future__ import annotations

import copy
import re

from stomp_bridge.protocol.frames import VERSIONS


class StompError(Exception):
    """A failure reported to the client as one ERROR frame.

    ``fatal`` (the class default, or per instance): the connection ends after the
    ERROR. ``receipt_id`` is the ``receipt`` of the frame that failed, if any.
    """

    fatal = True
    receipted = True  # answering a frame, it carries the frame's receipt as ``receipt-id``
    # the failed frame's RECEIPT goes first, then this ERROR (without receipt-id): RabbitMQ closed
    # the plugin's channel over what the frame asked, after the plugin had answered it
    receipt_first = False
    preceded_by: StompError | None = None  # an ERROR written just before this one (kept open)

    def __init__(
        self,
        message: str,
        detail: str = "",
        *,
        private: str = "",
        receipt_id: str | None = None,
        headers: dict[str, str] | None = None,
        fatal: bool | None = None,
    ) -> None:
        super().__init__(message if not detail else f"{message}: {detail}")
        self.message = message
        self.detail = detail
        self.private = private
        self.receipt_id = receipt_id
        self.headers = headers  # extra ERROR headers, e.g. ``subscription``
        if fatal is not None:
            self.fatal = fatal


class ProtocolError(StompError):
    """The bytes or headers the client sent break the STOMP grammar or rules."""


class FrameRejected(ProtocolError):
    """The plugin refuses this one frame and carries on (its ``error/3``): the connection stays."""

    fatal = False


class FrameTooLarge(ProtocolError):
    """A frame, a header, or the header count went past a configured limit."""


class InvalidDestination(StompError):
    """A ``destination`` (or ``reply-to``) value the bridge cannot map to AMQP (not fatal, as in
    the plugin)."""

    fatal = False


class AccessRefused(StompError):
    """RabbitMQ refused the login or an operation on permission grounds."""


class BrokerError(StompError):
    """RabbitMQ closed a channel or connection; ``message`` quotes its reason."""


class UnknownDelivery(BrokerError):
    """An ACK or NACK of a delivery tag the channel does not hold (never delivered, ack:auto,
    already settled): what RabbitMQ 4.3 and older answer. The plugin passes the ACK on to its
    channel and answers the frame (its RECEIPT); RabbitMQ then closes the channel, and the
    ERROR follows, without receipt-id (3.10.8, 4.0.5, 4.3.6: verified)."""

    receipted = False
    receipt_first = True

    def __init__(self, delivery_tag: int) -> None:
        super().__init__("precondition_failed", f"PRECONDITION_FAILED - unknown delivery tag {delivery_tag}")
        self.delivery_tag = delivery_tag


class MessageNotFound(FrameRejected):
    """The same ACK or NACK in front of RabbitMQ 4.4's native plugin: its own ERROR, without
    receipt-id and without a RECEIPT, and the connection stays (rabbit_stomp_processor's
    unknown_delivery_tag_error/2)."""

    receipted = False

    def __init__(self, delivery_tag: int) -> None:
        super().__init__("Message not found", f"unknown delivery tag {delivery_tag}\n")


_AMQP_PREFIX = re.compile(r"[A-Z_]+ - ")  # RabbitMQ's reply text: "NOT_FOUND - no queue 'q' ..."
_USER_ID = "user_id property set to "


def native_stomp_error(error: StompError) -> StompError:
    """``error`` as RabbitMQ 4.4's native plugin words it (``rabbitmq_stomp_dialect``): its body
    is RabbitMQ's explanation without the AMQP prefix (``no exchange 'x' in vhost '/'``, not
    ``NOT_FOUND - no exchange …``: 4.3's plugin quoted its channel's close), and a ``user-id``
    that is not the login is ``access_refused`` (the check AMQP 0-9-1 and 1.0 publishes get),
    not ``precondition_failed``. Other errors are the same; ``error`` itself is never changed."""
    if not isinstance(error, BrokerError):
        return error
    prefix = _AMQP_PREFIX.match(error.detail)
    if prefix is None:
        return error
    detail = error.detail[prefix.end():]
    message = error.message
    if message == "precondition_failed" and detail.startswith(_USER_ID):
        message = "access_refused"
    native = copy.copy(error)
    native.message, native.detail = message, detail
    return native


def error_headers(error: StompError) -> dict[str, str]:
    """An ERROR frame's headers, as the plugin writes them: the message, the versions the server
    speaks, the failed frame's receipt; also for a connection refused before it has a session
    (``transport/server.py``)."""
    headers = {"message": error.message, "content-type": "text/plain", "version": ",".join(VERSIONS)}
    if error.receipt_id is not None:
        headers["receipt-id"] = error.receipt_id
    if error.headers:
        headers.update(error.headers)
    return headers


def tp(text: str) -> str:
    """``text`` as the plugin's ``~tp`` prints an Erlang string in its ERROR texts: in double
    quotes, with ``\\`` and ``"`` escaped (``Could not interpret command "FOO"``)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def processing_error(private: str = "") -> FrameRejected:
    """What the plugin sends when its processor crashes on a bad value (a badarg or badmatch):
    ERROR ``message:Processing error``, body ``Processing error``."""
    return FrameRejected("Processing error", "Processing error", private=private)


def token_expired(private: str = "") -> BrokerError:
    """The ERROR for a connection whose OAuth 2 token ran out (RabbitMQ's close, or the
    bridge's own timer for brokers that keep such a connection open): the plugin's words
    (rabbit_stomp_processor:send_credential_expired_error/1, RabbitMQ 4.1 and later). A client
    keeps its connection by sending a new token to /bridge/token before then."""
    return BrokerError(
        "Credential expired",
        "The credential used to authenticate this connection has expired",
        private=private,
    )
