"""Typed protocol failures.

Everything that should end a STOMP connection with an ERROR frame is raised as a
:class:`StompError` and turned into the frame in exactly one place (the session).
Like the RabbitMQ plugin, an error carries a short ``message`` for the ERROR
frame's ``message`` header, a ``detail`` for its body, and an optional
``private`` string that only goes to the log (never to the client).
"""

from __future__ import annotations


class StompError(Exception):
    """A failure reported to the client as one ERROR frame, after which the connection ends.

    The plugin keeps a connection open after some ERRORs; the bridge always
    closes, as STOMP 1.2 requires (README, "Deliberate differences").
    ``receipt_id`` is the ``receipt`` of the frame that failed, if any.
    """

    def __init__(
        self,
        message: str,
        detail: str = "",
        *,
        private: str = "",
        receipt_id: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message if not detail else f"{message}: {detail}")
        self.message = message
        self.detail = detail
        self.private = private
        self.receipt_id = receipt_id
        self.headers = headers  # extra ERROR headers, e.g. ``subscription``


class ProtocolError(StompError):
    """The bytes or headers the client sent break the STOMP grammar or rules."""


class FrameTooLarge(ProtocolError):
    """A frame, a header, or the header count went past a configured limit."""


class InvalidDestination(StompError):
    """A ``destination`` (or ``reply-to``) value the bridge cannot map to AMQP."""


class AccessRefused(StompError):
    """RabbitMQ refused the login or an operation on permission grounds."""


class BrokerError(StompError):
    """RabbitMQ closed a channel or connection; ``message`` quotes its reason."""
