"""The STOMP core: a connection's decisions with no I/O, in the manner of h11 and websockets.

Inputs are method calls: the client's bytes (:meth:`StompCore.receive_data`, handled by
:meth:`StompCore.handle_frames`, a fair share of frames at a time; one frame:
:meth:`StompCore.frame_received`), and what RabbitMQ and the driver report (:meth:`~StompCore.delivered`, :meth:`~StompCore.confirmed`,
:meth:`~StompCore.returned`, :meth:`~StompCore.cancelled`, :meth:`~StompCore.amqp_closed`,
:meth:`~StompCore.timer_fired`, and each plan's outcome through its :class:`~.context.Job`).
Outputs are values the driver collects: the frames to write (``data_to_send``), the plans of
a frame's job, the publishes, acks and nacks to send (``to_amqp``), the connection's own jobs
(``jobs``), and whether it ended (``closed``, ``on_close``). Nothing here awaits, reads a
socket or a clock of its own, or knows aiormq: ``tests/unit/test_core.py`` runs every
command in every state with no broker.
"""

from __future__ import annotations

from typing import Any

from stomp_bridge.core import commands, fanout, resume, send, streams, subscribe
from stomp_bridge.core.context import Context, Job, Steps, first_step
from stomp_bridge.core.plans import Ack, SetTimer
from stomp_bridge.core.state import CLOSED, LOGIN, OPEN, action
from stomp_bridge.protocol import headers as hdr
from stomp_bridge.protocol.errors import BrokerError, FrameRejected, ProtocolError, StompError, token_expired, tp
from stomp_bridge.protocol.frames import CLIENT_COMMANDS, VECTORED_BODY, Frame

FAIR_SHARE = 64  # frames one connection handles before the driver lets the others in


def _connect_timer(seconds: float) -> Steps:
    if seconds:
        yield SetTimer("connect", seconds)


def not_connected(core: Context, frame: Frame) -> Steps:
    """A frame before CONNECT: the plugin's ERROR, or (``implicit_connect``) a login with the
    defaults first, as the plugin's ``implicit_connect`` does, then the frame."""
    if not core.rules.implicit_connect:
        raise FrameRejected("Illegal command", "You must log in using CONNECT first")
    yield from commands.connect(core, Frame("CONNECT", {}), implicit=True)
    name = action(core.state, frame.command)
    if name is not None:
        frame.headers = hdr.trim_headers(frame.headers, core.version)
        steps = HANDLERS[name](core, frame)
        if steps is not None:
            yield from steps


def bad_command(core: Context, frame: Frame) -> None:
    raise FrameRejected("Bad command", f"Could not interpret command {tp(frame.command)}\n")


HANDLERS: dict[str, Any] = {
    "connect": commands.connect,
    "already_connected": commands.already_connected,
    "send": send.send,
    "subscribe": subscribe.subscribe,
    "unsubscribe": subscribe.unsubscribe,
    "ack": commands.ack,
    "nack": commands.nack,
    "begin": commands.begin,
    "commit": commands.commit,
    "abort": commands.abort,
    "disconnect": commands.disconnect,
    "not_connected": not_connected,
    "bad_command": bad_command,
}


