"""Spans of the STOMP core's SENDs and deliveries (session/tracing.py), on the core with a fake
RabbitMQ (testkit/core.py) and OpenTelemetry's in-memory exporter: which spans, their parents,
their attributes, and the trace headers the AMQP message and the MESSAGE carry. Also: with no
observer, ``traceparent``/``tracestate`` pass through the core untouched both ways."""

from __future__ import annotations

import asyncio
import http.server
import socket
import threading

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, StatusCode

from stomp_bridge.core import plans as p
from stomp_bridge import __version__
from stomp_bridge.session.tracing import Tracing, resource
from stomp_bridge.settings import TracingSettings
from testkit.core import Harness

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
SAMPLED = f"00-{TRACE}-{CLIENT_SPAN}-01"
NOT_SAMPLED = f"00-{TRACE}-{CLIENT_SPAN}-00"
STATE = "vendor=abc,other=1"


@pytest.fixture
def exporter():
    return InMemorySpanExporter()


def traced(exporter: InMemorySpanExporter, ratio: float = 1.0, **rules) -> Harness:
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio)))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    h = Harness(**rules)
    h.core.observer = Tracing(provider, owned=False).connection("127.0.0.1:5000")
    h.connect()
    return h


def spans(exporter: InMemorySpanExporter) -> dict[str, object]:
    return {span.name: span for span in exporter.get_finished_spans()}


def parent_of(traceparent: str) -> str:
    return traceparent.split("-")[2]


def hex_id(span_id: int) -> str:
    return format(span_id, "016x")


# -- without an observer: the headers are the application's --------------------------------


def test_without_tracing_traceparent_and_tracestate_reach_the_amqp_message_and_come_back():
    h = Harness()
    h.connect()
    h.frame("SEND", {"destination": "/queue/q", "traceparent": SAMPLED, "tracestate": STATE})
    (publish,) = h.of(p.Publish)
    assert (publish.properties["headers"]["traceparent"], publish.properties["headers"]["tracestate"]) == (
        SAMPLED, STATE)
    h.frame("SUBSCRIBE", {"destination": "/queue/q", "id": "s"})
    h.frames()
    h.deliver("T_s", 1, headers={"traceparent": SAMPLED, "tracestate": STATE})
    (message,) = h.frames()
    assert (message.headers["traceparent"], message.headers["tracestate"]) == (SAMPLED, STATE)


# -- SEND -> publish -> confirm -> RECEIPT -----------------------------------------------


def test_a_send_is_a_child_of_the_clients_span_and_its_publish_a_child_of_the_send(exporter):
    h = traced(exporter)
    h.frame("SEND", {"destination": "/queue/q", "traceparent": SAMPLED, "tracestate": STATE, "receipt": "r1"},
            b"hello")
    assert exporter.get_finished_spans() == ()  # nothing is done before RabbitMQ confirms
    h.confirm(1)
    assert h.commands() == ["RECEIPT"]
    got = spans(exporter)
    send, publish = got["SEND /queue/q"], got["publish amq.default"]
    assert format(send.context.trace_id, "032x") == TRACE and send.parent.span_id == int(CLIENT_SPAN, 16)
    assert send.parent.is_remote and send.kind is SpanKind.SERVER
    assert publish.parent.span_id == send.context.span_id and publish.kind is SpanKind.PRODUCER
    assert publish.context.trace_id == send.context.trace_id
    assert dict(send.attributes) == {
        "messaging.system": "rabbitmq", "messaging.destination.name": "/queue/q",
        "messaging.message.body.size": 5, "network.peer.address": "127.0.0.1:5000", "stomp.receipt": "r1",
    }
    assert dict(publish.attributes) == {
        "messaging.system": "rabbitmq", "messaging.operation.type": "send",
        "messaging.destination.name": "amq.default", "messaging.rabbitmq.destination.routing_key": "q",
        "stomp_bridge.publish.seq": 1,
    }
    assert publish.status.status_code is StatusCode.UNSET and send.status.status_code is StatusCode.UNSET
    assert publish.end_time <= send.end_time  # the confirm, then the RECEIPT
    # The AMQP message names the publish span as its parent, in the client's trace and state.
    (plan,) = h.of(p.Publish)
    table = plan.properties["headers"]
    assert table["traceparent"] == f"00-{TRACE}-{hex_id(publish.context.span_id)}-01"
    assert table["tracestate"] == STATE


