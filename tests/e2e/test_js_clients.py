"""@stomp/stompjs in Node (tests/e2e/stompjs.test.mjs) over WebSocket and over TCP."""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import ROOT, run_node

JS_TESTS_PER_TRANSPORT = 5


@pytest.mark.parametrize("transport", ["websocket", "tcp"])
def test_stompjs_receipts_ack_modes_transactions_and_heart_beats(node, web_bridge, queues_with_prefix, transport):
    server = web_bridge()
    result = run_node(
        node,
        ["--test", "--test-reporter=spec", f"--test-name-pattern=^{transport}:", "tests/e2e/stompjs.test.mjs"],
        {
            "WS_URL": f"ws://127.0.0.1:{server.ws_port}/ws",
            "TCP_HOST": "127.0.0.1",
            "TCP_PORT": str(server.port),
            "QUEUE_PREFIX": queues_with_prefix,
        },
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    passed = re.search(r"^ℹ pass (\d+)$", result.stdout, re.M)
    assert passed is not None and int(passed.group(1)) == JS_TESTS_PER_TRANSPORT, output


def test_the_node_snippet_of_docs_websocket_runs_as_printed(node, web_bridge, unique):
    """docs/websocket.md's Node example (Node 20 has no global WebSocket: the `ws` package through
    webSocketFactory), with the bridge's address and a topic of this test's own: it receives what
    it sent and ends."""
    page = (ROOT / "docs" / "websocket.md").read_text()
    (snippet,) = re.findall(r'```js title="hello\.mjs"\n(.*?)```', page, re.S)
    assert "ws://localhost:15674/ws" in snippet and "/topic/demo" in snippet
    server = web_bridge()
    script = snippet.replace("ws://localhost:15674/ws", f"ws://127.0.0.1:{server.ws_port}/ws")
    script = script.replace("/topic/demo", f"/topic/docs-node-{unique}")
    artifacts = ROOT / "test-artifacts"  # inside the repository: node finds node_modules from there
    artifacts.mkdir(exist_ok=True)
    path = artifacts / f"hello-{unique}.mjs"
    path.write_text(script)
    try:
        result = run_node(node, [str(path)], {})
    finally:
        path.unlink()
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "hello from Node", result.stdout + result.stderr
