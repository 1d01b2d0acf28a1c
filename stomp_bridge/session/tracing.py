"""OpenTelemetry spans for each SEND and delivery, in the client's trace (the ``tracing`` setting).

Off by default, and optional: OpenTelemetry is the ``otel`` extra (``pip install
'stomp-bridge[otel]'``), imported only when ``tracing`` is on, so a bridge without it (or with
tracing off) runs exactly as before. The STOMP core reports what happens
(``core/observer.py``); :class:`ConnectionTracer` turns that into spans:

* ``SEND <destination>`` (SERVER), a child of the client's ``traceparent``/``tracestate`` on the
  SEND, from the frame to the moment its RECEIPT is written (or, without a receipt header, to
  the last confirm);
* ``publish <exchange>`` (PRODUCER), its child, from the publish to RabbitMQ's confirm (or its
  return or nack: status ERROR, ``stomp_bridge.confirm``); the AMQP message's
  ``traceparent``/``tracestate`` then name this span, so whatever consumes the message
  continues the trace from here;
* ``MESSAGE <destination>`` (CONSUMER), a child of the delivered message's ``traceparent``,
  from basic.deliver to the client's ACK or NACK (at once for ``ack:auto``); the MESSAGE's
  ``traceparent`` names this span.

Only a recorded (sampled) span replaces a ``traceparent``: where the trace is not sampled the
client's headers pass through untouched, as they do with tracing off. Sampling is parent-based:
a client's sampled flag decides for its trace, ``tracing_sample_ratio`` for traces the bridge
starts. Spans are exported over OTLP/HTTP in batches from the SDK's own thread; at shutdown what
is still buffered gets what is left of ``shutdown_grace`` (:meth:`Tracing.close`), and is dropped
with a WARNING if the collector has not taken it by then.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from stomp_bridge import __version__
from stomp_bridge.core.subscriptions import Subscription
from stomp_bridge.protocol.errors import StompError
from stomp_bridge.protocol.frames import Frame

if TYPE_CHECKING:
    from stomp_bridge.settings.sections import TracingSettings

log = logging.getLogger(__name__)

INSTALL = "pip install 'stomp-bridge[otel]'"
SYSTEM = "rabbitmq"
TRACE_HEADERS = ("traceparent", "tracestate")  # W3C Trace Context


class TracingUnavailable(RuntimeError):
    """``tracing`` is on but OpenTelemetry is not installed: the bridge does not start."""


def _otel() -> Any:
    """The OpenTelemetry modules the tracer needs, or :class:`TracingUnavailable`."""
    try:
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind, StatusCode
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError as exc:
        raise TracingUnavailable(
            f"tracing=true needs OpenTelemetry, which is not installed ({exc.name} is missing): "
            f"{INSTALL}, or set tracing=false."
        ) from None
    return trace, SpanKind, StatusCode, TraceContextTextMapPropagator


def _provider(settings: TracingSettings) -> Any:
    """A tracer provider exporting over OTLP/HTTP, parent-based sampling with the ratio."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    except ImportError as exc:
        raise TracingUnavailable(
            f"tracing=true needs the OpenTelemetry SDK and OTLP exporter ({exc.name} is missing): {INSTALL}."
        ) from None
    provider = TracerProvider(
        sampler=ParentBased(TraceIdRatioBased(settings.tracing_sample_ratio)), resource=resource(),
        shutdown_on_exit=False,  # Tracing.shutdown flushes, when the server closes
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.tracing_endpoint)))
    return provider


def resource() -> Any:
    """The spans' resource: ``service.name`` stomp-bridge and ``service.version``, unless the
    standard variables say otherwise (``OTEL_SERVICE_NAME``, then ``OTEL_RESOURCE_ATTRIBUTES``:
    the SDK's own precedence). ``Resource.create(attributes)`` puts its attributes over the
    variables', so the variables' detector goes on top of it again."""
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource

    ours = Resource.create({"service.name": "stomp-bridge", "service.version": __version__})
    return ours.merge(OTELResourceDetector().detect())


