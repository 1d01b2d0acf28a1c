"""What a stream refuses with a connection error, decided before anything is sent. No I/O.

RabbitMQ refuses an auto-ack consume with a prefetch on a stream, and (before 4.0) a NACK of a
stream's delivery, by closing the whole AMQP connection, which other sessions share
(``amqp/pool.py``, Isolation). The plugin's client gets its ERRORs for them
(``protocol/refusals.py``); here the core gives them without sending the operation:

* a queue is known to be a stream when this session declared it as one; a queue it did not
  declare (``/amq/queue/``) is asked about with :class:`~.plans.IsStream`, which no stream
  answers with a connection error (``amqp/sidechannel.is_stream``);
* ``ack:auto`` with a prefetch: asked before the consume; the consume itself always takes
  manual acks with a prefetch (the bridge acknowledges: ``amqp/channel.consume``), which a
  stream accepts, so a queue that became a stream meanwhile costs nothing;
* a NACK, in front of RabbitMQ before 4.0: every delivery of a stream carries an
  ``x-stream-offset`` header, so only a delivery that does (from a queue not known to be a
  stream, also a classic queue holding messages copied from a stream, or a message whose
  publisher set the header itself, which may then hide the stream's own) makes the NACK ask
  first.

``browser:true``'s ``basic.get`` goes on a connection of its own (``subscribe.browse``).
"""

from __future__ import annotations

from stomp_bridge.core.acks import ack_target
from stomp_bridge.core.context import Context, Steps
from stomp_bridge.core.plans import IsStream
from stomp_bridge.core.subscriptions import Subscription
from stomp_bridge.protocol import destinations as dest
from stomp_bridge.protocol import refusals
from stomp_bridge.protocol.frames import Frame

STREAM_TYPE = "stream"


def known_stream(core: Context, target: dest.Destination, plan: dest.SubscribePlan) -> bool | None:
    """Whether the queue a SUBSCRIBE part reads is a stream: True if this session declared it as
    one, False if it declared it otherwise, None if it did not declare it (``/amq/queue/``)."""
    if plan.declare is not None:
        stream = plan.declare.arguments.get("x-queue-type") == STREAM_TYPE
        if stream and plan.declare.queue:
            if core.stream_queues is None:
                core.stream_queues = set()
            core.stream_queues.add(plan.declare.queue)
        return stream
    if target.kind == dest.QUEUE:  # declared earlier in this session
        return core.stream_queues is not None and plan.queue in core.stream_queues
    return None


def check_auto_ack(core: Context, sub: Subscription, queue: str, stream: bool | None, prefetch: int) -> Steps:
    """SUBSCRIBE ``ack:auto`` with a prefetch: on a stream the plugin's ERRORs (RabbitMQ closes the
    connection of an auto-ack consume there). Named stream subscriptions are acknowledged by
    the bridge (``resume.py``), as every ack:auto consume is, and are not refused."""
    if sub.ack or prefetch == 0 or sub.position is not None:
        return
    if stream is None:
        stream = yield IsStream(queue)
    if stream:
        raise refusals.stream_auto_ack(core.dest_rules.dialect, queue, core.vhost)


def watch(core: Context, sub: Subscription, consumer_tag: str, queue: str, stream: bool | None) -> None:
    """A consumer whose deliveries the client acknowledges, in front of RabbitMQ before 4.0: its
    deliveries are looked at (``delivered``) so that a NACK of a stream's is never sent."""
    if sub.ack and core.dest_rules.dialect.stream_nack_refused:
        sub.watch_stream = True
        if core.stream_consumers is None:
            core.stream_consumers = {}
        core.stream_consumers[consumer_tag] = (queue, stream)


def same_queue(core: Context, consumer_tag: str, more: str) -> None:
    """Consumer ``more`` reads the queue ``consumer_tag`` reads (a window more)."""
    if core.stream_consumers is not None and consumer_tag in core.stream_consumers:
        core.stream_consumers[more] = core.stream_consumers[consumer_tag]


def forget(core: Context, consumer_tags: tuple[str, ...]) -> None:
    if core.stream_consumers is not None:
        for tag in consumer_tags:
            core.stream_consumers.pop(tag, None)


def delivered(core: Context, consumer_tag: str, delivery_tag: int, properties: dict) -> None:
    """A delivery of a watched consumer: marked if it is, or may be, a stream's."""
    entry = core.stream_consumers.get(consumer_tag) if core.stream_consumers is not None else None
    if entry is None:
        return
    queue, stream = entry
    if not stream and "x-stream-offset" not in (properties.get("headers") or ()):
        return  # no stream's: a stream adds its offset to every delivery (of any message)
    unacked = core.unacked
    if unacked.marked is None:
        unacked.marked = {}
    unacked.marked[delivery_tag] = (queue, True if stream else None)


def nack_check(core: Context, frame: Frame, receipt: bool) -> Steps | None:
    """Before a NACK is settled (only while deliveries are marked): None if it settles none of a
    stream's; else steps that ask what is not known yet and, for a stream's, raise the plugin's
    ERROR, after the NACK's RECEIPT (``receipt``) as the plugin's arrives first."""
    unacked = core.unacked
    assert unacked.marked is not None
    consumer_tag, delivery_tag = ack_target(frame.headers, "NACK", core.version, core.session_id)
    sub = unacked.by_tag.get(delivery_tag)
    if sub is None or sub.consumer_tag != consumer_tag:
        return None  # the settle's own refusal follows
    if sub.multiple:
        covered = [tag for tag in unacked.marked if tag <= delivery_tag and tag in unacked.by_tag]
    else:
        covered = [delivery_tag] if delivery_tag in unacked.marked else []
    if not covered:
        return None
    return _nack_check(core, frame, covered, receipt)


def _nack_check(core: Context, frame: Frame, covered: list[int], receipt: bool) -> Steps:
    marked = core.unacked.marked
    assert marked is not None
    asked: dict[str, bool] = {}
    for tag in covered:
        queue, stream = marked[tag]
        if stream is None:
            if queue not in asked:  # exact: a NACK sent to a stream would close the connection
                asked[queue] = yield IsStream(queue, exact=True)
            stream = asked[queue]
        if stream:
            if receipt:
                core.receipt(frame)
            raise refusals.stream_nack(core.dest_rules.dialect, queue, core.vhost)
