"""Instructions and function calls the bridge spends per message on its hot path.

    python -m bench.hotpath --broker 4.3                 # both paths, instructions and calls
    python -m bench.hotpath --broker system --checkout /path/to/old/checkout   # the same, an older bridge
    python -m bench.hotpath --broker system --windowed send,consume,fanout,pingpong --messages 20000

Two paths, each one message at a time so that every message crosses the whole path on its own
(one read, one write per hop, no batching to share the cost):

- ``send``: a small SEND with a receipt, from the bytes the bridge reads to the publish it
  writes, then RabbitMQ's confirm to the RECEIPT written;
- ``deliver``: a delivery (a queue filled beforehand, prefetch 1, ack client-individual),
  from the AMQP bytes read to the MESSAGE written, then the client's ACK to basic.ack written.

The bridge runs in its own process (``bench/hotpath_child.py``) under ``valgrind --tool=callgrind``:
the client counts its instructions over ``--base`` messages and over ``--base`` + ``--messages``
(counters zeroed and dumped with ``callgrind_control``), and the difference divided by
``--messages`` is the marginal cost of a message: startup, warm-up and the zero/dump requests
cancel out. Instruction counts do not move with the machine's load, so they are the before/after
figure for a hot-path change. A second run without valgrind counts Python function calls (and C
functions called from Python) the same way, through ``sys.setprofile`` in the bridge's loop
thread. ``--windowed`` counts the calls the same way over the bench's own scenarios instead
(``bench/scenarios.py``: many frames per read, as a windowed client sends them), where the
per-read work is shared and what is left is the per-message path. Numbers go in notes and
commit messages, never in tests.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

from testkit.brokers import local

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BODY = b"x" * 100
LENGTH = b""  # with --size: a content-length header, so a large body takes the large-body path


class Client:
    """A blocking STOMP client: one frame out, the answer in."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.send(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\0")
        command, _, _ = self.frame()
        if command != b"CONNECTED":
            raise RuntimeError(f"CONNECT answered by {command!r}")

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self) -> tuple[bytes, dict[bytes, bytes], bytes]:
        while True:
            self.buf = self.buf.lstrip(b"\r\n")
            head_end = self.buf.find(b"\n\n")
            if head_end >= 0:
                lines = self.buf[:head_end].split(b"\n")
                headers = dict(line.split(b":", 1) for line in lines[1:])
                start = head_end + 2
                if b"content-length" in headers:
                    end = start + int(headers[b"content-length"])
                else:
                    end = self.buf.find(b"\0", start)
                if end >= 0 and len(self.buf) > end:
                    body, self.buf = self.buf[start:end], self.buf[end + 1:]
                    if lines[0] == b"ERROR":
                        raise RuntimeError(f"ERROR {headers} {body!r}")
                    return lines[0], headers, body
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("connection closed")
            self.buf += chunk

    def close(self) -> None:
        self.sock.close()


def declare(client: Client, queue: str) -> None:
    client.send(b"SUBSCRIBE\nid:declare\ndestination:/queue/%s\n\n\0UNSUBSCRIBE\nid:declare\nreceipt:declared\n\n\0"
                % queue.encode())
    command, _, _ = client.frame()
    assert command == b"RECEIPT", command


def send_path(port: int, queue: str):
    client = Client(port)
    declare(client, queue)
    n = [0]

    def run(count: int) -> None:
        for _ in range(count):
            n[0] += 1
            client.send(b"SEND\ndestination:/queue/%s\nreceipt:%d\ncontent-type:text/plain\n%s\n%s\0"
                        % (queue.encode(), n[0], LENGTH, BODY))
            command, headers, _ = client.frame()
            assert command == b"RECEIPT" and headers[b"receipt-id"] == b"%d" % n[0], (command, headers)

    return run, client.close


