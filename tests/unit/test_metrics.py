"""/metrics carries no client- or broker-chosen text: every label value comes from a fixed set."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

import stomp_bridge.protocol.proxy  # noqa: F401 - defines StompError subclasses
import stomp_bridge.protocol.selectors  # noqa: F401
import stomp_bridge.transport.server  # noqa: F401 - imports the rest of the bridge
from stomp_bridge.metrics import (
    AMQP_ERRORS,
    BRIDGE_ERRORS,
    CLOSE_REASONS,
    ERROR_REASONS,
    OTHER,
    PROCESS_METRICS,
    LabelCounts,
    Metrics,
    family,
    process_families,
    process_values,
    render,
)
from stomp_bridge.protocol.errors import StompError

PACKAGE = Path(stomp_bridge.__file__).resolve().parent
LIVE = {"connections": 0, "receipts_pending": 0, "amqp_connections": 0}
# Where an ERROR's message is not a literal: amqp.broker_error names the AMQP error from
# RabbitMQ's reply text ("NOT_FOUND - no queue 'q'" -> "not_found").
DYNAMIC_MESSAGES = {("errors.py", "reply_error")}  # the AMQP error named in a reply text


def test_known_label_values_count_as_themselves():
    counts = LabelCounts(frozenset({"Bad CONNECT", "not_found"}))
    counts["Bad CONNECT"] += 1
    counts["Bad CONNECT"] += 1
    counts["not_found"] += 1
    assert dict(counts) == {"Bad CONNECT": 2, "not_found": 1}


def test_any_other_label_value_counts_as_other():
    counts = LabelCounts(frozenset({"Bad CONNECT"}))
    counts["no queue 'orders-of-alice' in vhost 'team-x'"] += 1
    counts["SUBSCRIBE-alice"] += 1
    counts["Bad CONNECT"] += 1
    assert dict(counts) == {OTHER: 2, "Bad CONNECT": 1}
    assert counts["anything else"] == 2  # what it counts as


def test_errors_rabbitmq_or_a_client_named_stay_out_of_metrics():
    metrics = Metrics(lambda: LIVE)
    c = metrics.counters
    # A reply text that is not "CODE - text" (another broker, a plugin), its prefix as message:
    c.errors["secret-queue-of-alice"] += 1
    c.connections_closed["secret-queue-of-alice"] += 1
    c.errors["not_found"] += 1
    c.connections_closed["client closed"] += 1
    text = metrics.render().decode()
    assert "alice" not in text
    assert 'stomp_bridge_errors_total{reason="other"} 1.0' in text
    assert 'stomp_bridge_errors_total{reason="not_found"} 1.0' in text
    assert 'stomp_bridge_connections_closed_total{reason="other"} 1.0' in text
    assert 'stomp_bridge_connections_closed_total{reason="client closed"} 1.0' in text


def test_every_amqp_error_name_is_a_reply_code_of_amqp_0_9_1():
    # AMQP 0-9-1 §1.5.3 (constants): the soft and hard errors, as broker_error lower-cases them.
    assert AMQP_ERRORS == {
        "content_too_large", "no_route", "no_consumers", "access_refused", "not_found",
        "resource_locked", "precondition_failed", "connection_forced", "invalid_path",
        "frame_error", "syntax_error", "command_invalid", "channel_error", "unexpected_frame",
        "resource_error", "not_allowed", "not_implemented", "internal_error",
    }
    assert ERROR_REASONS <= CLOSE_REASONS and "client closed" in CLOSE_REASONS


def _error_classes() -> tuple[set[str], set[str]]:
    """Names of StompError and its subclasses: (message is the first argument, fixed inside)."""
    plain, fixed = {"StompError"}, set()
    todo = list(StompError.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        (fixed if "__init__" in cls.__dict__ else plain).add(cls.__name__)
    return plain, fixed


@functools.cache
def _messages_in_source() -> tuple[dict[str, list[str]], list[str]]:
    """Every ERROR message literal in the package (with where), and where one is not a literal
    (as ``file:function``)."""
    plain, fixed = _error_classes()
    subclasses = (plain | fixed) - {"StompError"}  # StompError's own super() is Exception's
    literals: dict[str, list[str]] = {}
    dynamic: list[str] = []

    def first_argument(call: ast.Call, path: Path, function: str) -> None:
        first = call.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            literals.setdefault(first.value, []).append(f"{path.name}:{call.lineno}")
        else:
            dynamic.append(f"{path.name}:{function}")

    def visit(node: ast.AST, path: Path, cls: str, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, path, child.name, function)
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, path, cls, child.name)
                continue
            if isinstance(child, ast.Call) and child.args:
                func = child.func
                if isinstance(func, ast.Name) and func.id in plain:
                    first_argument(child, path, function)
                elif isinstance(func, ast.Attribute) and func.attr in plain:  # errors.AccessRefused
                    first_argument(child, path, function)
                elif (isinstance(func, ast.Attribute) and func.attr == "__init__" and cls in subclasses
                      and isinstance(func.value, ast.Call) and getattr(func.value.func, "id", "") == "super"):
                    first_argument(child, path, function)  # a subclass that fixes its message
            visit(child, path, cls, function)

    for path in sorted(PACKAGE.rglob("*.py")):
        visit(ast.parse(path.read_text(), str(path)), path, "", "<module>")
    return literals, dynamic


def test_every_error_message_in_the_source_is_a_known_label_value():
    """A new ERROR message must be added to metrics.BRIDGE_ERRORS, or it counts as "other"."""
    literals, _ = _messages_in_source()
    assert len(literals) > 30  # the scan finds them (a broken scan must not pass)
    missing = {m: where for m, where in literals.items() if m not in BRIDGE_ERRORS | AMQP_ERRORS}
    assert not missing, f"add to stomp_bridge/metrics.py BRIDGE_ERRORS: {missing}"


def test_an_error_message_is_a_literal_except_the_broker_named_ones():
    _, dynamic = _messages_in_source()
    unexpected = [d for d in dynamic if tuple(d.split(":")) not in DYNAMIC_MESSAGES]
    assert not unexpected, (
        f"ERROR messages built at run time ({unexpected}) must come from a fixed set: metrics labels"
    )
    assert dynamic, "broker_error's dynamic message is found (a broken scan must not pass)"


@pytest.mark.parametrize("message", sorted(BRIDGE_ERRORS))
def test_no_listed_message_is_stale(message):
    """The list holds only messages the bridge still sends."""
    literals, _ = _messages_in_source()
    assert message in literals


def test_exposition_is_what_prometheus_client_writes():
    """Metrics.render writes the text format itself (no prometheus_client in a bridge process):
    byte for byte generate_latest's output for the same families, with counts, labels that need
    escaping, the histogram and numbers Go writes with an exponent."""
    from prometheus_client import CollectorRegistry, generate_latest

    live = {"connections": 12, "receipts_pending": 0, "amqp_connections": 3, "login_checks": 10**9}
    process = {"virtual_memory_bytes": 1.2e9, "resident_memory_bytes": 45056000.0, "start_time_seconds": 1796166506.45,
               "cpu_seconds": 0.06999999999999999, "open_fds": 6.0, "max_fds": 1048576.0}
    metrics = Metrics(lambda: live, lambda: process)
    counters = metrics.counters
    counters.connections_opened = 12345678901
    counters.bytes_in = 7
    counters.frames_in["SEND"] += 3
    counters.frames_in['we"ird\\la\nbel'] += 1  # the transport maps these to "other"; escaped all the same
    counters.errors["Bad CONNECT"] += 2
    counters.connections_closed["client closed"] += 5
    counters.connections_refused["per_ip"] += 1
    for seconds in (0.0001, 0.003, 0.2, 7.0):
        counters.confirm_latency.observe(seconds)
    registry = CollectorRegistry()
    registry.register(metrics.registry)
    assert metrics.render() == generate_latest(registry)
    empty = Metrics(lambda: {}, lambda: {})
    registry = CollectorRegistry()
    registry.register(empty.registry)
    assert empty.render() == generate_latest(registry)


def test_process_metrics_are_prometheus_clients_from_proc():
    """process_* as every Prometheus-instrumented service has them: the names, help, types and
    values of prometheus_client's ProcessCollector, read by the bridge itself (which does not
    import prometheus_client)."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.process_collector import ProcessCollector

    theirs = {f.name: (f.type, f.documentation, f.samples[0].value) for f in ProcessCollector(registry=None).collect()}
    ours = process_values()
    assert set(theirs) == {spec.name for spec in PROCESS_METRICS}
    for spec in PROCESS_METRICS:
        kind, help_text, value = theirs[spec.name]
        assert (spec.kind, spec.help) == (kind, help_text)
        moving = spec.name in ("process_cpu_seconds", "process_resident_memory_bytes", "process_virtual_memory_bytes",
                               "process_open_fds")
        assert ours[spec.source[8:]] == pytest.approx(value, rel=0.2 if moving else 1e-9), spec.name
    # and rendered as generate_latest renders ProcessCollector's families (the same values)
    fixed = process_values()

    class Fixed:
        def collect(self):
            return [family(spec, value) for spec, value in process_families(fixed)]

    registry = CollectorRegistry()
    registry.register(Fixed())
    assert render(process_families(fixed)) == generate_latest(registry)
    assert b"process_cpu_seconds_total " in render(process_families(fixed))


def test_without_proc_there_are_no_process_metrics(tmp_path):
    assert process_values(proc=str(tmp_path)) == {}
    text = Metrics(lambda: {}, lambda: process_values(proc=str(tmp_path))).render()
    assert b"process_" not in text


def test_a_bridge_serves_its_process_metrics():
    text = Metrics(lambda: {}).render().decode()
    for name in ("process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds",
                 "process_max_fds", "process_start_time_seconds", "process_virtual_memory_bytes"):
        assert f"\n{name} " in text
