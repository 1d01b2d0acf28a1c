"""What the deployment tests share: paths, setting names, the helm binary."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
from pathlib import Path

import yaml

from stomp_bridge.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "stomp-bridge"
VALUE_SETS = sorted((CHART / "ci").glob("*-values.yaml"))

def known_settings() -> frozenset[str]:
    return frozenset(Settings.model_fields)


def env_setting(variable: str) -> str:
    """``STOMP_BRIDGE_HTTP_PORT`` -> ``http_port``; fails on a variable that is no setting."""
    assert variable.startswith("STOMP_BRIDGE_"), f"{variable} lacks the STOMP_BRIDGE_ prefix"
    name = variable.removeprefix("STOMP_BRIDGE_").lower()
    assert name in known_settings() or name == "config", f"{variable}: no setting {name!r} in Settings"
    return name


def helm_binary() -> str:
    found = os.environ.get("HELM") or shutil.which(str(ROOT / ".tools" / "bin" / "helm"))
    assert found, "no helm: run `bash scripts/fetch-helm` (scripts/test does) or set HELM=/path/to/helm"
    return found


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([helm_binary(), *args], capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, f"helm {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}"
    return proc


def render(*values_files: Path, release: str = "demo", sets: tuple[str, ...] = ()) -> list[dict]:
    args = ["template", release, str(CHART), "--namespace", "messaging"]
    for path in values_files:
        args += ["-f", str(path)]
    for item in sets:
        args += ["--set", item]
    return [doc for doc in yaml.safe_load_all(helm(*args).stdout) if doc]


def by_kind(docs: list[dict]) -> dict[str, dict]:
    kinds = [d["kind"] for d in docs]
    assert len(kinds) == len(set(kinds)), f"one object per kind expected, got {kinds}"
    return {d["kind"]: d for d in docs}


def _pump(stream, out: queue.Queue) -> None:
    for line in stream:
        out.put(line)
    out.put(None)


def start_bridge_process(
    command: list[str], env: dict[str, str], cwd: Path, timeout: float = 30.0
) -> tuple[subprocess.Popen, dict]:
    """Start a ``stomp-bridge`` process that logs JSON at INFO; return it and its
    "stomp-bridge listening" record (host, port, http_port). Output keeps draining in a
    thread, so a chatty bridge never blocks on a full pipe."""
    proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
    seen: list[str] = []
    try:
        while True:
            try:
                line = lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError("stomp-bridge logged no listening line:\n" + "".join(seen)) from None
            assert line is not None, "stomp-bridge exited before listening:\n" + "".join(seen)
            seen.append(line)
            if line.startswith("{") and json.loads(line).get("message") == "stomp-bridge listening":
                return proc, json.loads(line)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
