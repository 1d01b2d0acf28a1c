"""The hostile mode: every attack at once, beside a resending publisher and a consumer.

    python -m reliability --only siege                                  # the bridge, a child process
    python -m reliability --only siege --siege-targets bridge,native    # and RabbitMQ's plugin

For the window, each attack keeps going, reconnecting whenever the server closes it:

- junk that earns an ERROR per frame, from clients that never read: before login, and after
  (bad commands, and SENDs to an unknown destination whose ERROR repeats its 32 kB name);
- receipted SENDs from clients that never read their RECEIPTs;
- subscribers that never read their MESSAGEs while a publisher feeds their topic;
- a transaction flood: SENDs of 1 MiB in an open transaction, up to 200 (the issue's), ABORT, again;
- a login flood: wrong passwords for one user, from its own address (127.0.0.1).

Meanwhile a resending publisher (:class:`.faults.ResendingProducer`) sends persistent messages to
a queue a consumer reads and acks, and login probes log in, once a second each, the attacked user
with its right password and another user (both users in service: each logged in before).
Reported: lost messages (must be 0), the server's RSS before, at its peak and after, and each
probe's time to CONNECTED. The bridge's peak must stay within :func:`rss_bound_mb`, derived from
its settings, and once the attackers are gone it must be back within AFTER_SLACK_MB of before.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import socket
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from collections.abc import Callable
from dataclasses import dataclass, field

from stomp_bridge import memory
from stomp_bridge.settings import Settings
from stomp_bridge.transport.connection import READ_SIZE
from testkit.bridgeproc import BridgeProcess, listener_pid, rss_kb
from testkit.flood import JUNK, login, read_frame, unread_socket, write_until_stalled
from testkit.management import Management
from testkit.stomp import ClientError, StompClient

from .broker import drain_ids, vhost_url
from .faults import ResendingProducer, Tally

# The bridge under siege: its defaults but for three bounds lowered, so that the bound on its RSS
# is tight enough for a short run to tell a bounded bridge from one that is not (without the
# write bound, junk floods add some 13 MB a second; without the byte bound, 200 SENDs of 1 MiB
# in a transaction hold 230 MB).
BRIDGE_SETTINGS: dict[str, object] = {
    "connect_timeout": 3,  # junk before login is closed, then aborted, within a short run
    "write_buffer_high": 256 * 1024,
    "max_transaction_bytes": 8 * 1024 * 1024,
    "auto_ack_window": 100,
}
ATTACKERS = {"junk before login": 3, "junk after login": 3, "RECEIPTs never read": 2,
             "MESSAGEs never read": 2, "transaction flood": 1, "login flood": 8}
MIB = 1024 * 1024
# A SEND to an unknown destination: its ERROR ("Unknown destination") repeats the 32 kB name and
# keeps the connection. Few frames, many bytes: what the bridge answers grows as fast as it reads.
ECHOED = b"SEND\ndestination:/nowhere/" + b"x" * 32000 + b"\n\n\0"
TX_SENDS = 200  # SENDs of 1 MiB per transaction, as in the issue
MESSAGE_SIZE = 16 * 1024  # fed to the subscribers that never read
SLACK_MB = 16.0  # the allocator's fragments, the well-behaved clients, the probes
# Once the attackers are gone the bridge is back within this of its RSS before them (memory.py
# gives back what glibc keeps free and what closed connections left): 46 -> 73 -> 66 MB without.
AFTER_SLACK_MB = 8.0
LOGIN_DEADLINE = 1.0  # a fresh login of either user must be in within this
BASELINE = 3.0  # seconds of logins before the attacks, for comparison


def rss_bound_mb(settings: Settings, attackers: dict[str, int] = ATTACKERS) -> float:
    """The most the attacks may add to the bridge's RSS, from its settings.

    Per connection that floods (all but the login flood's), what may be queued for it (2 x
    write_buffer_high: the mark, plus the answers of one fair share of frames, small here) and
    its unread chunk (READ_SIZE); per login-flood lane, its unread chunk and a CONNECT of at most
    max_frame_size_before_login (its one ERROR is small); per subscriber that never reads, its
    deliveries in flight (auto_ack_window x MESSAGE_SIZE); per transaction flood, what its
    transactions may hold (max_transaction_bytes) and the SEND being parsed (1 MiB, twice: the
    chunks, then the body); plus SLACK_MB for the allocator's fragments, the well-behaved
    clients and the probes.
    """
    flooding = sum(n for name, n in attackers.items() if name != "login flood")
    total = flooding * (2 * settings.write_buffer_high + READ_SIZE)
    total += attackers["login flood"] * (READ_SIZE + settings.max_frame_size_before_login)
    total += attackers["MESSAGEs never read"] * settings.auto_ack_window * MESSAGE_SIZE
    total += attackers["transaction flood"] * (settings.max_transaction_bytes + 2 * MIB)
    return round(total / MIB + SLACK_MB, 1)


# -- the server under attack -------------------------------------------------------------------

@dataclass
class Target:
    name: str
    port: int
    pid: int
    bridge: BridgeProcess | None = None
    samples: list[int] = field(default_factory=list)  # RSS kB, every 0.2 s

    def rss_kb(self) -> int:
        return rss_kb(self.pid)

    async def sample(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.samples.append(self.rss_kb())
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.2)


# -- attacks -------------------------------------------------------------------------------------

@dataclass
class Attack:
    connections: int = 0  # opened
    bytes: int = 0  # written
    frames: Counter = field(default_factory=Counter)  # what came back, where read


def _never_reading(port: int, stop: threading.Event, attack: Attack, opening: Callable[[socket.socket], None],
                   data: bytes) -> None:
    """One lane (a thread): open, ``opening`` (a login, a SUBSCRIBE), then write ``data`` for as
    long as the server reads it, never reading; again whenever the server closes."""
    while not stop.is_set():
        try:
            sock = unread_socket(port)
        except OSError:
            stop.wait(0.2)
            continue
        attack.connections += 1
        try:
            opening(sock)
            if not data:
                stop.wait()  # it only ever reads what it must to be subscribed
            offset = 0
            while not stop.is_set():
                written = write_until_stalled(sock, data, 1 << 40, stall=0.5, offset=offset)
                attack.bytes += written
                offset = (offset + written) % len(data)
        except OSError as exc:
            attack.frames[f"closed by the server ({type(exc).__name__})"] += 1
        finally:
            sock.close()


def _logged_in(vhost: str, then: bytes = b"") -> Callable[[socket.socket], None]:
    def opening(sock: socket.socket) -> None:
        login(sock, vhost)
        if then:
            sock.sendall(then)
            read_frame(sock)  # the SUBSCRIBE's RECEIPT: the last frame this client reads

    return opening


async def _transaction_flood(port: int, vhost: str, stop: asyncio.Event, attack: Attack) -> None:
    """BEGIN, then up to TX_SENDS SENDs of 1 MiB (a receipted BEGIN of another transaction after
    every eighth shows an ERROR in order), ABORT, again. Reads what it is sent."""
    body = b"t" * MIB
    while not stop.is_set():
        try:
            client = await StompClient.connect(port, vhost, timeout=10)
        except (ClientError, OSError, asyncio.TimeoutError):
            await asyncio.sleep(0.2)
            continue
        attack.connections += 1
        try:
            while not stop.is_set():
                client.send("BEGIN", {"transaction": "t"})
                for i in range(TX_SENDS):
                    client.send("SEND", {"destination": "/topic/siege-tx", "transaction": "t"}, body)
                    attack.bytes += MIB
                    await client.drain()
                    if i % 8 == 7 or i == TX_SENDS - 1:
                        client.send("BEGIN", {"transaction": "sync", "receipt": f"sync{i}"})
                        refused = False
                        while True:
                            frame = await client.next(30)
                            if frame.command == "RECEIPT":
                                break
                            attack.frames[f"{frame.command} {frame.headers.get('message', '')}"] += 1
                            refused = True
                        if refused or stop.is_set():
                            break
                client.send("ABORT", {"transaction": "t"})
        except (ClientError, OSError, asyncio.TimeoutError):
            attack.frames["closed by the server"] += 1
        finally:
            client.abort()


async def _login_flood(port: int, vhost: str, user: str, stop: asyncio.Event, attack: Attack) -> None:
    """Wrong passwords for ``user`` from 127.0.0.1, as fast as the answers come."""
    while not stop.is_set():
        try:
            client = await StompClient.open(port, timeout=10)
        except OSError:
            await asyncio.sleep(0.2)
            continue
        attack.connections += 1
        try:
            client.send("CONNECT", {"accept-version": "1.2", "host": vhost, "login": user,
                                    "passcode": uuid.uuid4().hex})
            frame = await client.next(30)
            throttled = "failed logins" in frame.body.decode("utf-8", "replace")
            attack.frames[f"{frame.command} {frame.headers.get('message', '')}"
                          + (" (throttled)" if throttled else "")] += 1
        except (ClientError, OSError, asyncio.TimeoutError):
            attack.frames["closed without an answer"] += 1
        finally:
            client.abort()


async def _feed_topic(port: int, vhost: str, topic: str, stop: asyncio.Event, attack: Attack) -> None:
    """Receipted SENDs of MESSAGE_SIZE to ``topic``, 32 in flight, for the subscribers that never read."""
    body = b"m" * MESSAGE_SIZE
    while not stop.is_set():
        try:
            client = await StompClient.connect(port, vhost, timeout=10)
        except (ClientError, OSError, asyncio.TimeoutError):
            await asyncio.sleep(0.2)
            continue
        try:
            n = 0
            while not stop.is_set():
                for _ in range(32):
                    n += 1
                    client.send("SEND", {"destination": topic, "receipt": str(n)}, body)
                await client.drain()
                while (await client.next(30)).headers.get("receipt-id") != str(n):
                    pass
                attack.frames["MESSAGEs fed"] += 32
        except (ClientError, OSError, asyncio.TimeoutError):
            pass
        finally:
            client.abort()


# -- what is measured meanwhile -----------------------------------------------------------------

@dataclass
class Logins:
    seconds: list[float] = field(default_factory=list)  # to CONNECTED, of those that got in
    refused: list[str] = field(default_factory=list)

    @property
    def got_in(self) -> bool:
        """Every login got in, and as a rule within LOGIN_DEADLINE (the median: on a 2-core
        machine shared with other work, a login now and then waits for a core, through the
        plugin as through the bridge). A user locked out is refused; a starved one, slow."""
        if not self.seconds or self.refused:
            return False
        return sorted(self.seconds)[len(self.seconds) // 2] <= LOGIN_DEADLINE

    def summary(self) -> dict:
        return {"tries": len(self.seconds) + len(self.refused), "in": len(self.seconds),
                "in_within_1s": sum(1 for s in self.seconds if s <= LOGIN_DEADLINE),
                "max_s": round(max(self.seconds), 3) if self.seconds else None,
                "median_s": round(sorted(self.seconds)[len(self.seconds) // 2], 3) if self.seconds else None,
                "refused": Counter(self.refused).most_common(3), "got_in": self.got_in}


def probe_logins(port: int, vhost: str, user: str, password: str, seconds: float) -> Logins:
    """A fresh login once a second for ``seconds``: its time to CONNECTED, or why it was refused.

    Run in a process of its own (see :func:`_siege`), with blocking sockets: the harness's own
    event loop and threads, busy with the attacks, must not be what is measured.
    """
    logins = Logins()
    end = time.monotonic() + seconds
    frame = (f"CONNECT\naccept-version:1.2\nhost:{vhost}\nlogin:{user}\npasscode:{password}\n"
             "heart-beat:0,0\n\n\0").encode()
    while time.monotonic() < end:
        started = time.monotonic()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
                sock.sendall(frame)
                reply = read_frame(sock, timeout=15)
                took = time.monotonic() - started
                if reply.startswith(b"CONNECTED"):
                    logins.seconds.append(took)
                    sock.sendall(b"DISCONNECT\n\n\0")
                else:
                    head, _, body = reply.partition(b"\n\n")
                    message = next((line[8:] for line in head.split(b"\n") if line.startswith(b"message:")), b"")
                    logins.refused.append(f"{message.decode()}: {body[:100].decode('utf-8', 'replace')}")
        except OSError as exc:
            logins.refused.append(type(exc).__name__)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
    return logins


async def _consume(port: int, vhost: str, queue: str, done: asyncio.Event, acked: Counter) -> None:
    """Acks every message of ``queue`` (client-individual), reconnecting after any failure, until
    ``done`` and a second without a message."""
    while True:
        try:
            client = await StompClient.connect(port, vhost, timeout=10)
        except (ClientError, OSError, asyncio.TimeoutError):
            await asyncio.sleep(0.2)
            continue
        try:
            client.send("SUBSCRIBE", {"destination": f"/queue/{queue}", "id": "c", "ack": "client-individual",
                                      "prefetch-count": "100"})
            while True:
                try:
                    frame = await client.next(1.0)
                except asyncio.TimeoutError:
                    if done.is_set():
                        return
                    continue
                if frame.command != "MESSAGE":
                    raise ClientError(f"consumer got {frame.command} {frame.headers}")
                client.send("ACK", {"id": frame.headers["ack"]})
                acked[frame.headers["msg-id"]] += 1
        except (ClientError, OSError):
            pass
        finally:
            client.abort()


# -- the run -------------------------------------------------------------------------------------

async def run(amqp_url: str, mgmt: Management, seconds: float, target: str = "bridge",
              native_port: int = 61613, settle: float = 20.0) -> dict:
    vhost = mgmt.temporary_vhost("siege")
    tag = uuid.uuid4().hex[:8]
    victim, other = (f"siege-victim-{tag}", "victim-pw"), (f"siege-other-{tag}", "other-pw")
    for user, password in (victim, other):
        mgmt.create_user(user, password)
        mgmt.set_permissions(user, vhost)
    bridge = None
    try:
        if target == "bridge":
            bridge = BridgeProcess(amqp_url, dict(BRIDGE_SETTINGS)).start()
            server = Target("bridge", bridge.port, bridge.pid, bridge)
        else:
            server = Target(f"RabbitMQ's plugin (port {native_port})", native_port, listener_pid(native_port))
        return await _siege(server, amqp_url, vhost, seconds, victim, other, settle)
    finally:
        if bridge is not None:
            bridge.stop()
        for user, _ in (victim, other):
            mgmt.delete_user(user)
        mgmt.delete_vhost(vhost)


async def _siege(server: Target, amqp_url: str, vhost: str, seconds: float, victim: tuple[str, str],
                 other: tuple[str, str], settle: float) -> dict:
    port = server.port
    queue = f"siege-{uuid.uuid4().hex[:8]}"
    topic = f"/topic/siege-m-{uuid.uuid4().hex[:8]}"
    sampling, attacking, publishing, consumed = asyncio.Event(), asyncio.Event(), asyncio.Event(), asyncio.Event()
    halt = threading.Event()  # the threads' attacking
    tally, acked = Tally(), Counter()
    attacks = {name: Attack() for name in ATTACKERS}
    sampler = asyncio.create_task(server.sample(sampling))
    producer = ResendingProducer(port, vhost, queue, publishing, tally, "siege", window=16, silence=20.0)
    well_behaved = [asyncio.create_task(producer.run(asyncio.get_running_loop().time() + seconds + 120)),
                    asyncio.create_task(_consume(port, vhost, queue, consumed, acked))]
    loop = asyncio.get_running_loop()
    probes = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))
    # Users in service, each logged in before; how long their logins take unattacked, beside the
    # well-behaved clients, on this machine as loaded as it is now.
    baseline = await asyncio.gather(*(loop.run_in_executor(probes, probe_logins, port, vhost, *user, BASELINE)
                                      for user in (victim, other)))
    before = server.rss_kb()
    if server.bridge is not None:
        server.bridge.reset_peak_rss()
    started = time.monotonic()
    cpu_before = _cpu_seconds(server.pid)
    receipts = b"".join(f"SEND\ndestination:/topic/siege-r\nreceipt:r{i}\n\nx\0".encode() for i in range(512))
    subscribe = (f"SUBSCRIBE\ndestination:{topic}\nid:s\nreceipt:s\nx-max-length:2000\n\n\0").encode()
    lanes = (
        [("junk before login", lambda sock: None, JUNK * 4096)] * ATTACKERS["junk before login"]
        + [("junk after login", _logged_in(vhost), ECHOED * 8 + JUNK * 1024)] * ATTACKERS["junk after login"]
        + [("RECEIPTs never read", _logged_in(vhost), receipts)] * ATTACKERS["RECEIPTs never read"]
        + [("MESSAGEs never read", _logged_in(vhost, subscribe), b"")] * ATTACKERS["MESSAGEs never read"]
    )
    pool = ThreadPoolExecutor(len(lanes), thread_name_prefix="siege")  # all at once: a lane never returns early
    threads = [loop.run_in_executor(pool, _never_reading, port, halt, attacks[name], opening, data)
               for name, opening, data in lanes]
    tasks = [
        asyncio.create_task(_feed_topic(port, vhost, topic, attacking, attacks["MESSAGEs never read"])),
        *(asyncio.create_task(_transaction_flood(port, vhost, attacking, attacks["transaction flood"]))
          for _ in range(ATTACKERS["transaction flood"])),
        *(asyncio.create_task(_login_flood(port, vhost, victim[0], attacking, attacks["login flood"]))
          for _ in range(ATTACKERS["login flood"])),
    ]
    probing = [loop.run_in_executor(probes, probe_logins, port, vhost, *user, seconds) for user in (victim, other)]
    try:
        logins = dict(zip(("attacked user", "other user"), await asyncio.gather(*probing)))
    finally:
        probes.shutdown()
        attacking.set()
        halt.set()
        await asyncio.gather(*tasks, *threads, return_exceptions=True)
        pool.shutdown()
    attack_seconds = time.monotonic() - started
    cpu_during = _cpu_seconds(server.pid) - cpu_before

    peak = max(server.samples + [server.rss_kb()])
    if server.bridge is not None:
        peak = max(peak, server.bridge.rss_kb("VmHWM"))
    publishing.set()
    await well_behaved[0]  # every SEND receipted
    consumed.set()
    await well_behaved[1]
    after, connections = await asyncio.to_thread(_settled, server, settle, before)
    sampling.set()
    await sampler
    ids = await drain_ids(vhost_url(amqp_url, vhost), queue)
    expected = {f"siege-{n}" for n in range(producer.next)}
    found = set(acked) | set(ids)
    result = {
        "target": server.name,
        "seconds": round(attack_seconds, 1),
        "cpu_share": round(cpu_during / attack_seconds, 2),  # of one core, during the attacks
        "sent": tally.sent, "sends": tally.sends, "reconnects": tally.reconnects,
        "consumed": sum(acked.values()), "left_in_queue": len(ids),
        "lost": len(expected - found),
        "duplicated": sum(acked.values()) + len(ids) - len(found & expected),
        "rss_mb": {"before": round(before / 1024, 1), "peak": round(peak / 1024, 1), "after": round(after / 1024, 1)},
        "connections_after": connections,
        "rss_every_5s_mb": [round(kb / 1024, 1) for kb in server.samples[::25]],
        "logins": {name: probe.summary() for name, probe in logins.items()},
        "logins_unattacked": {name: probe.summary() for name, probe in zip(("attacked user", "other user"), baseline)},
        "attacks": {name: {"connections": a.connections, "mb_written": round(a.bytes / MIB, 1),
                           "answers": dict(a.frames)} for name, a in attacks.items()},
    }
    if server.bridge is not None:
        result["bound_mb"] = round(before / 1024 + rss_bound_mb(Settings(**BRIDGE_SETTINGS)), 1)
        stats = server.bridge.fresh_stats()
        result["log_errors"] = stats["log_errors"]
        result["last_error"] = stats["last_error"]
        result["reads_held"] = server.bridge.metric("stomp_bridge_reads_held_total")
        result["aborted"] = server.bridge.metric("stomp_bridge_connections_aborted_total")
    return result


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process (/proc/pid/stat fields 14 and 15)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def _settled(server: Target, timeout: float, before_kb: int) -> tuple[int, int | None]:
    """RSS once the attackers' connections are gone (the bridge's count is 0), or after ``timeout``;
    then, for the bridge, the lowest RSS until it is back within AFTER_SLACK_MB of ``before_kb``
    or the bridge has had two chances to give memory back (memory.TICK each)."""
    if server.bridge is None:
        time.sleep(min(timeout, 5.0))  # the plugin's connections: not counted from outside
        return server.rss_kb(), None
    deadline = time.monotonic() + timeout
    while True:
        connections = server.bridge.fresh_stats()["connections"]
        if connections == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    lowest = server.rss_kb()
    released = time.monotonic() + 2 * memory.TICK + 2.0
    while lowest > before_kb + AFTER_SLACK_MB * 1024 and time.monotonic() < released:
        time.sleep(0.2)
        lowest = min(lowest, server.rss_kb())
    return lowest, connections


def login_problems(logins: dict) -> list[str]:
    """Locked out: a fresh login of either user refused. Starved: the attacked user's median more
    than LOGIN_DEADLINE over the other user's, measured side by side in the same seconds. Not the
    median against LOGIN_DEADLINE itself: on a 2-core machine shared with other work every login
    can take over a second, the unattacked user's as the attacked one's (seen in CI: both 1.6 s),
    which is the machine's speed, not a lockout. The report shows that figure (``in_within_1s``)."""
    out = []
    for name, probe in logins.items():
        if not probe["in"] or probe["in"] < probe["tries"]:
            out.append(f"{name}: {probe['tries'] - probe['in']} of {probe['tries']} fresh logins refused: {probe}")
    attacked, other = logins["attacked user"], logins["other user"]
    if attacked["in"] and other["in"] and attacked["median_s"] > other["median_s"] + LOGIN_DEADLINE:
        out.append(f"attacked user's logins starved: median {attacked['median_s']} s against the other "
                   f"user's {other['median_s']} s in the same run")
    return out


def problems(result: dict) -> list[str]:
    """What the short run in CI asserts: nothing lost, RSS within the bound, both users in (login_problems)."""
    out = []
    if result["lost"]:
        out.append(f"{result['lost']} receipted messages lost")
    if "bound_mb" in result and result["rss_mb"]["peak"] > result["bound_mb"]:
        out.append(f"RSS peak {result['rss_mb']['peak']} MB over the bound {result['bound_mb']} MB")
    rss = result["rss_mb"]
    if "bound_mb" in result and rss["after"] > rss["before"] + AFTER_SLACK_MB:
        out.append(f"RSS after the attacks {rss['after']} MB, not given back: more than {AFTER_SLACK_MB:g} MB "
                   f"over the {rss['before']} MB before them")
    out += login_problems(result["logins"])
    if result.get("log_errors"):
        out.append(f"bridge logged {result['log_errors']} errors: {result['last_error']}")
    if result.get("connections_after"):
        out.append(f"bridge still holds {result['connections_after']} connections after the attack")
    return out

