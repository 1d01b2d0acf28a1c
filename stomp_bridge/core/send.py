"""SEND: from a frame to one publish per destination, and everything a SEND may ask for first.

The order of precedence, as the plugin (then the extensions) decide it: the header checks,
the Swaptacular peer rules, then the destination: a plugin destination; else
``/bridge/token`` (a new OAuth 2 token); else an extension (composite, ``/dsub/``,
``/temp-topic/``) or the plugin's error. For each destination: declare a ``/queue/`` the
session has not declared yet; the reply queue behind a ``reply-to: /temp-queue/<id>``;
the properties; Apollo's ``expires``/``ttl`` (an expired message is dropped, and still
receipted); ``mandatory``; the publish (with ``AMQ_SCHEDULED_DELAY``/``AMQ_SCHEDULED_TIME``,
into RabbitMQ's delay levels, ``protocol/scheduled.py``); then Apollo's ``retain``.

Retained messages and ``mandatory``: the retained copy is kept only of a message RabbitMQ
routed. With ``mandatory``, the SEND waits for RabbitMQ's verdict on its publish before it
keeps the copy; a returned message is answered with the ERROR that names the SEND's RECEIPT,
and no copy is kept.
"""

from __future__ import annotations

from stomp_bridge.core.context import Context, Steps, log
from stomp_bridge.core.plans import (
    Bind, Consume, Declare, DeclareExchange, DeleteQueue, QueueExists, Settled, SetTimer, UpdateSecret,
)
from stomp_bridge.core.subscriptions import Subscription
from stomp_bridge.protocol import destinations as dest
from stomp_bridge.protocol import features
from stomp_bridge.protocol import headers as hdr
from stomp_bridge.protocol import scheduled
from stomp_bridge.protocol.scheduled import DELAY_HEADER, TIME_HEADER
from stomp_bridge.protocol.errors import BrokerError, FrameRejected, InvalidDestination
from stomp_bridge.protocol.frames import Frame

_NOT_ON_SEND = frozenset(hdr.HEADERS_NOT_ON_SEND)


def send(core: Context, frame: Frame, committed: bool = False) -> Steps | None:
    """SEND: its publishes, then its RECEIPT. A transactional one is held until its COMMIT
    (``transactions.py``), which runs it here with ``committed``. A SEND that needs nothing of
    RabbitMQ but the publish (a declared or plain destination) is done here, with no generator;
    None then."""
    headers = frame.headers
    if not committed and "transaction" in headers and core.transactions.hold(frame):
        return None
    observer = core.observer
    if observer is not None:
        observer.send(frame)
    if not _NOT_ON_SEND.isdisjoint(headers):
        hdr.check_send_headers(headers)
    if core.policy is not None:
        core.policy.check_send(headers)
    value = headers.get("destination")
    if value is None:
        core.destination(frame)  # raises the plugin's "Missing destination"
    rules = core.dest_rules
    plain = rules.plain_send_target(value, headers)
    if plain is not None and (plain[0].kind != dest.QUEUE or plain[0].name in core.declared_queues):
        destination, target = plain  # the usual SEND: send_target's answer, cached
    else:
        try:
            destination = dest.parse_destination(value)
        except InvalidDestination:
            return send_extended(core, frame)
        target = rules.send_target(destination, headers, declare=destination.name not in core.declared_queues)
    if (
        target.declare is not None
        or ("reply-to" in headers and needs_reply_queue(core, headers))
        or ("retain" in headers and retain_action(core, headers, destination))
        or DELAY_HEADER in headers or TIME_HEADER in headers
    ):
        return send_to(core, frame, destination, target, receipted=True)
    publish(core, frame, destination, target, None)
    if observer is not None:
        handled(core, frame)
    elif "receipt" in headers:
        core.queue_receipt(headers["receipt"])
    return None


def handled(core: Context, frame: Frame) -> None:
    """Every publish of the SEND is queued: its RECEIPT (if it asked for one) once RabbitMQ
    confirmed all before it, and the observer (if any) told of both."""
    then = core.observer.handled(frame) if core.observer is not None else None
    receipt = frame.headers.get("receipt")
    if receipt is not None:
        core.queue_receipt(receipt, then)


def send_extended(core: Context, frame: Frame) -> Steps:
    if frame.headers.get("destination") == features.TOKEN_DESTINATION:
        yield from update_token(core, frame)  # not a plugin destination: no cost to other SENDs
    else:
        for part in core.extended_destinations(frame):  # composite, /dsub/ (or the plugin's error)
            target = core.dest_rules.send_target(part, frame.headers, declare=part.name not in core.declared_queues)
            yield from send_to(core, frame, part, target, receipted=False)
    handled(core, frame)


