"""One topic, many subscribers: what fan-out costs RabbitMQ, the bridge and the plugin (issue 36).

    python -m bench --broker 4.4 --only fanout-many                       # 1,000 subscribers, 10 and 50 msg/s
    python -m bench --broker 4.4 --only fanout-many --subscribers 10000 --fanout-ws --fanout-ways on
    python -m bench --broker 4.4 --only fanout-bridges                    # 1,000 over 1 and over 2 bridges

``fanout-many``: N subscribers of one ``/topic/`` (each its own STOMP connection, ``ack:auto``,
a receipted SUBSCRIBE), over TCP or WebSocket (``--fanout-ws``), and one publisher that SENDs
at a steady rate (``--fanout-rates``: one below saturation, one above) for ``--fanout-seconds``.
Each body carries its sequence number and the time it was sent, so every delivery's latency is
measured and every subscriber's order and count are checked (a message lost or out of order
is counted and reported, the run fails). Three ways, interleaved, each bridge a fresh process
(so its RSS is this case's alone): the bridge with ``edge_fanout`` off, with it on, and
RabbitMQ's own STOMP plugin (``--fanout-ways`` picks).

Per case: the queues RabbitMQ has bound to the topic (the copies it routes per published
message: one per subscriber, or one per bridge with ``edge_fanout``); RabbitMQ's CPU per
*published* message (its beam over the publishing part, less what it spent per second in
``--fanout-idle`` seconds just before with the subscribers held and nothing published: its
statistics and the node's other users; the raw figure is in the JSON); the bridge's CPU per
*delivered copy*; delivery latency p50/p99 (send to receive, one clock: the publisher and the
subscribers are this process); the publish rate achieved; the client's own CPU (near a core,
the client limited the run); and memory per subscriber on both sides: RabbitMQ's node memory
(``rabbitmqctl status``: the Erlang VM's total, its connection + queue process parts, and the
beam's RSS) before and after subscribing, over N; the bridge's RSS before and after, over N.

``fanout-bridges``: the same N subscribers spread over two bridges (both ``edge_fanout`` on,
the publisher on the first) against all on one: RabbitMQ's CPU per published message should
grow with the bridges (one copy per bridge), not with the subscribers.

The client is one asyncio Protocol per socket (no task, no stream: bench/idle.py's way), with a
minimal WebSocket client of its own for ``--fanout-ws``, so one process holds 10,000. It raises
its file-descriptor limit, and the bridges' (they inherit it), to what N needs.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import statistics
import struct
import subprocess
import time
from dataclasses import dataclass, field

from testkit.bridgeproc import find_listener
from testkit.brokers import LocalBroker
from testkit.management import Management
from testkit.stats import percentile
from testkit.stomp import Frame, StompClient, serialize

from .idle import raise_fd_limit
from .procstat import cpu_split, memory_kb, start_bridge
from .scenarios import BenchError, unique

CONNECT = b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\x00"
BODY_SIZE = 256
# RabbitMQ's memory parts that grow with STOMP connections and subscription queues
# (rabbitmqctl status): readers, writers, channels, the rest of a connection, queue processes.
CONNECTION_PARTS = ("connection_readers", "connection_writers", "connection_channels", "connection_other",
                    "queue_procs", "other_proc", "other_ets", "binary")


def ws_frame(payload: bytes, opcode: int = 1) -> bytes:
    """A client's WebSocket frame: FIN, masked (RFC 6455 requires it of clients)."""
    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return head + mask + masked


