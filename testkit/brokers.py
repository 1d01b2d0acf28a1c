"""Which RabbitMQ the tests run against, and how to reach and steer it.

:func:`find_broker` picks it, in order: ``STOMP_BRIDGE_TEST_AMQP_URL``; the local broker
``STOMP_BRIDGE_TEST_BROKER`` names (started when it does not answer); a testcontainers RabbitMQ
when Docker is running.

``STOMP_BRIDGE_TEST_BROKER`` picks a local broker:

- ``4.3`` (the default) and ``4.0``: RabbitMQ 4.x in a chroot built from Debian's packages by
  ``scripts/rabbitmq4`` (cached; started here when it does not answer), on ports whose last two
  digits are the version's (AMQP 5643, management 15643, STOMP 61643, web-stomp 15743, ...).
- ``4.4``: RabbitMQ 4.4's native STOMP as a preview (its plugins from RabbitMQ's main branch
  compiled onto 4.3.6 by ``scripts/rabbitmq4``; the node reports 4.3.6), on ports 5644, 15644,
  61644, 15744, 5544.
- ``system``: the machine's own RabbitMQ (Debian 12's 3.10.8) on the standard ports, set up by
  ``scripts/ensure-rabbitmq``.

``STOMP_BRIDGE_TEST_AMQP_URL`` overrides all of that with a remote broker (no rabbitmqctl then:
the tests that need it are deselected with ``-m 'not rabbitmqctl'``).

Every test that must run ``rabbitmqctl`` calls :func:`rabbitmqctl`, which reaches the selected
node (through the chroot for 4.x), never the machine's ``rabbitmqctl`` by name.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit.ports import port_open

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "rabbitmq4"
VERSIONS = ("4.3", "4.4", "4.0", "system", "docker")


@dataclass(frozen=True)
class LocalBroker:
    """One of the brokers the project's scripts run on this machine."""

    name: str  # "4.3", "4.4", "4.0" or "system"
    amqp_port: int
    api_port: int
    stomp_port: int  # the native STOMP plugin, for the differential tests
    ws_port: int | None  # the native web-stomp plugin (None: not enabled)
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
        if port_open(self.amqp_port) and port_open(self.api_port):
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
                "STOMP_BRIDGE_TEST_BROKER=4.3|4.4|4.0|system, or point STOMP_BRIDGE_TEST_AMQP_URL at one."
            )


HOW_TO_GET_A_BROKER = (
    "Integration tests need a RabbitMQ. By default they use RabbitMQ 4.3, which "
    "`bash scripts/rabbitmq4 start 4.3` builds (debootstrap, as root) and starts; "
    "STOMP_BRIDGE_TEST_BROKER=4.0 or =system picks RabbitMQ 4.0 or the machine's own "
    "(`rabbitmq-server -detached`, Debian package `rabbitmq-server`); or point "
    "STOMP_BRIDGE_TEST_AMQP_URL at one (e.g. amqp://guest:guest@host:5672/), or run Docker "
    "so testcontainers can start one."
)


@dataclass
class Broker:
    """A RabbitMQ the tests reach: AMQP, the management API, the native STOMP plugin."""

    amqp_url: str
    host: str
    api_url: str  # management HTTP API base, e.g. http://127.0.0.1:15672/api
    user: str
    password: str
    native_port: int = 61613  # the broker's own STOMP plugin
    local: LocalBroker | None = None  # None: a remote broker (no rabbitmqctl)
    version: str = ""  # RabbitMQ's version, from the management API

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.version.split(".")[:3] if p.isdigit())


def find_broker() -> tuple[Broker | None, Any]:
    """The broker the tests use, and the testcontainers container to stop after them (or None);
    ``(None, None)`` when there is none. RuntimeError when the selected local one cannot start."""
    url = os.environ.get("STOMP_BRIDGE_TEST_AMQP_URL")
    container = None
    local = selected()
    if local is not None:
        local.ensure_running()  # raises with how to start it by hand
        url = local.amqp_url
    if not url:
        try:  # pragma: no cover - only where Docker runs
            from testcontainers.rabbitmq import RabbitMqContainer

            container = RabbitMqContainer("rabbitmq:4.3-management")
            container.start()
            host = container.get_container_host_ip()
            port = container.get_exposed_port(5672)
            url = f"amqp://guest:guest@{host}:{port}/"
        except Exception:  # noqa: BLE001 - any failure means "no Docker"
            return None, None
    parsed = urllib.parse.urlsplit(url)
    host = parsed.hostname or "127.0.0.1"
    default_api = local.api_url if local is not None else f"http://{host}:15672/api"
    api = os.environ.get("STOMP_BRIDGE_TEST_API_URL", default_api)
    native = os.environ.get("STOMP_BRIDGE_TEST_NATIVE_PORT")
    return (
        Broker(
            amqp_url=url,
            host=host,
            api_url=api,
            user=urllib.parse.unquote(parsed.username or "guest"),
            password=urllib.parse.unquote(parsed.password or "guest"),
            native_port=int(native) if native else (local.stomp_port if local is not None else 61613),
            local=local,
        ),
        container,
    )


def _how_to_start(name: str) -> str:
    return "bash scripts/ensure-rabbitmq" if name == "system" else f"bash scripts/rabbitmq4 start {name}"


def local(name: str) -> LocalBroker:
    if name == "system":
        # no web-stomp: scripts/ensure-rabbitmq leaves 15674 to the bridge (its default ws_port)
        return LocalBroker("system", 5672, 15672, 61613, None, 5552)
    if name in ("4.3", "4.4", "4.0"):
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


def native_stomp() -> bool:
    """Whether the selected broker's STOMP plugin is RabbitMQ 4.4's native one (the preview, which
    reports 4.3.6: its version cannot tell). The bridge the tests start is then set to follow it
    (``rabbitmq_stomp_dialect = "4.4"``), and the tests expect 4.4's frames of both targets."""
    broker = selected()
    return broker is not None and broker.name == "4.4"


def plugin_words(text: str) -> str:
    """RabbitMQ's reply text as the targeted plugin's ERROR body has it: 4.4's native plugin (and
    the bridge in front of it) leaves out the AMQP prefix (``NOT_FOUND - ``), 4.3's quotes it."""
    if native_stomp():
        return re.sub(r"^[A-Z_]+ - ", "", text)
    return text


def stomp_dialect_setting() -> str:
    """The ``rabbitmq_stomp_dialect`` of the bridges the tests start."""
    return "4.4" if native_stomp() else "auto"


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
