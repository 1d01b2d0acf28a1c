"""SUBSCRIBE and UNSUBSCRIBE, and what keeps a subscription going: windows, resubscribing,
browsing. One subscribe path (:func:`subscribe_parts`) serves a plain destination, each part
of a composite one, and a subscription made again after RabbitMQ cancelled it.

Apollo and Artemis features live here as rules (``protocol/features.py``,
``protocol/selectors.py``) applied to the plan: nothing is stored in the bridge. A selector
drops what does not match by acknowledging it, a browse hands messages back to RabbitMQ,
durable subscriptions are RabbitMQ queues, and a named stream subscription's offset is a
message in one (``resume.py``).
"""

from __future__ import annotations

from collections.abc import Callable

from stomp_bridge.core import resume as core_resume
from stomp_bridge.core import fanout, streams
from stomp_bridge.core.context import Context, Steps, log
from stomp_bridge.core.state import CLOSED
from stomp_bridge.core.plans import (
    Bind, Cancel, Consume, Declare, DeleteQueue, EndBrowse, Get, JoinFanout, LeaveFanout, Peek, QueueExists,
    ReleaseExclusive, Sleep, WaitWritable,
)
from stomp_bridge.core.subscriptions import Subscription, part_tag, window_tag
from stomp_bridge.protocol import destinations as dest
from stomp_bridge.protocol import features
from stomp_bridge.protocol import headers as hdr
from stomp_bridge.protocol import refusals, resume
from stomp_bridge.protocol.errors import BrokerError, FrameRejected, InvalidDestination, ProtocolError, StompError, tp
from stomp_bridge.protocol.frames import Frame
from stomp_bridge.protocol.selectors import compile_selector

RESUBSCRIBE_FIRST_DELAY = 0.5  # seconds before asking again for a cancelled subscription's queue
RESUBSCRIBE_MAX_DELAY = 30.0  # the backoff doubles up to this


def subscribe(core: Context, frame: Frame) -> Steps:
    headers = frame.headers = features.translate_subscribe_headers(frame.headers)
    dest.require_durable_id(headers)
    try:
        destination = core.destination(frame)
        composite = None
    except InvalidDestination:
        composite = core.extended_destinations(frame)
        destination = composite[0]
    tag = hdr.subscribe_consumer_tag(headers)
    rules = core.rules
    if tag in core.subscriptions:
        raise ProtocolError(
            "Duplicated subscription identifier", f"A subscription identified by '{tag}' already exists.",
        )
    if len(core.subscriptions) >= rules.max_subscriptions:
        raise ProtocolError(
            "Too many subscriptions", f"A connection may hold at most {rules.max_subscriptions} subscriptions",
        )
    mode, multiple = hdr.ack_mode(headers)
    # basic.qos carries 16 bits; the plugin's direct connection takes more, so the nearest.
    prefetch = min(hdr.prefetch_count(headers), 65535)
    arguments = hdr.consume_arguments(headers)
    name = resume.consumer_name(headers, core.client_id, destination, composite is not None)
    window = 0
    if mode != "auto" and prefetch == 0 and name is None and not any(k.startswith("x-stream-") for k in arguments):
        window = prefetch = rules.client_ack_window
    if headers.get("browser") == "true":
        yield from browse(core, frame, tag, destination)
        return
    targets = composite or [destination]
    hook = delivery_filter(core, headers, targets)
    plans = [subscribe_plan(core, target, headers) for target in targets]  # refusals before I/O
    position = None
    if name is not None:  # a named stream subscription starts after its stored offset
        position = yield from core_resume.open_position(core, destination, name)
        arguments = hdr.consume_arguments(core_resume.start_headers(headers, position))
        if mode != "auto" and prefetch == 0:
            prefetch = rules.client_ack_window  # a stream needs one, and takes no windows
    sub = Subscription(tag, destination, "", ack=mode != "auto", multiple=multiple, filter=hook,
                       window=window if composite is None else 0, arguments=arguments, position=position)
    if rules.resubscribe_on_cancel:
        sub.again = (targets, headers, prefetch)
    if fanout.shareable(core, sub, destination, plans[0], headers, prefetch, composite is not None):
        yield from subscribe_shared(core, sub, destination, plans[0], headers.get("receipt"))
        return
    yield from subscribe_parts(core, sub, list(zip(targets, plans)), prefetch, headers.get("receipt"))


