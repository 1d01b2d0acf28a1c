"""Dockerfile, .dockerignore and docker-compose.yml: real linters plus checks against the model.

No Docker engine runs here: hadolint lints the Dockerfile, Debian's docker-compose validates
the compose file against the Compose schema (`config` needs no engine), and the rest is
checked against the settings model. test_image_install.py runs the image's install path.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from stomp_bridge.settings import Settings

from .dockerfile import DOCKERFILE, env_pairs, stages
from .support import ROOT, env_setting

COMPOSE = ROOT / "docker-compose.yml"
# The ports the image documents, and the settings that own them.
IMAGE_PORTS = {61613: "port", 61614: "tls_port", 15674: "ws_port", 9410: "http_port"}
# The TLS listener is off by default (tls_port unset); 61614 is its conventional port.
CONVENTIONAL = {"tls_port": 61614}


def default_port(setting: str) -> int:
    default = Settings.model_fields[setting].default
    return CONVENTIONAL[setting] if default is None else default


def tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    assert found, f"{name} is missing: run `bash scripts/test` (installs the deploy-check extra and Debian's docker-compose)"
    return found


def test_hadolint_finds_nothing():
    proc = subprocess.run([tool("hadolint"), "--no-color", str(DOCKERFILE)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_would_catch_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install stomp-bridge\nCMD stomp-bridge\n")
    proc = subprocess.run([tool("hadolint"), "--no-color", str(bad)], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "DL3007" in proc.stdout  # :latest


def test_dockerfile_is_multi_stage_pinned_and_non_root():
    build, final = stages()
    base = dict(build)["FROM"]
    assert base.endswith("AS build")
    text = DOCKERFILE.read_text()
    image = re.search(r"ARG PYTHON_IMAGE=(\S+)", text).group(1)
    assert re.fullmatch(r"python:3\.\d+\.\d+-slim-\w+", image), f"{image} is not pinned to a patch release"
    words = [w for w, _ in final]
    assert ("COPY", "--from=build /opt/stomp-bridge /opt/stomp-bridge") in final
    # nothing is built or installed in the final stage: only the venv is copied in
    assert not any(w == "RUN" and ("pip" in a or "apt-get" in a) for w, a in final)
    user = dict(final)["USER"]
    assert user.split(":")[0] not in ("0", "root")
    assert words.index("USER") < words.index("ENTRYPOINT")
    assert dict(final)["STOPSIGNAL"] == "SIGTERM"
    assert json.loads(dict(final)["ENTRYPOINT"]) == ["stomp-bridge"]
    health = dict(final)["HEALTHCHECK"]
    assert json.loads(health.split("CMD", 1)[1]) == ["python", "-m", "stomp_bridge.healthcheck"]


def test_dockerfile_ports_and_environment_are_the_settings():
    _, final = stages()
    exposed = {int(p) for p in dict(final)["EXPOSE"].split()}
    assert exposed == set(IMAGE_PORTS)
    for port, setting in IMAGE_PORTS.items():
        env_setting("STOMP_BRIDGE_" + setting.upper())
        assert default_port(setting) == port
    for name, value in env_pairs(dict(final)["ENV"]).items():
        if name.startswith("STOMP_BRIDGE_"):
            setting = env_setting(name)
            Settings(**{setting: value})  # a value the model accepts


def test_dockerignore_sends_only_what_the_build_copies():
    rules = [r for r in (ROOT / ".dockerignore").read_text().splitlines() if r and not r.startswith("#")]
    assert rules[0] == "*"
    kept = {r[1:].rstrip("/") for r in rules if r.startswith("!")}
    build, _ = stages()
    copied = set()
    for word, args in build:
        if word == "COPY":
            copied |= {p.rstrip("/") for p in args.split()[:-1]}
    assert copied == kept
    for path in copied:
        assert (ROOT / path).exists(), path


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_file_is_valid_for_docker_compose():
    for extra in ([], ["--profile", "monitoring"]):
        proc = subprocess.run([tool("docker-compose"), "-f", str(COMPOSE), *extra, "config", "-q"],
                              capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr


def test_compose_runs_bridge_after_a_healthy_rabbitmq():
    services = compose()["services"]
    assert set(services) == {"rabbitmq", "stomp-bridge", "prometheus"}
    rabbit, bridge = services["rabbitmq"], services["stomp-bridge"]
    assert rabbit["image"].startswith("rabbitmq:4.") and rabbit["image"].endswith("-management")
    assert bridge["build"] == "."
    assert bridge["depends_on"] == {"rabbitmq": {"condition": "service_healthy"}}
    assert "rabbitmq-diagnostics" in rabbit["healthcheck"]["test"]
    assert bridge["healthcheck"]["test"] == ["CMD", "python", "-m", "stomp_bridge.healthcheck", "readyz"]
    assert services["prometheus"]["profiles"] == ["monitoring"]
    plugins = (ROOT / "deploy/rabbitmq/enabled_plugins").read_text()
    assert "rabbitmq_stream" in plugins and "rabbitmq_management" in plugins


def test_compose_bridge_environment_and_ports_match_the_settings():
    bridge = compose()["services"]["stomp-bridge"]
    env = bridge["environment"]
    settings = {env_setting(name): value for name, value in env.items()}
    effective = Settings(**settings)
    assert effective.amqp_url.startswith("amqp://rabbitmq:5672")
    published = {}
    for mapping in bridge["ports"]:
        host, container = mapping.split(":")
        published[int(container)] = int(host)
    assert set(published) == {effective.port, effective.ws_port, effective.http_port}
    assert _seconds(bridge["stop_grace_period"]) > effective.shutdown_grace
    assert bridge["read_only"] is True and bridge["cap_drop"] == ["ALL"]


def _seconds(text: str) -> float:
    match = re.fullmatch(r"(\d+)(s|m)", text)
    return int(match.group(1)) * (60 if match.group(2) == "m" else 1)


def test_compose_mounts_files_that_exist_and_prometheus_scrapes_the_bridge():
    services = compose()["services"]
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            assert (ROOT / source).is_file(), f"{source} does not exist"
    bridge_port = Settings().http_port
    scrape = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    targets = {c["job_name"]: c["static_configs"][0]["targets"] for c in scrape["scrape_configs"]}
    assert targets["stomp-bridge"] == [f"stomp-bridge:{bridge_port}"]
    assert targets["rabbitmq"] == ["rabbitmq:15692"]


def test_one_version_names_the_image_everywhere():
    from stomp_bridge import __version__
    from stomp_bridge.containers import DEFAULT_IMAGE

    chart = yaml.safe_load((ROOT / "helm/stomp-bridge/Chart.yaml").read_text())
    assert chart["appVersion"] == __version__
    assert compose()["services"]["stomp-bridge"]["image"] == f"stomp-bridge:{__version__}"
    assert DEFAULT_IMAGE == f"stomp-bridge:{__version__}" or "STOMP_BRIDGE_IMAGE" in os.environ
    assert f'version = "{__version__}"' in (ROOT / "pyproject.toml").read_text()