def unsampled(traceparent: str | bytes) -> bool:
    """A well-formed W3C traceparent whose sampled flag is off: the parent-based sampler records
    nothing under it, so no span is made at all (the SDK's non-recording spans cost ~25 µs per
    SEND for nothing) and the headers pass on untouched."""
    if type(traceparent) is bytes:
        traceparent = traceparent.decode("ascii", "replace")
    if len(traceparent) != 55 or traceparent[2] != "-" or traceparent[35] != "-" or traceparent[52] != "-":
        return False  # the propagator decides what to make of it
    try:
        return not int(traceparent[53:], 16) & 1
    except ValueError:
        return False


class _Getter:
    """Reads W3C headers from a STOMP frame's headers or an AMQP headers table, whose longstr
    values pamqp may hand over as bytes."""

    def get(self, carrier: Any, key: str) -> list[str] | None:
        value = carrier.get(key)
        if value is None:
            return None
        if type(value) is bytes:
            value = value.decode("utf-8", "replace")
        return [value] if type(value) is str else None

    def keys(self, carrier: Any) -> list[str]:
        return list(carrier)


_GETTER = _Getter()


class Tracing:
    """One bridge's tracer, shared by its connections (each gets a :class:`ConnectionTracer`)."""

    def __init__(self, provider: Any, *, owned: bool, root_ratio: float | None = None) -> None:
        trace, self.SpanKind, self.StatusCode, propagator = _otel()
        # tracing_sample_ratio 0: a message without a traceparent is never recorded (known only of
        # the provider built here; another provider's sampler decides for itself)
        self.no_roots = root_ratio == 0.0
        self.trace = trace
        self.provider = provider
        self.owned = owned  # built here from the settings: shut down (flushed) here too
        self.tracer = provider.get_tracer("stomp_bridge", __version__)
        self.propagator = propagator()

    @classmethod
    def start(cls, settings: TracingSettings, provider: Any = None) -> Tracing | None:
        """None when ``tracing`` is off; else the tracer, on ``provider`` (a test's in-memory
        one) or on an OTLP exporter built from the settings."""
        if not settings.tracing:
            return None
        _otel()  # the API first: its absence is the usual case, and the clearest message
        owned = provider is None
        if owned:
            provider = _provider(settings)
        log.info("tracing on", extra={"endpoint": settings.tracing_endpoint or "OTEL_EXPORTER_OTLP_* or default",
                                      "sample_ratio": settings.tracing_sample_ratio})
        return cls(provider, owned=owned, root_ratio=settings.tracing_sample_ratio if owned else None)

    def connection(self, peer_name: str) -> ConnectionTracer:
        return ConnectionTracer(self, peer_name)

    async def close(self, timeout: float) -> bool:
        """Export what is buffered and stop, within ``timeout`` seconds; False (and a WARNING) if
        the collector did not take it in time. The SDK's shutdown waits up to 30 s, and its
        exporter retries each batch for 10 s more: with a collector that does not answer, a pod
        would outlive its termination grace. Its shutdown runs in a daemon thread of its own,
        which a process that exits leaves behind."""
        if not self.owned:
            return True
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def finished(_: object = None) -> None:
            if not done.done():
                done.set_result(None)

        def shut_down() -> None:
            try:
                self.provider.shutdown()
            except Exception:  # noqa: BLE001 - the SDK's own failure, logged by it; the bridge stops anyway
                log.debug("tracer provider shutdown failed", exc_info=True)
            finally:
                try:
                    loop.call_soon_threadsafe(finished)
                except RuntimeError:  # the loop closed: nobody waits any more
                    pass

        threading.Thread(target=shut_down, name="stomp-bridge tracing shutdown", daemon=True).start()
        try:
            await asyncio.wait_for(asyncio.shield(done), max(timeout, 0.0))
        except asyncio.TimeoutError:
            log.warning("spans not exported: the trace collector did not take them within shutdown_grace; "
                        "they are dropped", extra={"timeout_seconds": round(timeout, 3)})
            return False
        return True