def subscribe_plan(
    core: Context, destination: dest.Destination, headers: dict[str, str], *, declare: bool | None = None,
) -> dest.SubscribePlan:
    """The plugin's plan (``DestinationRules``), with Artemis durable subscription names and
    Apollo exclusive subscriptions applied."""
    if declare is None:  # a /queue/ this session declared already is not declared again
        declare = destination.name not in core.declared_queues
    plan = core.dest_rules.subscribe_plan(destination, headers, declare=declare)
    if features.durable_subscription_name(headers) is not None:
        plan = features.artemis_durable_plan(plan, destination, headers, core.client_id)
    if core.rules.apollo_exclusive and features.is_true(headers, "exclusive"):
        plan = features.exclusive_plan(plan)
    return plan


def subscribe_parts(
    core: Context, sub: Subscription, parts: list[tuple[dest.Destination, dest.SubscribePlan]], prefetch: int,
    receipt: str | None,
) -> Steps:
    """SUBSCRIBE's one AMQP sequence, for a plain destination (one part) and for each part of
    a composite one: declare the queue, copy a retained message, register the consumer tag,
    consume, bind. The parts after the first get their own consumer tags, mapped to the same
    subscription. On a failure every tag registered goes again, and (as the plugin does) a
    topic or exchange queue the bridge declared for it is deleted (at the end of the
    connection, which that failure closes: the ERROR goes first).

    With a ``receipt``, MESSAGEs are held until the RECEIPT has gone out, as the plugin
    answers SUBSCRIBE before it handles any delivery.
    """
    if receipt is not None:
        sub.held = []
    registered: list[str] = []
    target = None
    declared = None  # the queue this part declared, until it consumes and binds
    try:
        for index, (target, plan) in enumerate(parts):
            queue = plan.queue
            declared = None
            if plan.declare is not None:
                queue = core.declared(plan.declare, (yield Declare(plan.declare)))
                if plan.delete_on_failure:
                    declared = queue
            stream = streams.known_stream(core, target, plan)
            yield from streams.check_auto_ack(core, sub, queue, stream, prefetch)
            if core.rules.retained_messages and target.kind == dest.TOPIC and plan.binding is not None:
                yield from copy_retained(core, queue, plan.binding)
            tag = part_tag(sub.consumer_tag, index)
            if index == 0:
                sub.queue = queue
            else:
                sub.extra_tags = (*sub.extra_tags, tag)
            core.subscriptions[tag] = sub
            registered.append(tag)
            streams.watch(core, sub, tag, queue, stream)
            yield Consume(queue, tag, not sub.ack, prefetch, sub.arguments, sub.position is not None)
            if plan.binding is not None:
                yield Bind(queue, *plan.binding, plan.binding_arguments)
        declared = None
    except StompError as exc:
        failed(core, exc, registered, declared, target)
        raise
    except GeneratorExit:
        for tag in registered:
            core.subscriptions.pop(tag, None)
        raise
    if receipt is not None:
        core.queue_receipt(receipt, then=lambda: core.release_held(sub))


def failed(core: Context, exc: StompError, registered: list[str], declared: str | None,
           target: dest.Destination | None) -> None:
    """A SUBSCRIBE failed: its consumer tags forgotten, the queue it declared for a topic or an
    exchange deleted at the end (the plugin's maybe_clean_up_queue: the connection ends, the
    ERROR goes first), a topic's refusal quoted as the plugin quotes it."""
    for tag in registered:
        core.subscriptions.pop(tag, None)
    if declared is not None:
        core.discard_on_close.append(declared)
    if isinstance(exc, BrokerError) and exc.message == "access_refused" and target is not None \
            and target.kind == dest.TOPIC:
        # The plugin checks topic read permission itself and quotes the refusal
        # without the reply code RabbitMQ's bind refusal starts with.
        exc.detail = exc.detail.removeprefix("ACCESS_REFUSED - ")