def deliver_path(port: int, queue: str, total: int):
    filler = Client(port)
    declare(filler, queue)
    for i in range(total):
        filler.send(b"SEND\ndestination:/queue/%s\npersistent:false\n%s\n%s\n%s\0"
                    % (queue.encode(), b"receipt:end" if i == total - 1 else b"x:y", LENGTH, BODY))
    filler.frame()  # the last one's receipt: all are in the queue
    filler.close()
    client = Client(port)
    client.send(b"SUBSCRIBE\nid:0\ndestination:/queue/%s\nack:client-individual\nprefetch-count:1\n\n\0"
                % queue.encode())

    def run(count: int) -> None:
        for _ in range(count):
            command, headers, _ = client.frame()
            assert command == b"MESSAGE", command
            client.send(b"ACK\nid:%s\n\n\0" % headers[b"ack"])

    return run, client.close


def start_child(checkout: str, port: int, amqp_url: str, tool: str, out: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=checkout, PYTHONHASHSEED="0", STOMP_BRIDGE_WS_PORT="none")
    python = sys.executable  # the venv's (a symlink to the interpreter: valgrind runs it, not a shim)
    cmd = [python, os.path.join(HERE, "hotpath_child.py"), "--port", str(port), "--http-port", "0",
           "--log-level", "WARNING", "--amqp-url", amqp_url]
    if tool == "callgrind":
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-instr=no"] + cmd
    else:
        env["HOTPATH_CALLS"] = out
    proc = subprocess.Popen(cmd, cwd=checkout, env=env, stderr=subprocess.DEVNULL if tool == "callgrind" else None)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"bridge exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("bridge did not listen")


class Counter:
    """Zero the bridge's counter, and read it."""

    def __init__(self, proc: subprocess.Popen, tool: str, out: str) -> None:
        self.proc, self.tool, self.out = proc, tool, out

    def zero(self) -> None:
        if self.tool == "callgrind":
            subprocess.run(["callgrind_control", "-z", str(self.proc.pid)], check=True, capture_output=True)
        else:
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(0.2)

    def read(self) -> tuple[int, int]:
        if self.tool == "callgrind":
            before = set(glob.glob(self.out + ".*"))
            subprocess.run(["callgrind_control", "-d", str(self.proc.pid)], check=True, capture_output=True)
            for _ in range(600):
                new = set(glob.glob(self.out + ".*")) - before
                if new:
                    path = new.pop()
                    time.sleep(0.2)
                    if os.environ.get("HOTPATH_KEEP"):  # for callgrind_annotate: the last dump kept
                        shutil.copy(path, os.environ["HOTPATH_KEEP"])
                    with open(path) as f:
                        for line in f:
                            if line.startswith(("totals:", "summary:")):
                                return int(line.split()[1]), 0
                time.sleep(0.1)
            raise RuntimeError("no callgrind dump")
        if os.path.exists(self.out):
            os.unlink(self.out)
        self.proc.send_signal(signal.SIGUSR2)
        for _ in range(100):
            if os.path.exists(self.out):
                time.sleep(0.05)
                with open(self.out) as f:
                    py, c = f.read().split()
                return int(py), int(c)
            time.sleep(0.05)
        raise RuntimeError("no call count")


def measure(checkout: str, tool: str, path: str, args: argparse.Namespace) -> tuple[float, float]:
    broker = local(args.broker) if args.broker else None
    amqp_url = broker.amqp_url if broker else os.environ.get("STOMP_BRIDGE_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out" if tool == "callgrind" else "calls")
        proc = start_child(checkout, args.port, amqp_url, tool, out)
        queue = f"hotpath-{path}-{uuid.uuid4().hex[:8]}"
        try:
            warm = args.warmup
            if path == "send":
                run, close = send_path(args.port, queue)
            else:
                run, close = deliver_path(args.port, queue, warm + 2 * args.base + args.messages + 10)
            try:
                run(warm)
                counter = Counter(proc, tool, out)
                counter.zero()
                run(args.base)
                a = counter.read()
                counter.zero()
                run(args.base + args.messages)
                b = counter.read()
            finally:
                close()
        finally:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        if broker is not None:
            try:
                from testkit.management import Management
                Management(broker.api_url).delete_queue(queue)
            except Exception:  # noqa: BLE001 - a leftover queue is harmless
                pass
    return (b[0] - a[0]) / args.messages, (b[1] - a[1]) / args.messages


