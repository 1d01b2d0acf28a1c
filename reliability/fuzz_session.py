"""Fuzzing whole sessions: random and mutated frame sequences over real connections.

Each session is a seeded random script: usually a CONNECT (valid or mutated),
then frames built from pools of commands, destinations and headers that reach
every handler (SEND, SUBSCRIBE with queue arguments, ACK/NACK ids, transactions,
temp queues, receipts, bad values), the byte stream sometimes mutated, cut into
random chunks, and the socket ended by a close, a reset or the bridge.

What must hold: every frame the bridge sends parses; nothing follows an ERROR
and the bridge closes after it; the bridge stays up, logs no unexpected
exception (only protocol errors: StompError) and a well-behaved client on the
same bridge keeps its round trips going. Everything lives in a throwaway vhost.
"""

from __future__ import annotations

import asyncio
import random
import time

from stomp_bridge.protocol.errors import StompError
from stomp_bridge.protocol.frames import Frame, serialize
from testkit.bridgeproc import BridgeProcess
from testkit.management import Management
from testkit.stomp import Closed, StompClient

from .fuzz_parser import mutate
from .probe import Probe, summary

COMMANDS = ["SEND"] * 6 + ["SUBSCRIBE"] * 4 + ["UNSUBSCRIBE", "ACK", "ACK", "NACK", "BEGIN", "COMMIT", "ABORT",
                                                "DISCONNECT", "CONNECT", "STOMP", "BOGUS", "send"]


def _destination(rng: random.Random) -> str:
    k = rng.randrange(4)
    return rng.choice([
        f"/queue/fz-{k}", f"/topic/fz.{k}", "/topic/fz.*", f"/exchange/amq.direct/fz{k}", "/exchange/amq.fanout",
        f"/amq/queue/fz-{k}", f"/temp-queue/t{k}", "/reply-queue/nope", "/queue/", "/bogus/x", "", "/queue/a/b",
        "/exchange/missing-exchange/k", "/queue/" + "n" * 300, "/topic/" + "\u00e9" * 3, "/queue/%41",
        "/exchange/", "/amq/queue/", f"/queue/fz-{k}\\c", "/topic/" + "." * 50])


def _headers(rng: random.Random, command: str) -> dict[str, str]:
    h: dict[str, str] = {}
    if command in ("SEND", "SUBSCRIBE") or rng.random() < 0.1:
        h["destination"] = _destination(rng)
    choices = {
        "id": lambda: f"s{rng.randrange(4)}",
        "ack": lambda: rng.choice(["auto", "client", "client-individual", "bogus", ""]),
        "receipt": lambda: f"r{rng.randrange(1000)}",
        "transaction": lambda: f"t{rng.randrange(3)}",
        "persistent": lambda: rng.choice(["true", "false", "yes"]),
        "reply-to": lambda: rng.choice(["/temp-queue/rt", "/queue/fz-0", "/bogus"]),
        "prefetch-count": lambda: rng.choice(["0", "1", "10", "-1", "x", "99999999999"]),
        "x-queue-type": lambda: rng.choice(["classic", "quorum", "stream", "bogus"]),
        "durable": lambda: rng.choice(["true", "false"]),
        "auto-delete": lambda: rng.choice(["true", "false"]),
        "exclusive": lambda: rng.choice(["true", "false"]),
        "x-message-ttl": lambda: rng.choice(["1000", "-5", "abc", "9" * 30]),
        "x-max-length": lambda: rng.choice(["1", "0", "x"]),
        "x-dead-letter-exchange": lambda: rng.choice(["", "amq.fanout", "nope"]),
        "priority": lambda: rng.choice(["1", "300", "-1", "x"]),
        "expiration": lambda: rng.choice(["1000", "-1", "abc", "0"]),
        "content-type": lambda: rng.choice(["text/plain", "application/octet-stream", ""]),
        "message-id": lambda: rng.choice(["m1", ""]),
        "x-stream-offset": lambda: rng.choice(["first", "last", "next", "offset=5", "timestamp=1", "bogus"]),
        "requeue": lambda: rng.choice(["true", "false", "maybe"]),
        "selector": lambda: "x",
        "timestamp": lambda: rng.choice(["1", "-1", "x"]),
        "x-overflow": lambda: rng.choice(["drop-head", "reject-publish", "bogus"]),
        "heart-beat": lambda: rng.choice(["0,0", "10,10", "x", "1,"]),
        "accept-version": lambda: rng.choice(["1.0", "1.1", "1.2", "1.0,1.1,1.2", "2.0", ""]),
        "host": lambda: rng.choice(["/", "missing-vhost"]),
    }
    for name in rng.sample(list(choices), rng.randrange(5)):
        h[name] = choices[name]()
    if command in ("ACK", "NACK"):
        h[rng.choice(["id", "message-id"])] = rng.choice(
            ["T_s0@@session@@1", "x", "", "T_s1@@S@@99999999999999999999", "Q_/queue/fz-0@@s@@2", "@@@@"])
    if rng.random() < 0.05:
        h["content-length"] = rng.choice(["0", "5", "-1", "x", "999999999"])
    if rng.random() < 0.05:
        h["x-" + "k" * rng.randrange(1, 100)] = "v" * rng.randrange(0, 500)
    if rng.random() < 0.03:  # over RabbitMQ's frame_max (128 KiB) together: as message headers or queue arguments
        for name in ("big", "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-overflow"):
            h[name] = "v" * 40_000
    return h