class Subscriber(asyncio.Protocol):
    """CONNECT, SUBSCRIBE with a receipt, then count MESSAGEs: order, latency, total.

    Over WebSocket (``ws_path`` set) the HTTP upgrade comes first and every STOMP frame goes in
    a masked text frame; the server's frames are unwrapped into the same STOMP stream."""

    __slots__ = ("transport", "state", "buf", "wbuf", "ready", "error", "count", "expected", "latencies",
                 "run", "_subscribe", "_ws_path", "_port", "_counted")

    def __init__(self, run: FanoutRun, subscribe: bytes, ready: asyncio.Future, ws_path: str | None,
                 port: int) -> None:
        self.transport: asyncio.Transport | None = None
        self.state = "upgrading" if ws_path else "connecting"
        self.buf = b""
        self.wbuf = b""  # WebSocket bytes not yet a whole frame
        self.ready = ready
        self.error: str | None = None
        self.count = 0
        self.expected = 0
        self.latencies: list[float] = run.latencies
        self.run = run
        self._subscribe = subscribe
        self._ws_path = ws_path
        self._port = port
        self._counted = False  # told the run it is done (all its messages, or failed)

    def _done(self) -> None:
        if not self._counted:
            self._counted = True
            self.run.subscriber_done()

    def _write(self, stomp: bytes) -> None:
        assert self.transport is not None
        self.transport.write(ws_frame(stomp) if self._ws_path else stomp)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self._ws_path:
            key = base64.b64encode(os.urandom(16)).decode()
            self.transport.write(  # type: ignore[union-attr]
                (f"GET {self._ws_path} HTTP/1.1\r\nHost: 127.0.0.1:{self._port}\r\nUpgrade: websocket\r\n"
                 f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                 "Sec-WebSocket-Protocol: v12.stomp\r\n\r\n").encode())
        else:
            self._write(CONNECT)

    def data_received(self, data: bytes) -> None:
        if self._ws_path:
            data = self._unwrap(data)
            if not data:
                return
        if self.buf:
            data = self.buf + data
        parts = data.split(b"\x00")
        self.buf = parts.pop()
        if self.state == "held":
            now = time.perf_counter()
            for raw in parts:
                start = raw.find(b"MESSAGE\n")
                if start < 0:
                    if raw.strip(b"\r\n"):
                        self._stomp_frame(raw)
                    continue
                body = raw[raw.index(b"\n\n", start) + 2:]
                seq = int(body[:10])
                if seq != self.expected:
                    self.run.out_of_order += 1
                self.expected = seq + 1
                self.latencies.append(now - float(body[11:28]))
                self.count += 1
                if self.count == self.run.messages:
                    self._done()
            return
        for raw in parts:
            self._stomp_frame(raw)

    def _unwrap(self, data: bytes) -> bytes:
        buf = self.wbuf + data if self.wbuf else data
        if self.state == "upgrading":
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self.wbuf = buf
                return b""
            status = buf[:buf.find(b"\r\n")]
            if b" 101 " not in status + b" ":
                self._fail(f"WebSocket upgrade refused: {status.decode('latin-1')}")
                return b""
            buf = buf[end + 4:]
            self.state = "connecting"
            self._write(CONNECT)
        out = []
        pos = 0
        n = len(buf)
        while n - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            length = b1 & 0x7F
            head = 2
            if length == 126:
                if n - pos < 4:
                    break
                length = int.from_bytes(buf[pos + 2:pos + 4], "big")
                head = 4
            elif length == 127:
                if n - pos < 10:
                    break
                length = int.from_bytes(buf[pos + 2:pos + 10], "big")
                head = 10
            if n - pos < head + length:
                break
            opcode = b0 & 0x0F
            if opcode in (0, 1, 2):
                out.append(buf[pos + head:pos + head + length])
            elif opcode == 8:
                self._fail(f"WebSocket closed by the server: {buf[pos + head:pos + head + length]!r}")
                return b""
            pos += head + length
        self.wbuf = buf[pos:]
        return b"".join(out)

    def _stomp_frame(self, raw: bytes) -> None:
        raw = raw.lstrip(b"\r\n")
        if not raw:
            return
        command = raw.split(b"\n", 1)[0]
        if command == b"ERROR":
            self._fail("ERROR " + raw[:300].decode("utf-8", "replace").replace("\n", " | "))
        elif self.state == "connecting" and command == b"CONNECTED":
            self.state = "subscribing"
            self._write(self._subscribe)
        elif self.state == "subscribing" and command == b"RECEIPT":
            self.state = "held"
            if not self.ready.done():
                self.ready.set_result(None)
        else:
            self._fail(f"unexpected {command!r} while {self.state}")

    def _fail(self, why: str) -> None:
        if self.error is None:
            self.error = why
            self.run.errors.append(why)
        self.state = "failed"
        if not self.ready.done():
            self.ready.set_exception(BenchError(why))
        if self.transport is not None:
            self.transport.close()
        self._done()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.state not in ("closing", "failed"):
            self._fail("closed by the server" + (f" ({exc!r})" if exc else ""))


