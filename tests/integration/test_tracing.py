"""Traces across the hop: W3C ``traceparent``/``tracestate`` from a SEND to the AMQP message and
back on the MESSAGE (every target: the plugin carries them as opaque headers, and so does the
bridge with tracing off), and with ``tracing=true`` the bridge's own spans (bridge only): SEND →
publish → confirm → RECEIPT and delivery → MESSAGE → ACK, as children of the client's trace,
checked with OpenTelemetry's in-memory exporter, and exported over OTLP/HTTP to a receiver here.
"""

from __future__ import annotations

import gzip
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from tests.conftest import StompTarget
from tests.integration.stomp_client import Client

bridge_only = pytest.mark.skipif(
    os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native", reason="the bridge's tracing setting"
)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SAMPLED = f"00-{TRACE}-00f067aa0ba902b7-01"
STATE = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"


def test_traceparent_and_tracestate_reach_the_amqp_message_and_come_back_on_message(client, rabbit, queues, unique):
    """What the plugin does with them (and the bridge with tracing off): an application header
    like any other, copied into the AMQP headers table and back, byte for byte."""
    name = f"trace-{unique}"
    queues.append(name)
    publisher = client()
    trace_headers = {"traceparent": SAMPLED, "tracestate": STATE}
    publisher.send_with_receipt(f"/queue/{name}", "first", headers=trace_headers)
    (stored,) = rabbit.get(name)
    assert {k: stored["properties"]["headers"][k] for k in trace_headers} == trace_headers
    publisher.send_with_receipt(f"/queue/{name}", "second", headers=trace_headers)
    consumer = client()
    consumer.subscribe(f"/queue/{name}")
    message = consumer.next_message()
    assert message.body == b"second"
    assert {k: message.headers[k] for k in trace_headers} == trace_headers


# -- the bridge's spans (tracing=true) ----------------------------------------------------


@pytest.fixture
def spans():
    """The test's and the bridge's spans, in one in-memory exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def _stomp_py(server) -> Client:
    return Client(StompTarget("127.0.0.1", server.port, native=False))


@bridge_only
def test_a_send_and_its_delivery_are_spans_in_the_clients_trace(bridge, spans, queues, unique):
    """A stomp.py producer sends inside a span of its own; the bridge's SEND is its child, the
    publish the SEND's, and the consumer's MESSAGE the publish's (the AMQP message carried the
    publish span's traceparent); the consumer sees the MESSAGE span as its parent."""
    provider, exporter = spans
    server = bridge(tracing=True, tracer_provider=provider)
    name = f"traced-{unique}"
    queues.append(name)
    consumer, producer = _stomp_py(server), _stomp_py(server)
    consumer.subscribe(f"/queue/{name}", ack="client-individual")
    with provider.get_tracer("test").start_as_current_span("produce", kind=SpanKind.PRODUCER) as produce:
        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier)
        receipt = producer.send_with_receipt(f"/queue/{name}", "traced", headers={**carrier, "tracestate": STATE})
    message = consumer.next_message()
    consumer.conn.ack(message.headers["ack"], receipt="acked")
    consumer.wait_receipt("acked")

    got = {span.name: span for span in exporter.get_finished_spans()}
    send, publish, delivery = got[f"SEND /queue/{name}"], got["publish amq.default"], got[f"MESSAGE /queue/{name}"]
    trace_id = produce.get_span_context().trace_id
    assert {s.context.trace_id for s in (send, publish, delivery)} == {trace_id}
    assert send.parent.span_id == produce.get_span_context().span_id and send.kind is SpanKind.SERVER
    assert publish.parent.span_id == send.context.span_id and publish.kind is SpanKind.PRODUCER
    assert delivery.parent.span_id == publish.context.span_id and delivery.kind is SpanKind.CONSUMER
    # SEND → publish → confirm → RECEIPT, in that order in time
    assert send.start_time <= publish.start_time <= publish.end_time <= send.end_time
    assert send.attributes["stomp.receipt"] == receipt.headers["receipt-id"]
    assert publish.attributes["messaging.rabbitmq.destination.routing_key"] == name
    assert "stomp_bridge.confirm" not in publish.attributes  # confirmed: only a refusal says more
    # delivery → MESSAGE → ACK
    assert delivery.attributes["stomp.ack"] == "ACK"
    assert delivery.attributes["messaging.destination.subscription.name"] == "1"
    assert delivery.attributes["messaging.rabbitmq.message.delivery_tag"] >= 1
    version, trace_hex, parent, flags = message.headers["traceparent"].split("-")
    assert (trace_hex, parent) == (format(trace_id, "032x"), format(delivery.context.span_id, "016x"))
    assert int(flags, 16) & 1  # sampled
    assert message.headers["tracestate"] == STATE


