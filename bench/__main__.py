"""Side-by-side throughput and latency of the bridge and RabbitMQ's native STOMP plugin.

    python -m bench                          # starts a bridge, uses native on 61613
    python -m bench --runs 5 --messages 20000 --json out.json
    python -m bench --only fanout,pingpong
    python -m bench --only idle --connections 1000 --hold 30
    python -m bench --only idle --connections 10000 --no-subscribe --hold 60

Same client (a lean asyncio STOMP client built on the project's own codec),
same broker, interleaved A/B runs; prints the median of each scenario, the
ratio bridge / native (latency rows: > 1 means the bridge is slower), the
bridge process's CPU seconds and peak RSS per run (median CPU, highest peak),
its CPU per message over the timed part of a run (the figure to compare
between commits: the machine's noise moves it less than throughput),
RabbitMQ's CPU per message behind the bridge and with its own plugin, and the
cores busy (bridge + RabbitMQ + client CPU over the run's seconds).
The plugin runs inside RabbitMQ, so it has no CPU/RSS column of its own.

    python -m bench --broker 4.3 --only send,large   # RabbitMQ 4.3 of scripts/rabbitmq4, 1 MiB bodies
    python -m bench --only large,large-consume       # 1 MiB bodies in (SEND) and out (MESSAGE)
    python -m bench --before /tmp/old --only send    # an older checkout's bridge interleaved too
    python -m bench --taskset                        # RabbitMQ on one core, bridge and client on the other
    python -m bench --broker 4.4 --only send,consume,pingpong   # against 4.4's native STOMP (preview)

``cpu/rabbit``: the bridge's CPU per message over RabbitMQ's CPU per message with its own
plugin in the same run: what the STOMP work costs in the bridge against what it cost in the
broker, the figure the machine's speed does not move. ``--taskset`` holds RabbitMQ (every
thread of its beam) to one core in the bridge's runs and the plugin's alike, and the bridge
and the client to the other: the deployment of a bridge beside a broker whose cores are its
own. ``--before CHECKOUT`` starts that checkout's bridge too (on --before-port, a free one by default) and runs
it interleaved with this one, so a before/after is one run on one machine's load.

Checks while measuring: message counts, per-subscriber order, receipts in
frame order per connection (counted, not fatal: the plugin may reorder), and
any ERROR frame aborts the run with the frame printed. Every scenario has a
time limit. Run by hand: numbers go in notes, never into test assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

from bench.fanout_many import Case, print_cases, run_matrix
from bench.idle import run_idle
from bench.procstat import Probe, pin, start_bridge, unpin
from testkit.bridgeproc import find_listener
from bench.scenarios import BenchError, scenario_consume, scenario_fanout, scenario_pingpong, scenario_send
from testkit.brokers import local
from testkit.management import Management
from testkit.ports import free_port
from testkit.stomp import ClientError

AB_SCENARIOS = ["send-persistent", "send", "consume", "fanout", "pingpong", "large", "large-consume"]
ALL = [*AB_SCENARIOS, "idle", "fanout-many", "fanout-bridges"]
DEFAULT = [*AB_SCENARIOS, "idle"]  # the fan-out ones take minutes each: by --only


Scenario = Callable[[int, Callable[[], None]], Awaitable[dict]]


def ab_table(args: argparse.Namespace, rabbit: Management) -> dict[str, tuple[str, Scenario]]:
    """Each scenario: its label, and a function of (port, mark)."""
    m = args.messages
    mib = args.large_size / 2**20
    return {
        "send-persistent": ("persistent SEND, receipt each, 4 conns, window 100 (msg/s)",
                            lambda p, mark: scenario_send(p, rabbit, m, True, mark)),
        "send": ("non-persistent SEND, receipt each, 4 conns, window 100 (msg/s)",
                 lambda p, mark: scenario_send(p, rabbit, m, False, mark)),
        "consume": ("consume, client-individual, prefetch 500, 2 conns (msg/s)",
                    lambda p, mark: scenario_consume(p, rabbit, m, mark)),
        "fanout": (f"topic fan-out 1 -> 10, {m // 10} msgs, receipt/100 (deliveries/s)",
                   lambda p, mark: scenario_fanout(p, rabbit, m // 10, 10, mark)),
        "pingpong": (f"ping-pong RTT over {args.pings} round trips (ms)",
                     lambda p, mark: scenario_pingpong(p, rabbit, args.pings, mark=mark)),
        "large": (f"persistent SEND of {mib:g} MiB, receipt each, 2 conns, window 10 (msg/s)",
                  lambda p, mark: scenario_send(p, rabbit, args.large_messages, True, mark,
                                                size=args.large_size, conns=2, window=10)),
        # The way out: a quarter as many (RabbitMQ holds them all before the timed part).
        "large-consume": (f"consume {args.large_messages // 4} of {mib:g} MiB, client-individual, prefetch 10, "
                          "2 conns (msg/s)",
                          lambda p, mark: scenario_consume(p, rabbit, args.large_messages // 4, mark,
                                                           size=args.large_size, prefetch=10, window=10)),
    }


def run_one(fn: Callable[[], Awaitable[dict]], timeout: float, what: str) -> dict:
    async def bounded() -> dict:
        # Only this deadline is "timed out": a TimeoutError from a wait inside the scenario
        # (testkit.stomp's Stalled is one) keeps its own text.
        try:
            async with asyncio.timeout(timeout) as deadline:
                return await fn()
        except TimeoutError as exc:
            if deadline.expired():
                raise BenchError(f"{what} timed out after {timeout:g} s") from None
            raise BenchError(f"{what}: {exc or type(exc).__name__}") from None

    return asyncio.run(bounded())


def _cores_busy(result: dict) -> float:
    """Bridge, RabbitMQ and client CPU seconds over the run's seconds: near the machine's core
    count, the cores (not the bridge's design) limited the run."""
    seconds = result.get("elapsed_s") or 0
    used = result.get("cpu_s", 0) + result.get("broker_cpu_s", 0) + result.get("client_cpu_s", 0)
    return used / seconds if seconds else 0.0


def summarize(runs: list[dict]) -> dict:
    out: dict = {"runs": runs, "values": [r["value"] for r in runs],
                 "median": statistics.median(r["value"] for r in runs)}
    for key in ("p50_ms", "p90_ms", "p99_ms"):
        if key in runs[0]:
            out[key + "_median"] = statistics.median(r[key] for r in runs)
    if "receipts_out_of_order" in runs[0]:
        out["receipts_out_of_order"] = [r["receipts_out_of_order"] for r in runs]
    if runs[0].get("cpu_s") is not None:
        out["cpu_s_median"] = statistics.median(r["cpu_s"] for r in runs)
        out["cpu_us_per_msg_median"] = statistics.median(r["cpu_s"] / r["messages"] * 1e6 for r in runs)
        out["peak_rss_mb_max"] = max(r["peak_rss_mb"] for r in runs)
        out["cpu_user_us_per_msg_median"] = statistics.median(r["cpu_user_s"] / r["messages"] * 1e6 for r in runs)
        out["cpu_sys_us_per_msg_median"] = statistics.median(r["cpu_sys_s"] / r["messages"] * 1e6 for r in runs)
    out["cores_busy_median"] = statistics.median(_cores_busy(r) for r in runs)
    if runs[0].get("broker_cpu_s") is not None:
        out["broker_cpu_us_per_msg_median"] = statistics.median(r["broker_cpu_s"] / r["messages"] * 1e6
                                                                for r in runs)
    return out


def print_table(results: dict) -> None:
    rows = [("scenario", "bridge", "native", "ratio", "CPU s", "µs/msg (usr+sys)", "cpu/rabbit", "rabbit µs b/n",
             "rabbit b/n", "stack/n", "cores b/n", "RSS MB", "rcpt ooo b/n")]
    for res in results.values():
        n = res["targets"]["native"]
        for who in [t for t in res["targets"] if t != "native"]:
            b = res["targets"][who]
            cpu = f"{b['cpu_s_median']:.2f}" if "cpu_s_median" in b else "-"
            us = (f"{b['cpu_us_per_msg_median']:.1f} ({b['cpu_user_us_per_msg_median']:.1f}+"
                  f"{b['cpu_sys_us_per_msg_median']:.1f})" if "cpu_us_per_msg_median" in b else "-")
            against = (f"{b['cpu_us_per_msg_median'] / n['broker_cpu_us_per_msg_median']:.2f}"
                       if "cpu_us_per_msg_median" in b and n.get("broker_cpu_us_per_msg_median") else "-")
            rabbit = (f"{b['broker_cpu_us_per_msg_median']:.0f}/{n['broker_cpu_us_per_msg_median']:.0f}"
                      if "broker_cpu_us_per_msg_median" in b else "-")
            # RabbitMQ behind the bridge over RabbitMQ with its own STOMP, and the whole stack
            # (bridge + RabbitMQ behind it) over RabbitMQ alone: issue 36's two CPU targets.
            behind = stack = "-"
            if "broker_cpu_us_per_msg_median" in b and n.get("broker_cpu_us_per_msg_median"):
                behind = f"{b['broker_cpu_us_per_msg_median'] / n['broker_cpu_us_per_msg_median']:.2f}"
                if "cpu_us_per_msg_median" in b:
                    total = b["broker_cpu_us_per_msg_median"] + b["cpu_us_per_msg_median"]
                    stack = f"{total / n['broker_cpu_us_per_msg_median']:.2f}"
            cores = f"{b['cores_busy_median']:.2f}/{n['cores_busy_median']:.2f}"
            rss = f"{b['peak_rss_mb_max']:.0f}" if "peak_rss_mb_max" in b else "-"
            ooo = (f"{sum(b['receipts_out_of_order'])}/{sum(n['receipts_out_of_order'])}"
                   if "receipts_out_of_order" in b else "")
            label = res["label"] if who == "bridge" else f"  ({who})"
            if "p50_ms_median" in b:
                for i, p in enumerate(("p50", "p90", "p99")):
                    bv, nv = b[f"{p}_ms_median"], n[f"{p}_ms_median"]
                    first = i == 0
                    rows.append((f"{label} {p}" if first else f"  {p}", f"{bv:.3f}", f"{nv:.3f}",
                                 f"{bv / nv:.2f}", cpu if first else "", us if first else "",
                                 against if first else "", rabbit if first else "", behind if first else "",
                                 stack if first else "", cores if first else "", rss if first else "", ""))
            else:
                rows.append((label, f"{b['median']:.0f}", f"{n['median']:.0f}", f"{b['median'] / n['median']:.2f}",
                             cpu, us, against, rabbit, behind, stack, cores, rss, ooo))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row)).rstrip())
    print("CPU s: bridge process utime+stime per run (median); µs/msg: the same over the timed part, per "
          "message (SEND, delivery, round trip; large: per message of --large-size), user + system; cpu/rabbit: "
          "that over RabbitMQ's CPU per message with its own plugin; rabbit µs b/n: RabbitMQ's CPU per message "
          "behind the bridge / with its own plugin; rabbit b/n: their ratio; stack/n: (bridge + RabbitMQ behind it) "
          "over RabbitMQ with its own plugin; cores b/n: bridge, RabbitMQ and client CPU over the run's time "
          "(near the machine's core count, the cores limited the run); RSS MB: highest bridge VmHWM over the runs; "
          "rcpt ooo: receipts out of frame order, all runs, bridge/native; (before): the --before checkout's bridge")


