"""docs/oauth2.md runs as printed: its configuration is the test brokers', its stomp.py example
logs in with a token, refreshes it and prints the RECEIPTs it says, and a token RabbitMQ refuses
gets the ERROR its table says (bridge only: /bridge/token is the bridge's). On every broker: the
4.x ones run the OAuth 2 backend from their start, the machine's 3.10 gets it for these tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native", reason="/bridge/token is the bridge's"
)

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "oauth2.md"


def test_the_guides_stomp_py_example_refreshes_its_token_and_prints_its_receipts(bridge, oauth, rabbit, tmp_path):
    (example,) = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)
    server = bridge()
    assert '("127.0.0.1", 61623)' in example
    script = example.replace('("127.0.0.1", 61623)', f'("127.0.0.1", {server.port})')
    # the reader's identity provider: a fresh token for the example's login each call
    (tmp_path / "my_identity_provider.py").write_text(
        "from tests.tokens import token\n\n\ndef fetch_token():\n    return token('orders-service')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)]))
    try:
        done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=60)
    finally:
        rabbit.delete_queue("orders")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["RECEIPT order-1", "RECEIPT token-2", "RECEIPT order-2", "RECEIPT bye"]
    assert "`RECEIPT order-1`, `RECEIPT token-2`, `RECEIPT order-2` and `RECEIPT bye`" in GUIDE.read_text()


def test_a_new_token_rabbitmq_refuses_ends_the_connection_quoting_it(bridge, dial, oauth):
    """The guide's table: a token with a bad signature is RabbitMQ's to refuse, and it closes
    the connection; the client hears why."""
    conn = dial(bridge(), timeout=15)
    conn.connect(login="oauth-user", passcode=oauth("oauth-user"))
    forged = oauth("oauth-user")[:-4] + "AAAA"  # the same claims, another signature
    conn.send_frame("SEND", {"destination": "/bridge/token", "receipt": "t"}, forged)
    error = conn.error_then_close(timeout=15)
    assert (error["message"], error["receipt-id"]) == ("Token refused", "t")
    assert "NOT_ALLOWED - New secret was refused by one of the backends" in error.text
    assert "NOT_ALLOWED - New secret was refused by one of the backends" in GUIDE.read_text()
