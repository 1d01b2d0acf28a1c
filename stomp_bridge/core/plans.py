"""What the STOMP core asks the driver to do: frozen values, one class per operation.

Publishes, acks and nacks cannot fail, so a handler queues them (``Context.to_amqp``) and goes
on; the driver sends them in order before anything else. Otherwise a command's handler (a
generator, see ``context.Job``) yields a plan and gets the outcome
back: the value in the comment, or the :class:`~stomp_bridge.protocol.errors.StompError`
the operation failed with, thrown in where the plan was yielded. The driver
(``session/session.py``) runs each kind of plan in one place, against the typed AMQP channel
(``amqp/abc.py``) or its own timers and socket; it decides nothing.

NamedTuples: a SEND makes one ``Publish`` and an ACK one ``Ack``, and a tuple is the cheapest
frozen value to build.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from stomp_bridge.protocol.destinations import QueueDeclare
from stomp_bridge.protocol.headers import FRAME_MAX_DEFAULT

# -- per message: the core queues these in ``to_amqp``; the driver sends them in order -------


class Publish(NamedTuple):
    exchange: str
    routing_key: str
    properties: dict[str, Any]
    body: bytes
    mandatory: bool


class Ack(NamedTuple):
    delivery_tag: int
    multiple: bool


class Nack(NamedTuple):
    delivery_tag: int
    multiple: bool
    requeue: bool


# -- RPCs and waits ------------------------------------------------------------------------


class Declare(NamedTuple):  # -> the queue's name (RabbitMQ's choice when declare.queue is "")
    declare: QueueDeclare


class Bind(NamedTuple):  # -> None
    queue: str
    exchange: str
    routing_key: str
    arguments: dict[str, Any] | None


class DeclareExchange(NamedTuple):  # -> None: a durable exchange (the scheduled-delivery topology)
    exchange: str
    kind: str
    arguments: dict[str, Any]


class Consume(NamedTuple):  # -> None
    queue: str
    consumer_tag: str
    no_ack: bool
    prefetch: int
    arguments: dict[str, Any] | None
    # ack:auto acknowledged by the bridge even on a stream (RabbitMQ refuses no_ack there): a
    # named stream subscription, whose offset the bridge stores itself
    stream_auto: bool = False


class Cancel(NamedTuple):  # -> None
    consumer_tag: str


class DeleteQueue(NamedTuple):  # -> None
    queue: str


class ReleaseExclusive(NamedTuple):  # -> None: the session's exclusive queue is gone
    queue: str


class Get(NamedTuple):  # -> a delivery tuple, or None when the queue is empty
    queue: str


class EndBrowse(NamedTuple):  # -> None: what the Gets took goes back to the queue
    pass


class Peek(NamedTuple):  # -> (properties, body) of the queue's first message left in place, or None
    queue: str


class QueueExists(NamedTuple):  # -> bool
    queue: str


class IsStream(NamedTuple):  # -> bool: the queue is a stream (asked in a way no stream can refuse)
    queue: str
    exact: bool = False  # even for a queue that holds messages (a basic.get on a connection of its own)


class UpdateSecret(NamedTuple):  # -> None: RabbitMQ took the new token
    secret: str


class Settled(NamedTuple):  # -> True once RabbitMQ confirmed publish ``seq``; False if it refused it
    seq: int


class ResolveSecurity(NamedTuple):  # -> (certificate login or None, PeerPolicy or None)
    headers: dict[str, str]
    version: str


class OpenAmqp(NamedTuple):  # -> Opened
    user: str
    passcode: str
    vhost: str
    # unknown_host_default_vhost: the vhost to try when RabbitMQ refuses ``vhost`` as one
    fallback_vhost: str | None
    cert_login: Any  # the certificate login (swaptacular.certlogin.AmqpLogin) or None


class Opened(NamedTuple):
    vhost: str
    broker_version_text: str
    dialect: Any  # protocol.dialect.Dialect
    frame_max: int = FRAME_MAX_DEFAULT  # the largest AMQP frame RabbitMQ takes on this session's connection


class JoinFanout(NamedTuple):  # -> None: the subscription takes its MESSAGEs from a shared queue
    consumer_tag: str
    exchange: str
    routing_key: str
    arguments: dict[str, Any] | None  # a headers exchange binding's


class LeaveFanout(NamedTuple):  # -> None
    consumer_tag: str


class OpenPublisher(NamedTuple):  # -> None: the session's publishing channel is open (publishes wait for it)
    pass


class SetTimer(NamedTuple):  # -> None; at ``delay`` seconds the driver calls core.timer_fired(name)
    name: str  # one timer per name: setting it again moves it
    delay: float | None  # None: cancel it


class Sleep(NamedTuple):  # -> None
    seconds: float


class WaitWritable(NamedTuple):  # -> None, once the client's socket has room
    pass


class Flush(NamedTuple):  # -> None, once the batched publishes and acks are written
    pass


class ReceiptsSent(NamedTuple):  # -> None, once no RECEIPT is held (or the session ended)
    pass


class Disconnect(NamedTuple):  # -> None: close the AMQP side, then the client's socket
    pass
