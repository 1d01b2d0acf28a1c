"""Fan-out at the edge (``edge_fanout``), the core's part: which SUBSCRIBEs may share one AMQP
queue, and a shared delivery made into one subscriber's MESSAGE. No I/O.

A shared subscription must get exactly what a queue of its own would have held: so only an
``ack:auto`` SUBSCRIBE to a ``/topic/`` or ``/exchange/`` binding whose queue RabbitMQ would
make transient and alike for every subscriber (non-durable, no ``x-`` queue arguments, no
name of its own, no prefetch, not Apollo's exclusive), with an id, and none of what gives
each MESSAGE something of its own (``include-seq``, ``redeliveries_header``, a retained copy,
a tracer's headers). A selector is its own subscriber's, applied to each delivery. RabbitMQ
checks every SUBSCRIBE as its own: the core declares, binds and deletes the queue the
SUBSCRIBE would have had (``subscribe.subscribe_parts``), then joins the shared one
(:class:`~.plans.JoinFanout`, run by ``session/fanout.py``).
"""

from __future__ import annotations

from stomp_bridge.core.context import Context
from stomp_bridge.core.state import CLOSED
from stomp_bridge.core.subscriptions import Subscription
from stomp_bridge.protocol import destinations as dest
from stomp_bridge.protocol import features
from stomp_bridge.protocol import headers as hdr
from stomp_bridge.protocol.frames import message_head

SHARED_KINDS = (dest.TOPIC, dest.EXCHANGE)


def shareable(core: Context, sub: Subscription, target: dest.Destination, plan: dest.SubscribePlan,
              headers: dict[str, str], prefetch: int, composite: bool) -> bool:
    """Whether this SUBSCRIBE may take its MESSAGEs from a queue shared with others (the module
    docstring)."""
    rules = core.rules
    declare = plan.declare
    return (
        rules.edge_fanout
        and target.kind in SHARED_KINDS
        and not composite
        and not sub.ack
        and prefetch == 0
        and sub.position is None
        and hdr.has_subscription_id(sub.consumer_tag)
        and declare is not None
        and not declare.durable
        and not declare.arguments
        and plan.binding is not None
        and "x-queue-name" not in headers
        and features.sequence_header(headers) is None
        and features.durable_subscription_name(headers) is None
        and not (rules.apollo_exclusive and features.is_true(headers, "exclusive"))
        and not rules.redeliveries_header
        and not rules.retained_messages
        and not rules.resubscribe_on_cancel
        and not core.token_login
        and core.observer is None
    )


def delivered(core: Context, consumer_tag: str, shared: hdr.SharedMessage) -> int:
    """A shared delivery for subscription ``consumer_tag``: its MESSAGE queued (its own first
    headers before the common part, which is not copied), or held until its SUBSCRIBE's
    RECEIPT; the bytes queued (0: not this subscriber's, or its selector refused it)."""
    sub = core.subscriptions.get(consumer_tag)
    if sub is None or core.state is CLOSED:
        return 0
    if sub.filter is not None:
        first = shared.first(consumer_tag, core.session_id)
        if not sub.filter({**first, **shared.headers}):
            return 0
    version = core.version
    try:
        version = "1.2" if version == "1.0" else version
        parts = sub.head_parts
        if parts is None or parts[0] != version:
            parts = sub.head_parts = (version, hdr.SharedMessage.head_parts(consumer_tag, core.session_id, version))
        head, tail = shared.head(parts[1], version), shared.tail(version)
    except ValueError:  # a raw CR that 1.1 cannot escape: the whole MESSAGE in 1.2, as encode's
        head = message_head(shared.first(consumer_tag, core.session_id), "1.2")
        tail = shared.tail("1.2")
    counters = core.counters
    counters.messages_delivered += 1
    counters.frames_out["MESSAGE"] += 1
    pieces = (head, tail, b"")  # (head, body, end), as a large body's: written without a copy
    if sub.held is not None:
        sub.held.append(pieces)
    else:
        core.out.append(pieces)  # the hub writes every subscriber's once it has handed them all
    return len(head) + len(tail)