def subscribe_shared(core: Context, sub: Subscription, target: dest.Destination, plan: dest.SubscribePlan,
                     receipt: str | None) -> Steps:
    """A SUBSCRIBE that takes its MESSAGEs from a queue shared with the login's others (fan-out at
    the edge, ``core/fanout.py``). RabbitMQ decides it as its own: the queue it would have had is
    declared and bound (RabbitMQ's permissions, topic permissions and refusals, in the plugin's
    order and words) and deleted again; then the subscription joins the shared one, and every
    message routed after its RECEIPT reaches it."""
    assert plan.declare is not None and plan.binding is not None
    if receipt is not None:
        sub.held = []
    exchange, routing_key = plan.binding
    probe = dest.QueueDeclare(plan.declare.queue, durable=False, auto_delete=True, exclusive=True, arguments={})
    tag = sub.consumer_tag
    declared = None
    try:
        declared = yield Declare(probe)
        yield Bind(declared, exchange, routing_key, plan.binding_arguments)
        yield DeleteQueue(declared)
        declared = None
        core.subscriptions[tag] = sub
        sub.shared = True
        yield JoinFanout(tag, exchange, routing_key, plan.binding_arguments)
    except StompError as exc:
        failed(core, exc, [tag], declared, target)
        raise
    except GeneratorExit:
        core.subscriptions.pop(tag, None)
        raise
    if receipt is not None:
        core.queue_receipt(receipt, then=lambda: core.release_held(sub))


def copy_retained(core: Context, queue: str, binding: tuple[str, str]) -> Steps:
    """A new topic subscription gets the topic's retained message first: a copy is published into
    its own queue before the queue is bound (read on a side channel that hands it back)."""
    found = yield Peek(features.retained_queue(*binding))
    if found is not None:
        props, body = found
        core.publish("", queue, props, body, False)


def delivery_filter(
    core: Context, headers: dict[str, str], targets: list[dest.Destination]
) -> Callable[[dict[str, str]], bool] | None:
    """The per-delivery hook of a SUBSCRIBE, decided once here: None (the usual case) unless it
    has a ``selector`` or ``include-seq``, or ``redeliveries_header`` is set. A malformed
    selector, or one on a shared queue, is an ERROR now, never a failure at delivery time."""
    text = headers.get("selector")
    seq_name = features.sequence_header(headers)
    redeliveries = core.rules.redeliveries_header
    if text is None and seq_name is None and not redeliveries:
        return None
    match = None
    if text is not None:
        match = compile_selector(text)
        for target in targets:
            features.check_selector_destination(target)
    if seq_name is None and not redeliveries:
        return match

    def annotate(out: dict[str, str]) -> bool:
        if seq_name is not None:
            offset = out.get("x-stream-offset")
            if offset is not None:
                out[seq_name] = offset
        if redeliveries and out["redelivered"] == "true":
            # Quorum queues count earlier deliveries: x-acquired-count on 4.3 (whose
            # x-delivery-count counts only failed ones), x-delivery-count before; a classic
            # queue only says "at least once before".
            out[redeliveries] = out.get("x-acquired-count") or out.get("x-delivery-count", "1")
        return match is None or match(out)

    return annotate


# -- UNSUBSCRIBE ----------------------------------------------------------------------------


def unsubscribe(core: Context, frame: Frame) -> Steps:
    headers = frame.headers
    dest.require_durable_id(headers)
    tag = hdr.unsubscribe_consumer_tag(headers)
    sub = core.subscriptions.get(tag)
    if sub is None or sub.destination is None:
        if sub is None and features.durable_subscription_name(headers) is not None and core.client_id:
            # Artemis: a durable subscription is deleted by name, subscribed or not
            queue = features.artemis_queue_to_delete(headers, core.client_id)
            if queue is not None:
                yield DeleteQueue(queue)
                core.receipt(frame)
                return
        raise FrameRejected(
            "No subscription found",
            "UNSUBSCRIBE must refer to an existing subscription.\n"
            f"Subscription to {tp(hdr.describe_subscription(tag))} not found.\n",
        )
    if sub.shared:
        yield LeaveFanout(tag)
    elif sub.consuming:
        yield Cancel(tag)
    if sub.position is not None:  # named: the offset as far as it got, or (named again) forgotten
        if resume.NAME_HEADER in headers or features.durable_subscription_name(headers) is not None:
            yield DeleteQueue(sub.position.queue)
        else:
            core_resume.store(core, sub.position)
    del core.subscriptions[tag]
    for extra in sub.extra_tags:
        yield Cancel(extra)
        core.subscriptions.pop(extra, None)
    if sub.watch_stream:
        streams.forget(core, (tag, *sub.extra_tags))
    if core.exclusive_queues.get(sub.queue) and all(s.queue != sub.queue for s in core.subscriptions.values()):
        # an auto-delete queue went with its last consumer: its name is free again
        del core.exclusive_queues[sub.queue]
        yield ReleaseExclusive(sub.queue)
    if core.native_stomp:  # 4.4: the subscription's own queue, never one the UNSUBSCRIBE names
        doomed = sub.queue if sub.destination.kind == dest.TOPIC and dest.has_durable_header(headers) else None
    else:
        doomed = dest.durable_queue_to_delete(sub.destination, headers)
    doomed = doomed or features.artemis_queue_to_delete(headers, core.client_id)
    if doomed is not None:
        yield DeleteQueue(doomed)
    core.receipt(frame)