def script(rng: random.Random, vhost: str) -> bytes:
    """One session's bytes."""
    parts = []
    if rng.random() < 0.9:
        connect = {"accept-version": rng.choice(["1.2", "1.1", "1.0", "1.0,1.1,1.2"]), "host": vhost,
                   "login": "guest", "passcode": "guest"}
        if rng.random() < 0.2:
            connect["heart-beat"] = rng.choice(["0,0", "1000,1000", "0,500"])
        parts.append(serialize(Frame(rng.choice(["CONNECT", "STOMP"]), connect), "1.0"))
    for _ in range(rng.randrange(1, 12)):
        command = rng.choice(COMMANDS)
        body = rng.randbytes(rng.choice([0, 0, 3, 100, 5000]))
        try:
            parts.append(serialize(Frame(command, _headers(rng, command), body), "1.2"))
        except ValueError:
            continue
        if rng.random() < 0.1:
            parts.append(b"\n" * rng.randrange(1, 4))
    data = b"".join(parts)
    if rng.random() < 0.3:
        data = mutate(rng, data, parts or [data])
    return data


# ERRORs after which the bridge always closes, as the plugin does (a failed login, a malformed
# frame, a channel error); after the others (the plugin's error/3: a refused frame) the
# connection goes on and more frames may follow. "Processing error" is either.
CLOSING_ERRORS = frozenset((
    "AMQP channel died", "Bad CONNECT", "Version mismatch", "Duplicated subscription identifier",
    "Too many subscriptions",
    "Message rejected", "Broker unavailable", "Broker connection lost", "Connect timeout",
    "Heart-beat timeout", "Idle timeout", "Server shutdown", "Invalid frame", "Invalid command",
    "Too many headers", "Header too long", "Invalid content-length", "Frame too large",
    "Missing frame terminator", "Invalid escape sequence",
))


def _closes(message: str | None) -> bool:
    # RabbitMQ's own refusals come as its error names: not_found, access_refused, ...
    return message in CLOSING_ERRORS or (message or "").islower()


async def session(port: int, vhost: str, rng: random.Random, tally: dict) -> None:
    data = script(rng, vhost)
    tally["bytes"] += len(data)
    try:
        client = await StompClient.open(port)
    except OSError:
        tally["refused"] += 1
        return
    try:
        i = 0
        while i < len(data):
            step = rng.choice([1, 7, 64, 4096, len(data)])
            client.send_raw(data[i : i + step])
            i += step
            if rng.random() < 0.2:
                await asyncio.sleep(0.005)
        await client.drain()
        frames: list[Frame] = []
        while True:
            try:
                frames.append(await client.next(rng.choice([0.05, 0.3, 1.0])))
            except (asyncio.TimeoutError, TimeoutError):
                break
            if frames[-1].command == "ERROR" and _closes(frames[-1].headers.get("message")):
                frames.extend(await client.until_closed(10))
                break
        errors = [n for n, f in enumerate(frames) if f.command == "ERROR"]
        followed = [frames[n].headers.get("message") for n in errors if n != len(frames) - 1]
        if any(_closes(message) for message in followed):
            raise AssertionError(f"frames after a closing ERROR: {[f.command for f in frames]}")
        if errors:
            tally["errors"] += 1
        tally["frames_back"] += len(frames)
    except Closed:
        tally["closed"] += 1
    except (ConnectionError, OSError):
        tally["reset"] += 1
    except StompError as exc:
        raise AssertionError(f"the bridge sent bytes that do not parse: {exc}") from exc
    finally:
        if rng.random() < 0.5:
            client.abort()
        else:
            await client.close()


async def run(amqp_url: str, mgmt: Management, sessions: int, seed: int = 1, parallel: int = 4) -> dict:
    vhost = mgmt.temporary_vhost()
    # Every session on one shared AMQP connection with the probe: what one session sends must
    # never cost the connection (a connection error would end the probe too).
    bridge = BridgeProcess(amqp_url, {"connect_timeout": 3, "amqp_min_connections_per_login": 1}).start()
    probe = await Probe(bridge.port, vhost).start()
    tally = {"sessions": 0, "bytes": 0, "errors": 0, "closed": 0, "reset": 0, "refused": 0, "frames_back": 0}
    started = time.monotonic()
    rss_before = bridge.rss_kb()
    try:
        async def lane(k: int) -> None:
            for n in range(k, sessions, parallel):
                rng = random.Random(seed * 1_000_003 + n)
                await session(bridge.port, vhost, rng, tally)
                tally["sessions"] += 1
                if n % 50 == 0:
                    probe.check()
                    if not bridge.alive():
                        raise AssertionError(f"bridge died at session {n}:\n{bridge.log_tail()}")

        await asyncio.gather(*(lane(k) for k in range(parallel)))
        probe.check()
        stats = bridge.fresh_stats()
        tally["bridge_rss_mb"] = (round(rss_before / 1024, 1), round(bridge.rss_kb() / 1024, 1))
        if stats["log_errors"]:
            raise AssertionError(f"unexpected errors in the bridge: {stats}\n{bridge.log_tail()}")
    finally:
        await probe.stop()
        bridge.stop()
        await asyncio.to_thread(mgmt.delete_vhost, vhost)
    tally["seconds"] = round(time.monotonic() - started, 1)
    tally["probe"] = summary(probe.samples)
    return tally
