"""The Helm chart, checked with the real helm (lint, template) and Kubernetes' own schemas.

helm comes from scripts/fetch-helm (scripts/test runs it); kubernetes-validate carries the
OpenAPI schemas of each Kubernetes release, and scripts/crd-check those of cert-manager's and
the Prometheus operator's custom resources, so no cluster is needed.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess

import kubernetes_validate
import pytest
import yaml

from stomp_bridge.settings import load

from .support import (
    CHART,
    ROOT,
    VALUE_SETS,
    by_kind,
    env_setting,
    helm,
    known_settings,
    render,
)

KUBERNETES_VERSION = "1.30.0"  # oldest release the chart promises beyond kubeVersion's floor
CRD_KINDS = {"ServiceMonitor", "Certificate", "PrometheusRule"}
SETS = {path.name.removesuffix("-values.yaml"): path for path in VALUE_SETS}


def values(name: str):
    return SETS[name]


def config_of(docs: list[dict]) -> dict:
    return yaml.safe_load(by_kind(docs)["ConfigMap"]["data"]["bridge.yaml"])


def container_of(docs: list[dict]) -> dict:
    (container,) = by_kind(docs)["Deployment"]["spec"]["template"]["spec"]["containers"]
    return container


def test_every_value_set_named_in_the_issue_exists():
    assert {"tls", "hpa", "existing-secret", "websocket-ingress", "servicemonitor"} <= set(SETS)


@pytest.mark.parametrize("value_set", [None, *SETS])
def test_helm_lint_passes_strict(value_set):
    args = ["lint", "--strict", str(CHART)]
    if value_set:
        args += ["-f", str(values(value_set))]
    out = helm(*args).stdout
    assert "0 chart(s) failed" in out


@pytest.mark.parametrize("value_set", [None, *SETS])
def test_rendered_objects_are_valid_kubernetes(value_set):
    docs = render(*([values(value_set)] if value_set else []))
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            continue
        # strict: an unknown or misplaced field is an error too.
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def _validate_custom_resources(docs: list[dict]) -> list[dict]:
    script = ROOT / "scripts/crd-check/validate.mjs"
    assert (script.parent / "node_modules").is_dir(), "run `bash scripts/ensure-deploy-tools` (scripts/test does)"
    proc = subprocess.run(["node", str(script)], input=json.dumps(docs), capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.stdout, proc.stderr
    return json.loads(proc.stdout)


def test_custom_resources_are_valid_for_their_crds():
    """cert-manager's and the Prometheus operator's own CRD schemas, as the API server checks them."""
    docs = [d for path in SETS.values() for d in render(path) if d["kind"] in CRD_KINDS]
    assert {d["kind"] for d in docs} == CRD_KINDS
    results = _validate_custom_resources(docs)
    assert [r for r in results if r["error"]] == []
    broken = json.loads(json.dumps(next(d for d in docs if d["kind"] == "ServiceMonitor")))
    broken["spec"]["endpoints"][0]["interval"] = "15 seconds"
    (result,) = _validate_custom_resources([broken])
    assert "interval" in result["error"]


@pytest.mark.parametrize("value_set", [None, *SETS])
def test_rendered_config_file_is_valid_bridge_configuration(value_set, tmp_path):
    """The ConfigMap's file is loaded by the bridge's own loader, as `--config` does."""
    docs = render(*([values(value_set)] if value_set else []))
    config = config_of(docs)
    assert set(config) <= known_settings(), set(config) - known_settings()
    path = tmp_path / "bridge.yaml"
    path.write_text(by_kind(docs)["ConfigMap"]["data"]["bridge.yaml"])
    # The pod gets the RabbitMQ URL from the Secret (STOMP_BRIDGE_AMQP_URL), not from this file.
    secret = by_kind(docs).get("Secret")
    overrides = {"amqp_url": secret["stringData"]["amqp-url"]} if secret else {}
    settings = load(path, **overrides)
    assert settings.port == config["port"] == 61613
    assert settings.http_port == config["http_port"] == 9410
    for env in container_of(docs)["env"]:
        env_setting(env["name"])
    assert container_of(docs)["args"] == ["--config", "/etc/stomp-bridge/bridge.yaml"]


def test_defaults_render_the_core_objects():
    docs = render()
    assert sorted(d["kind"] for d in docs) == [
        "ConfigMap", "Deployment", "PodDisruptionBudget", "Secret", "Service", "ServiceAccount"
    ]


def test_deployment_probes_ports_and_security_context():
    docs = render()
    pod = by_kind(docs)["Deployment"]["spec"]["template"]["spec"]
    container = container_of(docs)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"stomp": 61613, "http": 9410}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert pod["automountServiceAccountToken"] is False
    assert {c["topologyKey"] for c in pod["topologySpreadConstraints"]} == {
        "kubernetes.io/hostname", "topology.kubernetes.io/zone"
    }
    service_ports = {p["name"]: p["port"] for p in by_kind(docs)["Service"]["spec"]["ports"]}
    assert service_ports == {"stomp": 61613, "http": 9410}
    assert container["image"] == "stomp-bridge:0.1.0"
    assert config_of(docs)["ws_port"] is None  # no listener the Service does not route to


@pytest.mark.parametrize("value_set", [None, "hpa"])
def test_termination_grace_covers_prestop_and_drain(value_set):
    docs = render(*([values(value_set)] if value_set else []))
    pod = by_kind(docs)["Deployment"]["spec"]["template"]["spec"]
    sleep = int(container_of(docs)["lifecycle"]["preStop"]["exec"]["command"][1])
    drain = config_of(docs)["shutdown_grace"]
    assert pod["terminationGracePeriodSeconds"] > sleep + drain


def test_secret_carries_the_rabbitmq_url_and_the_env_reads_it():
    docs = render(sets=("secret.amqpUrl=amqp://u:p@rabbit-0:5672/\\,amqp://u:p@rabbit-1:5672/",
                        "secret.defaultPass=s3cret", "secret.defaultUser=anon"))
    secret = by_kind(docs)["Secret"]
    assert secret["stringData"] == {
        "amqp-url": "amqp://u:p@rabbit-0:5672/,amqp://u:p@rabbit-1:5672/",
        "default-user": "anon",
        "default-pass": "s3cret",
    }
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container_of(docs)["env"]}
    assert refs["STOMP_BRIDGE_AMQP_URL"] == {"name": secret["metadata"]["name"], "key": "amqp-url"}
    assert refs["STOMP_BRIDGE_DEFAULT_PASS"]["key"] == "default-pass"
    assert "s3cret" not in json.dumps(by_kind(docs)["Deployment"])


def test_existing_secret_is_referenced_not_created():
    docs = render(values("existing-secret"))
    assert "Secret" not in {d["kind"] for d in docs}
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container_of(docs)["env"]}
    assert refs["STOMP_BRIDGE_AMQP_URL"] == {"name": "rabbitmq-stomp-credentials", "key": "url"}
    volumes = {v["name"]: v for v in by_kind(docs)["Deployment"]["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "stomp-bridge-cert"


def test_tls_mounts_the_certificate_where_the_config_points():
    docs = render(values("tls"))
    kinds = by_kind(docs)
    config = config_of(docs)
    container = container_of(docs)
    mount = next(m for m in container["volumeMounts"] if m["name"] == "tls")
    assert "subPath" not in mount, "a subPath mount would hide renewed certificates"
    for key in ("tls_cert_file", "tls_key_file", "tls_ca_file"):
        assert config[key].startswith(mount["mountPath"] + "/")
    assert config["tls_port"] == 61614 and config["tls_verify_peer"] is True
    assert config["ssl_cert_login"] is True and config["tls_min_version"] == "1.3"
    assert {"name": "stomp-tls", "containerPort": 61614, "protocol": "TCP"} in container["ports"]
    assert any(p["name"] == "stomp-tls" and p["port"] == 61614 for p in kinds["Service"]["spec"]["ports"])
    cert = kinds["Certificate"]
    volume = next(v for v in kinds["Deployment"]["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls")
    assert cert["spec"]["secretName"] == volume["secret"]["secretName"]
    assert cert["spec"]["issuerRef"] == {"name": "internal-ca", "kind": "ClusterIssuer"}
    assert "demo-stomp-bridge.messaging.svc" in cert["spec"]["dnsNames"]


def test_hpa_owns_the_replica_count():
    docs = render(values("hpa"))
    kinds = by_kind(docs)
    assert "replicas" not in kinds["Deployment"]["spec"]
    hpa = kinds["HorizontalPodAutoscaler"]["spec"]
    assert hpa["scaleTargetRef"]["name"] == kinds["Deployment"]["metadata"]["name"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (3, 12)
    assert config_of(docs)["max_connections"] == 20000


def test_websocket_ingress_routes_to_the_ws_listener():
    docs = render(values("websocket-ingress"))
    kinds = by_kind(docs)
    config = config_of(docs)
    assert (config["ws_port"], config["ws_path"]) == (15674, "/ws")
    assert config["ws_allowed_origins"] == "https://app.example.com"
    (rule,) = kinds["Ingress"]["spec"]["rules"]
    (path,) = rule["http"]["paths"]
    assert path["path"] == "/ws"
    assert path["backend"]["service"] == {"name": kinds["Service"]["metadata"]["name"], "port": {"name": "ws"}}
    assert any(p["name"] == "ws" and p["port"] == 15674 for p in kinds["Service"]["spec"]["ports"])
    assert kinds["Service"]["spec"]["externalTrafficPolicy"] == "Local"


def test_service_monitor_scrapes_the_http_port_of_the_service():
    kinds = by_kind(render(values("servicemonitor")))
    monitor = kinds["ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint == {"port": "http", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s"}
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= kinds["Service"]["metadata"]["labels"].items()
    assert "http" in {p["name"] for p in kinds["Service"]["spec"]["ports"]}
    # the alert rules say job="stomp-bridge": the job is the name label, not the release's name
    assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/name"
    assert kinds["Service"]["metadata"]["labels"]["app.kubernetes.io/name"] == "stomp-bridge"


def test_prometheus_rule_carries_the_tested_alert_rules():
    shipped = (ROOT / "deploy/prometheus/alerts.yml").read_text()
    assert (CHART / "files/alerts.yml").read_text() == shipped, "copy deploy/prometheus/alerts.yml to helm/stomp-bridge/files/"
    rule = by_kind(render(values("servicemonitor")))["PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"] == yaml.safe_load(shipped)
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_ingress_without_websocket_is_refused_with_the_fix():
    proc = helm("template", "demo", str(CHART), "--set", "ingress.enabled=true", check=False)
    assert proc.returncode != 0
    assert "set websocket.enabled=true" in proc.stderr


BAD_VALUES = {
    "misspelt setting": ({"config": {"max_frame_sise": 1024}}, "max_frame_sise"),
    "setting out of range": ({"config": {"max_frame_size": 10}}, "max_frame_size"),
    "setting of the wrong type": ({"config": {"idle_timeout": "soon"}}, "idle_timeout"),
    "setting the chart owns": ({"config": {"port": 1234}}, "port"),
    "log format": ({"config": {"log_format": "xml"}}, "log_format"),
    "top-level typo": ({"replicas": 3}, "replicas"),
    "port out of range": ({"ports": {"stomp": 70000}}, "stomp"),
    "not an AMQP URL": ({"secret": {"amqpUrl": "http://rabbit:5672/"}}, "amqpUrl"),
    "TLS version": ({"tls": {"minVersion": "1.0"}}, "minVersion"),
    "PROXY protocol from anyone": ({"config": {"proxy_protocol": True}}, "proxy_protocol_trusted"),
    "PROXY protocol from no one": (
        {"config": {"proxy_protocol": True, "proxy_protocol_trusted": []}}, "proxy_protocol_trusted"
    ),
}


@pytest.mark.parametrize("case", BAD_VALUES)
def test_values_schema_refuses_bad_values(case, tmp_path):
    bad, field = BAD_VALUES[case]
    path = tmp_path / "bad-values.yaml"
    path.write_text(yaml.safe_dump(bad))
    for command in ("lint", "template"):
        args = [command, *(["demo"] if command == "template" else []), str(CHART), "-f", str(path)]
        proc = helm(*args, check=False)
        assert proc.returncode != 0, f"helm {command} accepted {bad}"
        assert field in proc.stdout + proc.stderr


def test_proxy_protocol_trusts_the_networks_the_values_name():
    config = config_of(render(values("proxy-protocol")))
    assert config["proxy_protocol"] is True
    assert config["proxy_protocol_trusted"] == ["10.0.0.0/16", "fd00::/8"]


def test_notes_tell_where_to_connect():
    proc = helm("install", "demo", str(CHART), "--dry-run=client", "--namespace", "messaging",
                "-f", str(values("websocket-ingress")))
    notes = proc.stdout.split("NOTES:", 1)[1]
    assert "demo-stomp-bridge.messaging.svc:61613" in notes
    assert "wss://stomp.example.com/ws" in notes
    assert "/readyz" in notes


def test_values_schema_config_part_is_generated_from_the_settings_model():
    spec = importlib.util.spec_from_file_location("chart_schema", ROOT / "scripts" / "chart-schema.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["properties"]["config"] == module.config_schema(), (
        "values.schema.json is out of date: run `.venv/bin/python scripts/chart-schema.py`"
    )
    assert module.CHART_OWNED <= known_settings()


def test_the_charts_readme_lists_every_value_with_its_default():
    spec = importlib.util.spec_from_file_location("chart_readme", ROOT / "scripts" / "chart-readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    readme = (CHART / "README.md").read_text()
    values = (CHART / "values.yaml").read_text()
    start = readme.index(module.BEGIN) + len(module.BEGIN)
    assert readme[start:readme.index(module.END)] == module.table(values), (
        "helm/stomp-bridge/README.md is out of date: run `.venv/bin/python scripts/chart-readme.py`"
    )
    listed = {dotted for dotted, _, _ in module.rows(values)}
    assert {"replicaCount", "secret.amqpUrl", "tls.certManager.issuerRef.kind", "ingress.annotations",
            "priorityClassName"} <= listed
