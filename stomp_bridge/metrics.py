"""Every Prometheus metric of the bridge, in one place.

The hot paths only add to plain integers on a :class:`Counters` object (one
dict lookup and an add, no lock, no label resolution); a custom collector
turns them into metric families when ``/metrics`` is scraped. Gauges that
describe the present (open connections, receipts waiting for confirms) are
read from the live sessions at scrape time.

A bridge process writes the Prometheus text format itself (:func:`exposition`), byte for byte
what prometheus_client's ``generate_latest`` writes for the same families
(tests/unit/test_metrics.py compares them): importing prometheus_client, with the HTTP
server, urllib.request, email and WSGI modules its package imports, was about 2 MB of every
bridge process's memory. prometheus_client is imported where its families are asked for
(:func:`family`: the supervisor of ``workers``, the tests).

The standard ``process_*`` families (resident and virtual memory, CPU seconds, open and maximum
file descriptors, start time) are read from ``/proc`` at each scrape (:func:`process_values`),
with the names, help and values prometheus_client's ``ProcessCollector`` gives; the supervisor
of ``workers`` combines each its own way (``Spec.workers``: a sum of the processes' memory and
CPU, the most file descriptors one of them holds, the oldest start).

Label values come from fixed sets, never from what a client or RabbitMQ chose:
a client names its frames' commands and RabbitMQ's reply text names the AMQP
error an ERROR quotes. Taken as they come, either would let a peer invent
series without bound (the bridge's memory, Prometheus' cardinality) and write
into /metrics; outside their set they count as ``other``. No metric carries a
user, vhost, queue, destination, peer address or secret.
"""

from __future__ import annotations

import math
import os
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

# Seconds from publish to RabbitMQ's confirm.
CONFIRM_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

OTHER = "other"

# The ERROR ``message`` headers the bridge writes (tests/unit/test_metrics.py finds every one in
# the source and fails on a new one missing here)...
BRIDGE_ERRORS = frozenset({
    "AMQP channel died", "Bad CONNECT", "Bad command", "Bad transaction", "Broker connection lost",
    "Broker unavailable",
    "Browsing needs a queue", "Connect timeout", "Credential expired", "Duplicated subscription identifier",
    "Frame too large", "Header too long", "Heart-beat timeout", "Idle timeout", "Illegal command",
    "Invalid PROXY protocol header", "Invalid WebSocket frame", "Invalid command",
    "Invalid content-length", "Invalid destination", "Invalid escape sequence", "Invalid frame",
    "Invalid header", "Invalid heart-beat header", "Invalid id", "Invalid selector",
    "Message not found", "Message rejected", "Missing Header", "Missing client-id", "Missing destination",
    "Missing destination or id", "Missing frame terminator", "Missing header",
    "Missing transaction", "No subscription found", "Not connected", "Processing error",
    "Selector not supported on shared queues", "Server cancelled subscription", "Server shutdown",
    "Slow subscriber",
    "Subscription not found", "Token refused", "Too many connections", "Too many headers", "Too many subscriptions",
    "Transaction limit exceeded",
    "Transaction too large", "Unknown destination", "Unroutable message", "Unsupported browser-end",
    "Unsupported content type", "Untrusted PROXY protocol peer", "Version mismatch",
})
# ... and those that name the AMQP 0-9-1 error RabbitMQ closed a channel or connection with
# (amqp.broker_error: the reply text's "NOT_FOUND - ..." prefix, lower-cased).
AMQP_ERRORS = frozenset({
    "content_too_large", "no_route", "no_consumers", "connection_forced", "invalid_path",
    "access_refused", "not_found", "resource_locked", "precondition_failed", "frame_error",
    "syntax_error", "command_invalid", "channel_error", "unexpected_frame", "resource_error",
    "not_allowed", "not_implemented", "internal_error",
})
ERROR_REASONS = BRIDGE_ERRORS | AMQP_ERRORS
# A connection closes after a fatal ERROR (its message) or because the client left.
CLOSE_REASONS = ERROR_REASONS | {"client closed"}


