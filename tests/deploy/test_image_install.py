"""The image's install path, run on the host because no Docker engine runs here.

The Dockerfile's build stage is replayed instruction by instruction (COPY into a fresh
/src, RUN with /wheels and /opt/stomp-bridge moved under a temporary directory), the final
stage's ENV applied, and the installed ``stomp-bridge`` entry point started against the real
RabbitMQ: a stomp.py client sends and receives, /healthz and /readyz answer, the image's
HEALTHCHECK command passes, and SIGTERM ends it with exit status 0.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest
import stomp

from .dockerfile import env_pairs, stages
from .support import ROOT, start_bridge_process

pytestmark = pytest.mark.integration

IMAGE_PATHS = ("/opt/stomp-bridge", "/wheels", "/src")


class Image:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.venv = self.path("/opt/stomp-bridge")
        self.env: dict[str, str] = {}

    def path(self, image_path: str) -> Path:
        return self.root / image_path.lstrip("/")

    def translate(self, text: str) -> str:
        for image_path in IMAGE_PATHS:
            text = text.replace(image_path, str(self.path(image_path)))
        return text


def _host_env(shim: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{shim}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Image:
    img = Image(tmp_path_factory.mktemp("image"))
    shim = img.root / "shim"
    shim.mkdir()
    # The base image's `python`: this interpreter's base, not the test venv.
    (shim / "python").symlink_to(getattr(sys, "_base_executable", sys.executable))
    build, final = stages()
    env = _host_env(shim)
    workdir = img.root
    for word, args in build:
        if word in ("FROM", "ARG"):
            continue
        elif word == "ENV":
            env.update(env_pairs(args))
        elif word == "WORKDIR":
            workdir = img.path(args)
            workdir.mkdir(parents=True, exist_ok=True)
        elif word == "COPY":
            *sources, dest = args.split()
            target = workdir / dest
            for source in sources:
                src = ROOT / source
                if src.is_dir():
                    shutil.copytree(src, target, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, target / src.name)
        elif word == "RUN":
            proc = subprocess.run(["sh", "-c", img.translate(args)], cwd=workdir, env=env,
                                  capture_output=True, text=True, timeout=540)
            assert proc.returncode == 0, f"RUN {args}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        else:
            pytest.fail(f"the build stage has {word}; teach test_image_install.py what it does on the host")
    runtime = _host_env(shim)
    for word, args in final:
        if word == "ENV":
            for name, value in env_pairs(args).items():
                runtime[name] = img.translate(value).replace("$PATH", runtime["PATH"])
    img.env = runtime
    return img


def test_wheel_is_installed_not_the_source_tree(image):
    proc = subprocess.run(
        ["python", "-c", "import stomp_bridge, uvloop; print(stomp_bridge.__file__)"],
        env=image.env, capture_output=True, text=True, cwd=image.root,
    )
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).is_relative_to(image.venv), proc.stdout
    assert not (image.venv / "bin" / "pytest").exists(), "test tools leaked into the image"


class Inbox(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.messages: queue.Queue = queue.Queue()

    def on_message(self, frame) -> None:
        self.messages.put(frame.body)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_entry_point_serves_stomp_and_health_then_drains_on_sigterm(image, broker, rabbit):
    env = dict(image.env, STOMP_BRIDGE_HOST="127.0.0.1", STOMP_BRIDGE_PORT="0",
               STOMP_BRIDGE_HTTP_HOST="127.0.0.1", STOMP_BRIDGE_HTTP_PORT="0",
               STOMP_BRIDGE_WS_PORT="0", STOMP_BRIDGE_AMQP_URL=broker.amqp_url)
    proc, listening = start_bridge_process(["stomp-bridge"], env=env, cwd=image.root)
    name = f"deploy-image-{uuid.uuid4().hex[:12]}"
    try:
        # start_bridge_process read it as JSON: STOMP_BRIDGE_LOG_FORMAT=json is the image's
        port, http_port = listening["port"], listening["http_port"]
        assert shutil.which("stomp-bridge", path=env["PATH"]) == str(image.venv / "bin" / "stomp-bridge")

        conn = stomp.Connection([("127.0.0.1", port)], heartbeats=(0, 0))
        inbox = Inbox()
        conn.set_listener("", inbox)
        conn.connect(broker.user, broker.password, wait=True)
        conn.subscribe(f"/queue/{name}", id="1", ack="auto")
        conn.send(f"/queue/{name}", "through the image's install path", receipt="r-1")
        assert inbox.messages.get(timeout=10) == "through the image's install path"
        conn.disconnect()

        assert _get(f"http://127.0.0.1:{http_port}/healthz") == (200, "ok\n")
        status, reason = _get(f"http://127.0.0.1:{http_port}/readyz")
        assert status == 200, reason
        health_env = dict(env, STOMP_BRIDGE_HTTP_PORT=str(http_port))
        for path in ([], ["readyz"]):
            check = subprocess.run(["python", "-m", "stomp_bridge.healthcheck", *path], env=health_env, cwd=image.root,
                                   capture_output=True, text=True, timeout=30)
            assert check.returncode == 0, check.stderr

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        check = subprocess.run(["python", "-m", "stomp_bridge.healthcheck"], env=health_env, cwd=image.root,
                               capture_output=True, text=True, timeout=30)
        assert check.returncode == 1 and "did not answer" in check.stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        rabbit.delete_queue(name)
