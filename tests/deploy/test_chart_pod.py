"""The chart's pod, run here: its container args and environment, its ConfigMap file and
Secret, the installed ``stomp-bridge`` command, the probes' paths, and SIGTERM within the
pod's grace period.

Only the listener ports differ from the pod: a test never binds fixed ports, so
STOMP_BRIDGE_PORT/STOMP_BRIDGE_HTTP_PORT=0 are added (variables win over the file), and the
log level is INFO so the test reads the ports the bridge got from its "listening" line.
"""

from __future__ import annotations

import signal
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from .support import VALUE_SETS, by_kind, render, start_bridge_process

pytestmark = pytest.mark.integration

# Value sets whose settings the bridge on this branch can run without certificates.
RUNNABLE = [None] + [p for p in VALUE_SETS if p.name in ("hpa-values.yaml", "servicemonitor-values.yaml")]


def _environment(container: dict, secret: dict) -> dict[str, str]:
    env = {}
    for item in container["env"]:
        ref = item.get("valueFrom", {}).get("secretKeyRef")
        if ref is None:
            env[item["name"]] = item["value"]
            continue
        assert ref["name"] == secret["metadata"]["name"]
        if ref["key"] in secret["stringData"]:
            env[item["name"]] = secret["stringData"][ref["key"]]
        else:
            assert ref.get("optional") is True, f"{item['name']}: key {ref['key']} missing and not optional"
    return env


def config_ws_enabled(kinds: dict) -> bool:
    import yaml

    return yaml.safe_load(kinds["ConfigMap"]["data"]["bridge.yaml"]).get("ws_port") is not None


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.parametrize("value_set", RUNNABLE, ids=lambda p: p.name if p else "defaults")
def test_chart_pod_starts_becomes_ready_and_stops_in_its_grace_period(value_set, broker, tmp_path):
    docs = render(*([value_set] if value_set else []), sets=(f"secret.amqpUrl={broker.amqp_url}",))
    kinds = by_kind(docs)
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    config = tmp_path / Path(mount["mountPath"]).name
    config.write_text(kinds["ConfigMap"]["data"][mount["subPath"]])
    args = [str(config) if a == mount["mountPath"] else a for a in container["args"]]
    env = {
        "PATH": str(Path(sys.executable).parent),
        **_environment(container, kinds["Secret"]),
        "STOMP_BRIDGE_HOST": "127.0.0.1", "STOMP_BRIDGE_PORT": "0",
        "STOMP_BRIDGE_HTTP_HOST": "127.0.0.1", "STOMP_BRIDGE_HTTP_PORT": "0",
        "STOMP_BRIDGE_LOG_LEVEL": "INFO",
        **({"STOMP_BRIDGE_WS_PORT": "0"} if config_ws_enabled(kinds) else {}),
    }
    assert env["STOMP_BRIDGE_AMQP_URL"] == broker.amqp_url
    # JSON logs come from the chart's config file (log_format: json), not from the test
    proc, record = start_bridge_process([str(Path(sys.executable).parent / "stomp-bridge"), *args],
                                        env=env, cwd=tmp_path)
    try:
        if not config_ws_enabled(kinds):
            assert record.get("ws_port") is None, "a WebSocket listener the Service does not route to"
        http = f"http://127.0.0.1:{record['http_port']}"
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert _get(http + container[probe]["httpGet"]["path"]) == 200, probe
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=pod["terminationGracePeriodSeconds"]) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
