"""``python -m reliability [--short|--long]``: every reliability check, then a summary table.

    python -m reliability --short              # about two minutes (CI runs the same from pytest)
    python -m reliability --long               # 1,000,000 parser executions, 20-minute soak, ...
    python -m reliability --long --soak-seconds 300 --only soak,faults --json out.json
    python -m reliability --only cluster [--long]  # node failures, rolling restarts, alarms, load
                                                   # on the three-node 4.3 cluster (reliability/cluster.py)
    python -m reliability --only siege --siege-targets bridge,native  # the hostile mode, side by side
                                                   # with RabbitMQ's plugin (--native-port, 61613)
    python -m reliability --only isolation --isolation-brokers 4.3,4.0,system --isolation-native
                                                   # an attacker beside neighbours sharing its AMQP
                                                   # connections (issue 39), its ERRORs against the plugin's

Needs the RabbitMQ the tests use (STOMP_BRIDGE_TEST_AMQP_URL or 127.0.0.1:5672,
management API on 15672). The RabbitMQ-restart scenario starts a private node
of its own (root and Debian's rabbitmq-server needed; skipped with a note
otherwise); the shared node is never restarted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

from . import cluster, faults, fuzz_isolation, fuzz_parser, fuzz_session, hostile, siege, soak
from .brokers import broker_info
from testkit.management import Management

from .broker import PrivateRabbit

PARTS = ["parser", "session", "isolation", "hostile", "siege", "faults", "soak"]
EXTRA_PARTS = ["cluster"]  # only when asked (--only): it starts scripts/rabbitmq-cluster

PROFILES = {
    "short": {"fuzz_runs": 20_000, "sessions": 150, "window": 1.5, "subscriptions": 500, "baseline": 2.0,
              "fault_seconds": 6.0, "kill_seconds": 6.0, "rabbit_seconds": 8.0, "rabbit_restarts": 2,
              "soak_seconds": 20.0, "siege_seconds": 10.0, "cluster_faults": 1, "cluster_messages": 300, "cluster_rounds": 1,
              "cluster_alarms": 1, "cluster_connections": 300, "cluster_load_messages": 10, "cluster_load_rounds": 2},
    "long": {"fuzz_runs": 1_000_000, "sessions": 5_000, "window": 10.0, "subscriptions": 10_000, "baseline": 10.0,
             "fault_seconds": 120.0, "kill_seconds": 60.0, "rabbit_seconds": 60.0, "rabbit_restarts": 6,
             "soak_seconds": 1200.0, "siege_seconds": 60.0, "cluster_faults": 5, "cluster_messages": 3000, "cluster_rounds": 3,
             "cluster_alarms": 3, "cluster_connections": 2000, "cluster_load_messages": 20, "cluster_load_rounds": 3},
}


def amqp_url() -> str:
    return os.environ.get("STOMP_BRIDGE_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


def management() -> Management:
    url = urllib.parse.urlsplit(amqp_url())
    api = os.environ.get("STOMP_BRIDGE_TEST_API_URL", f"http://{url.hostname or '127.0.0.1'}:15672/api")
    return Management(api, urllib.parse.unquote(url.username or "guest"), urllib.parse.unquote(url.password or "guest"),
                      timeout=30)


async def run(parts: list[str], p: dict, work: Path, log, siege_targets: tuple[str, ...] = ("bridge",),
              native_port: int = 61613, isolation: dict | None = None) -> dict:
    out: dict = {"profile": p}
    mgmt = management()
    url = amqp_url()
    if "parser" in parts:
        log("parser fuzzing ...")
        out["parser"] = await asyncio.to_thread(fuzz_parser.fuzz, p["fuzz_runs"], work)
        if out["parser"]["crashed"]:
            raise AssertionError("parser fuzzing found a failure:\n" + out["parser"]["output"])
    if "session" in parts:
        log("session fuzzing ...")
        out["session"] = await fuzz_session.run(url, mgmt, p["sessions"], seed=int(time.time()))
    if "isolation" in parts:
        iso = isolation or {}
        out["isolation"] = []
        for name in iso.get("brokers") or [None]:
            broker = broker_info(name) if name else None
            label = broker.name if broker else ("remote" if os.environ.get("STOMP_BRIDGE_TEST_AMQP_URL") else "system")
            log(f"isolation fuzzing on {label} ...")
            out["isolation"].append(await fuzz_isolation.run(
                label, broker.amqp_url if broker else url,
                Management(broker.api_url, "guest", "guest", timeout=30) if broker else mgmt,
                seed=iso.get("seed", 39), profile=iso.get("profile", "short"),
                native_port=(broker.native_port if broker else native_port) if iso.get("native") else None,
                only=iso.get("cases"), log=log))
    if "hostile" in parts:
        log("hostile clients ...")
        vhost = mgmt.temporary_vhost()
        try:
            out["hostile"] = await hostile.run(url, vhost, p["window"], p["subscriptions"], p["baseline"])
        finally:
            mgmt.delete_vhost(vhost)
    if "siege" in parts:
        out["siege"] = []
        for target in siege_targets:
            log(f"hostile mode (siege), {target}, {p['siege_seconds']:g} s ...")
            out["siege"].append(await siege.run(url, mgmt, p["siege_seconds"], target, native_port))
    if "faults" in parts:
        log("fault injection: proxies ...")
        out["faults"] = {"proxies": await faults.proxies(url, mgmt, p["fault_seconds"])}
        log("fault injection: kill -9 ...")
        out["faults"]["kill -9 bridge"] = await faults.kill9(url, mgmt, p["kill_seconds"])
        why_not = PrivateRabbit.available()
        if why_not is None:
            log("fault injection: RabbitMQ restarts (private node) ...")
            out["faults"]["RabbitMQ restart"] = await faults.rabbit_restart(p["rabbit_seconds"], p["rabbit_restarts"])
        else:
            out["rabbit_restart_skipped"] = why_not
        for tally in out["faults"].values():
            if tally.lost:
                raise AssertionError(f"messages lost under faults: {tally}")
    if "soak" in parts:
        log(f"soak for {p['soak_seconds']:g} s ...")
        out["soak"] = await soak.run(url, mgmt, p["soak_seconds"])
    if "cluster" in parts:
        out["cluster"] = await cluster.run(p, log)
    return out


def table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def summary(out: dict) -> str:
    text = []
    rows = []
    if "parser" in out:
        r = out["parser"]
        rows.append(("executions fuzzed: frame parser, whole + byte at a time", f"{r['executions']:,}",
                     f"{r['engine']}, {r['seconds']} s, corpus {r['corpus']}"))
    if "session" in out:
        r = out["session"]
        rows.append(("executions fuzzed: sessions on real connections", f"{r['sessions']:,}",
                     f"{r['bytes']:,} bytes, {r['errors']} ERRORs, {r['seconds']} s, "
                     "bridge RSS {} -> {} MB".format(*r.get("bridge_rss_mb", ("?", "?")))))
    for r in out.get("isolation", []):
        rows.append((f"isolation cases: an attacker beside neighbours sharing its AMQP connections ({r['broker']})",
                     f"{r['cases']:,}", f"{len(r['failures'])} failures, {r['seconds']} s, "
                     + ", ".join(f"{k} {v}" for k, v in r["per_variant"].items())))
    if "hostile" in out:
        r = out["hostile"]
        rows.append(("attacks tried (hostile connections)", f"{r['attacks']:,}", f"{r['kinds']} kinds"))
    msgs = {"sent": 0, "received": 0, "lost": 0, "duplicated": 0}
    if "faults" in out:
        n = sum(t.faults for t in out["faults"].values())
        kinds = {}
        for t in out["faults"].values():
            kinds.update(t.fault_kinds)
        rows.append(("faults injected", f"{n:,}", ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))))
        for name, t in out["faults"].items():
            for key in msgs:
                msgs[key] += getattr(t, key)
    if "soak" in out:
        for key in msgs:
            msgs[key] += out["soak"][key]
    if "faults" in out or "soak" in out:
        for key in msgs:
            rows.append((f"messages {key}", f"{msgs[key]:,}", "faults + soak" + (" (must be 0)" if key == "lost" else "")))
    if rows:
        text.append(table(rows, ("what", "count", "detail")))
    if "hostile" in out:
        text.append("\nwell-behaved client's round trip during each attack (reported, not asserted):")
        text.append(table([(r["attack"], r["connections"], r["n"], r["p50_ms"], r["p99_ms"]) for r in out["hostile"]["rows"]],
                          ("attack", "hostile conns", "round trips", "p50 ms", "p99 ms")))
        text.append("outcomes: " + ", ".join(f"{k}: {v}" for k, v in out["hostile"]["outcomes"].items()))
    for r in out.get("isolation", []):
        for fl in r["failures"]:
            text.append(f"\nisolation FAILURE on {r['broker']}, {fl.get('variant')}, case {fl['case']}: "
                        + "; ".join(p[:300] for p in fl["problems"][:2]))
            text.extend("    " + step for step in fl.get("steps", []))
        if r["differences"]:
            text.append(f"\nthe attacker's first ERROR, bridge vs the plugin ({r['broker']}; reported, not failed):")
            text.append(table([(d["case"], (d["bridge"] or [["-"]])[0][0], (d["plugin"] or [["-"]])[0][0])
                               for d in r["differences"]], ("case", "bridge", "plugin")))
    if "siege" in out:
        text.append("\nhostile mode: every attack at once beside a resending publisher and a consumer "
                    "(lost must be 0; logins: fresh ones in within 1 s / tried; none may be refused, the median "
                    "must be within 1 s):")
        text.append(siege_table(out["siege"]))
        for r in out["siege"]:
            text.append(f"{r['target']}: " + "; ".join(
                f"{name} {a['connections']} conns, {a['mb_written']} MB written"
                + (", " + ", ".join(f"{k} {v}" for k, v in a["answers"].items()) if a["answers"] else "")
                for name, a in r["attacks"].items()))
    if "faults" in out:
        text.append("\nresending client under faults (every SEND resent until receipted):")
        text.append(table([(name, t.faults, t.sent, t.sends, t.reconnects, t.received, t.lost, t.duplicated)
                           for name, t in out["faults"].items()],
                          ("scenario", "faults", "messages", "SEND frames", "reconnects", "in RabbitMQ", "lost", "duplicates")))
    if "cluster" in out:
        c = out["cluster"]
        text.append(f"\nRabbitMQ {c['version']} cluster of three nodes (every SEND resent until receipted):")
        text.append(table([(r["scenario"], r["faults"], r["sent"], r["receipted"], r["received"], r["lost"],
                            r["duplicated"], r["reconnects"]) for r in c["rows"]],
                          ("fault", "faults", "SEND frames", "receipted", "received", "lost", "duplicates",
                           "reconnects")))
        text.append("rolling restart steps (node 0: steady traffic before): " + "; ".join(
            f"node {s['node']}: {s['seconds']} s, {s['receipts']} receipts, {s['errors']} errors, "
            f"p99 {s['p99_ms']} ms" for s in c["rolling_restart_steps"]))
        text.append(f"bridge read during each alarm: {c['alarm_read_mb']} MB")
        load = c["load"]
        text.append(f"load while failing, {load['connections']:,} connections in {load['rounds']} rounds, "
                    f"{load['reconnects']} reconnects; each bridge (a child process) before / at the peak of "
                    "each round / after each round's clients had gone:")
        text.append(table([(r["bridge"], r["rss_mb"], r["fds"], r["tasks"], r["connections"], r["log_errors"])
                           for r in load["bridges"]],
                          ("bridge", "RSS MB", "open fds", "asyncio tasks", "most connections", "ERROR records")))
    if "rabbit_restart_skipped" in out:
        text.append(f"RabbitMQ restart scenario skipped: {out['rabbit_restart_skipped']}")
    if "soak" in out:
        s = out["soak"]
        text.append(f"\nsoak {s['seconds']} s, {s['connections']:,} client connections:")
        text.append(table([(k, s[k]["rss_mb"], s[k]["fds"], s[k]["tasks"]) for k in ("idle", "warm", "end")],
                          ("bridge", "RSS MB", "open fds", "asyncio tasks")))
        text.append(f"AMQP connections/channels left in the vhost: {s['amqp_connections_end']}/{s['amqp_channels_end']}; "
                    f"peak RSS during the run {max([x['rss_mb'] for x in s['samples']] or [0])} MB; "
                    f"problems: {s['problems'] or 'none'}")
    return "\n".join(text)


def siege_table(results: list[dict]) -> str:
    def logins(probe: dict) -> str:
        refused = probe["tries"] - probe["in"]
        times = f", median {probe['median_s']} s, slowest {probe['max_s']} s" if probe["in"] else ""
        return f"{probe['in_within_1s']}/{probe['tries']}{times}" + (f", {refused} refused" if refused else "")

    return table([(r["target"], r["seconds"], r["sent"], r["lost"], r["rss_mb"]["before"], r["rss_mb"]["peak"],
                   r.get("bound_mb", "-"), r["rss_mb"]["after"], logins(r["logins"]["attacked user"]),
                   logins(r["logins"]["other user"])) for r in results],
                 ("server", "s", "messages", "lost", "RSS MB before", "peak", "bound", "after",
                  "attacked user in", "other user in"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reliability", description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--short", action="store_const", dest="profile", const="short", default="short")
    mode.add_argument("--long", action="store_const", dest="profile", const="long")
    parser.add_argument("--only", default=",".join(PARTS),
                        help=f"comma-separated parts: {','.join(PARTS + EXTRA_PARTS)} (default: {','.join(PARTS)})")
    for key, value in PROFILES["short"].items():
        parser.add_argument("--" + key.replace("_", "-"), type=type(value), default=None)
    parser.add_argument("--siege-targets", default="bridge",
                        help="the hostile mode's servers, comma-separated: bridge, native (default: bridge)")
    parser.add_argument("--native-port", type=int, default=61613, help="RabbitMQ's STOMP plugin (default: 61613)")
    parser.add_argument("--isolation-brokers", help="isolation: brokers by name, comma-separated (4.3, 4.0, "
                        "system, 4.4; default: the one STOMP_BRIDGE_TEST_AMQP_URL or 127.0.0.1:5672 names)")
    parser.add_argument("--isolation-native", action="store_true",
                        help="isolation: run each attacker script against the broker's own STOMP plugin too")
    parser.add_argument("--isolation-cases", help="isolation: case names or name prefixes (g1, r-max-age, random)")
    parser.add_argument("--seed", type=int, default=39, help="isolation: the random cases' seed (default 39)")
    parser.add_argument("--json", help="write the full results here")
    parser.add_argument("--work", help="directory for the fuzzing corpus (default: a temporary one)")
    args = parser.parse_args(argv)
    profile = dict(PROFILES[args.profile])
    profile.update({k: getattr(args, k) for k in profile if getattr(args, k) is not None})
    parts = [p for p in args.only.split(",") if p]
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)  # writes to sockets a fault just reset
    work = Path(args.work or tempfile.mkdtemp(prefix="reliability-"))
    started = time.monotonic()
    log = lambda m: print(f"[{time.monotonic() - started:7.1f} s] {m}", file=sys.stderr, flush=True)  # noqa: E731
    targets = tuple(t for t in args.siege_targets.split(",") if t)
    isolation = {"brokers": [b for b in (args.isolation_brokers or "").split(",") if b], "native": args.isolation_native,
                 "cases": set(args.isolation_cases.split(",")) if args.isolation_cases else None,
                 "seed": args.seed, "profile": args.profile}
    out = asyncio.run(run(parts, profile, work, log, targets, args.native_port, isolation))
    print(summary(out))
    if args.json:
        def default(o):
            return o.__dict__ if hasattr(o, "__dict__") else str(o)
        Path(args.json).write_text(json.dumps(out, indent=1, default=default))
    problems = list(out.get("soak", {}).get("problems") or [])
    problems += [f"{r['target']}: {p}" for r in out.get("siege", []) if r["target"] == "bridge"
                 for p in siege.problems(r)]
    problems += [f"isolation on {r['broker']}: {fl['case']} ({fl.get('variant')}): {fl['problems'][0][:200]}"
                 for r in out.get("isolation", []) for fl in r["failures"]]
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
