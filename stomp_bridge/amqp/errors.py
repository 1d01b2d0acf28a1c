"""aiormq's exceptions as the ERROR frames the STOMP plugin sends for the same AMQP errors."""

from __future__ import annotations

import asyncio
import re

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
            f"The connection to RabbitMQ closed ({describe(exc)}). Reconnect to retry.",
        )
    return BrokerError("Processing error", text or describe(exc))


_UNEXPECTED = re.compile(r"Expected one of \[(.*)\], got <([\w.]+) object")
_OS_ERROR_REPR = re.compile(r"\b\w+Error\(\d+, '([^']*)'\)")  # aiormq's f"... {e!r}" of a socket error


def describe(exc: BaseException) -> str:
    """What went wrong, in words, for a log line or an ERROR body: RabbitMQ's reply code and text,
    the socket's error, aiormq's own message; never an object's repr (aiormq's repr of its
    exceptions is ``<AMQPConnectionError: ('Server connection unexpectedly closed',)>``, and a
    pamqp frame's ``<Connection.Close object at 0x…>``)."""
    if isinstance(exc, asyncio.TimeoutError):
        return "no answer in time"
    if isinstance(exc, OSError) and not isinstance(exc, amqp_exc.AMQPError) and exc.strerror:
        return exc.strerror
    args = exc.args
    if isinstance(exc, (amqp_exc.ConnectionClosed, amqp_exc.ChannelClosed)) and len(args) == 2:
        code, text = args
        if text:
            return f"{text} ({code})" if code else str(text)
        return "the connection was closed" if isinstance(exc, amqp_exc.ConnectionClosed) else "the channel was closed"
    parts = []
    for arg in args:
        if isinstance(arg, BaseException):
            parts.append(describe(arg))
        elif getattr(arg, "reply_text", None) is not None:  # a pamqp close frame
            parts.append(f"{arg.reply_text} ({arg.reply_code})")
        elif isinstance(arg, str) and arg:
            unexpected = _UNEXPECTED.match(arg)
            if unexpected:  # aiormq's InvalidFrameError quotes the frame's repr: name it instead
                wanted = unexpected.group(1).replace("'", "")
                parts.append(f"RabbitMQ sent {unexpected.group(2)} where {wanted} was due")
            else:
                parts.append(_OS_ERROR_REPR.sub(r"\1", arg.strip()))
        elif isinstance(arg, (list, tuple)):  # aiormq's ('text',) as one argument
            parts.extend(describe(Exception(*arg)).split("; "))
    if len(args) == 2 and isinstance(args[0], int) and isinstance(args[1], str):  # (errno, message)
        return args[1]
    if parts:
        return "; ".join(parts)
    reason = getattr(exc, "reason", "")
    if isinstance(reason, str) and reason and "%" not in reason:
        return reason
    words = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", type(exc).__name__).lower()
    return words


def reply_error(text: str) -> StompError | None:
    """The ERROR for a channel.close or connection.close reply text (``NOT_FOUND - no queue …``):
    named after the AMQP error, the text as its body; None if the text names none."""
    if "credential expired" in text:  # rabbitmq_auth_backend_oauth2: the token's exp passed
        return token_expired(text)
    if " - " in text:
        name = text.split(" - ", 1)[0].strip().lower()
        return BrokerError(name, text)
    return None
