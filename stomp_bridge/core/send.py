"""SEND: from a frame to one publish per destination, and everything a SEND may ask for first.

The order of precedence, as the plugin (then the extensions) decide it: the header checks,
the Swaptacular peer rules, then the destination: a plugin destination; else
``/bridge/token`` (a new OAuth 2 token); else an extension (composite, ``/dsub/``,
``/temp-topic/``) or the plugin's error. For each destination: declare a ``/queue/`` the
session has not declared yet; the reply queue behind a ``reply-to: /temp-queue/<id>``;
the properties; Apollo's ``expires``/``ttl`` (an expired message is dropped, and still
receipted); ``mandatory``; the publish; then Apollo's ``retain``.

Retained messages and ``mandatory``: the retained copy is kept only of a message RabbitMQ
routed. With ``mandatory``, the SEND waits for RabbitMQ's verdict on its publish before it
keeps the copy; a returned message is answered with the ERROR that names the SEND's RECEIPT,
and no copy is kept.
"""

from __future__ import annotations

from stomp_bridge.core.context import Context, Steps, log
from stomp_bridge.core.plans import Consume, Declare, DeleteQueue, Publish, Settled, SetTimer, UpdateSecret
from stomp_bridge.core.subscriptions import Subscription
from stomp_bridge.protocol import destinations as dest
from stomp_bridge.protocol import features
from stomp_bridge.protocol import headers as hdr
from stomp_bridge.protocol.errors import BrokerError, FrameRejected, InvalidDestination
from stomp_bridge.protocol.frames import Frame

def send(core: Context, frame: Frame) -> Steps:
    """A transactional SEND is held, and receipted after its COMMIT (commands.commit)."""
    if not core.transactions.hold(frame):
        yield from send_now(core, frame)
        core.receipt(frame)


def send_now(core: Context, frame: Frame) -> Steps:
    """The SEND itself (at once, or at its transaction's COMMIT); the caller receipts it."""
    hdr.check_send_headers(frame.headers)
    if core.policy is not None:
        core.policy.check_send(frame.headers)
    try:
        destination = core.destination(frame)
    except InvalidDestination:
        if frame.headers.get("destination") == features.TOKEN_DESTINATION:
            yield from update_token(core, frame)  # not a plugin destination: no cost to other SENDs
            return
        for part in core.extended_destinations(frame):  # composite, /dsub/ (or the plugin's error)
            yield from send_to(core, frame, part)
        return
    yield from send_to(core, frame, destination)


def send_to(core: Context, frame: Frame, destination: dest.Destination) -> Steps:
    headers = frame.headers
    target = core.dest_rules.send_target(destination, headers, declare=destination.name not in core.declared_queues)
    if target.declare is not None:
        core.declared(target.declare, (yield Declare(target.declare)))
    reply_to = None
    reply_header = headers.get("reply-to")
    if reply_header is not None:
        if reply_header.startswith(features.TEMP_TOPIC_PREFIX):
            reply_to = features.temp_topic_reply_to(reply_header, core.session_id)
        else:
            temp_id = dest.reply_to_temp_queue(reply_header)
            if temp_id is not None:
                reply_to = yield from reply_queue(core, temp_id)
    props = hdr.properties_from_send(headers, reply_to)
    if ("expires" in headers or "ttl" in headers) and not set_expiration(props, headers, int(core.wall() * 1000)):
        return  # already expired: never delivered, and the RECEIPT still comes
    mandatory = core.rules.mandatory
    if "mandatory" in headers:
        mandatory = hdr.parse_bool(headers["mandatory"]) or False
    seq = yield Publish(target.exchange, target.routing_key, props, frame.body, mandatory)
    core.published(seq, mandatory, target.exchange, target.routing_key, destination.header, headers.get("receipt"))
    core.counters.messages_published += 1
    if "retain" in headers and core.rules.retained_messages and destination.kind == dest.TOPIC:
        action = features.retain_action(headers)
        if action is not None:
            yield from retain(core, target, props, frame.body, action, seq if mandatory else None)


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
    core.published((yield Publish("", queue, props, body, False)))


def update_token(core: Context, frame: Frame) -> Steps:
    """SEND to /bridge/token: the body is the client's new OAuth 2 token, handed to RabbitMQ
    as its connection's new secret; the SEND's RECEIPT (if asked for) once RabbitMQ took it."""
    token = frame.body.decode("utf-8", "replace").strip()
    if not token:
        raise FrameRejected("Invalid header", f"SEND to {features.TOKEN_DESTINATION} needs the new token as its body")
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
