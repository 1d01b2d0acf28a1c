"""A well-behaved client beside the attacks: round trips through RabbitMQ, timed.

It SENDs to a queue of its own and waits for the MESSAGE back, about 50 times
a second. Every round trip must succeed (an ERROR or a stall fails the run);
the latencies are reported, never asserted (the machine is shared).
"""

from __future__ import annotations

import asyncio
import time
import uuid

from testkit.stats import percentile
from testkit.stomp import StompClient


def summary(samples: list[float]) -> dict[str, float]:
    """The round trips' count, p50 and p99 in ms (testkit.stats); NaN for none."""
    if not samples:
        return {"n": 0, "p50_ms": float("nan"), "p99_ms": float("nan")}
    return {"n": len(samples), "p50_ms": round(percentile(samples, 50) * 1000, 2),
            "p99_ms": round(percentile(samples, 99) * 1000, 2)}


class Probe:
    def __init__(self, port: int, vhost: str) -> None:
        self.port, self.vhost = port, vhost
        self.queue = f"/queue/probe-{uuid.uuid4().hex[:8]}"
        self.client: StompClient | None = None
        self.samples: list[float] = []
        self.round_trips = 0
        self._task: asyncio.Task | None = None
        self._stopping = False

    async def start(self) -> "Probe":
        self.client = await StompClient.connect(self.port, self.vhost)
        self.client.send("SUBSCRIBE", {"destination": self.queue, "id": "probe", "receipt": "sub"})
        frame = await self.client.next(10)
        assert frame.command == "RECEIPT", f"probe SUBSCRIBE answered {frame.command} {frame.headers}"
        self._task = asyncio.create_task(self._loop())
        return self

    async def _loop(self) -> None:
        client = self.client
        assert client is not None
        n = 0
        # A flag, not only cancel(): Python 3.11's wait_for drops a cancellation that
        # arrives as the read completes, and this loop reads 50 times a second.
        while not self._stopping:
            n += 1
            started = time.perf_counter()
            client.send("SEND", {"destination": self.queue, "n": str(n)}, b"ping")
            frame = await client.next(15)
            if frame.command != "MESSAGE" or frame.headers.get("n") != str(n):
                raise AssertionError(f"probe expected MESSAGE {n}, got {frame.command} {frame.headers}")
            self.samples.append(time.perf_counter() - started)
            self.round_trips += 1
            await asyncio.sleep(0.02)

    def window(self) -> list[float]:
        """Start a new measurement window; returns the previous one's samples."""
        self.check()
        samples, self.samples = self.samples, []
        return samples

    def check(self) -> None:
        """Raise what stopped the well-behaved client, if anything did."""
        if self._task is not None and self._task.done():
            self._task.result()
            raise AssertionError("probe stopped")

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            except Exception:  # noqa: BLE001 - reported by check()
                pass
        if self.client is not None:
            await self.client.close()