def send_to(core: Context, frame: Frame, destination: dest.Destination, target: dest.SendTarget,
            receipted: bool) -> Steps:
    """One destination of a SEND that needs RabbitMQ first: the queue declared, the reply queue,
    or (after the publish) the retained copy."""
    headers = frame.headers
    delay = now_ms = None
    if DELAY_HEADER in headers or TIME_HEADER in headers:
        now_ms = int(core.wall() * 1000)
        delay = scheduled.delay_of(headers, now_ms)
    action = retain_action(core, headers, destination)
    if delay is not None and action is not None:
        raise FrameRejected("Invalid header", "A retained message cannot be scheduled: send it without "
                                              f"{scheduled.DELAY_HEADER}/{scheduled.TIME_HEADER}, or without retain\n")
    if target.declare is not None:
        core.declared(target.declare, (yield Declare(target.declare)))
    reply_to = None
    if needs_reply_queue(core, headers):
        reply_to = yield from reply_queue(core, dest.reply_to_temp_queue(headers["reply-to"]))
    if delay is not None:
        yield from schedule_topology(core, target.exchange)
    sent = publish(core, frame, destination, target, reply_to, None if delay is None else (delay, now_ms + delay))
    if sent is not None and action is not None:
        seq, props, mandatory = sent
        yield from retain(core, target, props, frame.body, action, seq if mandatory else None)
    if receipted:
        handled(core, frame)


def needs_reply_queue(core: Context, headers: dict[str, str]) -> bool:
    """``reply-to: /temp-queue/<id>`` whose queue this session has not declared yet."""
    reply = headers.get("reply-to")
    if reply is None or reply.startswith(features.TEMP_TOPIC_PREFIX):
        return False
    temp_id = dest.reply_to_temp_queue(reply)
    return temp_id is not None and temp_id not in core.reply_queues


def retain_action(core: Context, headers: dict[str, str], destination: dest.Destination) -> str | None:
    if "retain" in headers and core.rules.retained_messages and destination.kind == dest.TOPIC:
        return features.retain_action(headers)
    return None


def publish(core: Context, frame: Frame, destination: dest.Destination, target: dest.SendTarget,
            reply_to: str | None, delay: tuple[int, int] | None = None) -> tuple[int, dict, bool] | None:
    """The publish of one destination of a SEND: its number, properties and whether it is
    mandatory; None if Apollo's ``expires``/``ttl`` says it expired already (never delivered,
    and the RECEIPT still comes). With a ``delay`` (ms, and the due time in epoch ms), into the scheduled-delivery levels
    (``protocol/scheduled.py``) instead of the destination's exchange."""
    headers = frame.headers
    reply = headers.get("reply-to")
    if reply_to is None and reply is not None:
        if reply.startswith(features.TEMP_TOPIC_PREFIX):
            reply_to = features.temp_topic_reply_to(reply, core.session_id)
        else:
            temp_id = dest.reply_to_temp_queue(reply)
            if temp_id is not None:
                reply_to = core.reply_queues.get(temp_id)
    props = hdr.properties_from_send(headers, reply_to)
    if ("expires" in headers or "ttl" in headers) and not set_expiration(props, headers, int(core.wall() * 1000)):
        return None
    mandatory = core.rules.mandatory
    if "mandatory" in headers:
        mandatory = hdr.parse_bool(headers["mandatory"]) or False
    exchange, routing_key = target.exchange, target.routing_key
    problem = hdr.publish_problem(exchange, routing_key, props, core.frame_max)
    if problem is not None:  # a value AMQP cannot carry, e.g. a 300-byte routing key or 200 kB of headers
        raise FrameRejected("Invalid header", f"{problem}\n")
    if delay is not None:
        if "expiration" in props:  # RabbitMQ would expire it while it waits, and drop the TTL after
            raise FrameRejected("Invalid header", "A scheduled message cannot also expire (expiration, "
                                                  "expires or ttl): send one or the other\n")
        plan = scheduled.schedule(*delay, exchange=exchange, mandatory=mandatory)
        table = props["headers"]
        scheduled.without_schedule_headers(table)
        table.update(plan.headers)
        exchange, mandatory = plan.exchange, False  # the levels always route it; see scheduled.py
    seq = core.publish(exchange, routing_key, props, frame.body, mandatory)
    if mandatory:
        core.mandatory_sent(seq, exchange, routing_key, destination.header, headers.get("receipt"))
    if core.observer is not None:  # the publish is queued, not sent: it may add to props["headers"]
        core.observer.published(frame, seq, exchange, routing_key, props)
    core.counters.messages_published += 1
    return seq, props, mandatory


def schedule_topology(core: Context, exchange: str) -> Steps:
    """What a scheduled message needs in RabbitMQ: the levels (declared when a side channel finds
    their last queue missing, once per session), and the exit queues of the SEND's exchange
    (declared once per session and exchange)."""
    exits = core.scheduled_exchanges
    specs: list = []
    if exits is None:
        if not (yield QueueExists(scheduled.MARKER_QUEUE)):
            specs = scheduled.topology()
        exits = core.scheduled_exchanges = set()
    if exchange not in exits:
        specs = [*specs, *scheduled.exits(exchange)]
    for spec in specs:
        if isinstance(spec, scheduled.ExchangeSpec):
            yield DeclareExchange(spec.name, spec.kind, spec.arguments)
        elif isinstance(spec, scheduled.QueueSpec):
            yield Declare(dest.QueueDeclare(spec.name, durable=True, auto_delete=False, exclusive=False,
                                            arguments=spec.arguments))
        else:
            yield Bind(spec.queue, spec.exchange, "", spec.arguments)
    exits.add(exchange)


