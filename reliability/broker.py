"""RabbitMQ housekeeping for the harness: draining a queue, vhost URLs, and a private node.

Everything the harness creates on the shared broker lives in one vhost named
``rel-<uuid>`` (``testkit.management.Management.temporary_vhost``), deleted at
the end, so nothing is left behind and nothing of anyone else's is touched. The
RabbitMQ-restart scenario never restarts the shared broker: :class:`PrivateRabbit`
starts a node of its own (own node name, ports, data and log directories under
/tmp, no plugins) and restarts that.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import uuid

import aiormq

from testkit.ports import free_port, port_open


async def drain_ids(amqp_url: str, queue: str, header: str = "msg-id", idle: float = 1.0) -> list[str]:
    """Consume every message in ``queue`` and return the ``header`` of each (duplicates kept)."""
    out: list[str] = []
    connection = await aiormq.connect(amqp_url)
    try:
        channel = await connection.channel()
        try:
            ok = await channel.queue_declare(queue, passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:
            return out
        if ok.message_count == 0:
            return out
        got = asyncio.Event()

        def on_message(message) -> None:
            headers = message.header.properties.headers or {}
            value = headers.get(header)
            out.append(value.decode() if isinstance(value, bytes) else str(value))
            got.set()

        await channel.basic_qos(prefetch_count=1000)
        await channel.basic_consume(queue, on_message, no_ack=True)
        while True:
            got.clear()
            try:
                await asyncio.wait_for(got.wait(), idle)
            except asyncio.TimeoutError:
                ok = await channel.queue_declare(queue, passive=True)
                if ok.message_count == 0:
                    break
    finally:
        await connection.close()
    return out


def vhost_url(amqp_url: str, vhost: str) -> str:
    parts = urllib.parse.urlsplit(amqp_url)
    return urllib.parse.urlunsplit(parts._replace(path="/" + urllib.parse.quote(vhost, safe="")))


class PrivateRabbit:
    """A throwaway RabbitMQ node (user rabbitmq, own name, ports and dirs, no plugins).

    Only for the restart scenario: the shared node on 5672 is never stopped.
    """

    def __init__(self) -> None:
        self.name = f"rel-{uuid.uuid4().hex[:8]}@localhost"
        self.port = free_port()
        self.dist_port = free_port()
        self.dir = tempfile.mkdtemp(prefix="rel-rabbit-")
        self.amqp_url = f"amqp://guest:guest@127.0.0.1:{self.port}/"
        self.restarts = 0

    @staticmethod
    def available() -> str | None:
        """None when a private node can be started here, else why not."""
        if shutil.which("rabbitmq-server") is None:
            return "rabbitmq-server is not installed"
        if os.geteuid() != 0:
            return "starting a node as user rabbitmq needs root"
        try:
            import pwd

            pwd.getpwnam("rabbitmq")
        except KeyError:
            return "no rabbitmq user"
        return None

    def _env(self) -> str:
        d = self.dir
        env = {
            "HOME": "/var/lib/rabbitmq",
            "RABBITMQ_CONF_ENV_FILE": f"{d}/env.conf",
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": f"{d}/mnesia",
            "RABBITMQ_LOG_BASE": f"{d}/log",
            "RABBITMQ_ENABLED_PLUGINS_FILE": f"{d}/enabled_plugins",
            "RABBITMQ_CONFIG_FILE": f"{d}/rabbitmq.conf",
            "RABBITMQ_PLUGINS_EXPAND_DIR": f"{d}/plugins-expand",
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        }
        return " ".join(f"{k}={v}" for k, v in env.items())

    def _su(self, command: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(["su", "rabbitmq", "-s", "/bin/sh", "-c", f"cd {self.dir} && env {self._env()} {command}"],
                              capture_output=True, text=True, timeout=timeout)

    def _ctl(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return self._su(f"rabbitmqctl -n {self.name} " + " ".join(args), timeout)

    def start(self, timeout: float = 90.0) -> "PrivateRabbit":
        d = self.dir
        with open(f"{d}/enabled_plugins", "w") as f:
            f.write("[].\n")
        with open(f"{d}/rabbitmq.conf", "w") as f:
            f.write(f"listeners.tcp.1 = 127.0.0.1:{self.port}\n")
        open(f"{d}/env.conf", "w").close()
        shutil.chown(d, "rabbitmq", "rabbitmq")
        for name in os.listdir(d):
            shutil.chown(os.path.join(d, name), "rabbitmq", "rabbitmq")
        self._boot(timeout)
        return self

    def _boot(self, timeout: float) -> None:
        result = self._su("rabbitmq-server -detached")
        if result.returncode != 0:
            raise RuntimeError(f"private RabbitMQ did not start: {result.stderr.strip()}")
        deadline = time.monotonic() + timeout
        while not port_open(self.port, timeout=0.5):
            if time.monotonic() > deadline:
                raise RuntimeError(f"private RabbitMQ {self.name} not listening on {self.port} "
                                   f"after {timeout} s; logs in {self.dir}/log")
            time.sleep(0.25)

    def restart(self, full: bool = False) -> None:
        """stop_app/start_app (the RabbitMQ application restarts, connections drop), or
        ``full``: the whole node stops and boots again from disk."""
        self.restarts += 1
        if full:
            self._ctl("stop")
            deadline = time.monotonic() + 60
            while port_open(self.port, timeout=0.5) and time.monotonic() < deadline:
                time.sleep(0.2)
            self._boot(90)
        else:
            self._ctl("stop_app")
            self._ctl("start_app")

    def stop(self) -> None:
        self._ctl("stop", timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)