@bridge_only
def test_an_unroutable_mandatory_send_is_a_span_in_error(bridge, spans, dial, unique):
    provider, exporter = spans
    conn = dial(bridge(tracing=True, mandatory=True, tracer_provider=provider))
    conn.connect()
    conn.send_frame("SEND", {"destination": f"/topic/nobody-{unique}", "receipt": "r", "traceparent": SAMPLED}, "x")
    error = conn.error_then_close()
    assert error["message"] == "Unroutable message"
    got = {span.name: span for span in exporter.get_finished_spans()}
    send, publish = got[f"SEND /topic/nobody-{unique}"], got["publish amq.topic"]
    assert format(send.context.trace_id, "032x") == TRACE
    assert publish.attributes["stomp_bridge.confirm"] == "returned"
    assert (send.status.description, publish.status.description) == ("Unroutable message", "Unroutable message")


class _OtlpReceiver(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP endpoint on 127.0.0.1: the spans of every export request it got."""

    def __init__(self) -> None:
        self.spans: list = []
        self.got = threading.Event()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        receiver.spans.extend((resource.resource, span) for span in scope.spans)
                receiver.got.set()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture
def otlp():
    receiver = _OtlpReceiver()
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    yield receiver
    receiver.shutdown()
    receiver.server_close()


@bridge_only
def test_spans_are_exported_over_otlp_when_the_bridge_stops_at_the_latest(bridge, dial, otlp, unique):
    """From the settings alone: the OTLP/HTTP exporter, the service name, the client's trace.
    Stopping the bridge exports what its batch still held."""
    server = bridge(tracing=True, tracing_endpoint=f"http://127.0.0.1:{otlp.server_address[1]}/v1/traces")
    conn = dial(server)
    conn.connect()
    conn.receipt("SEND", {"destination": f"/topic/otlp-{unique}", "traceparent": SAMPLED}, "x", receipt_id="r")
    server.stop()
    assert otlp.got.wait(10), "the bridge exported nothing over OTLP"
    names = {span.name: (resource, span) for resource, span in otlp.spans}
    resource, send = names[f"SEND /topic/otlp-{unique}"]
    assert send.trace_id.hex() == TRACE and send.parent_span_id.hex() == SAMPLED.split("-")[2]
    assert "publish amq.topic" in names
    service = {a.key: a.value.string_value for a in resource.attributes}["service.name"]
    assert service == "stomp-bridge"


@bridge_only
def test_otel_service_name_names_the_service_of_the_exported_spans(bridge, dial, otlp, unique, monkeypatch):
    """docs/operations.md: the standard OTEL_* variables apply; service.name is the first of them."""
    monkeypatch.setenv("OTEL_SERVICE_NAME", f"orders-{unique}")
    server = bridge(tracing=True, tracing_endpoint=f"http://127.0.0.1:{otlp.server_address[1]}/v1/traces")
    conn = dial(server)
    conn.connect()
    conn.receipt("SEND", {"destination": f"/topic/otlp-{unique}", "traceparent": SAMPLED}, "x", receipt_id="r")
    server.stop()
    assert otlp.got.wait(10), "the bridge exported nothing over OTLP"
    services = {a.value.string_value for resource, _ in otlp.spans for a in resource.attributes
                if a.key == "service.name"}
    assert services == {f"orders-{unique}"}


@bridge_only
def test_a_collector_that_never_answers_holds_shutdown_no_longer_than_the_grace(bridge, dial, unique):
    """1,000 traced SENDs, then SIGTERM's close with a trace collector that accepts connections
    and never answers: the span export gets what is left of shutdown_grace (2 s), not the SDK's
    30 s and its exporter's retries (27-30 s, past a pod's termination grace)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        server = bridge(tracing=True, shutdown_grace=2.0,
                        tracing_endpoint=f"http://127.0.0.1:{silent.getsockname()[1]}/v1/traces")
        conn = dial(server)
        conn.connect()
        for n in range(999):
            conn.send_frame("SEND", {"destination": f"/topic/silent-{unique}", "traceparent": SAMPLED}, f"m{n}")
        conn.receipt("SEND", {"destination": f"/topic/silent-{unique}", "traceparent": SAMPLED}, "last",
                     receipt_id="r")
        began = time.monotonic()
        server.stop()
        took = time.monotonic() - began
    assert took < 2.0 + 5.0, f"shutdown took {took:.1f} s with shutdown_grace 2 s"


