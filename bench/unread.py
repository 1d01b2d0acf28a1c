"""What clients that send and never read cost the server: the bridge on TCP, TLS and WebSocket,
before login and after, beside RabbitMQ's plugin on TCP.

    python -m bench.unread                                   # the machine's RabbitMQ (5672, plugin 61613)
    python -m bench.unread --seconds 10 --clients 3 --only bridge-tcp-login,plugin-tcp-login

Each case: ``--clients`` connections with a 4 KiB receive buffer (testkit/flood.py) write junk
for ``--seconds`` (each junk frame earns an ERROR that keeps the connection: ``Bad command``
after login, ``Illegal command`` before; WebSocket: one message of junk frames at a time, or
pings), never reading. Reported: the MB written (into both kernels' socket buffers and the
server), the ERRORs the bridge sent (its
/metrics), the server's peak RSS growth (the bridge: its own process, VmHWM; the plugin: the
RabbitMQ node's RSS sampled, shared with whatever else the node does) and its RSS after the
clients have gone. Run it by hand; numbers go into docs/reliability.md, never into assertions.
"""

from __future__ import annotations

import argparse
import os
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable

from testkit.bridgeproc import BridgeProcess, listener_pid, rss_kb
from testkit.flood import JUNK, PING, login, unread_socket, write_until_stalled, ws_frame, ws_upgrade

CASES = ["bridge-tcp", "bridge-tcp-login", "bridge-tls-login", "bridge-ws-login", "bridge-ws-pings",
         "plugin-tcp", "plugin-tcp-login"]


def _self_signed() -> tuple[str, str]:
    directory = tempfile.mkdtemp(prefix="bench-unread-")
    cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=bridge",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    return cert, key


def _client(case: str, port: int) -> socket.socket:
    sock = unread_socket(port)
    if "-tls" in case:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        sock = context.wrap_socket(sock)
    send: Callable[[bytes], bytes] | None = None
    if "-ws" in case:
        ws_upgrade(sock)
        send = ws_frame
    if "login" in case:
        login(sock, send=send)
    return sock


def _payload(case: str) -> bytes:
    if case.endswith("pings"):
        return ws_frame(b"p" * 125, PING) * 512
    if "-ws" in case:
        return ws_frame(JUNK * 4096)
    return JUNK * 4096


def run_case(case: str, amqp_url: str, plugin_port: int, clients: int, seconds: float) -> dict:
    bridge = None
    if case.startswith("bridge"):
        cert, key = _self_signed()
        bridge = BridgeProcess(amqp_url, {"connect_timeout": seconds + 30, "ws_port": 0, "tls_port": 0,
                                          "tls_cert_file": cert, "tls_key_file": key}).start()
        stats = bridge.fresh_stats()
        port = stats["tls_port"] if "-tls" in case else stats["ws_port"] if "-ws" in case else stats["port"]
        pid = bridge.pid
    else:
        port, pid = plugin_port, listener_pid(plugin_port)
    try:
        before = rss_kb(pid)
        if bridge is not None:
            bridge.reset_peak_rss()
        socks = [_client(case, port) for _ in range(clients)]
        written = [0] * clients
        peak = before
        stop = time.monotonic() + seconds

        def flood(i: int) -> None:
            data = _payload(case)
            while time.monotonic() < stop:
                try:
                    written[i] += write_until_stalled(socks[i], data, 1 << 40, stall=0.2, offset=written[i])
                except OSError:
                    return

        threads = [threading.Thread(target=flood, args=(i,)) for i in range(clients)]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            peak = max(peak, rss_kb(pid))
            time.sleep(0.2)
        peak = max(peak, rss_kb(pid), rss_kb(pid, "VmHWM") if bridge is not None else 0)
        errors = None
        if bridge is not None:
            errors = sum(bridge.metric("stomp_bridge_errors_total", f'{{reason="{reason}"}}')
                         for reason in ("Bad command", "Illegal command"))
        for sock in socks:
            sock.close()
        time.sleep(2.0)  # the server sees the clients gone
        return {"case": case, "clients": clients, "seconds": seconds, "mb_in": round(sum(written) / 2**20, 1),
                "errors_sent": errors, "rss_before_mb": round(before / 1024, 1),
                "peak_growth_mb": round((peak - before) / 1024, 1), "rss_after_mb": round(rss_kb(pid) / 1024, 1)}
    finally:
        if bridge is not None:
            bridge.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.unread", description=__doc__.split("\n\n")[0])
    parser.add_argument("--amqp-url", default=os.environ.get("STOMP_BRIDGE_TEST_AMQP_URL",
                                                             "amqp://guest:guest@127.0.0.1:5672/"))
    parser.add_argument("--plugin-port", type=int, default=61613)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--only", default=",".join(CASES), help=f"comma-separated cases: {','.join(CASES)}")
    args = parser.parse_args()
    print("| case | clients | s | MB written into socket buffers | ERRORs sent | RSS MB before | peak growth MB | RSS MB after |")
    print("|---|---|---|---|---|---|---|---|")
    for case in args.only.split(","):
        r = run_case(case, args.amqp_url, args.plugin_port, args.clients, args.seconds)
        errors = "-" if r["errors_sent"] is None else f"{int(r['errors_sent']):,}"
        print(f"| {case} | {r['clients']} | {r['seconds']:g} | {r['mb_in']} | {errors} | {r['rss_before_mb']} | "
              f"{r['peak_growth_mb']} | {r['rss_after_mb']} |", flush=True)


if __name__ == "__main__":
    main()