WINDOWED = ("send", "consume", "fanout", "pingpong")


def measure_windowed(checkout: str, scenario: str, args: argparse.Namespace) -> tuple[float, float]:
    """Python (and C) calls per message in one of the bench's own scenarios, many messages per
    read as a windowed client sends them: counted from the scenario's mark to its end."""
    import asyncio

    from bench import scenarios
    from testkit.management import Management

    broker = local(args.broker) if args.broker else None
    amqp_url = broker.amqp_url if broker else os.environ.get("STOMP_BRIDGE_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    rabbit = Management(broker.api_url if broker else "http://127.0.0.1:15672/api")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "calls")
        proc = start_child(checkout, args.port, amqp_url, "calls", out)
        counter = Counter(proc, "calls", out)
        n = args.messages
        runs = {
            "send": lambda: scenarios.scenario_send(args.port, rabbit, n, False, counter.zero),
            "consume": lambda: scenarios.scenario_consume(args.port, rabbit, n, counter.zero),
            "fanout": lambda: scenarios.scenario_fanout(args.port, rabbit, n // 10, mark=counter.zero),
            "pingpong": lambda: scenarios.scenario_pingpong(args.port, rabbit, n // 10, mark=counter.zero),
        }
        per = {"send": n, "consume": n, "fanout": n // 10 * 10, "pingpong": n // 10}[scenario]
        try:
            asyncio.run(runs[scenario]())
            py, c = counter.read()
        finally:
            proc.terminate()
            proc.wait(60)
    return py / per, c / per


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.hotpath", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", choices=["4.4", "4.3", "4.0", "system"])
    ap.add_argument("--checkout", action="append", default=[],
                    help="measure the bridge of this checkout (repeatable; default: this one)")
    ap.add_argument("--port", type=int, default=61653)
    ap.add_argument("--messages", type=int, default=5000, help="the difference between the two counts")
    ap.add_argument("--base", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--only", default="send,deliver")
    ap.add_argument("--tools", default="callgrind,calls")
    ap.add_argument("--runs", type=int, default=3, help="--windowed: runs of each scenario (the median is printed)")
    ap.add_argument("--windowed", default="",
                    help="instead: Python calls per message in these bench scenarios (send, consume, fanout, "
                         "pingpong; --messages of them, a tenth for fanout's SENDs and pingpong's round trips)")
    ap.add_argument("--size", type=int, help="body bytes, sent with a content-length (default: 100, without); "
                    "e.g. --size 1048576 --messages 40 --base 10 --warmup 10 for the large-body path")
    args = ap.parse_args()
    if args.size is not None:
        global BODY, LENGTH
        BODY = bytes(i % 251 for i in range(args.size))
        LENGTH = b"content-length:%d\n" % args.size
    checkouts = [os.path.abspath(c) for c in args.checkout] or [ROOT]
    if args.windowed:
        for checkout in checkouts:
            for scenario in args.windowed.split(","):
                # the median of --runs (a run now and then counts a garbage collection's or a
                # connection's set-up calls too)
                counts = sorted(measure_windowed(checkout, scenario, args) for _ in range(args.runs))
                per, c_per = counts[len(counts) // 2]
                print(f"{checkout}: {scenario} (windowed): {per:,.1f} Python calls per message (+ {c_per:,.1f} C calls)",
                      flush=True)
        return 0
    for checkout in checkouts:
        for path in args.only.split(","):
            for tool in args.tools.split(","):
                per, c_per = measure(checkout, tool, path, args)
                what = "instructions" if tool == "callgrind" else "Python calls"
                extra = f" (+ {c_per:,.1f} C calls)" if tool == "calls" else ""
                print(f"{checkout}: {path}: {per:,.1f} {what} per message{extra}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
