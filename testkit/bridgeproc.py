"""The bridge as a child process that a harness can inspect from outside, kill -9 and restart
(``reliability``'s parts, and ``tests/cluster``'s load while failing).

``python -m testkit.bridgeproc STATS_FILE`` runs a bridge configured from
``STOMP_BRIDGE_*`` variables (as ``stomp-bridge`` does) and rewrites STATS_FILE
twice a second with what only the process itself can see: live asyncio tasks,
connections, and log records at ERROR (an unexpected exception in a connection
handler is logged there, so any count above zero is a crash that a client's
bytes caused). RSS and open file descriptors are read from /proc by the parent;
:meth:`BridgeProcess.usage` gives all of them at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from testkit.ports import free_port

ROOT = Path(__file__).resolve().parent.parent


class _ErrorCounter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.count = 0
        self.last = ""

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        self.last = record.getMessage()[:300]


async def _serve(stats_path: str) -> None:
    from stomp_bridge.processes import tune_gc
    from stomp_bridge.settings import Settings
    from stomp_bridge.transport.server import BridgeServer

    settings = Settings()
    server = BridgeServer(settings)
    errors = _ErrorCounter()
    logging.getLogger().addHandler(errors)
    await server.start()
    tune_gc()  # as stomp-bridge's own process does once it listens: the same collector to measure
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    tmp = stats_path + ".tmp"
    while not stop.is_set():
        stats = {
            "port": server.port if settings.port is not None else None,
            "tls_port": server.tls_port if settings.tls_port is not None else None,
            "ws_port": server.ws_port,
            "http_port": server.ops.port if server.ops else None,
            "tasks": len(asyncio.all_tasks()),
            "connections": server.connection_count,
            # AMQP connections the pool holds (lingering ones included) or is still closing
            "amqp_connections": server.pool.connection_count + server.pool.closing_count,
            "log_errors": errors.count,
            # shared AMQP connections RabbitMQ closed, by reply code (reliability/fuzz_isolation.py)
            "amqp_closed_by_rabbitmq": dict(server.counters.amqp_connections_closed_by_rabbitmq),
            "last_error": errors.last,
            "time": time.time(),
        }
        with open(tmp, "w") as f:
            json.dump(stats, f)
        os.replace(tmp, stats_path)
        try:
            await asyncio.wait_for(stop.wait(), 0.5)
        except asyncio.TimeoutError:
            pass
    await server.close(grace=5)


def main() -> None:
    from stomp_bridge.logs import configure

    configure(os.environ.get("STOMP_BRIDGE_LOG_LEVEL", "WARNING"), "text")
    try:
        import uvloop

        uvloop.run(_serve(sys.argv[1]))
    except ImportError:
        asyncio.run(_serve(sys.argv[1]))


def find_listener(port: int) -> int | None:
    """The process listening on TCP ``port`` on this machine (RabbitMQ's beam for its AMQP or
    STOMP port), found through /proc/net/tcp{,6} and the processes' socket descriptors; None
    when it is not visible (another user's process, another network namespace)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(f"socket:[{fields[9]}]")
        except OSError:
            continue
    if not inodes:
        return None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return int(pid)
        except OSError:
            continue
    return None


def listener_pid(port: int) -> int:
    """``find_listener``, or an error saying what is missing: RabbitMQ's node, to measure its
    STOMP plugin from outside as a BridgeProcess is measured."""
    pid = find_listener(port)
    if pid is None:
        raise RuntimeError(f"no process found listening on port {port}: is the plugin enabled?")
    return pid


def rss_kb(pid: int, field: str = "VmRSS") -> int:
    """A process's resident memory now (``VmHWM``: its peak), from /proc; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


@dataclass
class BridgeProcess:
    """One bridge child process; ``settings`` become STOMP_BRIDGE_* variables. It listens for
    STOMP on ``port`` (a free one by default) and HTTP on a free port, never WebSocket unless
    ``settings`` ask (``ws_port``)."""

    amqp_url: str
    settings: dict[str, object] = field(default_factory=dict)
    port: int = 0
    proc: subprocess.Popen | None = None
    starts: int = 0

    def __post_init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="bridgeproc-")
        self.stats_path = os.path.join(self.dir, "stats.json")
        self.log_path = os.path.join(self.dir, "bridge.log")
        if not self.port:
            self.port = free_port()

    def start(self, timeout: float = 20.0) -> "BridgeProcess":
        env = dict(os.environ)
        env.update({f"STOMP_BRIDGE_{k.upper()}": str(v) for k, v in self.settings.items()})
        env.update(STOMP_BRIDGE_HOST="127.0.0.1", STOMP_BRIDGE_PORT=str(self.port),
                   STOMP_BRIDGE_AMQP_URL=self.amqp_url, STOMP_BRIDGE_HTTP_PORT="0",
                   PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
        env.setdefault("STOMP_BRIDGE_LOG_LEVEL", "WARNING")
        env.setdefault("STOMP_BRIDGE_WS_PORT", "none")  # not 15674, which two bridges (or a RabbitMQ) share
        if os.path.exists(self.stats_path):
            os.unlink(self.stats_path)
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen([sys.executable, "-m", "testkit.bridgeproc", self.stats_path],
                                     cwd=ROOT, env=env, stdout=log, stderr=log)
        log.close()
        self.starts += 1
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"bridge exited with {self.proc.returncode}; log {self.log_path}:\n"
                                   + self.log_tail())
            if os.path.exists(self.stats_path):
                return self
            time.sleep(0.05)
        self.kill9()
        raise RuntimeError(f"bridge did not start within {timeout} s; log:\n{self.log_tail()}")

    def log_tail(self, n: int = 30) -> str:
        try:
            return "".join(open(self.log_path).readlines()[-n:])
        except OSError:
            return ""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stats(self) -> dict:
        with open(self.stats_path) as f:
            return json.load(f)

    def fresh_stats(self, timeout: float = 5.0) -> dict:
        """Stats written after now (the file is rewritten every 0.5 s)."""
        now = time.time()
        deadline = time.monotonic() + timeout
        while True:
            stats = self.stats()
            if stats["time"] >= now or time.monotonic() > deadline:
                return stats
            time.sleep(0.1)

    def metric(self, name: str, labels: str = "") -> float:
        """One sample of the bridge's /metrics, e.g. ``metric("stomp_bridge_reads_held_total")``;
        0 when the bridge does not report it."""
        url = f"http://127.0.0.1:{self.stats()['http_port']}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        wanted = name + labels
        for line in text.splitlines():
            key, _, value = line.rpartition(" ")
            if key == wanted:
                return float(value)
        return 0.0

    def rss_kb(self, field: str = "VmRSS") -> int:
        """Resident memory now (``VmHWM``: the highest since the start or :meth:`reset_peak_rss`)."""
        return rss_kb(self.pid, field)

    def reset_peak_rss(self) -> None:
        """VmHWM starts again from the current RSS (Linux's ``clear_refs``, value 5)."""
        with open(f"/proc/{self.pid}/clear_refs", "w") as f:
            f.write("5")

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def usage(self, fresh: bool = True) -> dict:
        """What the bridge holds now, read from outside: RSS (VmRSS, MB), open file descriptors,
        and from the stats file asyncio tasks, live connections and log records at ERROR.
        ``fresh``: stats written after now (waits up to half a second), else the last ones."""
        stats = self.fresh_stats() if fresh else self.stats()
        return {"rss_mb": round(self.rss_kb() / 1024, 1), "fds": self.fds(), "tasks": stats["tasks"],
                "connections": stats["connections"], "amqp_connections": stats["amqp_connections"],
                "log_errors": stats["log_errors"]}

    def kill9(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int | None:
        if not self.alive():
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.kill9()
            return None


if __name__ == "__main__":
    main()