def test_without_a_receipt_the_send_ends_with_its_last_confirm(exporter):
    h = traced(exporter)
    h.frame("SEND", {"destination": "/topic/a,/queue/b", "traceparent": SAMPLED})  # composite: two publishes
    h.confirm(1)
    assert [s.name for s in exporter.get_finished_spans()] == ["publish amq.topic"]
    h.confirm(2)
    assert [s.name for s in exporter.get_finished_spans()] == [
        "publish amq.topic", "publish amq.default", "SEND /topic/a,/queue/b"]


def test_a_multiple_confirm_ends_every_publish_it_covers(exporter):
    h = traced(exporter)
    for i in range(3):
        h.frame("SEND", {"destination": "/topic/t", "receipt": f"r{i}"})
    h.confirm(3, multiple=True)
    assert h.commands() == ["RECEIPT"] * 3
    assert sorted(s.name for s in exporter.get_finished_spans()) == ["SEND /topic/t"] * 3 + ["publish amq.topic"] * 3


def test_a_send_without_traceparent_starts_a_trace_of_its_own_the_message_carries(exporter):
    h = traced(exporter)
    h.frame("SEND", {"destination": "/topic/t"})
    h.confirm(1)
    send, publish = spans(exporter)["SEND /topic/t"], spans(exporter)["publish amq.topic"]
    assert send.parent is None
    (plan,) = h.of(p.Publish)
    assert parent_of(plan.properties["headers"]["traceparent"]) == hex_id(publish.context.span_id)


def test_a_trace_the_client_did_not_sample_records_nothing_and_keeps_its_headers(exporter):
    h = traced(exporter)
    h.frame("SEND", {"destination": "/topic/t", "traceparent": NOT_SAMPLED, "tracestate": STATE, "receipt": "r"})
    h.confirm(1)
    assert h.commands() == ["RECEIPT"]
    assert exporter.get_finished_spans() == ()
    (plan,) = h.of(p.Publish)
    assert (plan.properties["headers"]["traceparent"], plan.properties["headers"]["tracestate"]) == (
        NOT_SAMPLED, STATE)


def test_the_sample_ratio_applies_to_traces_the_bridge_starts(exporter):
    h = traced(exporter, ratio=0.0)
    h.frame("SEND", {"destination": "/topic/t"})
    h.frame("SEND", {"destination": "/topic/t", "traceparent": SAMPLED})
    h.confirm(2, multiple=True)
    assert {s.context.trace_id for s in exporter.get_finished_spans()} == {int(TRACE, 16)}
    first, second = h.of(p.Publish)
    assert "traceparent" not in first.properties["headers"]


def test_a_returned_publish_ends_both_spans_in_error(exporter):
    h = traced(exporter, mandatory=True)
    h.frame("SEND", {"destination": "/topic/nobody", "traceparent": SAMPLED, "receipt": "r"})
    h.return_("amq.topic", "nobody")
    h.confirm(1)
    assert h.commands() == ["ERROR"]
    got = spans(exporter)
    send, publish = got["SEND /topic/nobody"], got["publish amq.topic"]
    assert publish.status.status_code is StatusCode.ERROR and publish.attributes["stomp_bridge.confirm"] == "returned"
    assert send.status.status_code is StatusCode.ERROR and send.status.description == "Unroutable message"


def test_a_nacked_publish_ends_in_error(exporter):
    h = traced(exporter)
    h.frame("SEND", {"destination": "/topic/t", "receipt": "r"})
    h.confirm(1, nack=True)
    publish = spans(exporter)["publish amq.topic"]
    assert publish.attributes["stomp_bridge.confirm"] == "nack"
    assert spans(exporter)["SEND /topic/t"].status.description == "Message rejected"


def test_a_send_the_core_refuses_ends_in_error_with_no_publish(exporter):
    h = traced(exporter)
    h.frame("SEND", {"destination": "/topic/t", "traceparent": SAMPLED, "message-id": "not allowed"})
    assert h.commands() == ["ERROR"]
    (send,) = exporter.get_finished_spans()
    assert send.name == "SEND /topic/t" and send.status.status_code is StatusCode.ERROR
    assert send.attributes["stomp.error"] == "Invalid header"