class _Send:
    """One SEND's span and what it still waits for."""

    __slots__ = ("frame", "span", "pending", "done", "receipt", "failed")

    def __init__(self, frame: Frame, span: Any) -> None:
        self.frame = frame
        self.span = span
        self.pending = 0  # publishes not yet confirmed
        self.done = False  # every publish is queued (Observer.handled)
        self.receipt = "receipt" in frame.headers
        self.failed = False


class ConnectionTracer:
    """The spans of one STOMP connection: the core's :class:`~stomp_bridge.core.observer.Observer`."""

    __slots__ = ("tracing", "peer", "_send", "_open", "_publishes", "_low", "_deliveries")

    def __init__(self, tracing: Tracing, peer_name: str) -> None:
        self.tracing = tracing
        self.peer = peer_name
        self._send: _Send | None = None  # the SEND the core is working on
        self._open: set[_Send] = set()  # SENDs whose span has not ended
        self._publishes: dict[int, tuple[Any, _Send]] = {}  # publish number -> (span, its SEND)
        self._low = 1  # no publish below this number is waiting for its confirm
        self._deliveries: dict[int, Any] = {}  # delivery tag -> span, until the client settles it

    # -- SEND -> publish -> confirm -> RECEIPT ---------------------------------------------

    def send(self, frame: Frame) -> None:
        t = self.tracing
        headers = frame.headers
        traceparent = headers.get("traceparent")
        if traceparent is None:
            if t.no_roots:
                self._send = None
                return
            parent = None
        elif unsampled(traceparent):
            self._send = None
            return
        else:
            parent = t.propagator.extract(headers, getter=_GETTER)
        destination = headers.get("destination", "")
        # Few attributes: each costs the SDK ~2 µs per span.
        attributes = {
            "messaging.system": SYSTEM,
            "messaging.destination.name": destination,
            "messaging.message.body.size": len(frame.body),
            "network.peer.address": self.peer,
        }
        if "receipt" in headers:
            attributes["stomp.receipt"] = headers["receipt"]
        span = t.tracer.start_span(f"SEND {destination}", context=parent, kind=t.SpanKind.SERVER, attributes=attributes)
        self._send = send = _Send(frame, span)
        self._open.add(send)

    def published(self, frame: Frame, seq: int, exchange: str, routing_key: str, properties: dict[str, Any]) -> None:
        send = self._send
        if send is None or send.frame is not frame:
            return
        t = self.tracing
        span = t.tracer.start_span(
            f"publish {exchange or 'amq.default'}", context=t.trace.set_span_in_context(send.span),
            kind=t.SpanKind.PRODUCER,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.operation.type": "send",
                "messaging.destination.name": exchange or "amq.default",
                "messaging.rabbitmq.destination.routing_key": routing_key,
                "stomp_bridge.publish.seq": seq,
            },
        )
        if span.is_recording():  # the message carries this span as its parent, in the same trace
            t.propagator.inject(properties["headers"], context=t.trace.set_span_in_context(span))
        self._publishes[seq] = (span, send)
        send.pending += 1

    def handled(self, frame: Frame) -> Callable[[], None] | None:
        send = self._send
        if send is None or send.frame is not frame:
            return None
        self._send = None
        send.done = True
        if send.failed or not (send.receipt or send.pending):
            self._end(send)
            return None
        if not send.receipt:
            return None  # ends with its last confirm

        def receipt_written() -> None:  # the span's end is the RECEIPT's time
            self._end(send)

        return receipt_written

    def _end(self, send: _Send, status: str | None = None) -> None:
        if status is not None:
            send.span.set_status(self.tracing.StatusCode.ERROR, status)
        send.span.end()
        self._open.discard(send)

    def confirmed(self, tag: int, multiple: bool) -> None:
        publishes = self._publishes
        if not publishes:
            return
        if multiple:
            for seq in range(self._low, tag + 1):
                entry = publishes.pop(seq, None)
                if entry is not None:
                    self._confirmed(*entry)
            self._low = max(self._low, tag + 1)
        else:
            entry = publishes.pop(tag, None)
            if entry is not None:
                self._confirmed(*entry)

    def _confirmed(self, span: Any, send: _Send) -> None:
        span.end()  # confirmed: status unset, no attribute (a refusal sets both)
        send.pending -= 1
        if send.done and not send.pending and not send.receipt and not send.failed:
            self._end(send)

    def refused(self, seq: int, error: StompError) -> None:
        entry = self._publishes.pop(seq, None)
        if entry is None:
            return
        span, send = entry
        outcome = "returned" if error.message == "Unroutable message" else "nack"
        span.set_attribute("stomp_bridge.confirm", outcome)
        span.set_status(self.tracing.StatusCode.ERROR, error.message)
        span.end()
        send.pending -= 1
        if not send.failed:
            send.failed = True
            send.span.set_status(self.tracing.StatusCode.ERROR, error.message)
            if send.done:  # its RECEIPT will never be written
                self._end(send)

    def failed(self, frame: Frame, error: StompError) -> None:
        send = self._send
        if send is None or send.frame is not frame:
            return
        self._send = None
        send.failed = True
        send.span.set_attribute("stomp.error", error.message)
        self._end(send, error.message)

    # -- delivery -> MESSAGE -> ACK --------------------------------------------------------

    def delivered(self, sub: Subscription, delivery_tag: int, headers: dict[str, str],
                  properties: dict[str, Any]) -> None:
        t = self.tracing
        table = properties.get("headers")
        traceparent = table.get("traceparent") if table else None
        if traceparent is None:
            if t.no_roots:
                return
            parent = None
        elif unsampled(traceparent):
            return
        else:
            parent = t.propagator.extract(table, getter=_GETTER)
        destination = headers.get("destination", "")
        attributes = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.destination.name": destination,
            "messaging.rabbitmq.message.delivery_tag": delivery_tag,
            "network.peer.address": self.peer,
        }
        subscription = headers.get("subscription")
        if subscription is not None:
            attributes["messaging.destination.subscription.name"] = subscription
        if not sub.ack:
            attributes["stomp.ack"] = "auto"
        span = t.tracer.start_span(f"MESSAGE {destination}", context=parent, kind=t.SpanKind.CONSUMER,
                                   attributes=attributes)
        if span.is_recording():  # the client's processing continues the trace from this span
            t.propagator.inject(headers, context=t.trace.set_span_in_context(span))
        if sub.ack:
            self._deliveries[delivery_tag] = span
        else:  # written to the client's socket buffer now; RabbitMQ has it acknowledged by the bridge
            span.end()

    def settled(self, delivery_tag: int, multiple: bool, command: str) -> None:
        deliveries = self._deliveries
        if multiple:
            tags = [tag for tag in deliveries if tag <= delivery_tag]
        else:
            tags = [delivery_tag] if delivery_tag in deliveries else []
        for tag in tags:
            span = deliveries.pop(tag)
            span.set_attribute("stomp.ack", command)
            span.end()

    # -- the end -----------------------------------------------------------------------------

    def close(self) -> None:
        """The connection ended: what is still open ends here, saying so."""
        error = self.tracing.StatusCode.ERROR
        self._send = None
        for span, _ in self._publishes.values():
            span.set_status(error, "connection closed before RabbitMQ confirmed the publish")
            span.end()
        self._publishes.clear()
        for send in list(self._open):
            self._end(send, "connection closed before the SEND was done" if not send.failed else None)
        for span in self._deliveries.values():
            span.set_attribute("stomp.ack", "none: connection closed (RabbitMQ requeues it)")
            span.end()
        self._deliveries.clear()