# -- deliveries that need more than a frame --------------------------------------------------


def grow(core: Context, sub: Subscription) -> Steps:
    """The client holds a whole window of a windowed subscription: one consumer more, with its
    own window, once the client's socket has room.

    The plugin consumes without a prefetch limit: a client may hold any number of deliveries
    unacknowledged while it reads on. RabbitMQ 4.3 denies the channel-wide (global) QoS that
    could pause such a consumer for a client that stops reading, so the bridge consumes in
    windows instead: RabbitMQ stops at a full window; a client that keeps reading gets another
    consumer on the same queue (same tag prefix, arguments and priority, deliveries in queue
    order on the one channel); one that stops reading gets none, and what it costs the bridge
    stays bounded.
    """
    try:
        yield WaitWritable()
        if core.state is CLOSED or core.subscriptions.get(sub.consumer_tag) is not sub or not sub.window_full():
            return  # gone, or ACKs made room meanwhile
        tag = window_tag(sub.consumer_tag, len(sub.extra_tags) + 1)
        core.subscriptions[tag] = sub
        sub.extra_tags = (*sub.extra_tags, tag)
        if sub.watch_stream:
            streams.same_queue(core, sub.consumer_tag, tag)
        yield Consume(sub.queue, tag, False, sub.window, sub.arguments)
    finally:
        sub.growing = False


def server_cancelled(core: Context, sub: Subscription, consumer_tag: str) -> None:
    """RabbitMQ cancelled a consumer (its queue was deleted, a quorum queue's consumer timeout, a
    node went down): the plugin's ERROR, the connection and its other subscriptions carry on;
    or, with resubscribe_on_cancel, the bridge subscribes again once the queue is there, and
    the ERROR comes only if it is not there by resubscribe_timeout.

    Only ``consumer_tag``'s consumer is gone: the subscription's others (a composite's other
    parts, its windows) still consume until the resubscribe cancels them, so that it can use
    their tags again (a tag still consuming would be a connection error, 530)."""
    core.subscriptions.pop(consumer_tag, None)
    if sub.again is not None:
        if not sub.resubscribing:  # one resubscribe at a time: two would consume each tag twice
            sub.resubscribing = True
            core.spawn(resubscribe(core, sub, consumer_tag))
    else:
        for tag in (sub.consumer_tag, *sub.extra_tags):
            core.subscriptions.pop(tag, None)
        cancelled_error(core, sub.consumer_tag)


def cancelled_error(core: Context, consumer_tag: str) -> None:
    core.fail(
        BrokerError(
            "Server cancelled subscription",
            "The server has canceled a subscription.\n"
            f"No more messages will be delivered for {tp(hdr.describe_subscription(consumer_tag))}.\n",
            headers={"subscription": hdr.subscription_id(consumer_tag)},
        ),
        close=core.rules.close_on_error,
    )


def retry_delay(now: float, deadline: float, delay: float) -> float | None:
    """How long to wait before asking again for a cancelled subscription's queue: ``delay``, but
    never past the deadline, so the last try is at the deadline itself; None once it has passed."""
    if now >= deadline:
        return None
    return min(delay, deadline - now)


def resubscribe(core: Context, sub: Subscription, cancelled: str) -> Steps:
    """Subscribe ``sub`` again as its SUBSCRIBE did (a /queue/ is declared again), once every
    queue it reads from exists; asked again after 0.5 s, doubling up to 30 s, and a last time at
    resubscribe_timeout, then the plugin's ERROR. Its consumers RabbitMQ did not cancel are
    cancelled first (``server_cancelled``)."""
    assert sub.again is not None
    try:
        yield from _resubscribe(core, sub, cancelled)
    finally:
        sub.resubscribing = False


