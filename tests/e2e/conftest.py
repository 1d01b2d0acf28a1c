"""JavaScript clients against a real bridge: @stomp/stompjs in Node and in headless Chromium.

The tools come from scripts/ensure-js (run by scripts/test): Debian's chromium and
the npm packages pinned in package-lock.json. Missing tools fail the tests with
the command that installs them; they never skip.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.bridge import BridgeThread

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
NODE_TIMEOUT = 180.0

pytestmark = pytest.mark.skipif(
    os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native", reason="drives the bridge's own listeners"
)


@pytest.fixture(scope="session")
def node() -> str:
    path = shutil.which("node")
    if path is None:
        pytest.fail("node is not installed; `bash scripts/ensure-js` installs it (Debian's nodejs).", pytrace=False)
    if not (ROOT / "node_modules" / "@stomp" / "stompjs").is_dir():
        pytest.fail(
            f"{ROOT / 'node_modules'} lacks the npm packages; run `npm ci` in {ROOT} "
            "(`bash scripts/ensure-js` does).",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="session")
def chromium(node) -> str:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"{CHROMIUM} is missing; `bash scripts/ensure-js` installs Debian's chromium "
            "(apt-get install -y chromium).",
            pytrace=False,
        )
    return CHROMIUM


@pytest.fixture
def web_bridge(broker):
    """Factory: a bridge with its WebSocket listener on a free port (and TCP, as always),
    HTTP endpoint on a free port; ``web_bridge(**settings)``. Stopped at teardown."""
    started: list[BridgeThread] = []

    def make(**settings: object) -> BridgeThread:
        settings.setdefault("ws_port", 0)
        settings.setdefault("http_port", 0)
        server = BridgeThread(broker.amqp_url, **settings)
        server.start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="session")
def web_root() -> Iterator[str]:
    """The repository served over HTTP on a free port, as `python3 -m http.server` would
    (docs/websocket.md's way to open examples/web/): its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(ROOT))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def queues_with_prefix(rabbit, unique):
    """A queue-name prefix for JavaScript tests; their queues are deleted afterwards."""
    prefix = f"js-{unique}-"
    yield prefix
    for queue in rabbit.queues():
        if queue["name"].startswith(prefix):
            rabbit.delete_queue(queue["name"])


def run_node(node: str, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [node, *args], cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True,
        timeout=NODE_TIMEOUT, check=False,
    )
