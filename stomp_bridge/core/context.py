"""One STOMP connection's state, and the few primitives every command handler uses. No I/O.

The handlers (``commands.py``, ``send.py``, ``subscribe.py``) are generators: they read and
change this state, write frames through :meth:`Context.emit`, and ``yield`` a plan
(``plans.py``) wherever they need RabbitMQ or the driver; the outcome comes back as the value
of the ``yield``, or as the ``StompError`` it failed with, raised there. A :class:`Job` is one
such run. A ``StompError`` that leaves a handler is answered in one place, :meth:`answer`,
and :meth:`fail` is the one place that writes an ERROR frame.

Receipts and refusals. Every publish is numbered (RabbitMQ confirms by number); a RECEIPT
waits for every publish before its frame (``receipts.py``). A mandatory publish that RabbitMQ
returns, or a publish it nacks, is *refused*: no RECEIPT that covers it ever leaves, the
connection reads no more frames, and once every earlier publish is confirmed (so their
RECEIPTs are out) the ERROR goes and the connection ends.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Generator
from time import monotonic, time
from typing import Any, NamedTuple

from stomp_bridge.core.acks import Unacked
from stomp_bridge.core.observer import Observer
from stomp_bridge.core.plans import Publish
from stomp_bridge.core.receipts import NOTHING_HELD, ReceiptLedger
from stomp_bridge.core.rules import Rules
from stomp_bridge.core.state import CLOSED, LOGIN, OPEN, move
from stomp_bridge.core.subscriptions import Subscription
from stomp_bridge.core.transactions import Transactions
from stomp_bridge.protocol import destinations as dest
from stomp_bridge.protocol import features
from stomp_bridge.protocol import headers as hdr
from stomp_bridge.protocol.errors import AccessRefused, FrameRejected, StompError, error_headers, native_stomp_error
from stomp_bridge.protocol.frames import (
    END, END_LF, VECTORED_BODY, Frame, encode_frame, joined, receipt_frame,
)
from stomp_bridge.protocol.parser import FrameParser, Limits

log = logging.getLogger("stomp_bridge.session")

# The connection's states, and every move between them: ``state.py``.

Steps = Generator[Any, Any, None]  # a handler run: yields plans, gets their outcomes
_new = tuple.__new__  # a NamedTuple without its Python-level __new__: one per SEND


class Sent(NamedTuple):
    """A mandatory publish RabbitMQ has not confirmed yet (to match a basic.return to its SEND)."""

    seq: int
    exchange: str
    routing_key: str
    destination: str  # the SEND's destination header, for the ERROR
    receipt: str | None  # the SEND's own receipt, if it asked for one


NO_QUEUES: frozenset[str] = frozenset()  # every context's declared_queues until it declares one


class Job:
    """One run of a handler: the driver runs ``first``, then ``advance`` with each outcome, until
    it returns None. A ``StompError`` the handler lets out is answered here (for its frame), so
    the driver never sees one."""

    __slots__ = ("context", "steps", "frame", "first")

    def __init__(self, context: Context, steps: Steps, frame: Frame | None, first: Any) -> None:
        self.context = context
        self.steps = steps
        self.frame = frame  # None for work of the connection's own (a resubscribe, a window)
        self.first = first

    def advance(self, result: Any = None, error: StompError | None = None) -> Any:
        try:
            if error is None:
                return self.steps.send(result)
            return self.steps.throw(error)
        except StopIteration:
            return None
        except StompError as exc:
            self.context.answer(exc, self.frame)
            return None

    def cancel(self) -> None:
        """The connection ended under it."""
        self.steps.close()


def first_step(context: Context, steps: Steps | None, frame: Frame | None) -> Job | None:
    """Run ``steps`` up to its first plan: None if it needed none (done already)."""
    if steps is None:
        return None
    try:
        first = steps.send(None)
    except StopIteration:
        return None
    except StompError as exc:
        context.answer(exc, frame)
        return None
    return Job(context, steps, frame, first)


class Context:
    """The state of one STOMP connection (see the module docstring)."""

    __slots__ = (
        "rules", "counters", "peer", "peer_name", "credentials", "clock", "wall", "new_session_id", "trace",
        "state", "version", "session_id", "user", "vhost", "heartbeat", "eol", "parser", "dest_rules",
        "subscriptions", "unacked", "transactions", "declared_queues", "reply_queues", "exclusive_queues",
        "client_id", "policy", "token_login", "token_subject", "discard_on_close", "ledger", "mandatory", "refused",
        "settling", "close_reason", "close_detail", "out", "wakeup", "on_open", "on_close", "to_amqp", "jobs", "scheduled_exchanges",
        "observer", "frame_max", "stream_queues", "stream_consumers", "logging_in",
        "frames_handled", "native_stomp",
    )

    def __init__(
        self,
        rules: Rules,
        counters: Any,
        *,
        peer: str | None = None,
        peer_name: str = "",
        credentials: tuple[str | None, str | None] | None = None,
        clock: Callable[[], float] = monotonic,
        wall: Callable[[], float] = time,
        new_session_id: Callable[[], str] = hdr.new_session_id,
        trace: Callable[[str, Frame], None] | None = None,
    ) -> None:
        self.rules = rules
        self.counters = counters  # metrics.Counters: plain integers and dicts
        self.peer = peer  # the client's IP address (loopback_users, the login throttle)
        self.peer_name = peer_name or peer or ""  # "ip:port", for logs
        # Login and passcode the transport established (web-stomp's use_http_auth).
        self.credentials = credentials
        self.clock = clock  # monotonic seconds (resubscribe deadlines)
        self.wall = wall  # epoch seconds (token expiry, Apollo's expires/ttl)
        self.new_session_id = new_session_id
        self.trace = trace  # (direction, frame): the DEBUG frame log, when on
        self.state = LOGIN  # state.py
        self.logging_in = False  # a CONNECT arrived: connect_timeout no longer applies
        self.frames_handled = 0  # client frames so far (the driver's fair share counts them)
        # Behave as RabbitMQ 4.4's native STOMP plugin, not 4.3's (rules.native_stomp, at login)
        self.native_stomp = False
        self.version = "1.2"  # escaping for frames before negotiation
        self.session_id = ""
        self.user = ""
        self.vhost = ""
        self.heartbeat: tuple[int, int] = (0, 0)  # (server sends every, server expects every) ms
        self.eol = END_LF if rules.trailing_lf else END  # what ends every frame we send
        self.parser = FrameParser(
            Limits(
                max_frame_size=rules.max_frame_size_before_login,
                max_headers=rules.max_headers,
                max_header_length=rules.max_header_length,
            )
        )
        self.dest_rules = dest.DestinationRules(rules.default_topic_exchange)  # the broker's, once logged in
        self.frame_max = hdr.FRAME_MAX_DEFAULT  # the broker's, once logged in (Opened)
        self.subscriptions: dict[str, Subscription] = {}  # by consumer tag
        self.unacked = Unacked()  # what the client has to ACK, by delivery tag, in order
        self.transactions = Transactions(
            rules.max_transactions, rules.max_transaction_actions, rules.max_transaction_bytes
        )
        self.declared_queues: set[str] = NO_QUEUES  # type: ignore[assignment]  # a set from the first
        self.reply_queues: dict[str, str] = {}  # /temp-queue/<id> -> queue name
        # Exclusive queues belong to the AMQP connection, which other sessions may share: the
        # driver deletes them at the end, so they end with this STOMP connection as under the plugin.
        self.exclusive_queues: dict[str, bool] = {}  # name -> auto-delete
        # Queues a failed SUBSCRIBE declared: deleted (on a channel of their own) once it has closed.
        self.discard_on_close: list[str] = []
        self.client_id: str | None = None  # Artemis durable subscriptions
        # Scheduled delivery: None until this session found (or made) the topology; then the
        # exchanges the ``due`` exchange is bound to.
        self.scheduled_exchanges: set[str] | None = None
        # Streams (``streams.py``): the queues this session declared as streams, and the
        # consumers whose deliveries are watched (consumer tag -> (queue, is a stream: None
        # unknown)); None until the first.
        self.stream_queues: set[str] | None = None
        self.stream_consumers: dict[str, tuple[str, bool | None]] | None = None
        self.policy: Any = None  # Swaptacular: core.peer.PeerPolicy once CONNECT bound it
        self.token_login = False  # the passcode was a JWT (an OAuth 2 login /bridge/token can refresh)
        self.token_subject: str | None = None  # a JWT passcode's sub: a new token must be its
        self.ledger = ReceiptLedger(self.emit, counters.confirm_latency.observe)
        # mandatory publishes not confirmed yet, in order (created with the first: an empty deque
        # is ~600 bytes per idle connection)
        self.mandatory: deque[Sent] = NOTHING_HELD  # type: ignore[assignment]
        self.refused: tuple[int, StompError] | None = None  # the first publish RabbitMQ refused
        self.settling: dict[int, Callable[[bool], None]] = {}  # Settled plans waiting, by publish
        self.close_reason = ""
        self.close_detail = ""
        # Outputs: frames for the client; the publishes, acks and nacks to send, in order (they
        # cannot fail: a publish AMQP cannot carry is refused before it is numbered, so nothing
        # waits on them); work of the connection's own.
        self.out: list[bytes] = []
        self.wakeup: Callable[[], None] | None = None  # called when ``out`` stops being empty
        self.on_open: Callable[[], None] | None = None  # called once, when the login succeeded
        self.on_close: Callable[[], None] | None = None  # called once, when the connection must end
        self.to_amqp: list[Any] = []
        self.jobs: list[Job] = []
        # Told what happens to each SEND and delivery (observer.py): the driver's tracer, or None.
        self.observer: Observer | None = None

    # -- frames out ---------------------------------------------------------------------

    def emit(self, data: bytes) -> None:
        out = self.out
        if not out and self.wakeup is not None:
            self.wakeup()
        out.append(data)

    def data_to_send(self) -> list[bytes]:
        """The frames written since the last call, in order."""
        out, self.out = self.out, []
        return out

    def encode(self, command: str, headers: dict[str, str], body: bytes = b"", vectored: bool = False) -> bytes:
        """The one way the core encodes a frame for the client (``frames.encode_frame``, traced at
        DEBUG): 1.0 clients get the plugin's (1.2) escaping, the only safe choice, and so does a
        1.1 header with a raw CR, which 1.1 cannot escape. ``vectored``: a large body's frame as
        (head, body, end), its body not copied (the links write it as it is: ``frames.flatten``)."""
        if self.trace is not None:
            self.trace("out", Frame(command, headers, body))
        version = self.version
        try:
            return encode_frame(command, headers, body, "1.2" if version == "1.0" else version, self.eol, vectored)
        except ValueError:  # a raw CR that 1.1 cannot escape
            return encode_frame(command, headers, body, "1.2", self.eol, vectored)

    def deliver(self, headers: dict[str, str], body: bytes, sub: Subscription | None = None) -> None:
        """One MESSAGE (every MESSAGE: a delivery's, a browse's), held with ``sub``'s until its
        SUBSCRIBE's RECEIPT is out."""
        counters = self.counters
        counters.messages_delivered += 1
        counters.frames_out["MESSAGE"] += 1
        version = self.version
        if self.trace is None and version != "1.0":
            # encode's answer without its call (one per delivery): test_context pins it to encode
            try:
                data = encode_frame("MESSAGE", headers, body, version, self.eol, len(body) >= VECTORED_BODY)
            except ValueError:  # a raw CR that 1.1 cannot escape
                data = self.encode("MESSAGE", headers, body, len(body) >= VECTORED_BODY)
        else:
            data = self.encode("MESSAGE", headers, body, len(body) >= VECTORED_BODY)
        if sub is not None and sub.held is not None:
            sub.held.append(data)
        else:  # emit(), inlined: per delivery (test_session holds both to one write a pass)
            out = self.out
            if not out and self.wakeup is not None:
                self.wakeup()
            out.append(data)

    def release_held(self, sub: Subscription) -> None:
        held, sub.held = sub.held, None
        if held and self.state is not CLOSED:
            self.emit(joined(held))

    # -- receipts and publishes ---------------------------------------------------------

    def receipt(self, frame: Frame) -> None:
        """The frame's RECEIPT, if it asked for one, once RabbitMQ confirmed all before it."""
        receipt = frame.headers.get("receipt")
        if receipt is not None:
            self.queue_receipt(receipt)

    def queue_receipt(self, receipt: str, then: Callable[[], None] | None = None) -> None:
        # receipt_frame: encode's answer for a RECEIPT, made faster (one per receipted SEND;
        # tests/unit/test_frames.py holds it to encode_frame's)
        data = None if self.trace is not None else receipt_frame(receipt, self.eol)
        if data is None:
            data = self.encode("RECEIPT", {"receipt-id": receipt})
        self.counters.frames_out["RECEIPT"] += 1
        ledger = self.ledger
        ledger.receipt(receipt, data, ledger.last, then)

    def publish(self, exchange: str, routing_key: str, properties: dict, body: bytes, mandatory: bool) -> int:
        """A publish, numbered as RabbitMQ will confirm it (1, 2, 3 … on the session's one
        publishing channel): RECEIPTs queued after it wait for its confirm."""
        seq = self.ledger.last + 1
        self.ledger.published(seq)
        self.to_amqp.append(_new(Publish, (exchange, routing_key, properties, body, mandatory)))
        return seq

    def mandatory_sent(self, seq: int, exchange: str, routing_key: str, destination: str,
                       receipt: str | None) -> None:
        """Publish ``seq`` is mandatory: a basic.return is matched to it (``machine.returned``)."""
        if self.mandatory is NOTHING_HELD:
            self.mandatory = deque()
        self.mandatory.append(Sent(seq, exchange, routing_key, destination, receipt))

    def when_settled(self, seq: int, callback: Callable[[bool], None]) -> None:
        """``callback(True)`` once RabbitMQ confirmed publish ``seq``, ``(False)`` if it refused it
        or the connection ended first."""
        refused = self.refused
        if refused is not None and refused[0] <= seq or self.state is CLOSED:
            callback(False)
        elif not self.ledger.is_unconfirmed(seq):
            callback(True)
        else:
            self.settling[seq] = callback

    def refuse(self, seq: int, error: StompError) -> None:
        """RabbitMQ refused publish ``seq`` (returned or nacked it): see the module docstring."""
        if self.state is CLOSED:
            return
        if self.refused is None or seq < self.refused[0]:
            self.refused = (seq, error)
        if self.observer is not None:
            self.observer.refused(seq, error)
        self.state = move(self.state, "refused")
        self.ledger.stop_at(seq)
        for waiting in [s for s in self.settling if s >= seq]:
            self.settling.pop(waiting)(False)
        self.fail_if_refused()

    def fail_if_refused(self) -> None:
        refused = self.refused
        if refused is not None and self.ledger.confirmed_below(refused[0]):
            seq, error = refused
            if error.receipt_id is None:
                error.receipt_id = self.ledger.receipt_covering(seq)
            self.fail(error)

    # -- errors -------------------------------------------------------------------------

    def answer(self, exc: StompError, frame: Frame | None) -> None:
        """``frame`` failed (None: the connection's own work did): its ERROR, and the end of the
        connection unless the plugin keeps it open after this one (``close_on_error`` ends it
        after any)."""
        if frame is None:
            self.fail(exc)
            return
        if exc.receipt_id is None and exc.receipted:
            exc.receipt_id = frame.headers.get("receipt")
        if self.observer is not None:
            self.observer.failed(frame, exc)
        if exc.receipt_first:
            self.fail_after_receipt(exc, frame)
            return
        if exc.preceded_by is not None:
            self.fail(exc.preceded_by, close=False)
        self.fail(exc, close=exc.fatal or self.rules.close_on_error)

    def fail_after_receipt(self, error: StompError, frame: Frame) -> None:
        """The frame's RECEIPT (if it asked for one), then ``error`` and the end: the plugin
        answered the frame before RabbitMQ closed its channel. Nothing more is read meanwhile."""
        receipt = frame.headers.get("receipt")
        if receipt is None or self.state is CLOSED:
            self.fail(error)
            return
        if self.state is OPEN:
            self.state = move(self.state, "refused")  # reads no more frames
        self.queue_receipt(receipt, lambda: self.fail(error))

    def fail(self, error: StompError, *, close: bool = True) -> None:
        """The one place an error becomes an ERROR frame; the connection then ends unless
        ``close=False`` (the plugin's non-fatal errors, see ``protocol/errors.py``)."""
        if self.state is CLOSED:
            return
        if self.native_stomp:  # 4.4's plugin words some of RabbitMQ's errors its own way
            error = native_stomp_error(error)
        counters = self.counters
        counters.errors[error.message] += 1
        counters.frames_out["ERROR"] += 1
        if isinstance(error, AccessRefused):
            counters.auth_failures += 1
        log.debug(
            "stomp error sent",
            extra={"peer": self.peer_name, "error": error.message, "detail": error.detail, "private": error.private},
        )
        self.emit(self.encode("ERROR", error_headers(error), error.detail.encode("utf-8")))
        if close:
            self.close(error.message, error.private or error.detail)

    def close(self, reason: str = "", detail: str = "") -> None:
        """The connection ends (after an ERROR, a DISCONNECT, or the client's going)."""
        if self.state is CLOSED:
            return
        self.state = move(self.state, "closed")
        if reason:
            self.close_reason, self.close_detail = reason, detail
        self.transactions.clear()
        self.ledger.release_waiters()  # a DISCONNECT waiting for confirms ends, unreceipted
        settling, self.settling = self.settling, {}
        for callback in settling.values():
            callback(False)
        if self.on_close is not None:
            self.on_close()

    # -- destinations -------------------------------------------------------------------

    def destination(self, frame: Frame) -> dest.Destination:
        value = frame.headers.get("destination")
        if value is None:
            raise FrameRejected(
                "Missing destination", f"\"{frame.command}\" must include a 'destination' header\n"
            )
        return dest.parse_destination(value)

    def extended_destinations(self, frame: Frame) -> list[dest.Destination]:
        """A destination the plugin's parser refused: ``/dsub/<name>``, ``/temp-topic/`` or a
        composite; otherwise the plugin's own error."""
        value = frame.headers["destination"]
        found = features.parse_extended(value, self.client_id, self.session_id)
        if found is None:
            dest.parse_destination(value)  # raises the plugin's InvalidDestination
            raise AssertionError("unreachable: the destination parsed the second time")
        return found

    def declared(self, plan: dest.QueueDeclare, name: str) -> str:
        """RabbitMQ declared ``plan``'s queue as ``name``."""
        if plan.once_per_session:
            if self.declared_queues is NO_QUEUES:
                self.declared_queues = set()
            self.declared_queues.add(plan.queue)
        if plan.exclusive:
            self.exclusive_queues[name] = plan.auto_delete
        return name

    # -- the connection's own work ------------------------------------------------------

    def spawn(self, steps: Steps) -> None:
        """Work that no frame waits for (a resubscribe, one more window): the driver runs it."""
        job = first_step(self, steps, None)
        if job is not None:
            self.jobs.append(job)