def _resubscribe(core: Context, sub: Subscription, cancelled: str) -> Steps:
    assert sub.again is not None
    targets, headers, prefetch = sub.again
    for tag in (sub.consumer_tag, *sub.extra_tags):
        if tag != cancelled and core.subscriptions.get(tag) is sub:
            yield Cancel(tag)  # RabbitMQ answers cancel-ok for a tag it cancelled meanwhile
            core.subscriptions.pop(tag, None)
    deadline = core.clock() + core.rules.resubscribe_timeout
    delay = RESUBSCRIBE_FIRST_DELAY
    while not core.state is CLOSED:
        # declared again: a /queue/ RabbitMQ deleted is gone, whatever this session did before
        plans = [subscribe_plan(core, target, headers, declare=True) for target in targets]
        missing = False
        for plan in plans:
            if plan.declare is None and not (yield QueueExists(plan.queue)):
                missing = True
                break
        if not missing:
            if sub.position is not None:  # from the stored offset again, whatever was delivered
                position = yield from core_resume.open_position(core, targets[0], sub.position.name)
                sub.position.stored, sub.position.settled_max = position.stored, position.stored
                sub.position.unsettled.clear()
                sub.arguments = hdr.consume_arguments(core_resume.start_headers(headers, position))
            sub.extra_tags, sub.unacked, sub.growing = (), 0, False
            yield from subscribe_parts(core, sub, list(zip(targets, plans)), prefetch, None)
            core.counters.resubscriptions += 1
            log.info("subscribed again after RabbitMQ cancelled the consumer",
                     extra={"peer": core.peer_name, "subscription": hdr.subscription_id(sub.consumer_tag),
                            "queue": sub.queue})
            return
        wait = retry_delay(core.clock(), deadline, delay)
        if wait is None:
            cancelled_error(core, sub.consumer_tag)
            return
        yield Sleep(wait)
        delay = min(delay * 2, RESUBSCRIBE_MAX_DELAY)


# -- browsing ---------------------------------------------------------------------------------


def browse(core: Context, frame: Frame, tag: str, destination: dest.Destination) -> Steps:
    """Apollo's ``browser:true`` on a classic or quorum queue.

    RabbitMQ has no non-destructive read of a queue, so the bridge takes each message with
    ``basic.get`` (no auto-ack), sends it as a MESSAGE, and when the queue is empty hands every
    one back with ``basic.nack`` (requeue) and sends the ``browser:end`` MESSAGE. The messages
    keep their order but come back flagged ``redelivered`` (and quorum queues count a
    delivery), and while the browse runs other consumers do not see them. Streams are read
    non-destructively by an ordinary subscription with ``x-stream-offset``.

    As every SUBSCRIBE, its RECEIPT comes first: once the first ``basic.get`` has shown that
    the queue can be read, and before any MESSAGE.
    """
    headers = frame.headers
    if headers.get("browser-end") == "false":
        raise FrameRejected(
            "Unsupported browser-end",
            "browser-end:false asks to keep browsing new messages, which a RabbitMQ queue "
            "cannot do without consuming them. Use a stream and an ordinary subscription "
            "with x-stream-offset instead.\n",
        )
    queue = features.browse_queue(destination)
    text = headers.get("selector")
    match = compile_selector(text) if text is not None else None  # browsing takes nothing
    sub = Subscription(tag, destination, queue, ack=False, multiple=False, consuming=False)
    core.subscriptions[tag] = sub
    receipt = headers.get("receipt")
    while not core.state is CLOSED:
        try:
            got = yield Get(queue)
        except BrokerError as exc:
            if refusals.is_stream_refusal(exc):  # the plugin subscribes, which a stream refuses so
                raise refusals.stream_without_prefetch(core.dest_rules.dialect, queue, core.vhost) from None
            raise
        if receipt is not None:  # the queue answered: the subscription stands
            sub.held = []
            core.queue_receipt(receipt, then=lambda: core.release_held(sub))
            receipt = None
        if got is None:
            break
        _, delivery_tag, redelivered, exchange, routing_key, properties, body = got
        out = hdr.message_headers(tag, core.session_id, delivery_tag, exchange, routing_key, redelivered, properties)
        if match is None or match(out):
            core.deliver(out, body, sub)
            yield WaitWritable()
    yield EndBrowse()  # (a connection that ends first hands them back with its channels)
    end = {"subscription": hdr.subscription_id(tag)} if hdr.has_subscription_id(tag) else {}
    end["destination"] = destination.header
    end["message-id"] = f"{tag}@@{core.session_id}@@browse-end"
    end["browser"] = "end"
    core.deliver(end, b"", sub)
