"""What RabbitMQ refuses on a stream, in the words the plugin's client reads. Pure.

RabbitMQ answers some operations on a stream with a *connection* error: an auto-ack consume
with a prefetch, a ``basic.get``, and (before 4.0) a ``basic.nack``/``basic.reject`` (540
NOT_IMPLEMENTED). Under the plugin that ends only the one STOMP connection whose AMQP
connection it was; behind the bridge, which shares AMQP connections between sessions, it would
end every session on the connection. So the core decides these before anything is sent
(``core/streams.py``) and answers with the plugin's ERRORs, built here:

* the connection error: ERROR ``AMQP channel died``, whose body is the Erlang term the plugin's
  channel exited with (``rabbit_stomp_processor``'s handle_exit), with no ``receipt-id``; an
  auto-ack consume is preceded by a ``Processing error`` (the SUBSCRIBE's own crash);
* the channel error RabbitMQ gives first when a stream consumer has no prefetch
  (``precondition_failed``), for a browse, which the plugin sends as a plain subscription.

The texts are RabbitMQ's (``protocol/dialect.py``: they changed in 4.0). A queue or vhost name
is quoted as Erlang's ``~p`` quotes a string (``"`` and ``\\`` escaped).
"""

from __future__ import annotations

from stomp_bridge.protocol.dialect import Dialect
from stomp_bridge.protocol.errors import BrokerError, processing_error

NOT_IMPLEMENTED = 540


class ChannelDied(BrokerError):
    """The plugin's ERROR after RabbitMQ closed the AMQP connection under its channel.

    ``preceded_by``: an ERROR the plugin sends just before it (without closing). Neither
    carries the failed frame's ``receipt-id``: the plugin learns of the close after the frame's
    handling, from its channel's exit."""

    receipted = False

    def __init__(self, code: int, text: str, *, preceded_by: BrokerError | None = None, private: str = "") -> None:
        super().__init__("AMQP channel died", channel_died_body(code, text), private=private or text)
        self.preceded_by = preceded_by


def erlang_string(text: str) -> str:
    """``text`` as Erlang's ``~p`` prints a string: in double quotes, ``\\`` and ``"`` escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def channel_died_body(code: int, text: str) -> str:
    """``Reason: {shutdown, {connection_closing, {server_initiated_close, Code, Text}}}`` laid out
    as the plugin's ``~p`` lays it out (verified on 3.10.8, 4.0.5 and 4.3.6)."""
    return (
        "Reason: {shutdown,\n"
        "            {connection_closing,\n"
        f"                {{server_initiated_close,{code},\n"
        f"                    {erlang_string(text)}}}}}}}"
    )


def _queue(dialect: Dialect, queue: str, vhost: str) -> str:
    name = f"queue '{queue}' in vhost '{vhost}'"
    return name if dialect.stream_texts_before_4 else f"stream {name}"


def stream_auto_ack(dialect: Dialect, queue: str, vhost: str) -> ChannelDied:
    """SUBSCRIBE ``ack:auto`` with a prefetch to a stream (RabbitMQ: 540 on the consume)."""
    plural = "stream queues " if dialect.stream_texts_before_4 else ""
    where = _queue(dialect, queue, vhost)
    text = f"automatic acknowledgement not supported by {plural}{where}"
    return ChannelDied(NOT_IMPLEMENTED, text, preceded_by=processing_error("auto-ack consume on a stream"))


def stream_nack(dialect: Dialect, queue: str, vhost: str) -> ChannelDied:
    """NACK of a stream's delivery, before 4.0 (RabbitMQ: 540 on the basic.nack)."""
    return ChannelDied(
        NOT_IMPLEMENTED,
        f"basic.nack and basic.reject not supported by stream queues queue '{queue}' in vhost '{vhost}'",
    )


def stream_without_prefetch(dialect: Dialect, queue: str, vhost: str) -> BrokerError:
    """A consume with no prefetch on a stream (RabbitMQ: 406, a channel error): what the plugin's
    client gets for ``browser:true`` on a stream, which the plugin subscribes like any other."""
    if dialect.stream_texts_before_4:
        where = f"'{_queue(dialect, queue, vhost)}'"
    else:
        where = _queue(dialect, queue, vhost)
    return BrokerError("precondition_failed", f"PRECONDITION_FAILED - consumer prefetch count is not set for {where}")


MAX_AGE_UNITS = "YMDhms"


def check_max_age(queue: str, vhost: str, value: str) -> None:
    """A stream's ``x-max-age``: digits and one unit, more than 0 (RabbitMQ 4.3's check). RabbitMQ
    4.0 (and 3.x) crash on some others (``bogus``, ``''``, ``-1h``: 541 INTERNAL_ERROR on the
    connection, verified); every broker gets 4.3's refusal instead, decided here."""
    digits = value.rstrip(MAX_AGE_UNITS)
    if not (len(value) == len(digits) + 1 and digits.isascii() and digits.isdigit() and int(digits) > 0):
        raise BrokerError(
            "precondition_failed",
            f"PRECONDITION_FAILED - invalid arg 'x-max-age' for queue '{queue}' in vhost '{vhost}': invalid_max_age",
        )


def is_stream_refusal(error: BrokerError) -> bool:
    """RabbitMQ's reply says the operation is one a stream does not support (``not supported by
    stream queue``, or a stream's ``consumer prefetch count is not set``)."""
    text = error.detail
    return "not supported by stream queue" in text or "prefetch count is not set" in text