def test_a_transactional_send_is_traced_at_its_commit(exporter):
    h = traced(exporter)
    h.frame("BEGIN", {"transaction": "tx"})
    h.frame("SEND", {"destination": "/topic/t", "transaction": "tx", "traceparent": SAMPLED})
    assert h.of(p.Publish) == []
    h.frame("COMMIT", {"transaction": "tx", "receipt": "c"})
    h.confirm(1)
    assert h.commands() == ["RECEIPT"]
    assert sorted(s.name for s in exporter.get_finished_spans()) == ["SEND /topic/t", "publish amq.topic"]


def test_what_the_connection_leaves_unfinished_ends_at_its_close(exporter):
    h = traced(exporter)
    h.frame("SEND", {"destination": "/topic/t", "receipt": "r"})
    h.frame("SUBSCRIBE", {"destination": "/queue/q", "id": "s", "ack": "client"})
    h.deliver("T_s", 1)
    h.core.close()
    h.core.observer.close()
    got = spans(exporter)
    assert got["publish amq.topic"].status.description == "connection closed before RabbitMQ confirmed the publish"
    assert got["SEND /topic/t"].status.status_code is StatusCode.ERROR
    assert got["MESSAGE /queue/q"].attributes["stomp.ack"].startswith("none")


# -- delivery -> MESSAGE -> ACK ----------------------------------------------------------


def test_a_delivery_is_a_child_of_the_messages_traceparent_until_the_clients_ack(exporter):
    h = traced(exporter)
    h.frame("SUBSCRIBE", {"destination": "/queue/q", "id": "s", "ack": "client-individual"})
    h.frames()
    h.deliver("T_s", 7, headers={"traceparent": SAMPLED, "tracestate": STATE})
    (message,) = h.frames()
    assert exporter.get_finished_spans() == ()  # until the ACK
    h.frame("ACK", {"id": message.headers["ack"]})
    (span,) = exporter.get_finished_spans()
    assert span.name == "MESSAGE /queue/q" and span.kind is SpanKind.CONSUMER
    assert span.parent.span_id == int(CLIENT_SPAN, 16) and format(span.context.trace_id, "032x") == TRACE
    assert dict(span.attributes) == {
        "messaging.system": "rabbitmq", "messaging.operation.type": "process",
        "messaging.destination.name": "/queue/q", "messaging.rabbitmq.message.delivery_tag": 7,
        "network.peer.address": "127.0.0.1:5000", "messaging.destination.subscription.name": "s",
        "stomp.ack": "ACK",
    }
    # The client's own processing continues the trace from the bridge's span.
    assert message.headers["traceparent"] == f"00-{TRACE}-{hex_id(span.context.span_id)}-01"
    assert message.headers["tracestate"] == STATE


def test_a_cumulative_ack_ends_every_delivery_it_settles(exporter):
    h = traced(exporter)
    h.frame("SUBSCRIBE", {"destination": "/queue/q", "id": "s", "ack": "client"})
    h.frames()
    for tag in (1, 2, 3):
        h.deliver("T_s", tag, headers={"traceparent": SAMPLED})
    messages = h.frames()
    h.frame("NACK", {"id": messages[1].headers["ack"]})
    assert sorted(s.attributes["messaging.rabbitmq.message.delivery_tag"] for s in exporter.get_finished_spans()) == [
        1, 2]
    assert {s.attributes["stomp.ack"] for s in exporter.get_finished_spans()} == {"NACK"}


def test_an_auto_ack_delivery_ends_when_its_message_is_written(exporter):
    h = traced(exporter)
    h.frame("SUBSCRIBE", {"destination": "/topic/t", "id": "s"})
    h.frames()
    h.deliver("T_s", 1, headers={"traceparent": SAMPLED})
    (span,) = exporter.get_finished_spans()
    assert span.attributes["stomp.ack"] == "auto"


def test_a_delivery_without_a_sampled_trace_keeps_its_headers(exporter):
    h = traced(exporter)
    h.frame("SUBSCRIBE", {"destination": "/topic/t", "id": "s"})
    h.frames()
    h.deliver("T_s", 1, headers={"traceparent": NOT_SAMPLED.encode(), "tracestate": STATE})  # bytes: a longstr
    (message,) = h.frames()
    assert exporter.get_finished_spans() == ()
    assert (message.headers["traceparent"], message.headers["tracestate"]) == (NOT_SAMPLED, STATE)


