"""CONNECT, ACK, NACK, BEGIN, COMMIT, ABORT and DISCONNECT: one handler each (see context.py).

SEND is in ``send.py``, SUBSCRIBE and UNSUBSCRIBE in ``subscribe.py``. A handler that needs
nothing of RabbitMQ (ACK, BEGIN …) is a plain function; the others are generators, or plain
functions that return one (None: nothing left to do).
"""

from __future__ import annotations

from stomp_bridge import __version__
from stomp_bridge.core import login, resume, streams
from stomp_bridge.core.acks import ack_target
from stomp_bridge.core.context import Context, Steps, log
from stomp_bridge.core.state import OPEN, move
from stomp_bridge.core.rules import native_stomp
from stomp_bridge.core.plans import (
    Ack, Disconnect, Flush, Nack, OpenAmqp, Opened, ReceiptsSent, ResolveSecurity, SetTimer,
)
from stomp_bridge.core.send import send, token_timer
from stomp_bridge.core.transactions import transaction_id
from stomp_bridge.protocol import destinations as dest
from stomp_bridge.protocol import features
from stomp_bridge.protocol import headers as hdr
from stomp_bridge.protocol.connect import negotiate_version
from stomp_bridge.protocol.errors import (
    FrameRejected, MessageNotFound, ProtocolError, StompError, UnknownDelivery, tp,
)
from stomp_bridge.protocol.frames import Frame
from stomp_bridge.protocol.parser import Limits

_new = tuple.__new__  # a NamedTuple without its Python-level __new__: one per ACK

# -- CONNECT ------------------------------------------------------------------------------


def connect(core: Context, frame: Frame, implicit: bool = False) -> Steps:
    """Log in (the decisions are login.py's), then CONNECTED (none for an implicit connect)."""
    core.logging_in = True  # from here amqp_connect_timeout bounds the wait, not connect_timeout
    version = negotiate_version(frame.headers.get("accept-version"))
    headers = hdr.trim_headers(frame.headers, version)
    cert_login, core.policy = yield ResolveSecurity(headers, version)
    rules = core.rules
    request = login.login_request(
        rules, headers, peer=core.peer, cert_login=cert_login, transport=core.credentials, policy=core.policy,
    )
    core.user = request.user  # the login being tried: the closing line names it if RabbitMQ refuses it
    opened: Opened = yield OpenAmqp(
        request.user, request.passcode, request.vhost, login.fallback_vhost(rules, request.vhost), cert_login,
    )
    logged_in(core, opened, request.user, version, request.heartbeat)
    yield SetTimer("connect", None)
    claims = features.token_claims(request.passcode)
    core.token_login = claims is not None
    core.token_subject = claims.get("sub") if claims is not None else None
    yield from token_timer(core, features.token_expiry(claims))
    core.client_id = headers.get("client-id")
    log.info(
        "client connected",
        extra={"peer": core.peer_name, "user": request.user, "vhost": opened.vhost, "version": version,
               "heart_beat": f"{request.heartbeat[0]},{request.heartbeat[1]}", "implicit": implicit},
    )
    if implicit:
        return  # the plugin sends no CONNECTED for an implicit connect
    server = None if rules.hide_server_info else login.server_header(opened.broker_version_text, __version__)
    out = login.connected_headers(core.session_id, core.heartbeat, version, server)
    core.counters.frames_out["CONNECTED"] += 1
    core.emit(core.encode("CONNECTED", out))


def logged_in(core: Context, opened: Opened, user: str, version: str, heartbeat: tuple[int, int]) -> None:
    """RabbitMQ took the login: the broker's rules, the negotiated version, the frame limits of
    a logged-in client."""
    rules = core.rules
    core.state = move(core.state, "logged_in")
    core.user, core.vhost = user, opened.vhost
    core.native_stomp = native_stomp(rules.rabbitmq_stomp_dialect, opened.dialect.version)
    core.dest_rules = dest.DestinationRules(
        rules.default_topic_exchange, opened.dialect, rules.headers_bindings, opened.vhost)
    core.frame_max = opened.frame_max
    core.version = version
    # The plugin's codec unescapes every frame with 1.2 rules whatever the version, and
    # escapes what it sends the same way; both sides match it.
    core.parser.version = "1.2"
    core.parser.limits = Limits(
        max_frame_size=rules.max_frame_size, max_headers=rules.max_headers, max_header_length=rules.max_header_length,
    )
    core.session_id = core.new_session_id()
    core.heartbeat = heartbeat
    if core.on_open is not None:
        core.on_open()


def already_connected(core: Context, frame: Frame) -> None:
    raise ProtocolError("Bad CONNECT", "Already connected: CONNECT may be sent once")


# -- ACK / NACK ---------------------------------------------------------------------------


def ack(core: Context, frame: Frame) -> None:
    headers = frame.headers  # the usual ACK (no transaction, no receipt): no call it need not make
    if "transaction" not in headers or not core.transactions.hold(frame):
        core.to_amqp.append(settle(core, frame, "ACK"))
        if core.unacked.moved:  # a named stream subscription's offset moved
            resume.settled(core)
    if "receipt" in headers:
        core.receipt(frame)


def nack(core: Context, frame: Frame) -> Steps | None:
    if not core.transactions.hold(frame):
        check = streams.nack_check(core, frame, receipt=True) if core.unacked.marked else None
        if check is not None:
            return _checked_nack(core, frame, check)
        _nack(core, frame)
    core.receipt(frame)
    return None


