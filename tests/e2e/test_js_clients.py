"""@stomp/stompjs in Node (tests/e2e/stompjs.test.mjs) over WebSocket and over TCP."""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import run_node

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
