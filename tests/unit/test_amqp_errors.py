"""aiormq's exceptions become the plugin's ERROR (amqp/errors.py broker_error)."""

from __future__ import annotations

import aiormq.exceptions as amqp_exc
from pamqp import commands as spec

from stomp_bridge.amqp.errors import broker_error
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
    assert broker_error(RuntimeError()).detail == "RuntimeError()"