class LabelCounts(dict[str, int]):
    """Counts by a label whose values come from ``allowed``; any other key counts as ``other``.

    ``counts[key] += 1`` works as on a ``defaultdict(int)``, so callers need not know the
    set. For per-frame counts the caller maps the key itself (a Python ``__setitem__``
    costs a call per frame).
    """

    __slots__ = ("allowed",)

    def __init__(self, allowed: frozenset[str]) -> None:
        super().__init__()
        self.allowed = allowed

    def __missing__(self, key: str) -> int:
        return 0 if key in self.allowed else dict.get(self, OTHER, 0)

    def __setitem__(self, key: str, value: int) -> None:
        dict.__setitem__(self, key if key in self.allowed else OTHER, value)


class Histogram:
    """Bucket counts without a lock: the bridge observes from one event loop."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def buckets(self) -> list[tuple[str, int]]:
        out, total = [], 0
        for bound, count in zip(self.bounds, self.counts):
            total += count
            out.append((repr(bound), total))
        out.append(("+Inf", total + self.counts[-1]))
        return out


class Counters:
    """Running totals, added to on the hot paths."""

    def __init__(self) -> None:
        self.connections_opened = 0
        self.connections_closed = LabelCounts(CLOSE_REASONS)  # by reason
        # by command: a STOMP client command or "other" (server.py maps it, per frame)
        self.frames_in: defaultdict[str, int] = defaultdict(int)
        self.frames_out: defaultdict[str, int] = defaultdict(int)
        self.bytes_in = 0
        self.bytes_out = 0
        self.messages_published = 0
        self.messages_delivered = 0
        self.messages_returned = 0  # mandatory publishes RabbitMQ returned: no queue took them
        self.resubscriptions = 0  # subscriptions RabbitMQ cancelled that the bridge made again
        self.token_updates = 0  # new OAuth 2 tokens clients sent to /bridge/token, accepted by RabbitMQ
        self.errors = LabelCounts(ERROR_REASONS)  # ERROR frames by message
        self.amqp_connection_failures = 0
        # shared AMQP connections RabbitMQ closed (connection.close), by reply code: 320 forced, 5xx errors
        self.amqp_connections_closed_by_rabbitmq: defaultdict[str, int] = defaultdict(int)
        self.heartbeat_timeouts = 0
        self.auth_failures = 0
        self.logins_throttled = 0  # refused at once: too many failed logins (login_failures_per_minute)
        self.logins_delayed = 0  # held for their turn with RabbitMQ: their user is being guessed at
        # by limit: total, per_ip, origin, http_auth, proxy_protocol (bad header), untrusted_proxy
        self.connections_refused: defaultdict[str, int] = defaultdict(int)
        self.tls_handshake_failures: defaultdict[str, int] = defaultdict(int)  # by reason
        self.websocket_upgrades = 0  # of the connections opened, those that came over WebSocket
        self.reads_held = 0  # a client had not taken write_buffer_high bytes: its reading stopped
        self.connections_aborted = 0  # closed, but not drained within close_timeout: aborted
        # fan-out at the edge (edge_fanout): shared queues and their subscribers now, the
        # MESSAGEs made from their deliveries, the subscribers closed for not keeping up
        self.fanout_queues = 0
        self.fanout_subscribers = 0
        self.fanout_copies = 0
        self.fanout_slow_subscribers = 0
        self.confirm_latency = Histogram(CONFIRM_BUCKETS)


class Spec(NamedTuple):
    """One metric family: what /metrics serves, and its row in docs/operations.md (``reference``)."""

    name: str  # as registered; a counter is exposed with ``_total``
    kind: str  # "gauge", "counter" or "histogram"
    help: str
    source: str  # the Counters attribute, or "live:<key>" for a value read from the sessions at scrape time
    label: str = ""  # its one label, if any
    when: str = ""  # served only then (the docs say so)
    # how the supervisor of workers combines the workers' samples (and its own, for process_*):
    # "sum", "max" or "min"
    workers: str = "sum"


# Every metric family of one bridge process, in the order /metrics serves them.
METRICS: tuple[Spec, ...] = (
    Spec("stomp_bridge_connections", "gauge", "Open STOMP connections.", "live:connections"),
    Spec("stomp_bridge_receipts_pending", "gauge",
         "RECEIPT frames waiting for RabbitMQ to confirm earlier publishes.", "live:receipts_pending"),
    Spec("stomp_bridge_login_checks", "counter",
         "Logins RabbitMQ checked on a connection of their own before they joined a shared AMQP "
         "connection (amqp_login_cache_seconds skips it).", "live:login_checks"),
    Spec("stomp_bridge_amqp_connections", "gauge",
         "AMQP connections to RabbitMQ, each shared by up to amqp_channels_per_connection sessions.",
         "live:amqp_connections"),
    Spec("stomp_bridge_connections_opened", "counter", "STOMP connections accepted.", "connections_opened"),
    Spec("stomp_bridge_connections_closed", "counter",
         "STOMP connections closed, by reason: 'client closed' or the closing ERROR's message.",
         "connections_closed", label="reason"),
    Spec("stomp_bridge_connections_refused", "counter",
         "STOMP connections refused, by limit: total, per_ip, origin, http_auth, proxy_protocol (a bad or "
         "missing PROXY header), untrusted_proxy (a peer outside proxy_protocol_trusted).",
         "connections_refused", label="limit"),
    Spec("stomp_bridge_websocket_upgrades", "counter",
         "WebSocket handshakes accepted (each then counts as a STOMP connection).", "websocket_upgrades"),
    Spec("stomp_bridge_reads_held", "counter",
         "Times the bridge stopped reading a client that had not taken write_buffer_high bytes sent "
         "to it, until it took them.", "reads_held"),
    Spec("stomp_bridge_connections_aborted", "counter",
         "Closing connections that had not taken what was queued for them within close_timeout, "
         "aborted (reset).", "connections_aborted"),
    Spec("stomp_bridge_frames_received", "counter", "Frames from clients, by command (unknown commands: other).",
         "frames_in", label="command"),
    Spec("stomp_bridge_frames_sent", "counter", "Frames to clients, by command.", "frames_out", label="command"),
    Spec("stomp_bridge_received_bytes", "counter", "Bytes read from STOMP clients.", "bytes_in"),
    Spec("stomp_bridge_sent_bytes", "counter", "Bytes written to STOMP clients.", "bytes_out"),
    Spec("stomp_bridge_messages_published", "counter", "Messages published to RabbitMQ.", "messages_published"),
    Spec("stomp_bridge_messages_delivered", "counter", "Messages delivered to STOMP clients.",
         "messages_delivered"),
    Spec("stomp_bridge_messages_returned", "counter",
         "Mandatory publishes RabbitMQ returned because no queue took them (each an ERROR "
         "'Unroutable message' and no RECEIPT).", "messages_returned"),
    Spec("stomp_bridge_resubscriptions", "counter",
         "Subscriptions RabbitMQ cancelled that the bridge subscribed again (resubscribe_on_cancel).",
         "resubscriptions"),
    Spec("stomp_bridge_fanout_queues", "gauge",
         "Shared subscription queues (edge_fanout): one per login and binding with subscribers here.",
         "fanout_queues"),
    Spec("stomp_bridge_fanout_subscribers", "gauge",
         "Subscriptions taking their MESSAGEs from a shared queue (edge_fanout).", "fanout_subscribers"),
    Spec("stomp_bridge_fanout_copies", "counter",
         "MESSAGEs made from deliveries of shared queues, one per subscriber (edge_fanout).", "fanout_copies"),
    Spec("stomp_bridge_fanout_slow_subscribers", "counter",
         "Subscribers of shared queues closed for not taking fanout_subscriber_buffer bytes (ERROR "
         "'Slow subscriber').", "fanout_slow_subscribers"),
    Spec("stomp_bridge_token_updates", "counter",
         "New OAuth 2 tokens clients sent to /bridge/token that RabbitMQ accepted (connection.update-secret).",
         "token_updates"),
    Spec("stomp_bridge_errors", "counter", "ERROR frames sent, by their message (unknown ones: other).", "errors",
         label="reason"),
    Spec("stomp_bridge_amqp_connection_failures", "counter",
         "AMQP connections to RabbitMQ that could not be opened or were lost.", "amqp_connection_failures"),
    Spec("stomp_bridge_amqp_connections_closed_by_rabbitmq", "counter",
         "Shared AMQP connections RabbitMQ closed with a connection.close, by reply code: 320 (forced: "
         "an operator, a node stopping) or a connection error (5xx), which ends every session on the "
         "connection; no client frame may cause one.", "amqp_connections_closed_by_rabbitmq", label="code"),
    Spec("stomp_bridge_heartbeat_timeouts", "counter", "Clients dropped for missing heart-beats.",
         "heartbeat_timeouts"),
    Spec("stomp_bridge_auth_failures", "counter", "CONNECTs refused by authentication.", "auth_failures"),
    Spec("stomp_bridge_logins_throttled", "counter",
         "CONNECTs refused without asking RabbitMQ: too many failed logins of that user from that "
         "address, and its next turn more than 10 s away (login_failures_per_minute).", "logins_throttled"),
    Spec("stomp_bridge_logins_delayed", "counter",
         "CONNECTs held for their turn before RabbitMQ checked them: too many failed logins of that "
         "user from that address, and a password RabbitMQ has not accepted for it in the last "
         "24 hours (login_failures_per_minute).", "logins_delayed"),
    Spec("stomp_bridge_tls_handshake_failures", "counter",
         "Failed TLS handshakes on the TLS and wss listeners, by reason (version, no_certificate, "
         "certificate, closed, protocol: not TLS, e.g. plain STOMP on the TLS port), each also logged at "
         "INFO as 'TLS handshake failed'; timeouts are not counted here.",
         "tls_handshake_failures", label="reason"),
    Spec("stomp_bridge_publish_confirm_seconds", "histogram", "Time from publish to RabbitMQ's confirm.",
         "confirm_latency"),
)
# The process's own, as every Prometheus-instrumented service has them (prometheus_client's
# ProcessCollector: the same names, help and values), read from /proc (:func:`process_values`).
LINUX = "/proc (Linux)"
PROCESS_METRICS: tuple[Spec, ...] = (
    Spec("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", "process:virtual_memory_bytes",
         when=LINUX),
    Spec("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
         "process:resident_memory_bytes", when=LINUX),
    Spec("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.",
         "process:start_time_seconds", when=LINUX, workers="min"),
    Spec("process_cpu_seconds", "counter", "Total user and system CPU time spent in seconds.",
         "process:cpu_seconds", when=LINUX),
    Spec("process_open_fds", "gauge", "Number of open file descriptors.", "process:open_fds", when=LINUX,
         workers="max"),
    Spec("process_max_fds", "gauge", "Maximum number of open file descriptors.", "process:max_fds", when=LINUX,
         workers="min"),
)
WORKERS_RULE = {  # docs/operations.md: what the supervisor of workers serves
    "sum": "the sum over the supervisor and its workers",
    "max": "the most any one of those processes has (the limit is per process)",
    "min": "the least of those processes' values",
}
WORKERS_RULE_OF = {"process_start_time_seconds": "the supervisor's, the oldest process's",
                   "process_max_fds": "the lowest of those processes' limits"}
# What the supervisor adds to the workers' sum (``processes.Supervisor.metrics``).
SUPERVISOR_METRICS: tuple[Spec, ...] = (
    Spec("stomp_bridge_workers", "gauge", "Worker processes answering /metrics.", "", when="workers > 1"),
    Spec("stomp_bridge_worker_restarts", "counter", "Worker processes started again after they died.", "",
         when="workers > 1"),
)


def family(spec: Spec, value: Any) -> Any:
    """The metric family of ``spec`` with ``value``: a number, a dict by label value, or a Histogram
    (prometheus_client's, imported here: see the module docstring)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

    if spec.kind == "histogram":
        hist = HistogramMetricFamily(spec.name, spec.help)
        hist.add_metric([], value.buckets(), value.sum)
        return hist
    if spec.label:
        labelled = CounterMetricFamily(spec.name, spec.help, labels=[spec.label])
        for key, count in sorted(value.items()):
            labelled.add_metric([key], count)
        return labelled
    kind = GaugeMetricFamily if spec.kind == "gauge" else CounterMetricFamily
    return kind(spec.name, spec.help, value=value)


def _page_size() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not Unix
        return 4096


def _clock_ticks() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not Unix
        return 100.0


_boot_time: float | None = None


def _booted(proc: str) -> float:
    """The machine's boot time (``btime`` of /proc/stat), read once."""
    global _boot_time
    if _boot_time is None:
        with open(os.path.join(proc, "stat"), "rb") as stat:
            _boot_time = next((float(line.split()[1]) for line in stat if line.startswith(b"btime ")), 0.0)
    return _boot_time


def process_values(pid: int | str = "self", proc: str = "/proc") -> dict[str, float]:
    """The ``process_*`` values of process ``pid``, read as prometheus_client's ProcessCollector
    reads them (its /proc/<pid>/stat fields, limits and fd directory); {} where there is no /proc,
    and without what cannot be read."""
    values: dict[str, float] = {}
    where = os.path.join(proc, str(pid))
    try:
        with open(os.path.join(where, "stat"), "rb") as stat:
            parts = stat.read().split(b")")[-1].split()  # after the command name, which may hold spaces
        ticks = _clock_ticks()
        values["virtual_memory_bytes"] = float(parts[20])
        values["resident_memory_bytes"] = float(parts[21]) * _page_size()
        values["start_time_seconds"] = float(parts[19]) / ticks + _booted(proc)
        values["cpu_seconds"] = float(parts[11]) / ticks + float(parts[12]) / ticks  # as ProcessCollector adds
    except (OSError, IndexError, ValueError, StopIteration):
        return {}
    try:
        values["open_fds"] = float(len(os.listdir(os.path.join(where, "fd"))))
        with open(os.path.join(where, "limits"), "rb") as limits:
            for line in limits:
                if line.startswith(b"Max open files"):
                    values["max_fds"] = float(line.split()[3])  # the soft limit ("unlimited": left out)
                    break
    except (OSError, IndexError, ValueError):
        pass
    return values


def _values(counters: Counters, live: dict[str, float], process: dict[str, float]) -> Iterable[tuple[Spec, Any]]:
    """Each family's spec and value, in the order /metrics serves them (a live or process value
    the server does not feed is left out)."""
    for spec in METRICS:
        if spec.source.startswith("live:"):
            key = spec.source[5:]
            if key in live:
                yield spec, live[key]
        else:
            yield spec, getattr(counters, spec.source)
    yield from process_families(process)


def process_families(process: dict[str, float]) -> Iterable[tuple[Spec, float]]:
    for spec in PROCESS_METRICS:
        key = spec.source[8:]
        if key in process:
            yield spec, process[key]


class BridgeCollector:
    """The bridge's families as prometheus_client's collectors give them (``collect()``), for
    a prometheus_client registry."""

    def __init__(self, counters: Counters, live: Callable[[], dict[str, float]],
                 process: Callable[[], dict[str, float]] = process_values) -> None:
        self.counters = counters
        self.live = live
        self.process = process

    def collect(self) -> Iterable[Any]:
        for spec, value in _values(self.counters, self.live(), self.process()):
            yield family(spec, value)


def _number(value: float) -> str:
    """A sample's value as prometheus_client writes it (``utils.floatToGoString``)."""
    d = float(value)
    if d == math.inf:
        return "+Inf"
    if d == -math.inf:
        return "-Inf"
    if math.isnan(d):
        return "NaN"
    text = repr(d)
    dot = text.find(".")
    if d > 0 and dot > 6:  # Go switches to exponents sooner than Python
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def _help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _label(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def exposition(counters: Counters, live: dict[str, float], process: dict[str, float]) -> bytes:
    """/metrics in the Prometheus text format (version 0.0.4), as ``generate_latest`` writes
    :class:`BridgeCollector`'s families."""
    return render(_values(counters, live, process))


def render(families: Iterable[tuple[Spec, Any]]) -> bytes:
    """Families given as (spec, value) in the Prometheus text format, as ``generate_latest``."""
    out = []
    for spec, value in families:
        if spec.kind == "histogram":
            name = spec.name
            out.append(f"# HELP {name} {_help(spec.help)}\n# TYPE {name} histogram\n")
            buckets = value.buckets()
            for bound, count in buckets:
                out.append(f'{name}_bucket{{le="{_label(bound)}"}} {_number(count)}\n')
            out.append(f"{name}_count {_number(buckets[-1][1])}\n{name}_sum {_number(value.sum)}\n")
            continue
        counter = bool(spec.label) or spec.kind != "gauge"  # family(): a labelled family is a counter
        name = spec.name.removesuffix("_total") + "_total" if counter else spec.name
        out.append(f"# HELP {name} {_help(spec.help)}\n# TYPE {name} {'counter' if counter else 'gauge'}\n")
        if spec.label:
            for key, count in sorted(value.items()):
                out.append(f'{name}{{{spec.label}="{_label(key)}"}} {_number(count)}\n')
        else:
            out.append(f"{name} {_number(value)}\n")
    return "".join(out).encode("utf-8")


def reference() -> str:
    """docs/operations.md's table of every metric, from :data:`METRICS` (scripts/docs-tables.py
    writes it; tests/unit/test_docs_tables.py fails when the page's copy differs)."""
    rows = ["| metric | type | label | what it counts |", "|---|---|---|---|"]
    for spec in METRICS + PROCESS_METRICS + SUPERVISOR_METRICS:
        if spec.kind == "counter":
            name = f"`{spec.name}_total`"
        elif spec.kind == "histogram":
            name = f"`{spec.name}` (`_bucket`, `_sum`, `_count`)"
        else:
            name = f"`{spec.name}`"
        label = f"`{spec.label}`" if spec.label else ""
        what = spec.help + (f" Only with {spec.when}." if spec.when else "")
        if spec in PROCESS_METRICS:
            what += f" With workers: {WORKERS_RULE_OF.get(spec.name, WORKERS_RULE[spec.workers])}."
        rows.append(f"| {name} | {spec.kind} | {label} | {what} |")
    return "\n".join(rows) + "\n"


class Metrics:
    """What one bridge serves on ``/metrics``."""

    def __init__(self, live: Callable[[], dict[str, float]],
                 process: Callable[[], dict[str, float]] = process_values) -> None:
        self.counters = Counters()
        self.live = live
        self.process = process  # the process_* values, read at each scrape (a test gives fixed ones)
        # The families as prometheus_client's (collect()), for those who want them (tests)
        self.registry = BridgeCollector(self.counters, live, process)

    def render(self) -> bytes:
        return exposition(self.counters, self.live(), self.process())