class StompCore(Context):
    """One STOMP connection's decisions (see the module docstring)."""

    __slots__ = ()

    def started(self) -> Job | None:
        """The connection was accepted: its first plans (``connect_timeout``, ``timer_fired``)."""
        return first_step(self, _connect_timer(self.rules.connect_timeout), None)

    # -- the client ----------------------------------------------------------------------

    def receive_data(self, data: bytes | memoryview) -> None:
        """Bytes the client sent (handled by :meth:`handle_frames`)."""
        self.parser.feed(data)

    def handle_frames(self, budget: int = FAIR_SHARE) -> Job | bool:
        """Handle the complete frames received, in order, up to ``budget`` of them: the job of a
        frame that needs RabbitMQ (the driver runs it, then calls again), True when there is
        more to do but the others should have their turn (``budget`` frames handled, or as many
        frames queued for the client: let it take them), False once every frame received is
        handled (or the connection ended). A frame that breaks STOMP's grammar is its ERROR."""
        parser = self.parser
        frames_in = self.counters.frames_in
        out = self.out
        handled = 0
        try:
            while handled < budget:
                if self.state is CLOSED:
                    return False
                frame = parser.next_frame()
                if frame is None:
                    return False
                handled += 1
                # The client names the command: anything but STOMP's own is "other" (a label per
                # invented command would grow /metrics without bound).
                command = frame.command
                frames_in[command if command in CLIENT_COMMANDS else "other"] += 1
                if self.trace is not None:
                    self.trace("in", frame)
                job = self.frame_received(frame)
                if job is not None:
                    return job
                if len(out) >= budget:
                    return True
        except StompError as exc:  # the parser's: the bytes are not STOMP
            self.fail(exc)
            return False
        finally:
            self.frames_handled += handled
        return self.state is not CLOSED

    def frame_received(self, frame: Frame) -> Job | None:
        """Handle one client frame: None when it is done already (the usual case), else the
        job whose plans the driver runs before it handles the next frame."""
        state = self.state
        name = action(state, frame.command)
        if name is None:
            return None  # failing or closed: the client's frames no longer count
        if state is OPEN and self.version == "1.0":
            frame.headers = hdr.trim_headers(frame.headers, "1.0")
        try:
            steps = HANDLERS[name](self, frame)
            if steps is None:
                return None
            first = steps.send(None)
        except StopIteration:
            return None
        except StompError as exc:
            self.answer(exc, frame)
            return None
        return Job(self, steps, frame, first)

    def timer_fired(self, name: str) -> None:
        if name == "token":
            self.fail(token_expired())
        elif name == "connect":
            if self.state is LOGIN and not self.logging_in:  # a CONNECT that arrived has its own timeout
                self.fail(ProtocolError(
                    "Connect timeout", f"No CONNECT frame within {self.rules.connect_timeout:g} seconds"))
        elif name.startswith(resume.TIMER_PREFIX):
            resume.timer_fired(self, name)

    @property
    def receipts_pending(self) -> int:
        return self.ledger.held

    # -- RabbitMQ --------------------------------------------------------------------------

    def delivered(self, delivery: tuple) -> None:
        """basic.deliver: a MESSAGE for the subscription of its consumer tag."""
        tag, delivery_tag, redelivered, exchange, routing_key, properties, body = delivery
        sub = self.subscriptions.get(tag)
        if sub is None or self.state is CLOSED:
            return
        headers = hdr.message_headers(
            sub.consumer_tag, self.session_id, delivery_tag, exchange, routing_key, redelivered, properties,
            ack=sub.ack and self.version == "1.2",
        )
        if sub.filter is not None and not sub.filter(headers):
            # A selector refused it: acknowledged, so RabbitMQ forgets it (the queue is the
            # subscription's own) and the prefetch window moves on.
            if sub.ack:
                self.to_amqp.append(Ack(delivery_tag, False))
            return
        if sub.position is not None:
            resume.delivered(self, sub, delivery_tag, headers)
        if sub.ack:
            self.unacked.delivered(delivery_tag, sub)
            if sub.watch_stream:
                streams.delivered(self, tag, delivery_tag, properties)
            if sub.window and not sub.growing and sub.window_full():
                sub.growing = True
                self.spawn(subscribe.grow(self, sub))
        if self.observer is not None:
            self.observer.delivered(sub, delivery_tag, headers, properties)
        self.deliver(headers, body, sub)

    def fanned_out(self, consumer_tag: str, shared: hdr.SharedMessage) -> int:
        """A delivery of a queue shared with other sessions (fan-out at the edge): ``fanout.delivered``."""
        return fanout.delivered(self, consumer_tag, shared)

    def confirmed(self, tag: int, multiple: bool, nack: bool) -> None:
        """basic.ack / basic.nack of publish ``tag`` (and all before it if ``multiple``)."""
        if self.state is CLOSED:
            return
        ledger = self.ledger
        if nack:
            low = ledger.lowest_unconfirmed()
            self.refuse(
                low if multiple and low is not None and low < tag else tag,
                BrokerError(
                    "Message rejected",
                    "RabbitMQ refused (nacked) a published message; no RECEIPT will be sent "
                    "for it or anything after it. Reconnect and resend unreceipted messages.",
                    private=f"nack delivery_tag={tag} multiple={multiple}",
                ),
            )
            return
        if self.observer is not None:  # before the RECEIPTs this confirm lets out
            self.observer.confirmed(tag, multiple)
        ledger.confirmed(tag, multiple)
        sent = self.mandatory
        while sent and not ledger.is_unconfirmed(sent[0].seq):
            sent.popleft()
        settling = self.settling
        if settling:
            for seq in [s for s in settling if (s <= tag if multiple else s == tag)]:
                settling.pop(seq)(True)
        if self.refused is not None:
            self.fail_if_refused()

    def returned(self, reply_code: int, reply_text: str, exchange: str, routing_key: str) -> None:
        """basic.return: RabbitMQ returned a mandatory publish no queue took (before its confirm).

        Returns come in publish order: the message is the first unconfirmed mandatory one to that
        exchange and key (or, should none match, the first unconfirmed one: naming an earlier SEND
        only withholds more RECEIPTs, never sends one too many)."""
        if self.state is CLOSED:
            return
        sent = self.mandatory
        match = next((entry for entry in sent if entry.exchange == exchange and entry.routing_key == routing_key), None)
        if match is None and sent:
            match = sent[0]
        if match is not None:
            seq, destination, receipt = match.seq, match.destination, match.receipt
        else:  # cannot happen: only mandatory publishes come back
            seq, destination, receipt = self.ledger.last, "?", None
        self.counters.messages_returned += 1
        self.refuse(
            seq,
            BrokerError(
                "Unroutable message",
                f"RabbitMQ returned the message sent to '{destination}': {reply_text} (no queue is bound "
                f"to exchange '{exchange}' with routing key '{routing_key}'). It was not stored, and no "
                "RECEIPT follows for it or anything sent after it: bind a queue (or send elsewhere), "
                "then reconnect and resend.",
                private=f"basic.return {reply_code} {reply_text}",
                receipt_id=receipt,
            ),
        )

    def cancelled(self, consumer_tag: str) -> None:
        """RabbitMQ cancelled a consumer: see ``subscribe.server_cancelled``."""
        sub = self.subscriptions.get(consumer_tag)
        if sub is not None and self.state is not CLOSED:
            subscribe.server_cancelled(self, sub, consumer_tag)

    def amqp_closed(self, error: StompError) -> None:
        """The channel or its connection closed under the session."""
        if self.state is not CLOSED:
            self.counters.amqp_connection_failures += 1
        self.fail(error)

    # -- the end ---------------------------------------------------------------------------

    def queues_to_delete(self) -> list[str]:
        """The session's exclusive queues, which must go with it (see ``exclusive_queues``)."""
        return list(self.exclusive_queues)
