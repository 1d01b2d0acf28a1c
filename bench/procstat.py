"""The bridge subprocess: start it, and read its CPU time and memory from /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from testkit.bridgeproc import find_listener

ROOT = os.path.join(os.path.dirname(__file__), "..")
TICK = os.sysconf("SC_CLK_TCK")


def start_bridge(port: int, settings: dict[str, str] | None = None, checkout: str | None = None,
                 cpus: set[int] | None = None) -> subprocess.Popen:
    """``settings``: extra STOMP_BRIDGE_<NAME> environment for the bridge; ``checkout``: run the
    bridge of that directory (an older commit's, for a before/after in one run); ``cpus``: the
    cores it may run on."""
    env = dict(os.environ)
    if checkout is not None:
        env["PYTHONPATH"] = os.path.abspath(checkout)
    # No WebSocket listener unless asked: web-stomp's 15674 may be taken (another bridge, a broker).
    env["STOMP_BRIDGE_WS_PORT"] = "none"
    for name, value in (settings or {}).items():
        env[f"STOMP_BRIDGE_{name.upper()}"] = value
    proc = subprocess.Popen(
        [sys.executable, "-m", "stomp_bridge", "--port", str(port), "--http-port", "0", "--log-level", "WARNING"],
        cwd=checkout or ROOT, env=env,
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
    )
    for _ in range(100):
        if proc.poll() is not None:
            raise RuntimeError(f"bridge exited with {proc.returncode} before listening on {port}")
        # Its own listener: a connection alone could reach another process holding the port.
        if find_listener(port) == proc.pid:
            return proc
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"bridge did not listen on {port} within 10 s")


def cpu_split(pid: int) -> tuple[float, float]:
    """utime and stime of the process, seconds (fields 14 and 15 of /proc/pid/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process."""
    return sum(cpu_split(pid))


def pin(pid: int, cpus: set[int]) -> dict[int, set[int]]:
    """Every thread of ``pid`` (a beam has dozens of schedulers) held to ``cpus``; returns each
    thread's affinity before, for :func:`unpin`."""
    before = {}
    for tid in map(int, os.listdir(f"/proc/{pid}/task")):
        try:
            before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, cpus)
        except OSError:
            continue
    return before


def unpin(before: dict[int, set[int]]) -> None:
    for tid, cpus in before.items():
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:
            continue


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (peak) in kB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":", 1)
                out[key] = int(value.split()[0])
    return out


def reset_peak(pid: int) -> bool:
    """Reset VmHWM to the current RSS (Linux 4.0+: write 5 to clear_refs)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Probe:
    """CPU seconds and peak RSS of the bridge over one run, and RabbitMQ's CPU seconds beside
    it (``broker_pid``: its beam process). ``pid`` None: the native plugin (no bridge to read).

    A scenario calls :meth:`mark` where its timed part begins (after filling a queue, say), so
    that the CPU per message counts only the messages the scenario divides by."""

    def __init__(self, pid: int | None, broker_pid: int | None = None) -> None:
        self.pid = pid
        self.broker_pid = broker_pid
        self.cpu0 = (0.0, 0.0)
        self.broker_cpu0 = (0.0, 0.0)
        self.client_cpu0 = 0.0
        self.peak_reset = False

    def start(self) -> None:
        if self.pid is not None:
            self.peak_reset = reset_peak(self.pid)
        self.mark()

    def mark(self) -> None:
        # The bench client runs in this process: its CPU beside the bridge's and RabbitMQ's says
        # whether the machine's cores were the limit (see "cores busy").
        self.client_cpu0 = time.process_time()
        if self.pid is not None:
            self.cpu0 = cpu_split(self.pid)
        if self.broker_pid is not None:
            self.broker_cpu0 = cpu_split(self.broker_pid)

    def stop(self) -> dict[str, float]:
        out: dict[str, float] = {"client_cpu_s": time.process_time() - self.client_cpu0}
        if self.broker_pid is not None:
            user, system = cpu_split(self.broker_pid)
            out["broker_cpu_user_s"] = user - self.broker_cpu0[0]
            out["broker_cpu_sys_s"] = system - self.broker_cpu0[1]
            out["broker_cpu_s"] = out["broker_cpu_user_s"] + out["broker_cpu_sys_s"]
        if self.pid is None:
            return out
        user, system = cpu_split(self.pid)
        mem = memory_kb(self.pid)
        return {
            **out,
            "cpu_s": user - self.cpu0[0] + system - self.cpu0[1],
            "cpu_user_s": user - self.cpu0[0],
            "cpu_sys_s": system - self.cpu0[1],
            "rss_mb": mem["VmRSS"] / 1024,
            # Without a reset, VmHWM is the peak since the bridge started.
            "peak_rss_mb": mem["VmHWM"] / 1024,
            "peak_is_per_run": self.peak_reset,
        }
