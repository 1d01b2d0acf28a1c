"""What a bridge process imports: optional features only when configured, test and Spark
libraries never. Each is memory in every bridge process (docs/performance.md, memory): a
regression here is silent otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Never in a bridge process, whatever its settings (the test and Spark extras, tracing off).
NEVER = ("hypothesis", "pytest", "pyspark", "pandas", "opentelemetry", "testcontainers")
# Only where the feature is used: a supervisor of workers (multiprocessing, prometheus_client's
# parser), a WebSocket listener (websockets), a certificate read (cryptography).
UNUSED_HERE = ("multiprocessing", "prometheus_client", "websockets", "cryptography")

SCRIPT = r"""
import asyncio, json, os, sys
from stomp_bridge.cli import load_settings
from stomp_bridge.transport.server import BridgeServer

async def main():
    settings = load_settings(["--port", "0", "--http-port", "0", "--ws-port", "none"])
    server = BridgeServer(settings)
    await server.start()
    await asyncio.sleep(0.2)
    (await asyncio.open_connection("127.0.0.1", server.ops.port))[1].write(b"GET /metrics HTTP/1.0\r\n\r\n")
    await asyncio.sleep(0.2)  # a scrape of /metrics served too
    print(json.dumps(sorted(sys.modules)), flush=True)
    os._exit(0)  # listening and served is what counts here

asyncio.run(main())
"""


def _modules(script: str) -> set[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOMP_BRIDGE_")}
    env["PYTHONPATH"] = str(ROOT)
    env["STOMP_BRIDGE_AMQP_URL"] = "amqp://guest:guest@127.0.0.1:1/"  # no broker needed: nobody logs in
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def _top(modules: set[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}


def test_a_started_bridge_without_optional_features_imports_none_of_them():
    loaded = _top(_modules(SCRIPT))
    assert "stomp_bridge" in loaded and "pydantic" in loaded  # it did run
    assert not loaded & set(NEVER), sorted(loaded & set(NEVER))
    assert not loaded & set(UNUSED_HERE), sorted(loaded & set(UNUSED_HERE))


def test_importing_the_command_imports_no_test_spark_or_tracing_library():
    loaded = _top(_modules("import json, sys, stomp_bridge.cli, stomp_bridge.processes\n"
                           "print(json.dumps(sorted(sys.modules)))"))
    assert not loaded & set(NEVER + UNUSED_HERE), sorted(loaded & set(NEVER + UNUSED_HERE))
