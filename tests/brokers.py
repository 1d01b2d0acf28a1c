"""Which RabbitMQ the tests run against, and how to reach and steer it.

``STOMP_BRIDGE_TEST_BROKER`` picks a local broker:

- ``4.3`` (the default) and ``4.0``: RabbitMQ 4.x in a chroot built from Debian's packages by
  ``scripts/rabbitmq4`` (cached; started here when it does not answer), on ports whose last two
  digits are the version's (AMQP 5643, management 15643, STOMP 61643, web-stomp 15743, ...).
- ``system``: the machine's own RabbitMQ (Debian 12's 3.10.8) on the standard ports, set up by
  ``scripts/ensure-rabbitmq``.

``STOMP_BRIDGE_TEST_AMQP_URL`` overrides all of that with a remote broker (no rabbitmqctl then:
the tests that need it are deselected with ``-m 'not rabbitmqctl'``).

Every test that must run ``rabbitmqctl`` calls :func:`rabbitmqctl`, which reaches the selected
node (through the chroot for 4.x), never the machine's ``rabbitmqctl`` by name.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "rabbitmq4"
VERSIONS = ("4.3", "4.0", "system", "docker")


@dataclass(frozen=True)
class LocalBroker:
    """One of the brokers the project's scripts run on this machine."""

    name: str  # "4.3", "4.0" or "system"
    amqp_port: int
    api_port: int
    stomp_port: int  # the native STOMP plugin, for the differential tests
    ws_port: int  # the native web-stomp plugin
    stream_port: int

    @property
    def amqp_url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.amqp_port}/"

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}/api"

    def ctl_command(self, tool: str = "rabbitmqctl") -> list[str]:
        if self.name == "system":
            exe = shutil.which(tool)
            if exe is None:
                raise RuntimeError(
                    f"{tool} is not installed here; `bash scripts/ensure-rabbitmq` installs "
                    "Debian's rabbitmq-server"
                )
            return [exe]
        action = "ctl" if tool == "rabbitmqctl" else "plugins"
        return ["bash", str(SCRIPT), action, self.name]

    def ensure_running(self) -> None:
        """Start the broker when it does not answer (4.x only; idempotent, ~5 s once built)."""
        if _port_open(self.amqp_port) and _port_open(self.api_port):
            return
        if self.name == "system":
            script = ROOT / "scripts" / "ensure-rabbitmq"
            done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=600)
        else:
            done = subprocess.run(["bash", str(SCRIPT), "start", self.name], capture_output=True,
                                  text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(
                f"RabbitMQ {self.name} could not be started: {(done.stderr or done.stdout).strip()[-2000:]}\n"
                f"Start it by hand with `{_how_to_start(self.name)}`, pick another with "
                "STOMP_BRIDGE_TEST_BROKER=4.3|4.0|system, or point STOMP_BRIDGE_TEST_AMQP_URL at one."
            )


def _how_to_start(name: str) -> str:
    return "bash scripts/ensure-rabbitmq" if name == "system" else f"bash scripts/rabbitmq4 start {name}"


def local(name: str) -> LocalBroker:
    if name == "system":
        return LocalBroker("system", 5672, 15672, 61613, 15674, 5552)
    if name in ("4.3", "4.0"):
        vv = name.replace(".", "")
        return LocalBroker(name, int(f"56{vv}"), int(f"156{vv}"), int(f"616{vv}"), int(f"157{vv}"),
                           int(f"55{vv}"))
    raise ValueError(f"STOMP_BRIDGE_TEST_BROKER={name!r}: expected one of {', '.join(VERSIONS)}")


def selected() -> LocalBroker | None:
    """The local broker the tests use; None when STOMP_BRIDGE_TEST_AMQP_URL names a remote one
    or ``STOMP_BRIDGE_TEST_BROKER=docker`` asks for a testcontainers RabbitMQ."""
    name = os.environ.get("STOMP_BRIDGE_TEST_BROKER", "4.3")
    if os.environ.get("STOMP_BRIDGE_TEST_AMQP_URL") or name == "docker":
        return None
    return local(name)


class RabbitCtlError(RuntimeError):
    pass


def rabbitmqctl(*args: str, timeout: float = 60, check: bool = True, tool: str = "rabbitmqctl") -> str:
    """Run ``rabbitmqctl`` (or ``rabbitmq-plugins``) against the selected local broker; its stdout."""
    broker = selected()
    if broker is None:
        raise RabbitCtlError(
            "this test steers the broker with rabbitmqctl, which needs a local broker; with "
            "STOMP_BRIDGE_TEST_AMQP_URL set, deselect it with -m 'not rabbitmqctl'"
        )
    done = subprocess.run([*broker.ctl_command(tool), *args], capture_output=True, text=True,
                          timeout=timeout)
    if check and done.returncode != 0:
        raise RabbitCtlError(f"{tool} {' '.join(args)} failed: {(done.stderr or done.stdout).strip()}")
    return done.stdout


def _port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False