def set_expiration(props: dict, headers: dict[str, str], now_ms: int) -> bool:
    """Apollo's ``expires``/``ttl`` as AMQP per-message expiration; False if already expired.

    RabbitMQ discards an expired message instead of delivering it (at the head of a classic
    queue, on any read of a quorum queue); the message also keeps an ``expires`` header with
    its absolute expiry, as Apollo adds one for ``ttl``.
    """
    amqp_expiration, expires = features.expiration(headers, now_ms)
    if expires is None:
        return True
    if expires <= now_ms:
        return False
    if amqp_expiration is not None:
        props["expiration"] = amqp_expiration
    if "expires" not in headers:
        props["headers"]["expires"] = str(expires)
    return True


def reply_queue(core: Context, temp_id: str) -> Steps:
    """/temp-queue/<id>: one server-named queue per id, auto-subscribed (plugin semantics)."""
    existing = core.reply_queues.get(temp_id)
    if existing is None:
        declare = dest.temp_queue_declare(core.rules.temp_queue_prefix, core.session_id, temp_id)
        existing = core.declared(declare, (yield Declare(declare)))
        tag = hdr.reply_queue_consumer_tag(temp_id)
        core.subscriptions[tag] = Subscription(tag, None, existing, ack=False, multiple=False)
        yield Consume(existing, tag, True, 0, None)
        core.reply_queues[temp_id] = existing
    return existing


def retain(core: Context, target: dest.SendTarget, props: dict, body: bytes, action: str,
           mandatory_seq: int | None) -> Steps:
    """Apollo retained messages, kept in RabbitMQ: one ``x-max-length: 1`` queue per topic holds
    the last ``retain:set`` message; ``retain:remove`` deletes it. The message itself is also
    published to the topic as usual; a mandatory one is kept only once RabbitMQ routed it."""
    queue = features.retained_queue(target.exchange, target.routing_key)
    if action == "remove":
        yield DeleteQueue(queue)
        return
    if mandatory_seq is not None and not (yield Settled(mandatory_seq)):
        return  # returned (its ERROR names this SEND) or the connection ended: nothing to keep
    declare = dest.QueueDeclare(queue, durable=True, auto_delete=False, exclusive=False,
                                arguments=dict(features.RETAINED_QUEUE_ARGUMENTS))
    yield Declare(declare)
    core.publish("", queue, props, body, False)


def update_token(core: Context, frame: Frame) -> Steps:
    """SEND to /bridge/token: the body is the client's new OAuth 2 token, handed to RabbitMQ
    as its connection's new secret; the SEND's RECEIPT (if asked for) once RabbitMQ took it.
    Only for a connection that logged in with a token: one that logged in with a password gets
    ERROR ``Token refused`` and stays open."""
    token = frame.body.decode("utf-8", "replace").strip()
    if not token:
        raise FrameRejected("Invalid header", f"SEND to {features.TOKEN_DESTINATION} needs the new token as its body")
    if not core.token_login:
        # RabbitMQ takes connection.update-secret from an internal (password) user and ignores it:
        # the client would believe it refreshed something, and the token's expiry would end a
        # connection that never depended on it.
        raise FrameRejected(
            "Token refused",
            f"This connection logged in with a password, not an OAuth 2 token (a JWT as passcode): "
            f"RabbitMQ has no token of it to replace and would ignore this one. {features.TOKEN_DESTINATION} "
            "refreshes connections that logged in with a token; this one needs none.",
        )
    claims = features.token_claims(token)
    subject = claims.get("sub") if claims is not None else None
    if core.token_subject is not None and subject != core.token_subject:
        # RabbitMQ 4.x refuses another user's token as a new secret; 3.10 would take it
        found = "is not a JWT" if claims is None else (
            "has no subject (sub)" if subject is None else f"is for {subject!r}")
        raise BrokerError(
            "Token refused",
            f"The new token {found}, and this connection logged in as {core.token_subject!r}. "
            "Log in again with it.",
        )
    try:
        yield UpdateSecret(token)
    except BrokerError as exc:
        raise BrokerError(
            "Token refused",
            f"RabbitMQ refused the new token ({exc.detail}) and closed the connection. Log in again.",
            private=exc.private or exc.detail,
        ) from None
    yield from token_timer(core, features.token_expiry(claims))
    core.counters.token_updates += 1
    log.info("token refreshed", extra={"peer": core.peer_name, "user": core.user})


def token_timer(core: Context, expires: float | None) -> Steps:
    """The ERROR a client is owed when its OAuth 2 token runs out (RabbitMQ 4.3 closes the
    connection then, older brokers keep it open): at ``expires`` (epoch seconds); a new token
    moves it."""
    yield SetTimer("token", None if expires is None else max(0.0, expires - core.wall()))