def _checked_nack(core: Context, frame: Frame, check: Steps) -> Steps:
    yield from check  # a stream's delivery: the plugin's ERROR (streams.py)
    _nack(core, frame)
    core.receipt(frame)


def _nack(core: Context, frame: Frame) -> None:
    core.to_amqp.append(settle(core, frame, "NACK"))
    if core.unacked.moved:
        resume.settled(core)


def settle(core: Context, frame: Frame, command: str) -> Ack | Nack:
    """What an ACK or NACK settles (acks.py), as the basic.ack / basic.nack to send."""
    consumer_tag, delivery_tag = ack_target(frame.headers, command, core.version, core.session_id)
    # 4.4's plugin settles what the channel holds, subscribed or not (a delivery outlives its
    # UNSUBSCRIBE or server cancel); 4.3's refused an ACK of a subscription that is gone
    if consumer_tag not in core.subscriptions and not core.native_stomp:
        value = frame.headers[hdr.ack_header_name(core.version)]
        raise FrameRejected("Subscription not found", f"Message with id {tp(value)} has no subscription")
    try:
        multiple = core.unacked.settle(consumer_tag, delivery_tag)
    except UnknownDelivery:
        if core.native_stomp:  # 4.4's native plugin: its own ERROR, and the connection stays
            raise MessageNotFound(delivery_tag) from None
        raise  # 4.3's: the RECEIPT, then RabbitMQ's channel error (Context.answer)
    if core.observer is not None:
        core.observer.settled(delivery_tag, multiple, command)
    if command == "ACK":
        return _new(Ack, (delivery_tag, multiple))
    requeue = hdr.parse_bool(frame.headers.get("requeue"))
    if requeue is None:
        requeue = core.rules.default_nack_requeue
    return Nack(delivery_tag, multiple, requeue)


# -- transactions -------------------------------------------------------------------------
# As in the plugin, a transactional SEND/ACK/NACK is held until COMMIT (transactions.py); a held
# ACK/NACK is receipted at once, a held SEND when, after COMMIT, RabbitMQ has confirmed it.


def begin(core: Context, frame: Frame) -> None:
    core.transactions.begin(transaction_id(frame.headers, "BEGIN"))
    core.receipt(frame)


def commit(core: Context, frame: Frame) -> Steps:
    """Run the held frames in order. As in the plugin, one that fails (a bad destination, say)
    gets its ERROR and the others still run; a fatal error ends it all. In front of 4.4, an
    ACK/NACK of a delivery an earlier cumulative ACK of the same COMMIT settled is skipped, as
    its plugin does (4.3's passed it on, and RabbitMQ closed the channel)."""
    covered: set[tuple[str, int]] | None = set() if core.native_stomp else None
    for action in core.transactions.commit(transaction_id(frame.headers, "COMMIT")):
        try:
            if action.command == "SEND":
                steps = send(core, action, committed=True)
                if steps is not None:
                    yield from steps
            else:
                if covered is not None and _covered(core, action, covered):
                    continue
                if action.command == "NACK" and core.unacked.marked:
                    check = streams.nack_check(core, action, receipt=False)
                    if check is not None:
                        yield from check
                core.to_amqp.append(settle(core, action, action.command))
                if core.unacked.moved:
                    resume.settled(core)
        except StompError as exc:
            if exc.receipt_first:  # RabbitMQ closes the channel: nothing after it runs
                core.answer(exc, frame)  # the COMMIT's RECEIPT, then the ERROR (4.3, verified)
                return
            core.answer(exc, action)
            if core.state is not OPEN:
                return
    core.receipt(frame)


def _covered(core: Context, action: Frame, covered: set[tuple[str, int]]) -> bool:
    """True if an earlier cumulative ACK/NACK of this COMMIT settled ``action``'s delivery;
    otherwise note what ``action`` settles besides the delivery it names (4.4's
    record_transaction_settlements: the named one settled twice is still an error)."""
    try:
        consumer_tag, delivery_tag = ack_target(action.headers, action.command, core.version, core.session_id)
    except StompError:
        return False  # settle() answers it
    if (consumer_tag, delivery_tag) in covered:
        return True
    unacked = core.unacked.by_tag
    sub = unacked.get(delivery_tag)
    if sub is not None and sub.consumer_tag == consumer_tag and sub.multiple:
        covered.update((unacked[t].consumer_tag, t) for t in unacked if t < delivery_tag)
    return False


def abort(core: Context, frame: Frame) -> None:
    core.transactions.abort(transaction_id(frame.headers, "ABORT"))
    core.receipt(frame)


# -- DISCONNECT ---------------------------------------------------------------------------


def disconnect(core: Context, frame: Frame) -> Steps:
    """The RECEIPT once everything before it is confirmed; then the driver closes the AMQP side
    first, so that once the client sees the socket close, RabbitMQ has already requeued its
    unacknowledged messages and the session's exclusive queues are gone."""
    stored = resume.store_all(core)  # named stream subscriptions: their offsets as far as they got
    receipt = frame.headers.get("receipt")
    if receipt is not None or stored:
        yield Flush()
    if receipt is not None:
        core.queue_receipt(receipt)
        yield ReceiptsSent()
    yield Disconnect()
    core.close()