@dataclass
class FanoutRun:
    """What all subscribers of one case share: the expected count, latencies, completion."""

    messages: int
    subscribers: int
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    out_of_order: int = 0
    finished: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def subscriber_done(self) -> None:
        self.finished += 1
        if self.finished >= self.subscribers:
            self.done.set()


def thread_cpu_s(pid: int) -> float:
    """CPU seconds of every thread of ``pid`` to the nanosecond (/proc/PID/task/*/schedstat), for
    RabbitMQ, whose threads live as long as it does: /proc/PID/stat counts 10 ms ticks, and a
    published message on a fanned-out topic costs RabbitMQ tens of µs. Falls back to the ticks."""
    try:
        total = 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
        if total:
            return total / 1e9
    except OSError:
        pass
    return sum(cpu_split(pid))


def rabbit_memory(broker: LocalBroker | None) -> dict[str, int] | None:
    """The node's memory by part (rabbitmqctl status, bytes); None without a local broker."""
    if broker is None:
        return None
    done = subprocess.run([*broker.ctl_command(), "status", "--formatter", "json"], capture_output=True,
                          text=True, timeout=120)
    if done.returncode != 0:
        return None
    mem = json.loads(done.stdout)["memory"]
    out = {name: int(mem[name]) for name in CONNECTION_PARTS if isinstance(mem.get(name), int)}
    out["erlang"] = int(mem["total"]["erlang"])
    out["connections_and_queues"] = sum(out.get(p, 0) for p in CONNECTION_PARTS[:5])
    return out


async def open_subscribers(run: FanoutRun, ports: list[tuple[int, str | None]], dest: str,
                           concurrency: int = 100) -> list[Subscriber]:
    """N subscribers spread round-robin over ``ports`` ((port, ws_path or None) each)."""
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(concurrency)
    subs: list[Subscriber] = []
    sub = f"SUBSCRIBE\ndestination:{dest}\nid:0\nack:auto\nreceipt:s\n\n\x00".encode()

    async def one(i: int) -> None:
        port, ws_path = ports[i % len(ports)]
        async with gate:
            ready = loop.create_future()
            _, proto = await asyncio.wait_for(
                loop.create_connection(lambda: Subscriber(run, sub, ready, ws_path, port), "127.0.0.1", port), 60)
            subs.append(proto)
            await asyncio.wait_for(ready, 60)

    results = await asyncio.gather(*(one(i) for i in range(run.subscribers)), return_exceptions=True)
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        for s in subs:
            s.state = "closing"
            if s.transport is not None:
                s.transport.close()
        raise BenchError(f"{len(failed)} of {run.subscribers} subscribers could not subscribe; first: "
                         f"{failed[0]!r}")
    return subs


async def publish_at(port: int, dest: str, messages: int, rate: float) -> tuple[float, StompClient]:
    """SEND ``messages`` at ``rate`` per second (on a schedule, not after each other), bodies
    ``<seq> <perf_counter>``. Returns the seconds it took and the publisher, still open (the caller
    closes it once the deliveries are in: a close could drop SENDs not yet published). No
    receipts: above saturation RabbitMQ confirms the last SEND only after routing every copy
    before it, and what is waited for is the deliveries."""
    client = await StompClient.connect(port, heartbeat=None, raise_errors=True)
    try:
        start = time.perf_counter()
        for i in range(messages):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            head = b"%010d %017.6f" % (i, time.perf_counter())
            client.send_raw(serialize(Frame("SEND", {"destination": dest}, head + b"x" * (BODY_SIZE - len(head))),
                                      "1.2"))
        return time.perf_counter() - start, client
    except BaseException:
        client.writer.close()
        raise


async def wait_listening(port: int, bridge: subprocess.Popen, timeout: float = 10.0) -> None:
    """Until ``bridge`` itself listens on ``port`` (another process's listener does not count)."""
    deadline = time.monotonic() + timeout
    while await asyncio.to_thread(find_listener, port) != bridge.pid:
        if bridge.poll() is not None:
            raise BenchError(f"the bridge exited with {bridge.returncode} before listening on {port}")
        if time.monotonic() > deadline:
            raise BenchError(f"the bridge did not listen on its WebSocket port {port} within {timeout:g} s")
        await asyncio.sleep(0.05)


