"""Side-by-side throughput of the bridge and RabbitMQ's native STOMP plugin.

    python bench/bench.py                    # starts a bridge, uses native on 61613
    python bench/bench.py --runs 5 --messages 20000

Same client (a lean asyncio STOMP client built on the project's own codec),
same broker, interleaved A/B runs; prints the median of each scenario and the
ratio bridge / native. Run by hand: numbers go in notes and the README, never
into test assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from stomp_bridge.protocol.frames import Frame, serialize  # noqa: E402
from stomp_bridge.protocol.parser import FrameParser, Limits  # noqa: E402


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.parser = FrameParser(Limits(max_frame_size=64 * 1024 * 1024))
        self.pending: list[Frame] = []

    @classmethod
    async def connect(cls, port: int) -> Client:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client = cls(reader, writer)
        client.send(Frame("CONNECT", {"accept-version": "1.2", "host": "/", "login": "guest",
                                      "passcode": "guest"}))
        frame = await client.next()
        assert frame.command == "CONNECTED", frame
        return client

    def send(self, frame: Frame) -> None:
        self.writer.write(serialize(frame, "1.2"))

    async def next(self) -> Frame:
        while not self.pending:
            data = await self.reader.read(1 << 20)
            if not data:
                raise ConnectionError("closed")
            self.parser.feed(data)
            while (f := self.parser.next_frame()) is not None:
                self.pending.append(f)
            self.pending.reverse()
        return self.pending.pop()

    async def batch(self) -> list[Frame]:
        """Every frame the next read completes (fewer wake-ups than next())."""
        out: list[Frame] = []
        if self.pending:
            out, self.pending = list(reversed(self.pending)), []
            return out
        while not out:
            data = await self.reader.read(1 << 20)
            if not data:
                raise ConnectionError("closed")
            self.parser.feed(data)
            while (f := self.parser.next_frame()) is not None:
                out.append(f)
        return out

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except Exception:  # noqa: BLE001
            pass


async def publish(port: int, dest: str, count: int, window: int, persistent: bool, size: int) -> None:
    client = await Client.connect(port)
    body = b"x" * size
    headers = {"destination": dest}
    if persistent:
        headers["persistent"] = "true"
    sent = done = 0
    while done < count:
        while sent < count and sent - done < window:
            client.send(Frame("SEND", dict(headers, receipt=str(sent)), body))
            sent += 1
        for frame in await client.batch():
            assert frame.command == "RECEIPT", frame
            done += 1
    await client.close()


async def scenario_send(port: int, messages: int, persistent: bool) -> float:
    conns, window = 4, 100
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    dest = f"/queue/{queue}"
    setup = await Client.connect(port)
    setup.send(Frame("SUBSCRIBE", {"destination": dest, "id": "declare", "receipt": "x"}))
    setup.send(Frame("UNSUBSCRIBE", {"id": "declare"}))
    await setup.next()
    per = messages // conns
    start = time.perf_counter()
    await asyncio.gather(*(publish(port, dest, per, window, persistent, 256) for _ in range(conns)))
    elapsed = time.perf_counter() - start
    await setup.close()
    delete_queue(queue)
    return per * conns / elapsed


async def scenario_consume(port: int, messages: int) -> float:
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    dest = f"/queue/{queue}"
    await publish(port, dest, messages, 500, False, 256)
    received = 0
    done = asyncio.Event()

    async def consumer() -> None:
        nonlocal received
        client = await Client.connect(port)
        client.send(Frame("SUBSCRIBE", {"destination": dest, "id": "0", "ack": "client-individual",
                                        "prefetch-count": "500"}))
        while not done.is_set():
            try:
                frames = await asyncio.wait_for(client.batch(), 0.5)
            except asyncio.TimeoutError:
                continue
            out = []
            for frame in frames:
                out.append(serialize(Frame("ACK", {"id": frame.headers["ack"]}), "1.2"))
                received += 1
            client.writer.write(b"".join(out))
            if received >= messages:
                done.set()
        await client.close()

    start = time.perf_counter()
    await asyncio.gather(consumer(), consumer())
    elapsed = time.perf_counter() - start
    delete_queue(queue)
    return messages / elapsed


def delete_queue(name: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", "delete_queue", name], capture_output=True, check=False)


def start_bridge(port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "stomp_bridge", "--port", str(port), "--log-level", "WARNING"],
        cwd=os.path.join(os.path.dirname(__file__), ".."),
    )
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("bridge did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bridge-port", type=int, default=61633)
    ap.add_argument("--native-port", type=int, default=61613)
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-start", action="store_true", help="a bridge already runs on --bridge-port")
    args = ap.parse_args()
    proc = None if args.no_start else start_bridge(args.bridge_port)
    scenarios = {
        "persistent SEND, receipt each, 4 conns, window 100 (msg/s)":
            lambda p: scenario_send(p, args.messages, True),
        "non-persistent SEND, receipt each, 4 conns, window 100 (msg/s)":
            lambda p: scenario_send(p, args.messages, False),
        "consume, client-individual, prefetch 500, 2 conns (msg/s)":
            lambda p: scenario_consume(p, args.messages),
    }
    targets = {"bridge": args.bridge_port, "native": args.native_port}
    try:
        rows = []
        for name, fn in scenarios.items():
            results: dict[str, list[float]] = {t: [] for t in targets}
            for _ in range(args.runs):
                for target, port in targets.items():  # interleaved A/B
                    results[target].append(asyncio.run(fn(port)))
            med = {t: statistics.median(v) for t, v in results.items()}
            rows.append((name, med["bridge"], med["native"], med["bridge"] / med["native"]))
        width = max(len(r[0]) for r in rows)
        print(f"{'scenario':<{width}}  {'bridge':>10}  {'native':>10}  ratio")
        for name, b, n, r in rows:
            print(f"{name:<{width}}  {b:>10.0f}  {n:>10.0f}  {r:5.2f}")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
