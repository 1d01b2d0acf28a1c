"""The example page (examples/web/) in headless Chromium, through the bridge.

tests/e2e/browser.mjs drives the page with playwright-core and reports on its
stdout; this side sends to the page from stomp.py and from an AMQP client once
the page is subscribed, and receives the page's own SEND with stomp.py. The
page is served over HTTP, so the browser's real Origin header meets the
bridge's ws_allowed_origins. Screenshots land in test-artifacts/.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import threading

import aiormq

from tests.conftest import StompTarget
from tests.e2e.conftest import ARTIFACTS, NODE_TIMEOUT, ROOT
from tests.integration.stomp_client import Client
from tests.integration.test_operations import get, metric

LINE_TIMEOUT = 60.0


def publish_amqp(amqp_url: str, routing_key: str, body: bytes) -> None:
    async def run() -> None:
        connection = await aiormq.connect(amqp_url)
        try:
            channel = await connection.channel()
            await channel.confirm_delivery()
            await channel.basic_publish(body, exchange="amq.topic", routing_key=routing_key)
        finally:
            await connection.close()

    asyncio.run(run())


class NodeProcess:
    """browser.mjs, with its JSON-line events on a queue."""

    def __init__(self, node: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [node, "tests/e2e/browser.mjs"], cwd=ROOT, env={**os.environ, **env},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.events: queue.Queue[dict] = queue.Queue()
        self.output: list[str] = []
        self._errors: list[str] = []
        self._threads = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_errors, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            try:
                self.events.put(json.loads(line))
            except ValueError:
                pass
        self.events.put({"event": "exit"})
        self.proc.stdout.close()

    def _read_errors(self) -> None:
        assert self.proc.stderr is not None
        self._errors.extend(self.proc.stderr)
        self.proc.stderr.close()

    def expect(self, name: str) -> dict:
        while True:
            try:
                event = self.events.get(timeout=LINE_TIMEOUT)
            except queue.Empty:
                raise AssertionError(f"browser.mjs said nothing for {LINE_TIMEOUT}s: {self.report()}") from None
            if event["event"] == name:
                return event
            if event["event"] == "exit":
                raise AssertionError(f"browser.mjs ended before {name!r}: {self.report()}")

    def report(self) -> str:
        return "".join(self.output) + "".join(self._errors)

    def finish(self) -> int:
        """Waits for the process (killed after NODE_TIMEOUT) and for its output."""
        try:
            self.proc.wait(NODE_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for thread in self._threads:
            thread.join(5)
        return self.proc.returncode


def test_page_receives_from_stomp_and_amqp_and_its_send_reaches_python(
    chromium, node, web_bridge, web_root, broker, unique
):
    web_bridge = web_bridge(ws_allowed_origins=web_root)  # only the page's own origin
    key = f"web-{unique}"
    topic = f"/topic/{key}"
    ARTIFACTS.mkdir(exist_ok=True)
    screenshot = ARTIFACTS / "browser-example-page.png"
    screenshot.unlink(missing_ok=True)
    from_page = f"from the browser {unique}"
    with Client(StompTarget("127.0.0.1", web_bridge.port, native=False)) as python:
        python.subscribe(topic)
        browser = NodeProcess(node, {
            "CHROMIUM": chromium,
            "PAGE_URL": f"{web_root}/examples/web/index.html",
            "WS_URL": f"ws://127.0.0.1:{web_bridge.ws_port}/ws",
            "DESTINATION": topic,
            "EXPECT": "from stomp.py,from AMQP",
            "SEND_BODY": from_page,
            "SCREENSHOT": str(screenshot),
        })
        try:
            subscribed = browser.expect("subscribed")
            assert "stomp-bridge" in subscribed["status"]
            python.send_with_receipt(topic, "from stomp.py")
            publish_amqp(broker.amqp_url, key, b"from AMQP")
            sent = browser.expect("sent")
            browser.expect("done")
        finally:
            code = browser.finish()
        assert code == 0, browser.report()
        bodies = []
        while from_page.encode() not in bodies:
            bodies.append(python.next_message().body)
    assert b"from stomp.py" in bodies and b"from AMQP" in bodies  # the subscriber saw them too
    assert sent["shown"][:2] == ["from stomp.py", "from AMQP"]
    assert screenshot.stat().st_size > 0


def test_page_from_an_origin_not_allowed_cannot_connect(chromium, node, web_bridge, web_root):
    """Cross-site WebSocket hijacking: the browser's Origin is not in ws_allowed_origins."""
    server = web_bridge(ws_allowed_origins="https://app.example.com")
    ARTIFACTS.mkdir(exist_ok=True)
    browser = NodeProcess(node, {
        "CHROMIUM": chromium,
        "PAGE_URL": f"{web_root}/examples/web/index.html",
        "WS_URL": f"ws://127.0.0.1:{server.ws_port}/ws",
        "DESTINATION": "/topic/never",
        "EXPECT_REFUSED": "1",
        "SCREENSHOT": str(ARTIFACTS / "browser-origin-refused.png"),
    })
    try:
        refused = browser.expect("refused")
        browser.expect("done")
    finally:
        code = browser.finish()
    assert code == 0, browser.report()
    assert "Cannot reach" in refused["status"]
    _, text = get(server, "/metrics")
    assert metric(text, "stomp_bridge_connections_refused_total", '{limit="origin"}') == 1
    assert metric(text, "stomp_bridge_connections_opened_total") == 0
