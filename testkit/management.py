"""A small synchronous client for RabbitMQ's management HTTP API: the one the tests, the
reliability harness and the benchmarks share.

Tests use it to check what RabbitMQ really holds (queue names, durability, arguments) and to
publish or fetch messages outside STOMP; the harness for a throwaway vhost per run and its
connection counts; the benchmarks to clean up and to read the broker's file-descriptor limit.
A 404 answers ``None``: "not there" is an answer, not an error.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

DEFAULT_API = "http://127.0.0.1:15672/api"


SERVER_ERROR_ATTEMPTS = 5


class Management:
    def __init__(self, api_url: str = DEFAULT_API, user: str = "guest", password: str = "guest",
                 timeout: float = 10.0) -> None:
        self.base = api_url.rstrip("/")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self.auth = f"Basic {token}"
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """The decoded JSON answer (``{}`` when empty), ``None`` on 404; other HTTP errors raise.

        A 500 or 503 is asked again (a few times, a moment apart): the management plugin answers
        so now and then while its statistics are being collected on a busy node (seen on 4.3.6
        here, between two answers of 200 a second apart). Not a health check's: its 503 is
        its answer (an alarm, a queue that would lose its quorum), wanted at once."""
        attempts = 1 if path.startswith("/health/") else SERVER_ERROR_ATTEMPTS
        data = None if body is None else json.dumps(body).encode()
        for attempt in range(attempts):
            req = urllib.request.Request(self.base + path, data=data, method=method)
            req.add_header("Authorization", self.auth)
            req.add_header("Content-Type", "application/json")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    raw = resp.read()
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return None
                if exc.code in (500, 503) and attempt + 1 < attempts:
                    time.sleep(0.25 * (attempt + 1))
                    continue
                raise
            return json.loads(raw) if raw else {}
        raise AssertionError("unreachable")

    @staticmethod
    def q(text: str) -> str:
        return urllib.parse.quote(text, safe="")

    def overview(self) -> dict:
        return self.request("GET", "/overview")

    # queues

    def queue(self, name: str, vhost: str = "/") -> dict | None:
        return self.request("GET", f"/queues/{self.q(vhost)}/{self.q(name)}")

    def arguments(self, name: str, vhost: str = "/") -> dict | None:
        """A queue's arguments as declared: RabbitMQ 4.x records ``x-queue-type: classic`` on
        every classic queue declared without one, 3.10 nothing; tests compare without it."""
        q = self.queue(name, vhost)
        if q is None:
            return None
        args = dict(q["arguments"])
        if args.get("x-queue-type") == "classic":
            del args["x-queue-type"]
        return args

    def queues(self, vhost: str = "/") -> list[dict]:
        return self.request("GET", f"/queues/{self.q(vhost)}") or []

    def delete_queue(self, name: str, vhost: str = "/") -> None:
        self.request("DELETE", f"/queues/{self.q(vhost)}/{self.q(name)}")

    def declare_queue(self, name: str, vhost: str = "/", **props: Any) -> None:
        body = {"durable": True, "auto_delete": False, "arguments": {}}
        body.update(props)
        self.request("PUT", f"/queues/{self.q(vhost)}/{self.q(name)}", body)

    def declare_exchange(self, name: str, kind: str, vhost: str = "/") -> None:
        self.request("PUT", f"/exchanges/{self.q(vhost)}/{self.q(name)}",
                     {"type": kind, "durable": False, "auto_delete": False, "arguments": {}})

    def delete_exchange(self, name: str, vhost: str = "/") -> None:
        self.request("DELETE", f"/exchanges/{self.q(vhost)}/{self.q(name)}")

    def bindings(self, queue: str, vhost: str = "/") -> list[dict]:
        return self.request("GET", f"/queues/{self.q(vhost)}/{self.q(queue)}/bindings") or []

    def topic_queues(self, key_prefix: str, vhost: str = "/") -> list[str]:
        """Queues bound to amq.topic with a routing key starting with ``key_prefix``."""
        bindings = self.request("GET", f"/exchanges/{self.q(vhost)}/amq.topic/bindings/source") or []
        return sorted({b["destination"] for b in bindings
                       if b["destination_type"] == "queue" and b["routing_key"].startswith(key_prefix)})

    # messages

    def publish(
        self,
        exchange: str,
        routing_key: str,
        payload: str,
        properties: dict | None = None,
        vhost: str = "/",
    ) -> bool:
        name = exchange or "amq.default"
        res = self.request(
            "POST",
            f"/exchanges/{self.q(vhost)}/{self.q(name)}/publish",
            {
                "properties": properties or {},
                "routing_key": routing_key,
                "payload": payload,
                "payload_encoding": "string",
            },
        )
        return bool(res and res.get("routed"))

    def get(self, queue: str, count: int = 1, vhost: str = "/") -> list[dict]:
        return (
            self.request(
                "POST",
                f"/queues/{self.q(vhost)}/{self.q(queue)}/get",
                {"count": count, "ackmode": "ack_requeue_false", "encoding": "auto"},
            )
            or []
        )

    # vhosts, users, permissions

    def create_vhost(self, vhost: str, user: str = "guest") -> None:
        self.request("PUT", f"/vhosts/{self.q(vhost)}", {})
        self.set_permissions(user, vhost)

    def temporary_vhost(self, prefix: str = "rel", user: str = "guest") -> str:
        """A new vhost ``<prefix>-<random>`` with full permissions for ``user``; its name."""
        vhost = f"{prefix}-{uuid.uuid4().hex[:10]}"
        self.create_vhost(vhost, user)
        return vhost

    def delete_vhost(self, vhost: str) -> None:
        self.request("DELETE", f"/vhosts/{self.q(vhost)}")

    def create_user(self, user: str, password: str, tags: str = "") -> None:
        self.request("PUT", f"/users/{self.q(user)}", {"password": password, "tags": tags})

    def delete_user(self, user: str) -> None:
        self.request("DELETE", f"/users/{self.q(user)}")

    def set_permissions(
        self, user: str, vhost: str = "/", configure: str = ".*", write: str = ".*", read: str = ".*"
    ) -> None:
        self.request(
            "PUT",
            f"/permissions/{self.q(vhost)}/{self.q(user)}",
            {"configure": configure, "write": write, "read": read},
        )

    def set_topic_permissions(
        self, user: str, vhost: str = "/", exchange: str = "amq.topic", write: str = ".*", read: str = ".*"
    ) -> None:
        self.request(
            "PUT",
            f"/topic-permissions/{self.q(vhost)}/{self.q(user)}",
            {"exchange": exchange, "write": write, "read": read},
        )

    # connections and resources

    def vhost_connections(self, vhost: str) -> tuple[int, int]:
        """(AMQP connections, channels) open in ``vhost`` as the management API reports them."""
        conns = self.request("GET", f"/vhosts/{self.q(vhost)}/connections") or []
        chans = self.request("GET", f"/vhosts/{self.q(vhost)}/channels") or []
        return len(conns), len(chans)

    def wait_vhost_connections(self, vhost: str, want: int, timeout: float = 30.0) -> tuple[int, int]:
        """The API's lists lag the broker by its stats interval; poll until ``want`` or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            conns, chans = self.vhost_connections(vhost)
            if conns <= want or time.monotonic() > deadline:
                return conns, chans
            time.sleep(1.0)

    def file_descriptors(self) -> tuple[int, int] | None:
        """(fd_used, fd_total) of the first node; None when the API does not say (yet)."""
        try:
            node = self.request("GET", "/nodes")[0]
            return int(node["fd_used"]), int(node["fd_total"])
        except (OSError, KeyError, IndexError, ValueError, TypeError):
            return None

    async def cleanup_topic(self, key_prefix: str, wait: float = 10.0) -> list[str]:
        """Wait for auto-delete subscription queues bound under ``key_prefix`` to go; delete the
        stragglers; return them. An unreachable API leaves nothing to clean up."""

        def left() -> list[str]:
            try:
                return self.topic_queues(key_prefix)
            except OSError:
                return []

        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        names = await asyncio.to_thread(left)
        while names and loop.time() < deadline:
            await asyncio.sleep(0.5)
            names = await asyncio.to_thread(left)
        for name in names:
            await asyncio.to_thread(self.delete_queue, name)
        return names
