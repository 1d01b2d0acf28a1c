"""The supervisor's pure parts: summing the workers' /metrics, the workers' settings."""

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from pydantic import ValidationError

from stomp_bridge.metrics import Metrics, process_families, render
from stomp_bridge.processes import COMBINE, _Families, sum_families, worker_settings
from stomp_bridge.settings import Settings


def _worker_text(connections: int, sends: int, latencies: list[float], errors: dict[str, int],
                 process: dict[str, float] | None = None) -> str:
    metrics = Metrics(lambda: {"connections": connections, "receipts_pending": 1}, lambda: process or {})
    metrics.counters.frames_in["SEND"] += sends
    for value in latencies:
        metrics.counters.confirm_latency.observe(value)
    for reason, count in errors.items():
        metrics.counters.errors[reason] += count
    return metrics.render().decode()


def _render(texts: list[str], combine: dict[str, str] | None = None) -> dict[str, float]:
    registry = CollectorRegistry()
    registry.register(_Families(sum_families(texts, combine)))
    out = generate_latest(registry).decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in out.splitlines()
            if line and not line.startswith("#")}


def test_gauges_counters_labels_and_histograms_are_summed_sample_by_sample():
    summed = _render([
        _worker_text(3, 10, [0.001, 0.2], {"Invalid destination": 1}),
        _worker_text(4, 5, [0.001], {"Not connected": 2}),
    ])
    assert summed["stomp_bridge_connections"] == 7
    assert summed["stomp_bridge_receipts_pending"] == 2
    assert summed['stomp_bridge_frames_received_total{command="SEND"}'] == 15
    # a label value only one worker has is kept as it is
    assert summed['stomp_bridge_errors_total{reason="Invalid destination"}'] == 1
    assert summed['stomp_bridge_errors_total{reason="Not connected"}'] == 2
    assert summed['stomp_bridge_publish_confirm_seconds_bucket{le="0.001"}'] == 2
    assert summed['stomp_bridge_publish_confirm_seconds_bucket{le="+Inf"}'] == 3
    assert summed["stomp_bridge_publish_confirm_seconds_count"] == 3
    assert summed["stomp_bridge_publish_confirm_seconds_sum"] == pytest.approx(0.202)


def _process(rss: float, cpu: float, start: float, fds: float) -> dict[str, float]:
    return {"virtual_memory_bytes": rss * 4, "resident_memory_bytes": rss, "start_time_seconds": start,
            "cpu_seconds": cpu, "open_fds": fds, "max_fds": 1024.0}


def test_process_metrics_of_workers_and_supervisor_combine_as_a_pod_uses_them():
    """Memory and CPU add up over the processes (what the pod uses); open descriptors are the
    most one process holds (a limit is per process: open/max still says how near it is); the
    start is the supervisor's, the oldest; the limit the tightest."""
    workers = [_worker_text(1, 0, [], {}, _process(40e6, 12.5, 1000.5, 300)),
               _worker_text(1, 0, [], {}, _process(50e6, 7.5, 1002.0, 700))]
    supervisor = render(process_families(_process(20e6, 1.0, 1000.0, 9))).decode()
    summed = _render([*workers, supervisor], COMBINE)
    assert summed["process_resident_memory_bytes"] == 110e6
    assert summed["process_virtual_memory_bytes"] == 440e6
    assert summed["process_cpu_seconds_total"] == 21.0
    assert summed["process_open_fds"] == 700
    assert summed["process_max_fds"] == 1024
    assert summed["process_start_time_seconds"] == 1000.0
    assert summed["stomp_bridge_connections"] == 2


def test_one_worker_renders_exactly_as_it_was_scraped():
    text = _worker_text(2, 1, [0.01], {"Processing error": 1})
    registry = CollectorRegistry()
    registry.register(_Families(sum_families([text])))
    assert generate_latest(registry).decode() == text


def test_a_worker_serves_its_metrics_on_a_private_loopback_port():
    settings = Settings(workers=3, port=61613, http_host="0.0.0.0", http_port=9410)
    mine = worker_settings(settings)
    assert (mine.http_host, mine.http_port, mine.port, mine.workers) == ("127.0.0.1", 0, 61613, 3)
    assert (settings.http_host, settings.http_port) == ("0.0.0.0", 9410)


@pytest.mark.parametrize("port", ["port", "ws_port"])
def test_workers_need_fixed_ports(port):
    with pytest.raises(ValidationError, match=f"workers=2 share their ports: set {port} to a port number"):
        Settings(workers=2, **{"port": 61613, "ws_port": None, port: 0})
    Settings(workers=1, **{port: 0})  # one process may pick a free port
