"""What tracing costs the bridge per message: off, on but not sampled, on and sampled.

    python -m bench.tracing                       # the machine's RabbitMQ, 20,000 messages, 3 runs
    python -m bench.tracing --broker 4.3 --messages 40000 --runs 5 --json out.json

Three bridge processes side by side, each its own CPU (``/proc``), the runs interleaved:

* ``off``: ``tracing`` off (the default); the SENDs carry a ``traceparent`` all the same;
* ``unsampled``: ``tracing=true``, every SEND's ``traceparent`` says its trace is not
  sampled (flags ``00``): the bridge makes non-recording spans and passes the headers on;
* ``sampled``: ``tracing=true``, flags ``01``: every SEND, publish and delivery is a span,
  exported over OTLP/HTTP to a receiver in this process that counts them.

Scenarios: ``send`` (non-persistent SEND, receipt each, 4 connections; the bench's own) and
``consume`` (client-individual ACK, prefetch 500, 2 connections). Per mode: throughput, the
bridge's CPU per message over the timed part (µs), the difference to ``off``, and for
``sampled`` the spans received and dropped. Before the timed part of a sampled run the
receiver waits until the bridge's exporter has been quiet for a second, so spans of the set-up
(filling the queue) are not counted. Run by hand; numbers go in docs/performance.md, never into
test assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import http.server
import json
import os
import statistics
import sys
import threading
import time

from bench.procstat import Probe, start_bridge
from testkit.bridgeproc import find_listener
from bench.scenarios import BenchError, scenario_consume, scenario_send
from testkit.brokers import local
from testkit.management import Management
from testkit.ports import free_port

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
MODES = {
    "off": ({}, f"00-{TRACE}-00f067aa0ba902b7-01"),
    "unsampled": ({"tracing": "true"}, f"00-{TRACE}-00f067aa0ba902b7-00"),
    "sampled": ({"tracing": "true"}, f"00-{TRACE}-00f067aa0ba902b7-01"),
}
SPANS_PER_MESSAGE = {"send": 2, "consume": 1}  # SEND + publish; MESSAGE (the fill's spans are waited out)


class Sink(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP traces endpoint that counts the spans it receives."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        self.spans = 0
        self.last = time.monotonic()
        sink = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest.FromString(body)
                sink.spans += sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
                sink.last = time.monotonic()
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    def wait_quiet(self, seconds: float = 1.0, limit: float = 30.0) -> None:
        """Until nothing arrived for ``seconds`` past the exporter's 5 s schedule (blocking: the
        bench client has nothing else to do then)."""
        end = time.monotonic() + limit
        time.sleep(seconds)
        while time.monotonic() < end and time.monotonic() - self.last < 5.0 + seconds:
            time.sleep(0.2)


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tracing", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=20000, help="per run and scenario")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--broker", choices=["4.4", "4.3", "4.0", "system"], default="system")
    ap.add_argument("--only", default="send,consume")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()
    broker = local(args.broker)
    rabbit = Management(broker.api_url)
    sink = Sink()
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{sink.server_address[1]}/v1/traces"
    procs = {}
    try:
        for mode, (settings, _) in MODES.items():
            env = {"amqp_url": broker.amqp_url, "ws_port": "none", **settings}
            if mode == "sampled":
                env["tracing_endpoint"] = endpoint
            port = free_port()
            procs[mode] = (port, start_bridge(port, env))
        broker_pid = find_listener(broker.amqp_port)
        results: dict[str, dict[str, list[dict]]] = {}
        for name in [s.strip() for s in args.only.split(",") if s.strip()]:
            results[name] = {mode: [] for mode in MODES}
            for run in range(args.runs):
                for mode, (port, proc) in procs.items():
                    if proc.poll() is not None:
                        raise BenchError(f"the {mode} bridge exited with {proc.returncode}")
                    extra = {"traceparent": MODES[mode][1]}
                    probe = Probe(proc.pid, broker_pid)
                    before = sink.spans

                    def mark(probe: Probe = probe, mode: str = mode) -> None:
                        nonlocal before
                        if mode == "sampled":
                            sink.wait_quiet()
                        before = sink.spans
                        probe.mark()

                    probe.start()
                    if name == "send":
                        coro = scenario_send(port, rabbit, args.messages, False, mark, extra=extra)
                    else:
                        coro = scenario_consume(port, rabbit, args.messages, mark, extra=extra)
                    result = asyncio.run(coro)
                    result.update(probe.stop())
                    if mode == "sampled":
                        sink.wait_quiet()
                        result["spans"] = sink.spans - before
                        result["spans_expected"] = SPANS_PER_MESSAGE[name] * result["messages"]
                    result["cpu_us_per_msg"] = result["cpu_s"] / result["messages"] * 1e6
                    results[name][mode].append(result)
                    spans = (f"  spans {result['spans']}/{result['spans_expected']}" if "spans" in result else "")
                    print(f"{name} run {run + 1} {mode:9} {result['value']:9.0f} msg/s  "
                          f"{result['cpu_us_per_msg']:6.1f} µs/msg{spans}", flush=True)
        print()
        print(f"{'scenario':9} {'mode':9} {'msg/s':>9} {'µs/msg':>8} {'+µs':>6} {'spans/expected':>15}")
        summary: dict = {}
        for name, by_mode in results.items():
            base = statistics.median(r["cpu_us_per_msg"] for r in by_mode["off"])
            for mode, runs in by_mode.items():
                us = statistics.median(r["cpu_us_per_msg"] for r in runs)
                rate = statistics.median(r["value"] for r in runs)
                spans = ""
                if mode == "sampled":
                    spans = f"{sum(r['spans'] for r in runs)}/{sum(r['spans_expected'] for r in runs)}"
                summary.setdefault(name, {})[mode] = {"msg_per_s": rate, "cpu_us_per_msg": us, "extra_us": us - base}
                print(f"{name:9} {mode:9} {rate:9.0f} {us:8.1f} {us - base:+6.1f} {spans:>15}")
        print("µs/msg: the bridge process's CPU per message over the timed part (median of the runs); "
              "+µs: against tracing off")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"args": vars(args), "summary": summary, "runs": results,
                           "loadavg": os.getloadavg()}, f, indent=2)
    except BenchError as exc:
        print(f"ABORTED: {exc}", file=sys.stderr)
        return 2
    finally:
        for _, proc in procs.values():
            proc.terminate()
            try:
                proc.wait(15)
            except Exception:  # noqa: BLE001
                proc.kill()
        sink.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
