"""deploy/: alert rules, dashboard, RabbitMQ files, systemd, HAProxy, the plain manifest.

PromQL is parsed by a real PromQL parser and every metric it names must be one the bridge
exposes; the RabbitMQ policy is imported into a real broker and seen on the queues the
bridge creates; the systemd unit goes through `systemd-analyze verify`.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import kubernetes_validate
import promql_parser
import pytest
import stomp
import yaml

from stomp_bridge.metrics import Metrics
from stomp_bridge.settings import Settings, load
from stomp_bridge.testing import running_bridge

from .support import ROOT

DEPLOY = ROOT / "deploy"
METRIC = re.compile(r"\b(?:stomp_bridge|process)_[a-z_]+\b")


def exposed_metrics() -> set[str]:
    """Every series name the bridge's /metrics can carry, with Prometheus' suffixes."""
    names = set()
    live = {"connections": 0, "receipts_pending": 0, "amqp_connections": 0, "login_checks": 0}  # all BridgeServer feeds
    for family in Metrics(lambda: live).registry.collect():
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names |= {family.name + s for s in ("_bucket", "_sum", "_count")}
        else:
            names.add(family.name)
    return names


def parse_promql(expr: str) -> set[str]:
    promql_parser.parse(expr)  # raises on a syntax error
    used = set(METRIC.findall(expr))
    unknown = used - exposed_metrics()
    assert not unknown, f"{sorted(unknown)} are not metrics of the bridge (stomp_bridge/metrics.py)"
    return used


def test_metric_names_are_read_from_the_bridge():
    assert {"stomp_bridge_connections", "stomp_bridge_errors_total",
            "stomp_bridge_publish_confirm_seconds_bucket"} <= exposed_metrics()


def test_promql_check_catches_a_wrong_metric_and_bad_syntax():
    with pytest.raises(AssertionError, match="stomp_bridge_frames_total"):
        parse_promql("rate(stomp_bridge_frames_total[5m])")
    with pytest.raises(ValueError, match="unclosed left parenthesis"):
        parse_promql("sum(rate(stomp_bridge_errors_total[5m])")


def test_alert_rules_cover_the_failures_and_use_real_metrics():
    rules = yaml.safe_load((DEPLOY / "prometheus/alerts.yml").read_text())
    alerts = {r["alert"]: r for group in rules["groups"] for r in group["rules"]}
    assert {"StompBridgeDown", "StompBridgeRabbitMQUnreachable", "StompBridgeReceiptLatencyHigh",
            "StompBridgeErrorRateHigh"} <= set(alerts)
    for name, rule in alerts.items():
        parse_promql(rule["expr"])
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert rule["annotations"]["summary"], name
    assert "stomp_bridge_publish_confirm_seconds_bucket" in alerts["StompBridgeReceiptLatencyHigh"]["expr"]


def _promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    binary = ROOT / ".tools/bin/promtool"
    assert binary.exists(), "no promtool: run `bash scripts/ensure-deploy-tools` (scripts/test does)"
    return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_alert_rules_fire_on_the_failures_they_name():
    """promtool's rule unit tests: synthetic series in, the expected alerts out."""
    proc = _promtool("test", "rules", str(DEPLOY / "prometheus/alerts_test.yml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tested = set(re.findall(r"alertname: (\w+)", (DEPLOY / "prometheus/alerts_test.yml").read_text()))
    assert {"StompBridgeDown", "StompBridgeRabbitMQUnreachable", "StompBridgeReceiptLatencyHigh",
            "StompBridgeErrorRateHigh"} <= tested


def test_prometheus_config_passes_promtool(tmp_path):
    # The config names its rule file by its path in the container; check the same pair here.
    config = (DEPLOY / "prometheus/prometheus.yml").read_text().replace("/etc/prometheus/alerts.yml", "alerts.yml")
    (tmp_path / "prometheus.yml").write_text(config)
    shutil.copy(DEPLOY / "prometheus/alerts.yml", tmp_path / "alerts.yml")
    proc = _promtool("check", "config", "prometheus.yml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 1 rule files found" in proc.stdout


def test_prometheus_config_loads_the_rules_it_ships():
    config = yaml.safe_load((DEPLOY / "prometheus/prometheus.yml").read_text())
    assert [Path(p).name for p in config["rule_files"]] == ["alerts.yml"]


def test_grafana_dashboard_queries_parse_and_cover_every_metric():
    dashboard = json.loads((DEPLOY / "grafana/stomp-bridge-dashboard.json").read_text())
    used: set[str] = set()
    ids = []
    for panel in dashboard["panels"]:
        ids.append(panel["id"])
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            expr = target["expr"].replace("$__rate_interval", "5m").replace("$instance", ".*")
            used |= parse_promql(expr)
    assert len(ids) == len(set(ids))
    families = {re.sub(r"_(total|bucket|sum|count)$", "", m) for m in exposed_metrics()}
    shown = {re.sub(r"_(total|bucket|sum|count)$", "", m) for m in used}
    assert families == shown, f"not on the dashboard: {sorted(families - shown)}"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "instance"} <= variables


def test_enabled_plugins_is_an_erlang_term_rabbitmq_reads():
    proc = subprocess.run(
        ["erl", "-noshell", "-eval",
         f'{{ok, [P]}} = file:consult("{DEPLOY / "rabbitmq/enabled_plugins"}"), '
         'io:format("~p", [P]), halt().'],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    plugins = set(re.findall(r"\w+", proc.stdout))
    assert plugins == {"rabbitmq_management", "rabbitmq_prometheus", "rabbitmq_stream"}


RABBITMQ_TRANSLATE = """
S = cuttlefish_schema:files(filelib:wildcard("{plugins}/*/priv/schema/*.schema")),
case cuttlefish_generator:map(S, cuttlefish_conf:file("{conf}")) of
  {{error, Phase, Errors}} -> io:format("~p ~p~n", [Phase, Errors]), halt(1);
  Config -> io:format("~p~n", [lists:sort(proplists:get_keys(Config))]), halt(0)
end.
"""


def _rabbitmq_translate(conf: Path) -> subprocess.CompletedProcess[str]:
    """What RabbitMQ does with rabbitmq.conf at boot: cuttlefish maps it through the schemas of
    the installed broker's plugins; an unknown key or a bad value is an error."""
    plugins = sorted(Path("/usr/lib/rabbitmq/lib").glob("rabbitmq_server-*/plugins"))
    assert plugins, "RabbitMQ's schemas are read from Debian's rabbitmq-server (scripts/ensure-rabbitmq installs it)"
    code = RABBITMQ_TRANSLATE.format(plugins=plugins[-1], conf=conf)
    return subprocess.run(["erl", "-noshell", "-pa", *map(str, plugins[-1].glob("*/ebin")), "-eval", code],
                          capture_output=True, text=True, timeout=120)


def test_rabbitmq_conf_passes_rabbitmqs_own_schema(tmp_path):
    conf = (DEPLOY / "rabbitmq/rabbitmq.conf").read_text()
    # the broker checks that the definitions file exists: point at the repository's copy
    local = tmp_path / "rabbitmq.conf"
    local.write_text(conf.replace("/etc/rabbitmq/definitions.json", str(DEPLOY / "rabbitmq/definitions.json")))
    proc = _rabbitmq_translate(local)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rabbitmq_prometheus" in proc.stdout and "rabbitmq_management" in proc.stdout
    local.write_text(local.read_text() + "chanel_max = 5\n")
    misspelt = _rabbitmq_translate(local)
    assert misspelt.returncode != 0 and "chanel_max" in misspelt.stdout


def test_definitions_user_password_hash_is_rabbitmqs_sha256_of_the_documented_password():
    definitions = json.loads((DEPLOY / "rabbitmq/definitions.json").read_text())
    (user,) = definitions["users"]
    raw = base64.b64decode(user["password_hash"])
    salt, digest = raw[:4], raw[4:]
    assert user["hashing_algorithm"] == "rabbit_password_hashing_sha256"
    assert hashlib.sha256(salt + b"stomp").digest() == digest
    (permission,) = definitions["permissions"]
    assert permission["user"] == user["name"]


@pytest.mark.integration
def test_stomp_queue_policy_applies_to_the_bridges_subscription_queues(broker, rabbit):
    definitions = json.loads((DEPLOY / "rabbitmq/definitions.json").read_text())
    vhost = f"deploy-policy-{uuid.uuid4().hex[:12]}"
    rabbit.create_vhost(vhost, broker.user)
    try:
        # the vhost-scoped import, as `rabbitmqctl import_definitions` does for one vhost
        rabbit.request("POST", f"/definitions/{rabbit.q(vhost)}", {"policies": definitions["policies"]})
        with running_bridge(broker.amqp_url, http_port=None) as bridge:
            conn = stomp.Connection([bridge.address], heartbeats=(0, 0), vhost=vhost)
            conn.connect(broker.user, broker.password, wait=True)
            conn.subscribe("/topic/prices", id="durable-1", headers={"durable": "true", "auto-delete": "false"})
            conn.subscribe("/queue/orders", id="2")
            conn.send("/queue/orders", "x", receipt="sync")  # a round trip: both SUBSCRIBEs are done
            queues = _queues_with_policy_info(rabbit, vhost, count=2)
            conn.disconnect()
        policies = {q["name"]: q.get("policy") for q in queues}
        stomp_queues = [name for name in policies if name.startswith("stomp-subscription-")]
        assert len(stomp_queues) == 1, policies
        assert policies[stomp_queues[0]] == "stomp-subscriptions"
        assert policies["orders"] in (None, "")
    finally:
        rabbit.delete_vhost(vhost)


def _queues_with_policy_info(rabbit, vhost: str, count: int) -> list[dict]:
    """The vhost's queues once the management API reports their policy field.

    The API fills it from the queues' statistics, emitted every few seconds: poll for that
    event with a deadline (there is nothing to subscribe to). RabbitMQ 4.x leaves out the
    ``policy`` field of a queue without one, but always reports ``effective_policy_definition``.
    """
    deadline = time.monotonic() + 30
    while True:
        queues = rabbit.queues(vhost)
        if len(queues) >= count and all("policy" in q or "effective_policy_definition" in q for q in queues):
            return queues
        assert time.monotonic() < deadline, f"RabbitMQ did not report the queues' policies: {queues}"
        time.sleep(0.2)


def test_systemd_unit_verifies(tmp_path):
    unit = (DEPLOY / "systemd/stomp-bridge.service").read_text()
    # verify checks that ExecStart exists: point it at this checkout's installed entry point
    installed = Path(sys.executable).parent / "stomp-bridge"
    copy = tmp_path / "stomp-bridge.service"
    copy.write_text(unit.replace("/opt/stomp-bridge/bin/stomp-bridge", str(installed)))
    proc = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stderr
    grace = load(DEPLOY / "systemd/bridge.yaml").shutdown_grace
    assert int(re.search(r"TimeoutStopSec=(\d+)", unit).group(1)) > grace


def test_systemd_config_file_is_valid_bridge_configuration():
    settings = load(DEPLOY / "systemd/bridge.yaml")
    assert settings.default_user is None  # anonymous CONNECT refused
    assert settings.amqp_url.count("amqp://") == 2
    raw = yaml.safe_load((DEPLOY / "systemd/bridge.yaml").read_text())
    assert set(raw) <= set(Settings.model_fields)


def _haproxy_check(path: Path) -> subprocess.CompletedProcess[str]:
    binary = ROOT / ".tools/bin/haproxy"
    assert binary.exists(), "no haproxy: run `bash scripts/ensure-deploy-tools` (scripts/test does)"
    return subprocess.run([str(binary), "-c", "-f", str(path)], capture_output=True, text=True, timeout=60)


def test_haproxy_config_is_valid_for_haproxy(tmp_path):
    proc = _haproxy_check(DEPLOY / "haproxy/haproxy.cfg")
    assert proc.returncode == 0 and "Configuration file is valid" in proc.stdout, proc.stdout + proc.stderr
    bad = tmp_path / "bad.cfg"
    bad.write_text((DEPLOY / "haproxy/haproxy.cfg").read_text().replace("send-proxy-v2", "send-proxy-v9"))
    assert _haproxy_check(bad).returncode != 0


def test_haproxy_sends_proxy_protocol_and_checks_readiness():
    cfg = (DEPLOY / "haproxy/haproxy.cfg").read_text()
    defaults = Settings()
    assert f"bind :{defaults.port}" in cfg
    servers = re.findall(r"^\s+server (\S+) (\S+):(\d+)", cfg, re.M)
    assert len(servers) >= 2 and all(int(port) == defaults.port for _, _, port in servers)
    server_defaults = re.search(r"default-server (.*)", cfg).group(1).split()
    assert "send-proxy-v2" in server_defaults and "check" in server_defaults
    assert server_defaults[server_defaults.index("port") + 1] == str(defaults.http_port)
    assert "option httpchk GET /readyz" in cfg
    assert "STOMP_BRIDGE_PROXY_PROTOCOL=true" in cfg and "proxy_protocol" in Settings.model_fields


def test_plain_kubernetes_manifest_is_the_chart_rendered_and_valid():
    spec = importlib.util.spec_from_file_location("k8s_example", ROOT / "scripts/k8s-example.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = (DEPLOY / "kubernetes/stomp-bridge.yaml").read_text()
    assert text == module.render(), "run `.venv/bin/python scripts/k8s-example.py`"
    docs = [d for d in yaml.safe_load_all(text) if d]
    assert {d["kind"] for d in docs} >= {"Deployment", "Service", "ConfigMap", "Secret"}
    for doc in docs:
        kubernetes_validate.validate(doc, "1.30.0", strict=True)
        assert "helm.sh/chart" not in doc["metadata"].get("labels", {})
