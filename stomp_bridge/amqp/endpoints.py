"""The RabbitMQ nodes a bridge connects to, and which of them to try next.

With a cluster, ``amqp_url`` lists several nodes. New STOMP connections go to
the nodes in turn (spreading load); a node that did not answer is skipped for
a while that doubles with each failure (0.5 s up to 30 s), and tried again
first among the rest once that time is up. If every node is backing off, all
are tried anyway: a client should get a real answer, not a guess.
"""

from __future__ import annotations

import urllib.parse
from time import monotonic

BASE_DELAY = 0.5
MAX_DELAY = 30.0


class Endpoints:
    def __init__(self, urls: str, *, clock=monotonic) -> None:
        self.urls = [url.strip() for url in urls.split(",") if url.strip()]
        if not self.urls:
            raise ValueError("amqp_url names no RabbitMQ node")
        self._clock = clock
        self._next = 0
        self._failures = [0] * len(self.urls)
        self._down_until = [0.0] * len(self.urls)

    def order(self, near: tuple[str, int] | None = None) -> list[int]:
        """Indexes to try, healthy nodes first, each group in round-robin order; the healthy node
        at address ``near`` (host, port), if any, before the rest."""
        count = len(self.urls)
        rotation = [(self._next + i) % count for i in range(count)]
        now = self._clock()
        healthy = [i for i in rotation if self._down_until[i] <= now]
        if near is not None:
            healthy.sort(key=lambda i: self.address(i) != near)  # stable: the rest keep their turn
        backing_off = sorted((i for i in rotation if self._down_until[i] > now), key=self._down_until.__getitem__)
        return healthy + backing_off

    def failed(self, index: int) -> None:
        self._failures[index] += 1
        delay = min(MAX_DELAY, BASE_DELAY * 2 ** (self._failures[index] - 1))
        self._down_until[index] = self._clock() + delay

    def succeeded(self, index: int) -> None:
        self._failures[index] = 0
        self._down_until[index] = 0.0
        self._next = (index + 1) % len(self.urls)

    def address(self, index: int) -> tuple[str, int]:
        parts = urllib.parse.urlsplit(self.urls[index])
        return parts.hostname or "localhost", parts.port or (5671 if parts.scheme == "amqps" else 5672)
