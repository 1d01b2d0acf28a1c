"""The bench runs end to end against the suite's broker: a fresh machine can measure.

Its figures are never asserted (they belong in notes); what is checked is that every scenario
the performance page quotes produces its columns: throughput both ways, the bridge's CPU per
message and RabbitMQ's beside it (found by the port the native plugin listens on).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native", reason="runs both sides itself")
def test_bench_measures_cpu_per_message_for_bridge_and_rabbitmq(broker, tmp_path):
    if broker.local is None:
        pytest.skip("RabbitMQ's CPU is read from /proc: a local broker only")
    out = tmp_path / "bench.json"
    env = dict(os.environ, STOMP_BRIDGE_AMQP_URL=broker.amqp_url)
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--runs", "1", "--messages", "4000", "--only", "send,large",
         "--large-messages", "4", "--native-port", str(broker.native_port), "--api", broker.api_url,
         "--bridge-port", str(free_port()), "--json", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["broker_pid"], "RabbitMQ's process was not found by its STOMP port"
    for name in ("send", "large"):
        bridge = report["scenarios"][name]["targets"]["bridge"]
        native = report["scenarios"][name]["targets"]["native"]
        assert bridge["median"] > 0 and native["median"] > 0
        assert bridge["cpu_us_per_msg_median"] >= 0  # the kernel counts CPU in 10 ms ticks
        assert bridge["broker_cpu_us_per_msg_median"] >= 0 and "broker_cpu_us_per_msg_median" in native
    assert report["scenarios"]["send"]["targets"]["bridge"]["cpu_us_per_msg_median"] > 0  # 4,000 SENDs: ticks
    assert "µs/msg" in done.stdout
    assert report["scenarios"]["send"]["cpu_ratio"] > 0  # the bridge's CPU per message / RabbitMQ's with its plugin
    assert "cpu/rabbit" in done.stdout


@pytest.mark.skipif(os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native", reason="runs both sides itself")
def test_bench_runs_an_older_checkout_interleaved_with_rabbitmq_on_its_own_core(broker, tmp_path):
    """--before runs a second bridge from another checkout (here this one) beside the first, and
    --taskset holds RabbitMQ to one core and the bridges and the client to the other."""
    if broker.local is None:
        pytest.skip("RabbitMQ's process is pinned through /proc: a local broker only")
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--runs", "1", "--messages", "2000", "--only", "send",
         "--broker", broker.local.name, "--before", str(ROOT), "--taskset",
         "--bridge-port", str(free_port()), "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    targets = json.loads(out.read_text())["scenarios"]["send"]["targets"]
    assert set(targets) == {"bridge", "native", "before"}
    assert targets["before"]["cpu_us_per_msg_median"] >= 0
    assert "(before)" in done.stdout


@pytest.mark.skipif(os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native", reason="runs both sides itself")
def test_bench_that_cannot_start_its_before_bridge_stops_the_other_and_unpins_rabbitmq(broker, tmp_path):
    """The --before bridge's port taken: the bench says so and ends at once, its first bridge
    stopped and RabbitMQ's threads back on every core. (It once left the first bridge running,
    holding the caller's pipes until a 300-s timeout, and RabbitMQ pinned to core 0.)"""
    import socket

    from testkit.bridgeproc import listener_pid

    if broker.local is None:
        pytest.skip("RabbitMQ's process is pinned through /proc: a local broker only")
    beam = listener_pid(broker.local.stomp_port)
    every_core = os.sched_getaffinity(beam)
    with socket.create_server(("0.0.0.0", 0)) as taken:
        done = subprocess.run(
            [sys.executable, "-m", "bench", "--runs", "1", "--messages", "200", "--only", "send",
             "--broker", broker.local.name, "--before", str(ROOT), "--before-port", str(taken.getsockname()[1]),
             "--taskset", "--bridge-port", str(free_port())],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "ABORTED: bridge exited with 1 before listening" in done.stderr
    assert os.sched_getaffinity(beam) == every_core


@pytest.mark.skipif(os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native", reason="the bridge's tracing")
def test_the_tracing_bench_measures_each_mode_and_every_sampled_span_reaches_its_receiver(broker, tmp_path):
    """python -m bench.tracing, short: three bridges (off, unsampled, sampled), the CPU per SEND
    of each, and the sampled one's spans all exported over OTLP to the bench's receiver."""
    if broker.local is None:
        pytest.skip("the bench starts its bridges against a local broker (testkit.brokers)")
    out = tmp_path / "tracing.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.tracing", "--runs", "1", "--messages", "400", "--only", "send",
         "--broker", broker.local.name, "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert set(report["summary"]["send"]) == {"off", "unsampled", "sampled"}
    assert all(mode["cpu_us_per_msg"] >= 0 for mode in report["summary"]["send"].values())
    (sampled,) = report["runs"]["send"]["sampled"]
    assert sampled["spans"] == sampled["spans_expected"] == 800  # SEND + publish, each


@pytest.mark.skipif(os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native", reason="runs both sides itself")
@pytest.mark.parametrize("websocket", [False, True], ids=["tcp", "websocket"])
def test_the_fanout_many_bench_counts_every_delivery_with_edge_fanout_off_on_and_the_plugin(broker, tmp_path,
                                                                                          websocket):
    """fanout-many, short (20 subscribers, 20 messages): a fresh bridge with edge_fanout off, one
    with it on, and the plugin (over WebSocket where the broker has web-stomp), over TCP and over
    WebSocket (the bench's own minimal client);
    every copy delivered in order, and each case's figures present."""
    if broker.local is None:
        pytest.skip("RabbitMQ's CPU is read from /proc and web-stomp's port is known: a local broker only")
    # the machine's own broker has no web-stomp (scripts/ensure-rabbitmq): over WebSocket, the bridge only
    ways = ["off", "on"] if websocket and broker.local.ws_port is None else ["off", "on", "native"]
    out = tmp_path / "fanout.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--runs", "1", "--only", "fanout-many", "--broker", broker.local.name,
         "--fanout-ways", ",".join(ways),
         "--subscribers", "20", "--fanout-rates", "20", "--fanout-seconds", "1", "--fanout-idle", "0.2",
         "--fanout-no-memory", "--bridge-port", str(free_port()), "--json", str(out),
         *(["--fanout-ws"] if websocket else [])],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    cases = json.loads(out.read_text())["fanout"]["fanout-many@20"]
    assert set(cases) == set(ways)
    for name, case in cases.items():
        assert case["delivered"] == case["expected_deliveries"] == 400, (name, case)
        assert case["lost"] == case["errors"] == case["out_of_order"] == 0, (name, case)
        assert case["p99_ms"] > 0 and case["rabbit_us_per_published"] is not None, (name, case)
        assert case["websocket"] is websocket
    for name in ("off", "on"):
        assert cases[name]["bridge_us_per_delivery"] >= 0 and cases[name]["bridge_rss_after_mb"] > 0
    assert "bridge µs/copy" in done.stdout