def test_the_bridge_starts_no_trace_when_its_ratio_is_zero(exporter):
    """tracing_sample_ratio=0: only the clients' sampled traces are recorded; a message without a
    traceparent makes no span (and gets no traceparent)."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    provider = TracerProvider(sampler=ParentBased(ALWAYS_OFF))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    h = Harness()
    h.core.observer = Tracing(provider, owned=False, root_ratio=0.0).connection("c")
    h.connect()
    h.frame("SEND", {"destination": "/topic/t"})
    h.frame("SEND", {"destination": "/topic/t", "traceparent": SAMPLED})
    h.confirm(2, multiple=True)
    assert [s.name for s in exporter.get_finished_spans()] == ["publish amq.topic", "SEND /topic/t"]
    first, _ = h.of(p.Publish)
    assert "traceparent" not in first.properties["headers"]


@pytest.mark.parametrize("traceparent, expected", [
    (NOT_SAMPLED, True), (NOT_SAMPLED.encode(), True), (f"00-{TRACE}-{CLIENT_SPAN}-02", True),
    (SAMPLED, False), (f"00-{TRACE}-{CLIENT_SPAN}-03", False),
    ("00-short-00", False), (f"00-{TRACE}-{CLIENT_SPAN}-zz", False), (f"00_{TRACE}-{CLIENT_SPAN}-00", False),
])
def test_only_a_well_formed_unsampled_traceparent_skips_the_spans(traceparent, expected):
    from stomp_bridge.session.tracing import unsampled

    assert unsampled(traceparent) is expected


# -- the provider built from the settings: its resource, its shutdown ----------------------------

@pytest.mark.parametrize(("env", "service"), [
    ({}, "stomp-bridge"),
    ({"OTEL_SERVICE_NAME": "orders-bridge"}, "orders-bridge"),
    ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attributes,deployment.environment=prod"}, "from-attributes"),
    ({"OTEL_SERVICE_NAME": "orders-bridge", "OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attributes"},
     "orders-bridge"),  # the SDK's precedence: OTEL_SERVICE_NAME over the attributes
])
def test_the_standard_variables_name_the_service(monkeypatch, env, service):
    for name in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    attributes = resource().attributes
    assert attributes["service.name"] == service
    assert attributes["service.version"] == __version__
    if "deployment.environment" in env.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        assert attributes["deployment.environment"] == "prod"


@pytest.fixture
def silent_collector(monkeypatch):
    """An OTLP/HTTP address that accepts connections and never answers (a collector that hangs),
    kept until the SDK's abandoned shutdown has given up (its export timeout shortened to 1 s),
    so that nothing retries against a closed port after the test."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1/traces"
        for thread in threading.enumerate():
            if thread.name == "stomp-bridge tracing shutdown":
                thread.join(15)


async def test_shutdown_exports_within_its_timeout_even_when_the_collector_never_answers(silent_collector):
    """1,000 spans buffered for a collector that hangs: the SDK's own shutdown takes 30 s and more;
    the tracer's close gives up after its timeout, saying so."""
    tracing = Tracing.start(TracingSettings(tracing=True, tracing_endpoint=silent_collector))
    assert tracing is not None and tracing.owned
    for n in range(1000):
        tracing.tracer.start_span(f"SEND /queue/{n}").end()
    loop = asyncio.get_running_loop()
    began = loop.time()
    assert await tracing.close(0.5) is False
    assert loop.time() - began < 5.0  # 0.5 s and the thread's start, far under the SDK's 30 s


async def test_shutdown_reports_success_when_the_collector_takes_the_spans(tmp_path):
    """A collector that answers: close() returns True once the spans are out."""
    got = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers["Content-Length"]))
            got.set()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
        tracing = Tracing.start(TracingSettings(tracing=True, tracing_endpoint=endpoint))
        tracing.tracer.start_span("SEND /queue/a").end()
        assert await tracing.close(10.0) is True
        assert got.is_set()
    finally:
        server.shutdown()
        server.server_close()
