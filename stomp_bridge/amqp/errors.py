"""aiormq's exceptions as the ERROR frames the STOMP plugin sends for the same AMQP errors."""

from __future__ import annotations

import aiormq.exceptions as amqp_exc

from stomp_bridge.protocol.errors import BrokerError, StompError, token_expired


def broker_error(exc: BaseException) -> StompError:
    """Turn an aiormq exception into the ERROR the plugin would send.

    The plugin names the AMQP error (``not_found``, ``precondition_failed`` …)
    in the ``message`` header and quotes RabbitMQ's reply text in the body.
    """
    if isinstance(exc, StompError):
        return exc
    text = ""
    for arg in exc.args:  # aiormq puts the reply text first or after the reply code
        candidate = getattr(arg, "reply_text", arg)
        if isinstance(candidate, str) and candidate:
            text = candidate
            break
    named = reply_error(text)
    if named is not None:
        return named
    if isinstance(exc, (amqp_exc.AMQPConnectionError, ConnectionError, OSError)):
        return BrokerError(
            "Broker connection lost",
            f"The connection to RabbitMQ closed ({exc!r}). Reconnect to retry.",
        )
    return BrokerError("Processing error", text or repr(exc))


def reply_error(text: str) -> StompError | None:
    """The ERROR for a channel.close or connection.close reply text (``NOT_FOUND - no queue …``):
    named after the AMQP error, the text as its body; None if the text names none."""
    if "credential expired" in text:  # rabbitmq_auth_backend_oauth2: the token's exp passed
        return token_expired(text)
    if " - " in text:
        name = text.split(" - ", 1)[0].strip().lower()
        return BrokerError(name, text)
    return None
