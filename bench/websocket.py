"""What WebSocket compression (``ws_compression``, permessage-deflate) costs and saves.

    python -m bench.websocket                     # 5,000 JSON messages, 500 idle clients
    python -m bench.websocket --messages 20000 --clients 1000

For compression off and on, alternately (``--rounds``), against a bridge of its own on the
machine's RabbitMQ: the bytes on the wire per MESSAGE (a counting TCP relay between the
subscriber and the bridge), the bridge's CPU per message in and out (a publisher and a
subscriber on one topic, both over WebSocket, both offering compression as browsers do), and
the bridge's RSS per idle logged-in WebSocket client. The bodies are JSON with varying ids and
timestamps, so the figures are neither a best case (identical bodies) nor a worst (random bytes).
Run by hand: numbers go in notes and docs/websocket.md, never into test assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics

from websockets.asyncio.client import connect

from bench.procstat import cpu_seconds, memory_kb, start_bridge

CONNECT = "CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\0"


def frame(command: str, headers: dict[str, str], body: str = "") -> str:
    return command + "\n" + "".join(f"{k}:{v}\n" for k, v in headers.items()) + "\n" + body + "\0"


def order(rng: random.Random, i: int) -> str:
    return json.dumps({
        "id": rng.randint(1, 10**9), "user": f"user{rng.randint(1, 10**6)}@example.com",
        "event": rng.choice(["order.created", "order.paid", "order.shipped"]),
        "items": [{"sku": f"A-{rng.randint(100, 999)}", "qty": rng.randint(1, 9),
                   "price": round(rng.random() * 100, 2)} for _ in range(rng.randint(1, 3))],
        "seq": i,
    })


class CountingRelay:
    """A TCP relay that counts the bytes the bridge sends to the client."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.to_client = 0
        self.server: asyncio.base_events.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        bridge_r, bridge_w = await asyncio.open_connection("127.0.0.1", self.target_port)

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, count: bool) -> None:
            while data := await reader.read(65536):
                if count:
                    self.to_client += len(data)
                writer.write(data)
                await writer.drain()
            writer.close()

        await asyncio.gather(pipe(client_r, bridge_w, False), pipe(bridge_r, client_w, True),
                             return_exceptions=True)


async def login(port: int):
    ws = await connect(f"ws://127.0.0.1:{port}/ws", subprotocols=["v12.stomp"], compression="deflate",
                       ping_interval=None, max_size=None)
    await ws.send(CONNECT)
    await ws.recv()
    return ws


async def traffic(port: int, pid: int, messages: int) -> tuple[float, float]:
    """(wire bytes per MESSAGE to the subscriber, bridge CPU µs per message in and out)."""
    relay = CountingRelay(port)
    relay_port = await relay.start()
    subscriber, publisher = await login(relay_port), await login(port)
    await subscriber.send(frame("SUBSCRIBE", {"id": "s", "destination": "/topic/bench-ws", "receipt": "r"}))
    await subscriber.recv()
    rng = random.Random(1)
    bodies = [order(rng, i) for i in range(messages)]
    before_bytes, before_cpu = relay.to_client, cpu_seconds(pid)

    async def publish() -> None:
        for i, body in enumerate(bodies):
            await publisher.send(frame("SEND", {"destination": "/topic/bench-ws",
                                                "content-type": "application/json"}, body))
            if i % 200 == 199:
                await publisher.send(frame("SEND", {"destination": "/topic/bench-ws-none",
                                                    "receipt": f"p{i}"}))
                while True:  # a receipt every 200 keeps the publisher from running ahead
                    if "RECEIPT" in await publisher.recv():
                        break

    async def consume() -> None:
        got = 0
        while got < messages:
            if (await subscriber.recv()).startswith("MESSAGE"):
                got += 1

    await asyncio.gather(publish(), consume())
    wire = (relay.to_client - before_bytes) / messages
    cpu = (cpu_seconds(pid) - before_cpu) / messages * 1e6
    for ws in (subscriber, publisher):
        await ws.close()
    assert relay.server is not None
    relay.server.close()
    return wire, cpu


async def idle(port: int, pid: int, clients: int) -> float:
    """The bridge's RSS growth per idle logged-in WebSocket client, in kB."""
    first = await login(port)
    before = memory_kb(pid)["VmRSS"]
    held = [await login(port) for _ in range(clients)]
    grown = memory_kb(pid)["VmRSS"] - before
    for ws in (*held, first):
        await ws.close()
    return grown / clients


def measure(compression: bool, messages: int, clients: int, port: int) -> tuple[float, float, float]:
    # start_bridge waits for its TCP port (port + 1 here); the clients use the WebSocket one
    bridge = start_bridge(port + 1, {"ws_compression": str(compression).lower(), "ws_port": str(port)})
    try:
        async def run() -> tuple[float, float, float]:
            wire, cpu = await traffic(port, bridge.pid, messages)
            return wire, cpu, await idle(port, bridge.pid, clients)
        return asyncio.run(run())
    finally:
        bridge.terminate()
        bridge.wait(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.websocket", description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--clients", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ws-port", type=int, default=61790)
    args = parser.parse_args(argv)
    results: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
    for _ in range(args.rounds):
        for compression in (False, True):
            results[compression].append(measure(compression, args.messages, args.clients, args.ws_port))
    print(f"{args.messages} JSON messages, {args.clients} idle clients, median of {args.rounds} rounds")
    print(f"{'ws_compression':16} {'wire B/MESSAGE':>15} {'CPU us/msg':>11} {'kB/idle client':>15}")
    for compression, rows in results.items():
        wire, cpu, kb = (statistics.median(column) for column in zip(*rows))
        print(f"{str(compression).lower():16} {wire:15.0f} {cpu:11.1f} {kb:15.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