def print_idle(r: dict, target: str = "bridge") -> None:
    def mb(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f} MB"

    if r["capped"]:
        print(f"  WARNING, capped: {r['capped']}")
    print(f"idle connections ({target}): {r['held']}/{r['connections']} held for {r['hold_s']:g} s, "
          f"heart-beat {r['heartbeat']}, errors {r['errors']}")
    print(f"  opened in {r['open_s']:.1f} s (bridge CPU {r['cpu_open_s'] or 0:.2f} s); "
          f"CPU while holding {r['cpu_hold_s'] or 0:.2f} s")
    kb = r["kb_per_connection"]
    print(f"  bridge RSS before {mb(r['rss_before_mb'])}, with connections held {mb(r['rss_held_mb'])}, "
          f"peak {mb(r['peak_rss_mb'])}" + (f" (~{kb:.0f} kB per connection)" if kb else ""))
    print(f"  heart-beats received per connection: min {r['heartbeats_min']}, median {r['heartbeats_median']:g} "
          f"(expected at least {r['heartbeats_expected_min']})")
    late = r["heartbeat_late_ms"]
    if late:
        print(f"  heart-beat lateness over {r['heartbeat_gaps']} gaps (gap - interval / 2): "
              + ", ".join(f"{k} {v:.0f} ms" for k, v in late.items())
              + f"; client loop lag max {r['client_loop_lag_ms_max']:.0f} ms")
    ramp = r.get("heartbeat_late_while_opening_ms")
    if ramp:
        print(f"  while opening (before {r['settle_s']:g} s of settling): "
              + ", ".join(f"{k} {v:.0f} ms" for k, v in ramp.items()))
    for kind, count in r["error_kinds"].items():
        print(f"  {count} x {kind}")
    if r["leftover_queues_deleted"]:
        print(f"  deleted {r['leftover_queues_deleted']} subscription queues left behind")


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bridge-port", type=int, default=61633)
    ap.add_argument("--native-port", type=int, default=61613)
    ap.add_argument("--messages", type=int, default=20000, help="per run (fan-out publishes messages / 10)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pings", type=int, default=2000, help="ping-pong round trips after 100 warm-up")
    ap.add_argument("--large-messages", type=int, default=400, help="large: SENDs per run")
    ap.add_argument("--large-size", type=int, default=2**20, help="large: body bytes (more than 4 MiB needs a raised "
                    "max_frame_size on both: STOMP_BRIDGE_MAX_FRAME_SIZE, stomp.max_frame_size)")
    ap.add_argument("--broker", choices=["4.4", "4.4-preview", "4.3", "4.0", "system"],
                    help="a local test broker (testkit.brokers): sets the bridge's amqp_url, --native-port and --api "
                    "(4.4, alias 4.4-preview: RabbitMQ 4.4's native STOMP compiled onto 4.3.6 by scripts/rabbitmq4)")
    ap.add_argument("--only", default=",".join(DEFAULT),
                    help=f"comma-separated subset of {','.join(ALL)} (default: all but the fanout-* ones)")
    ap.add_argument("--connections", type=int, default=1000, help="idle: STOMP connections to hold")
    ap.add_argument("--hold", type=float, default=30.0, help="idle: seconds to hold them")
    ap.add_argument("--unsafe-connections", action="store_true",
                    help="idle: do not cap --connections to RabbitMQ's free file descriptors")
    ap.add_argument("--heartbeat", default="10000,10000", help="idle: CONNECT heart-beat header")
    ap.add_argument("--idle-send", action="store_true",
                    help="idle: each connection sends one receipted SEND instead of subscribing (publishing sessions)")
    ap.add_argument("--no-subscribe", action="store_true",
                    help="idle: CONNECT only (no subscription queue per connection in RabbitMQ)")
    ap.add_argument("--channels-per-connection", type=int, default=64,
                    help="the bridge's amqp_channels_per_connection (sessions per AMQP connection)")
    ap.add_argument("--subscribers", type=int, default=1000, help="fanout-many/-bridges: subscribers of the topic")
    ap.add_argument("--fanout-rates", default="10,50",
                    help="fanout-many/-bridges: publish rates, msg/s (one below saturation, one above)")
    ap.add_argument("--fanout-seconds", type=float, default=10.0, help="fanout-many/-bridges: seconds of publishing")
    ap.add_argument("--fanout-ws", action="store_true", help="fanout-many/-bridges: subscribers over WebSocket")
    ap.add_argument("--fanout-ways", default="off,on,native",
                    help="fanout-many: the bridge with edge_fanout off, on, and RabbitMQ's own plugin")
    ap.add_argument("--fanout-no-memory", action="store_true",
                    help="fanout-many/-bridges: skip RabbitMQ's memory (rabbitmqctl status, seconds per call)")
    ap.add_argument("--fanout-idle", type=float, default=5.0,
                    help="fanout-many/-bridges: seconds of RabbitMQ's background CPU measured (and subtracted) "
                    "with the subscribers held before publishing")
    ap.add_argument("--fanout-drain", type=float, default=120.0,
                    help="fanout-many/-bridges: seconds to wait after the last SEND for every delivery")
    ap.add_argument("--timeout", type=float, default=180.0, help="per run of a scenario, seconds")
    ap.add_argument("--json", metavar="PATH", help="write every run's results as JSON")
    ap.add_argument("--no-start", action="store_true", help="a bridge already runs on --bridge-port (no CPU/RSS)")
    ap.add_argument("--api", default="http://127.0.0.1:15672/api", help="RabbitMQ management API (cleanup)")
    ap.add_argument("--before", metavar="CHECKOUT",
                    help="also run this checkout's bridge (on --before-port), interleaved: before/after in one run")
    ap.add_argument("--before-port", type=int, default=0, help="the --before bridge's STOMP port (0: a free one)")
    ap.add_argument("--taskset", action="store_true",
                    help="RabbitMQ on core 0 in every run (bridge's and plugin's), the bridges and the client on core 1")
    args = ap.parse_args()
    if args.broker:
        args.broker = "4.4" if args.broker == "4.4-preview" else args.broker
        broker = local(args.broker)
        os.environ["STOMP_BRIDGE_AMQP_URL"] = broker.amqp_url
        args.native_port, args.api = broker.stomp_port, broker.api_url
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(only) - set(ALL)
    if unknown:
        ap.error(f"unknown scenario(s) {', '.join(sorted(unknown))}; choose from {', '.join(ALL)}")
    if args.connections > 2000 * args.channels_per_connection:
        print(f"note: {args.connections} connections means "
              f"{-(-args.connections // args.channels_per_connection)} AMQP connections to RabbitMQ")

    rabbit = Management(args.api)
    broker_pid = find_listener(args.native_port)  # RabbitMQ's beam, which runs the native plugin
    pinned: dict[int, set[int]] = {}
    client_cpus = os.sched_getaffinity(0)
    cpus = None
    if args.taskset:
        if broker_pid is None:
            ap.error("--taskset needs RabbitMQ's process (not found by its STOMP port)")
        cpus = {1}
        pinned = pin(broker_pid, {0})
        os.sched_setaffinity(0, cpus)
    bridge_settings = {"amqp_channels_per_connection": str(args.channels_per_connection)}
    if args.before is not None and not args.before_port:
        args.before_port = free_port()
    report: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "args": vars(args),
                    "loadavg_before": os.getloadavg(), "scenarios": {}}
    status = 0
    proc = before = None
    try:  # from the first bridge started: a failure to start the second stops the first and unpins RabbitMQ
        proc = None if args.no_start else start_bridge(args.bridge_port, bridge_settings, cpus=cpus)
        before = None if args.before is None else start_bridge(args.before_port, bridge_settings,
                                                               checkout=args.before, cpus=cpus)
        pid = proc.pid if proc else None
        table = ab_table(args, rabbit)
        targets = {"bridge": (args.bridge_port, pid), "native": (args.native_port, None)}
        if before is not None:
            targets["before"] = (args.before_port, before.pid)
        report["broker_pid"] = broker_pid
        for name in [s for s in AB_SCENARIOS if s in only]:
            label, fn = table[name]
            print(f"{name}: {label}", flush=True)
            runs: dict[str, list[dict]] = {t: [] for t in targets}
            for i in range(args.runs):
                for target, (port, tpid) in targets.items():  # interleaved A/B
                    for bridge in (proc, before):
                        if bridge is not None and bridge.poll() is not None:
                            raise BenchError(f"a bridge exited with {bridge.returncode}")
                    probe = Probe(tpid, broker_pid)
                    probe.start()
                    result = run_one(lambda: fn(port, probe.mark), args.timeout, f"{name} against {target} (run {i + 1})")
                    result.update(probe.stop())
                    runs[target].append(result)
                    print(f"  run {i + 1} {target:6} {result['value']:12.3f}"
                          + (f"  cpu {result['cpu_s']:.2f} s ({result['cpu_s'] / result['messages'] * 1e6:.1f} µs/msg)"
                             if "cpu_s" in result else "")
                          + (f"  rabbit {result['broker_cpu_s'] / result['messages'] * 1e6:.1f} µs/msg"
                             if "broker_cpu_s" in result else "")
                          + f"  cores busy {_cores_busy(result):.2f}", flush=True)
            targets_out = {t: summarize(r) for t, r in runs.items()}
            report["scenarios"][name] = {
                "label": label, "better": "lower" if name == "pingpong" else "higher",
                "targets": targets_out,
                "ratio": targets_out["bridge"]["median"] / targets_out["native"]["median"],
            }
            plugin_us = targets_out["native"].get("broker_cpu_us_per_msg_median")
            if plugin_us and "cpu_us_per_msg_median" in targets_out["bridge"]:
                # the bridge's CPU per message over RabbitMQ's with its own plugin: the column
                report["scenarios"][name]["cpu_ratio"] = targets_out["bridge"]["cpu_us_per_msg_median"] / plugin_us
                behind_us = targets_out["bridge"].get("broker_cpu_us_per_msg_median")
                if behind_us is not None:
                    report["scenarios"][name]["rabbit_behind_ratio"] = behind_us / plugin_us
                    report["scenarios"][name]["stack_ratio"] = (
                        behind_us + targets_out["bridge"]["cpu_us_per_msg_median"]) / plugin_us
        if report["scenarios"]:
            print()
            print_table(report["scenarios"])
        if "idle" in only:
            # With --before, the older checkout's bridge holds the same connections after this one's
            # (one at a time: each run has the machine to itself), its figures printed beside.
            idle_targets = [("bridge", args.bridge_port, pid)]
            if before is not None:
                idle_targets.append(("before", args.before_port, before.pid))
            for target, port, tpid in idle_targets:
                print()
                idle = run_one(lambda: run_idle(port, tpid, rabbit, args.connections, args.hold,
                                                args.heartbeat, unsafe=args.unsafe_connections,
                                                subscribe=not args.no_subscribe, send=args.idle_send,
                                                per_amqp=args.channels_per_connection),
                               args.timeout + args.hold + args.connections * 0.2, f"idle connections ({target})")
                report["idle" if target == "bridge" else f"idle_{target}"] = idle
                print_idle(idle, target)
                if idle["errors"]:
                    status = 1
        fanout = [s for s in ("fanout-many", "fanout-bridges") if s in only]
        if fanout:
            if proc is not None:  # each fan-out case starts bridges of its own (its RSS is its own)
                proc.terminate()
                proc.wait(15)
                proc = None
            broker = local(args.broker) if args.broker else None
            kw = dict(subscribers=args.subscribers, seconds=args.fanout_seconds, ws=args.fanout_ws,
                      native_port=args.native_port, native_ws_port=broker.ws_port if broker else None,
                      broker=broker, broker_pid=broker_pid, rabbit=rabbit, bridge_port=args.bridge_port,
                      settings=bridge_settings, drain=args.fanout_drain, memory=not args.fanout_no_memory,
                      idle_s=args.fanout_idle)
            report["fanout"] = {}
            for name in fanout:
                cases = ([Case(w.strip()) for w in args.fanout_ways.split(",") if w.strip()]
                         if name == "fanout-many" else [Case("on", 1), Case("on", 2)])
                for rate in (float(r) for r in args.fanout_rates.split(",") if r.strip()):
                    title = (f"{name}: {args.subscribers} {'WebSocket' if args.fanout_ws else 'TCP'} subscribers of "
                             f"one topic, {rate:g} msg/s for {args.fanout_seconds:g} s, load "
                             f"{os.getloadavg()[0]:.1f}")
                    print(title, flush=True)
                    got = run_one(lambda: run_matrix(cases, args.runs, rate=rate, **kw),
                                  args.timeout + args.runs * len(cases) * (args.fanout_seconds + args.fanout_drain
                                                                           + args.subscribers * 0.05 + 60),
                                  title)
                    print()
                    print_cases(title, got)
                    print()
                    report["fanout"][f"{name}@{rate:g}"] = got
                    if any(c["lost"] or c["errors"] or c["out_of_order"] for c in got.values()):
                        status = 1
    except (BenchError, ClientError, RuntimeError) as exc:
        print(f"\nABORTED: {exc}", file=sys.stderr)
        report["aborted"] = str(exc)
        status = 2
    finally:
        for bridge in (proc, before):
            if bridge is not None:
                bridge.terminate()
                try:
                    bridge.wait(15)
                except Exception:  # noqa: BLE001
                    bridge.kill()
        unpin(pinned)
        os.sched_setaffinity(0, client_cpus)
        report["loadavg_after"] = os.getloadavg()
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=2)
            print(f"results written to {args.json}")
    return status


if __name__ == "__main__":
    sys.exit(main())