@bridge_only
def test_tracing_off_records_nothing_and_leaves_the_headers_alone(bridge, spans, rabbit, queues, unique):
    provider, exporter = spans
    server = bridge(tracer_provider=provider)  # a provider, but tracing is off
    name = f"untraced-{unique}"
    queues.append(name)
    producer = _stomp_py(server)
    producer.send_with_receipt(f"/queue/{name}", "x", headers={"traceparent": SAMPLED, "tracestate": STATE})
    (stored,) = rabbit.get(name)
    assert (stored["properties"]["headers"]["traceparent"], stored["properties"]["headers"]["tracestate"]) == (
        SAMPLED, STATE)
    assert exporter.get_finished_spans() == ()
    assert trace.get_current_span().get_span_context().is_valid is False  # nothing leaked into the test's context


# -- without the otel extra -----------------------------------------------------------------

# Run in a fresh interpreter where OpenTelemetry cannot be imported, as if the extra were not
# installed (a finder refuses every opentelemetry module).
_WITHOUT_OTEL = """
import importlib.abc, sys

class NoOpenTelemetry(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoOpenTelemetry())
"""

_ROUND_TRIP = _WITHOUT_OTEL + """
import json
from stomp_bridge.testing import running_bridge
from testkit.stomp import Frame, StompClient
import asyncio

async def round_trip(port, queue, headers):
    client = await StompClient.connect(port, heartbeat=None, raise_errors=True, read_timeout=10)
    client.send(Frame("SUBSCRIBE", {"destination": queue, "id": "s", "receipt": "sub"}))
    await client.expect_receipt("sub")
    client.send(Frame("SEND", {"destination": queue, "receipt": "sent", **headers}, b"x"))
    frames = []
    while len(frames) < 2:
        frames.extend(await client.batch())
    await client.close()
    return frames

with running_bridge(sys.argv[1], http_port=None) as bridge:
    frames = asyncio.run(round_trip(bridge.port, sys.argv[2], json.loads(sys.argv[3])))
message = next(f for f in frames if f.command == "MESSAGE")
print(json.dumps({"commands": sorted(f.command for f in frames), "headers": message.headers,
                  "otel": sorted(m for m in sys.modules if m.startswith("opentelemetry"))}))
"""


def _without_otel(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, cwd=root)


@bridge_only
def test_without_opentelemetry_a_bridge_with_tracing_off_works_as_before(broker, unique, queues):
    queue = f"no-otel-{unique}"
    queues.append(queue)
    done = _without_otel(_ROUND_TRIP, broker.amqp_url, f"/queue/{queue}",
                         json.dumps({"traceparent": SAMPLED, "tracestate": STATE}))
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["commands"] == ["MESSAGE", "RECEIPT"]
    assert (got["headers"]["traceparent"], got["headers"]["tracestate"]) == (SAMPLED, STATE)
    assert got["otel"] == []


@bridge_only
def test_without_opentelemetry_tracing_on_refuses_to_start_saying_what_to_install(broker):
    """The stomp-bridge command with STOMP_BRIDGE_TRACING=true: exit 1 and one line, not a
    bridge that runs without the spans it was asked for."""
    code = _WITHOUT_OTEL + "import os\nos.environ['STOMP_BRIDGE_TRACING'] = 'true'\n" + (
        "from stomp_bridge.cli import main\nsys.exit(main(sys.argv[1:]))")
    done = _without_otel(code, "--port", "0", "--http-port", "none", "--amqp-url", broker.amqp_url)
    assert done.returncode == 1
    assert "tracing=true needs OpenTelemetry" in done.stderr
    assert "pip install 'stomp-bridge[otel]'" in done.stderr
