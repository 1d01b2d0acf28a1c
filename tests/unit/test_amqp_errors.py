"""aiormq's exceptions become the plugin's ERROR (amqp/errors.py broker_error)."""

from __future__ import annotations

import asyncio

import aiormq.exceptions as amqp_exc
import pytest
from pamqp import commands as spec

from stomp_bridge.amqp.errors import broker_error, describe
from stomp_bridge.protocol.errors import AccessRefused, BrokerError


def close(code: int, text: str) -> spec.Channel.Close:
    return spec.Channel.Close(reply_code=code, reply_text=text, class_id=50, method_id=10)


def test_a_stomp_error_passes_through_unchanged() -> None:
    refused = AccessRefused("Bad CONNECT", "no")
    assert broker_error(refused) is refused


def test_a_channel_close_is_named_after_its_amqp_error_and_quotes_rabbitmq() -> None:
    text = "NOT_FOUND - no queue 'q' in vhost '/'"
    error = broker_error(amqp_exc.ChannelNotFoundEntity(close(404, text)))
    assert isinstance(error, BrokerError)
    assert (error.message, error.detail) == ("not_found", text)


def test_the_reply_text_may_come_after_the_reply_code() -> None:
    text = "PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue 'q'"
    error = broker_error(amqp_exc.ChannelPreconditionFailed(406, text))
    assert (error.message, error.detail) == ("precondition_failed", text)


def test_access_refused_on_a_resource_is_rabbitmqs_name_lower_cased() -> None:
    text = "ACCESS_REFUSED - access to queue 'q' in vhost '/' refused for user 'u'"
    assert broker_error(amqp_exc.ChannelAccessRefused(close(403, text))).message == "access_refused"


def test_a_lost_connection_without_a_reply_says_so_and_how_to_retry() -> None:
    for exc in (amqp_exc.AMQPConnectionError("reset"), ConnectionResetError(104, "reset"), OSError("down")):
        error = broker_error(exc)
        assert error.message == "Broker connection lost", exc
        assert "Reconnect to retry" in error.detail


def test_anything_else_is_a_processing_error_with_its_text() -> None:
    assert (broker_error(RuntimeError("odd")).message, broker_error(RuntimeError("odd")).detail) == (
        "Processing error", "odd",
    )
    assert broker_error(RuntimeError()).detail == "runtime error"  # its class in words, not its repr


def test_a_lost_connection_says_what_happened_in_words_not_a_repr() -> None:
    """The ERROR body read 'The connection to RabbitMQ closed (<AMQPConnectionError:
    ('Server connection unexpectedly closed',)>)'."""
    error = broker_error(amqp_exc.AMQPConnectionError(("Server connection unexpectedly closed",)))
    assert error.detail == ("The connection to RabbitMQ closed (Server connection unexpectedly closed). "
                            "Reconnect to retry.")


@pytest.mark.parametrize(("exc", "words"), [
    (amqp_exc.AMQPConnectionError(("Server connection unexpectedly closed",)), "Server connection unexpectedly closed"),
    (amqp_exc.InvalidFrameError(f"Expected one of {['Connection.OpenOk']!r}, got {spec.Connection.Close()!r}"),
     "RabbitMQ sent Connection.Close where Connection.OpenOk was due"),
    (amqp_exc.ConnectionClosed(320, "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"),
     "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown' (320)"),
    (amqp_exc.ChannelClosed(None, None), "the channel was closed"),
    (amqp_exc.AMQPConnectionError(111, "Connection refused"), "Connection refused"),
    (amqp_exc.AMQPConnectionError("Server connection reset: ConnectionResetError(104, 'Connection reset by peer')"),
     "Server connection reset: Connection reset by peer"),
    (amqp_exc.ChannelNotFoundEntity(close(404, "NOT_FOUND - no queue 'q'")), "NOT_FOUND - no queue 'q' (404)"),
    (ConnectionResetError(104, "Connection reset by peer"), "Connection reset by peer"),
    (asyncio.TimeoutError(), "no answer in time"),
    (amqp_exc.AMQPConnectionError(), "Unexpected connection problem"),
])
def test_describe_puts_an_exception_in_words(exc, words) -> None:
    assert describe(exc) == words
    assert "object at 0x" not in describe(exc) and not describe(exc).startswith("<")