@dataclass
class Case:
    """One way to run: ``ways`` ``off``/``on`` (a fresh bridge each, edge_fanout so), ``native``;
    ``bridges``: how many bridges the subscribers are spread over."""

    way: str
    bridges: int = 1

    @property
    def name(self) -> str:
        return self.way if self.bridges == 1 else f"{self.way} x{self.bridges}"


async def run_case(case: Case, *, subscribers: int, rate: float, seconds: float, ws: bool, native_port: int,
                   native_ws_port: int | None, broker: LocalBroker | None, broker_pid: int | None,
                   rabbit: Management, bridge_port: int, settings: dict[str, str], drain: float = 120.0,
                   memory: bool = True, idle_s: float = 5.0) -> dict:
    messages = max(1, int(rate * seconds))
    raise_fd_limit(subscribers + 512)  # the bridges inherit it
    key = unique("bench.fanmany").replace("-", ".")
    dest = f"/topic/{key}"
    bridges = []
    try:
        if case.way == "native":
            ports = [(native_ws_port, "/ws")] if ws else [(native_port, None)]
            if ws and native_ws_port is None:
                raise BenchError("--fanout-ws against the plugin needs its web-stomp port (--broker)")
            publish_port = native_port
        else:
            ports = []
            for b in range(case.bridges):
                stomp_port = bridge_port + 2 * b
                extra = {**settings, "edge_fanout": "true" if case.way == "on" else "false"}
                if ws:
                    extra["ws_port"] = str(stomp_port + 1)
                bridge = await asyncio.to_thread(start_bridge, stomp_port, extra)
                bridges.append(bridge)
                if ws:  # start_bridge waited for the TCP listener; the WebSocket one may come after
                    await wait_listening(stomp_port + 1, bridge)
                ports.append((stomp_port + 1, "/ws") if ws else (stomp_port, None))
            publish_port = bridge_port
        pids = [b.pid for b in bridges]
        rss0 = [memory_kb(p)["VmRSS"] for p in pids]
        mem0 = await asyncio.to_thread(rabbit_memory, broker) if memory else None
        rabbit_rss0 = memory_kb(broker_pid)["VmRSS"] if broker_pid else 0
        run = FanoutRun(messages, subscribers)
        t0 = time.perf_counter()
        subs = await open_subscribers(run, ports, dest)
        open_s = time.perf_counter() - t0
        await asyncio.sleep(1.0)  # let the last SUBSCRIBEs' work settle before reading memory
        rss1 = [memory_kb(p)["VmRSS"] for p in pids]
        mem1 = await asyncio.to_thread(rabbit_memory, broker) if memory else None
        rabbit_rss1 = memory_kb(broker_pid)["VmRSS"] if broker_pid else 0
        # The copies RabbitMQ routes per published message: the queues bound to the topic (one
        # per subscriber, or one per bridge with edge_fanout), a count the machine's load does
        # not move, where RabbitMQ's CPU per published message at a few per second does.
        try:
            queues: int | None = len(await asyncio.to_thread(rabbit.topic_queues, key))
        except Exception:  # noqa: BLE001 - the management API is optional here
            queues = None
        try:
            # RabbitMQ's CPU with the subscribers held and nothing published (its statistics,
            # other users of the node), subtracted from the publishing part's below: at 10 msg/s
            # a few ms per second of background would be hundreds of µs per published message.
            idle0 = thread_cpu_s(broker_pid) if broker_pid else None
            bidle0 = [sum(cpu_split(p)) for p in pids]
            ti = time.perf_counter()
            await asyncio.sleep(idle_s)
            idle_elapsed = time.perf_counter() - ti
            idle_rate = (thread_cpu_s(broker_pid) - idle0) / idle_elapsed if idle0 is not None else None
            bridge_idle_rate = sum(sum(cpu_split(p)) - c for p, c in zip(pids, bidle0)) / idle_elapsed
            cpu0 = [sum(cpu_split(p)) for p in pids]
            bcpu0 = thread_cpu_s(broker_pid) if broker_pid else None
            ccpu0 = time.process_time()
            t1 = time.perf_counter()
            publish_s, publisher = await publish_at(publish_port, dest, messages, rate)
            try:
                await asyncio.wait_for(run.done.wait(), drain)
            except asyncio.TimeoutError:
                pass
            finally:
                publisher.writer.close()
            elapsed = time.perf_counter() - t1
            cpu = [sum(cpu_split(p)) - c for p, c in zip(pids, cpu0)]
            bcpu_raw = thread_cpu_s(broker_pid) - bcpu0 if bcpu0 is not None else None
            bcpu = max(0.0, bcpu_raw - idle_rate * elapsed) if bcpu_raw is not None and idle_rate is not None else None
            ccpu = time.process_time() - ccpu0
            peak = [memory_kb(p)["VmHWM"] for p in pids]
        finally:
            for s in subs:
                if s.state != "failed":
                    s.state = "closing"
                if s.transport is not None:
                    s.transport.close()
        delivered = sum(s.count for s in subs)
        lat = sorted(run.latencies)
        out = {
            "case": case.name, "way": case.way, "bridges": case.bridges, "subscribers": subscribers,
            "websocket": ws, "rate": rate, "published": messages, "expected_deliveries": messages * subscribers,
            "delivered": delivered, "lost": messages * subscribers - delivered, "out_of_order": run.out_of_order,
            "errors": len(run.errors), "error_first": run.errors[0] if run.errors else None,
            "short_subscribers": sum(1 for s in subs if s.count < messages),
            "open_s": open_s, "publish_s": publish_s, "elapsed_s": elapsed,
            # below ``rate`` when the publisher's SENDs were not taken (the bridge or RabbitMQ
            # saturated) or the client did not get the CPU to keep its schedule
            "achieved_rate": messages / publish_s if publish_s else None,
            "rabbit_queues": queues,
            "rabbit_cpu_s": bcpu, "rabbit_cpu_raw_s": bcpu_raw, "rabbit_idle_cores": idle_rate,
            "bridge_idle_cores": bridge_idle_rate if pids else None,
            "rabbit_us_per_published_raw": bcpu_raw / messages * 1e6 if bcpu_raw is not None else None,
            "bridge_cpu_s": sum(cpu) if pids else None, "client_cpu_s": ccpu,
            "rabbit_us_per_published": bcpu / messages * 1e6 if bcpu is not None else None,
            "rabbit_us_per_delivery": bcpu / max(1, delivered) * 1e6 if bcpu is not None else None,
            "bridge_us_per_delivery": sum(cpu) / max(1, delivered) * 1e6 if pids else None,
            "p50_ms": percentile(lat, 50) * 1000 if lat else None,
            "p99_ms": percentile(lat, 99) * 1000 if lat else None,
            "max_ms": lat[-1] * 1000 if lat else None,
            "bridge_rss_before_mb": sum(rss0) / 1024 if pids else None,
            "bridge_rss_after_mb": sum(rss1) / 1024 if pids else None,
            "bridge_peak_rss_mb": sum(peak) / 1024 if pids else None,
            "bridge_kb_per_subscriber": (sum(rss1) - sum(rss0)) / subscribers if pids else None,
        }
        if broker_pid:
            out["rabbit_rss_kb_per_subscriber"] = (rabbit_rss1 - rabbit_rss0) / subscribers
        out["rabbit_memory_before"], out["rabbit_memory_after"] = mem0, mem1
        if mem0 and mem1:
            out["rabbit_kb_per_subscriber"] = (mem1["erlang"] - mem0["erlang"]) / 1024 / subscribers
            out["rabbit_conn_queue_kb_per_subscriber"] = (
                (mem1["connections_and_queues"] - mem0["connections_and_queues"]) / 1024 / subscribers)
        return out
    finally:
        for b in bridges:
            b.terminate()
        for b in bridges:
            try:
                await asyncio.to_thread(b.wait, 30)
            except subprocess.TimeoutExpired:
                b.kill()
        try:
            await rabbit.cleanup_topic(key, wait=30)
        except Exception:  # noqa: BLE001 - cleanup only
            pass


