"""Every Prometheus metric of the bridge, in one place.

The hot paths only add to plain integers on a :class:`Counters` object (one
dict lookup and an add, no lock, no label resolution); a custom collector
turns them into metric families when ``/metrics`` is scraped. Gauges that
describe the present (open connections, receipts waiting for confirms) are
read from the live sessions at scrape time.

Label values come from fixed sets, never from what a client or RabbitMQ chose:
a client names its frames' commands and RabbitMQ's reply text names the AMQP
error an ERROR quotes. Taken as they come, either would let a peer invent
series without bound (the bridge's memory, Prometheus' cardinality) and write
into /metrics; outside their set they count as ``other``. No metric carries a
user, vhost, queue, destination, peer address or secret.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

# Seconds from publish to RabbitMQ's confirm.
CONFIRM_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

OTHER = "other"

# The ERROR ``message`` headers the bridge writes (tests/unit/test_metrics.py finds every one in
# the source and fails on a new one missing here)...
BRIDGE_ERRORS = frozenset({
    "Bad CONNECT", "Bad command", "Bad transaction", "Broker connection lost", "Broker unavailable",
    "Browsing needs a queue", "Connect timeout", "Credential expired", "Duplicated subscription identifier",
    "Frame too large", "Header too long", "Heart-beat timeout", "Idle timeout", "Illegal command",
    "Invalid PROXY protocol header", "Invalid WebSocket frame", "Invalid command",
    "Invalid content-length", "Invalid destination", "Invalid escape sequence", "Invalid frame",
    "Invalid header", "Invalid heart-beat header", "Invalid id", "Invalid selector",
    "Message rejected", "Missing Header", "Missing client-id", "Missing destination",
    "Missing destination or id", "Missing frame terminator", "Missing header",
    "Missing transaction", "No subscription found", "Not connected", "Processing error",
    "Selector not supported on shared queues", "Server cancelled subscription", "Server shutdown",
    "Subscription not found", "Token refused", "Too many headers", "Too many subscriptions",
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
        self.heartbeat_timeouts = 0
        self.auth_failures = 0
        self.logins_throttled = 0  # refused at once: too many failed logins (login_failures_per_minute)
        self.logins_delayed = 0  # held for their turn with RabbitMQ: their user is being guessed at
        # by limit: total, per_ip, origin, http_auth, proxy_protocol (bad header), untrusted_proxy
        self.connections_refused: defaultdict[str, int] = defaultdict(int)
        self.tls_handshake_failures: defaultdict[str, int] = defaultdict(int)  # by reason
        self.websocket_upgrades = 0  # of the connections opened, those that came over WebSocket
        self.confirm_latency = Histogram(CONFIRM_BUCKETS)


class BridgeCollector(Collector):
    def __init__(self, counters: Counters, live: Callable[[], dict[str, float]]) -> None:
        self.counters = counters
        self.live = live

    def collect(self) -> Iterable[Any]:
        c = self.counters
        live = self.live()
        yield _gauge("stomp_bridge_connections", "Open STOMP connections.", live["connections"])
        yield _gauge(
            "stomp_bridge_receipts_pending",
            "RECEIPT frames waiting for RabbitMQ to confirm earlier publishes.",
            live["receipts_pending"],
        )
        if "login_checks" in live:
            yield _counter(
                "stomp_bridge_login_checks",
                "Logins RabbitMQ checked on a connection of their own before they joined a shared AMQP "
                "connection (amqp_login_cache_seconds skips it).",
                live["login_checks"],
            )
        if "amqp_connections" in live:
            yield _gauge(
                "stomp_bridge_amqp_connections",
                "AMQP connections to RabbitMQ, each shared by up to amqp_channels_per_connection sessions.",
                live["amqp_connections"],
            )
        yield _counter("stomp_bridge_connections_opened", "STOMP connections accepted.", c.connections_opened)
        yield _labelled(
            "stomp_bridge_connections_closed", "STOMP connections closed, by reason.", "reason",
            c.connections_closed,
        )
        yield _labelled(
            "stomp_bridge_connections_refused",
            "STOMP connections refused by a limit, a bad PROXY header or an untrusted proxy.", "limit",
            c.connections_refused,
        )
        yield _counter(
            "stomp_bridge_websocket_upgrades",
            "WebSocket handshakes accepted (each then counts as a STOMP connection).",
            c.websocket_upgrades,
        )
        yield _labelled(
            "stomp_bridge_frames_received", "Frames from clients, by command (unknown commands: other).",
            "command", c.frames_in,
        )
        yield _labelled("stomp_bridge_frames_sent", "Frames to clients, by command.", "command", c.frames_out)
        yield _counter("stomp_bridge_received_bytes", "Bytes read from STOMP clients.", c.bytes_in)
        yield _counter("stomp_bridge_sent_bytes", "Bytes written to STOMP clients.", c.bytes_out)
        yield _counter("stomp_bridge_messages_published", "Messages published to RabbitMQ.", c.messages_published)
        yield _counter(
            "stomp_bridge_messages_delivered", "Messages delivered to STOMP clients.", c.messages_delivered
        )
        yield _counter(
            "stomp_bridge_messages_returned",
            "Mandatory publishes RabbitMQ returned because no queue took them (each an ERROR "
            "'Unroutable message' and no RECEIPT).",
            c.messages_returned,
        )
        yield _counter(
            "stomp_bridge_resubscriptions",
            "Subscriptions RabbitMQ cancelled that the bridge subscribed again (resubscribe_on_cancel).",
            c.resubscriptions,
        )
        yield _counter(
            "stomp_bridge_token_updates",
            "New OAuth 2 tokens clients sent to /bridge/token that RabbitMQ accepted "
            "(connection.update-secret).",
            c.token_updates,
        )
        yield _labelled(
            "stomp_bridge_errors", "ERROR frames sent, by their message (unknown ones: other).", "reason",
            c.errors,
        )
        yield _counter(
            "stomp_bridge_amqp_connection_failures",
            "AMQP connections to RabbitMQ that could not be opened or were lost.",
            c.amqp_connection_failures,
        )
        yield _counter(
            "stomp_bridge_heartbeat_timeouts", "Clients dropped for missing heart-beats.", c.heartbeat_timeouts
        )
        yield _counter("stomp_bridge_auth_failures", "CONNECTs refused by authentication.", c.auth_failures)
        yield _counter(
            "stomp_bridge_logins_throttled",
            "CONNECTs refused without asking RabbitMQ: too many failed logins of that user from that "
            "address, and its next turn more than 10 s away (login_failures_per_minute).",
            c.logins_throttled,
        )
        yield _counter(
            "stomp_bridge_logins_delayed",
            "CONNECTs held for their turn before RabbitMQ checked them: too many failed logins of that "
            "user from that address, and a password RabbitMQ has not accepted for it in the last "
            "24 hours (login_failures_per_minute).",
            c.logins_delayed,
        )
        yield _labelled(
            "stomp_bridge_tls_handshake_failures",
            "Failed TLS handshakes on the TLS and wss listeners, by reason (version, no_certificate, "
            "certificate, closed, protocol); timeouts are not counted here.",
            "reason", c.tls_handshake_failures,
        )
        hist = HistogramMetricFamily(
            "stomp_bridge_publish_confirm_seconds", "Time from publish to RabbitMQ's confirm."
        )
        hist.add_metric([], c.confirm_latency.buckets(), c.confirm_latency.sum)
        yield hist


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _labelled(name: str, doc: str, label: str, values: dict[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([key], value)
    return family


class Metrics:
    """The registry one bridge serves on ``/metrics``."""

    def __init__(self, live: Callable[[], dict[str, float]]) -> None:
        self.counters = Counters()
        self.registry = CollectorRegistry()
        self.registry.register(BridgeCollector(self.counters, live))

    def render(self) -> bytes:
        return generate_latest(self.registry)