def summarize_cases(runs: list[dict]) -> dict:
    """Medians over a case's runs of every numeric figure; counts (lost, errors) summed."""
    out: dict = {"runs": len(runs)}
    for k, v in runs[0].items():
        if isinstance(v, dict):
            out[k] = [r[k] for r in runs]
        elif k in ("lost", "errors", "out_of_order", "short_subscribers", "delivered", "expected_deliveries"):
            out[k] = sum(r[k] for r in runs)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            vals = [r[k] for r in runs if r.get(k) is not None]
            out[k] = statistics.median(vals) if vals else None
        else:
            out[k] = v
    for k in ("rabbit_us_per_published", "bridge_us_per_delivery", "p99_ms"):
        vals = [r[k] for r in runs if r.get(k) is not None]
        if len(vals) > 1:
            out[k + "_range"] = (min(vals), max(vals))
    return out


def print_cases(title: str, cases: dict[str, dict], native: str = "native") -> None:
    def f(v: float | None, fmt: str = ".1f") -> str:
        return "-" if v is None else format(v, fmt)

    print(title)
    header = ("case", "queues", "rabbit µs/pub", "÷native", "rabbit µs/deliv", "bridge µs/copy", "÷native/deliv",
              "p50 ms", "p99 ms", "msg/s sent", "rabbit kB/sub", "(conn+q)", "(beam RSS)", "bridge kB/sub", "RSS MB",
              "delivered", "missing", "errors", "client s")
    rows = [header]
    n = cases.get(native)
    for name, c in cases.items():
        ratio = per = "-"
        if n and n.get("rabbit_us_per_published") and c.get("rabbit_us_per_published") is not None:
            ratio = f"{c['rabbit_us_per_published'] / n['rabbit_us_per_published']:.4f}"
        if n and n.get("rabbit_us_per_delivery") and c.get("bridge_us_per_delivery") is not None:
            per = f"{c['bridge_us_per_delivery'] / n['rabbit_us_per_delivery']:.2f}"
        rows.append((name, f(c.get("rabbit_queues"), ".0f"), f(c.get("rabbit_us_per_published"), ".0f"), ratio,
                     f(c.get("rabbit_us_per_delivery")),
                     f(c.get("bridge_us_per_delivery")), per, f(c.get("p50_ms")), f(c.get("p99_ms")),
                     f(c.get("achieved_rate")),
                     f(c.get("rabbit_kb_per_subscriber")), f(c.get("rabbit_conn_queue_kb_per_subscriber")),
                     f(c.get("rabbit_rss_kb_per_subscriber")),
                     f(c.get("bridge_kb_per_subscriber")), f(c.get("bridge_rss_after_mb"), ".0f"),
                     f"{c['delivered']}/{c['expected_deliveries']}", str(c["lost"]), str(c["errors"]),
                     f(c.get("client_cpu_s"), ".1f")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for row in rows:
        print("  " + "  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row)))
    for name, c in cases.items():
        if c.get("error_first"):
            print(f"  {name}: first error: {c['error_first']}")
    print("queues: bound to the topic (the copies RabbitMQ routes per published message); rabbit µs/pub: RabbitMQ's "
          "CPU per published message less its idle rate, ÷native: over the plugin's; bridge µs/copy: the bridge's CPU "
          "per delivered copy, ÷native/deliv: over RabbitMQ's per delivery with its plugin; p50/p99: send to receive; "
          "msg/s sent: the publish rate achieved; rabbit kB/sub: the node's Erlang memory (conn+q: its connection and "
          "queue parts; beam RSS) after subscribing less before, over the subscribers; bridge kB/sub: its RSS so; "
          "missing: copies not delivered within --fanout-drain; client s: this process's CPU (near the run's seconds: "
          "the client limited it)")


async def run_matrix(cases: list[Case], runs: int, **kw) -> dict[str, dict]:
    """Every case once per round, the rounds interleaved (off, on, native, off, on, ...)."""
    results: dict[str, list[dict]] = {c.name: [] for c in cases}
    for i in range(runs):
        for case in cases:
            r = await run_case(case, **kw)
            results[case.name].append(r)
            print(f"  run {i + 1} {case.name:8} rabbit {r['rabbit_us_per_published'] or 0:9.0f} µs/pub"
                  + (f"  bridge {r['bridge_us_per_delivery']:.1f} µs/copy" if r["bridge_us_per_delivery"] else "")
                  + f"  p50 {r['p50_ms'] or 0:.1f} p99 {r['p99_ms'] or 0:.1f} ms"
                  + f"  delivered {r['delivered']}/{r['expected_deliveries']}"
                  + (f"  ERRORS {r['errors']}: {r['error_first']}" if r["errors"] else "")
                  + f"  load {os.getloadavg()[0]:.1f}", flush=True)
    return {name: summarize_cases(rs) for name, rs in results.items()}
