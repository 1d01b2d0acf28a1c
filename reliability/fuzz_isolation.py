"""No client's frame may end another's session: an attacker beside neighbours that share its
AMQP connections (issue 39).

A bridge (a child process) runs with its AMQP connections shared: ``amqp_min_connections_per_login=1``
(every session of the login on one connection, and one publishing connection), or the default pooling
with more neighbours than ``amqp_min_connections_per_login`` so that the attacker's session joins a
connection a neighbour uses. The neighbours are well-formed sessions of the same login, each
subscribed to a queue of its own (ack:auto, client-individual, a topic) and doing round trips through
RabbitMQ all the time. One more session of the same login, the attacker, runs one case after another:
a crafted frame sequence (issue 39's table, the refusals python -m reliability.hard_errors found reachable, SECURITY.md) or a random one
drawn from every command, every header the bridge reads and every destination kind, against a stream,
a quorum and a classic queue made beforehand with messages in them.

After each case every neighbour must complete a round trip again (within ``STALL_SECONDS``), none may
have got an ERROR or lost its connection, and the bridge's count of shared AMQP connections RabbitMQ
closed (``stomp_bridge_amqp_connections_closed_by_rabbitmq``, by reply code) must not have grown: a
case that breaks any of these is a failure, reported with its frames; the neighbours start afresh and
the run goes on. The same attacker scripts run against the broker's own STOMP plugin (each of its
STOMP connections has an AMQP connection of its own, so nothing is shared there) and the attacker's
ERROR ``message`` headers are compared, case by case: differences are reported, not failed.

Everything is deterministic by seed (the cases, their order, their names; the vhost is a throwaway one).
"""

from __future__ import annotations

import asyncio
import random
import re
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiormq

from stomp_bridge.protocol import features, resume
from stomp_bridge.protocol.frames import Frame
from testkit.bridgeproc import BridgeProcess
from testkit.management import Management
from testkit.stomp import Closed, StompClient

STALL_SECONDS = 20.0  # a neighbour's round trip must complete within this (a shared 2-core machine)
CASE_SECONDS = 20.0  # an attack script's bound (its waits are shorter; a stalled bridge ends it here)
PREMADE_MESSAGES = 20
BIG_MESSAGES = 600  # more than client_ack_window (500): the windowed subscription grows a consumer

# Bridge settings per variant; each runs in a bridge of its own.
FEATURES = {"retained_messages": "true", "resubscribe_on_cancel": "true", "resubscribe_timeout": "3",
            "apollo_exclusive": "true", "headers_bindings": "true", "redeliveries_header": "redeliveries"}
VARIANTS: dict[str, dict[str, Any]] = {
    "shared": {"amqp_min_connections_per_login": 1},
    "shared+features": {"amqp_min_connections_per_login": 1, **FEATURES},
    "pooled+features": dict(FEATURES),  # the default pooling: 16 connections first, then 64 sessions each
}
POOLED_NEIGHBOURS = 17  # past amqp_min_connections_per_login (16): the attacker shares a connection


# -- the attacker's scripts -----------------------------------------------------------------------

@dataclass(frozen=True)
class Names:
    """Queues made beforehand (shared by every case) and the prefix of a case's own names."""

    stream: str
    quorum: str
    classic: str
    big: str
    prefix: str  # per case and target: nothing one case makes is seen by another

    def own(self, suffix: str) -> str:
        return f"{self.prefix}-{suffix}"


Step = tuple  # ("frame", Frame) | ("await", command, seconds) | ("settle", "ACK"|"NACK", headers, seconds) | ("sleep", s)


@dataclass
class Case:
    name: str
    group: str  # "issue39 g<N>", "research", "random"
    build: Callable[[Names], list[Step]]
    needs: frozenset[str] = frozenset()  # bridge settings it needs (FEATURES' names)
    connect: Callable[[Names], dict[str, str]] | None = None  # extra CONNECT headers
    brokers: frozenset[str] | None = None  # where RabbitMQ would close the connection (None: everywhere)


def f(command: str, headers: dict[str, str], body: bytes = b"") -> Step:
    return ("frame", Frame(command, headers, body))


def stream_subscribe(dest: str, sub_id: str, ack: str, *, name: str | None = None, xqt: bool = False,
                     **extra: str) -> Step:
    headers = {"destination": dest, "id": sub_id, "ack": ack, "x-stream-offset": "first", "prefetch-count": "10"}
    if xqt:
        headers["x-queue-type"] = "stream"
    if name is not None:
        headers["x-stream-consumer-name"] = name
    headers.update(extra)
    return f("SUBSCRIBE", headers)


def crafted() -> list[Case]:
    """Issue 39's 22 sequences, then what reliability.hard_errors found reachable (SECURITY.md)."""
    cases: list[Case] = []

    # group 1 (12): NACK on a stream subscription (540 on 3.10)
    def nack_case(label: str, *, amq: bool, ack: str, name: bool, requeue: str | None = None, tx: bool = False):
        def build(n: Names) -> list[Step]:
            dest = f"/amq/queue/{n.stream}" if amq else f"/queue/{n.stream}"
            steps = [stream_subscribe(dest, "s1", ack, name=n.own("reader") if name else None, xqt=not amq),
                     ("await", "MESSAGE", 10.0)]
            extra = {} if requeue is None else {"requeue": requeue}
            if tx:
                steps.append(f("BEGIN", {"transaction": "tx1"}))
                extra["transaction"] = "tx1"
            steps.append(("settle", "NACK", extra, 10.0))
            if tx:
                steps.append(f("COMMIT", {"transaction": "tx1"}))
            return steps
        cases.append(Case(f"g1-nack-{label}", "issue39 g1", build, brokers=frozenset({"system"})))

    for amq in (True, False):
        for ack in ("client", "client-individual"):
            for name in (False, True):
                nack_case(f"{'amq' if amq else 'queue'}-{ack}{'-named' if name else ''}", amq=amq, ack=ack, name=name)
    nack_case("amq-requeue-false", amq=True, ack="client-individual", name=False, requeue="false")
    nack_case("queue-requeue-false", amq=False, ack="client", name=False, requeue="false")
    nack_case("amq-in-tx", amq=True, ack="client-individual", name=False, tx=True)
    nack_case("queue-named-in-tx", amq=False, ack="client", name=True, tx=True)

    # group 2 (4): ack:auto on a stream with a prefetch and a stream offset (540 everywhere)
    for label, extra in (("prefetch-count", {"prefetch-count": "10", "x-stream-offset": "first"}),
                         ("activemq-prefetch", {"activemq.prefetchSize": "10", "x-stream-offset": "first"}),
                         ("x-stream-offset", {"x-stream-offset": "offset=0", "prefetch-count": "1"}),
                         ("from-seq", {"from-seq": "0", "prefetch-count": "10"})):
        def build(n: Names, extra=extra) -> list[Step]:
            return [f("SUBSCRIBE", {"destination": f"/amq/queue/{n.stream}", "id": "s1", "ack": "auto", **extra}),
                    ("await", "MESSAGE", 3.0)]
        cases.append(Case(f"g2-autoack-{label}", "issue39 g2", build))

    # group 3 (2): browser:true on a stream (basic.get: 540)
    cases.append(Case("g3-browse-amq-stream", "issue39 g3", lambda n: [
        f("SUBSCRIBE", {"destination": f"/amq/queue/{n.stream}", "id": "b", "browser": "true"}), ("await", "MESSAGE", 3.0)]))
    cases.append(Case("g3-browse-queue-stream", "issue39 g3", lambda n: [
        f("SUBSCRIBE", {"destination": f"/queue/{n.stream}", "id": "b", "browser": "true", "x-queue-type": "stream"}),
        ("await", "MESSAGE", 3.0)]))

    # group 4: a client id that is a composite part's tag
    cases.append(Case("g4-composite-part-tag", "issue39 g4", lambda n: [
        f("SUBSCRIBE", {"destination": f"/queue/{n.own('q0')}", "id": "a@@part1", "receipt": "r1"}), ("await", "RECEIPT", 5.0),
        f("SUBSCRIBE", {"destination": f"/queue/{n.own('q1')},/queue/{n.own('q2')}", "id": "a", "receipt": "r2"}),
        ("await", "RECEIPT", 5.0)]))

    # group 5: a client id that is a window's tag, then a windowed subscription that grows
    cases.append(Case("g5-window-tag", "issue39 g5", lambda n: [
        f("SUBSCRIBE", {"destination": f"/queue/{n.own('w0')}", "id": "w@@window1", "receipt": "r1"}),
        ("await", "RECEIPT", 5.0),
        f("SUBSCRIBE", {"destination": f"/queue/{n.big}", "id": "w", "ack": "client"}),
        ("messages", BIG_MESSAGES - 50, 15.0)]))

    # group 6: the offset queue of (S, name) made a stream by a client, then a named subscription
    def offset_stream(n: Names) -> list[Step]:
        queue = resume.offset_queue(n.stream, n.own("name"))
        return [f("SEND", {"destination": f"/queue/{queue}", "x-queue-type": "stream", "receipt": "r1"}, b"5"),
                ("await", "RECEIPT", 5.0),
                stream_subscribe(f"/amq/queue/{n.stream}", "s1", "client", name=n.own("name")), ("await", "MESSAGE", 5.0)]
    cases.append(Case("g6-offset-queue-stream", "issue39 g6", offset_stream))

    # group 7: the retained queue of a topic made a stream by a client, then a topic subscription
    def retained_stream(n: Names) -> list[Step]:
        queue = features.retained_queue("amq.topic", n.own("t"))
        return [f("SEND", {"destination": f"/queue/{queue}", "x-queue-type": "stream", "receipt": "r1"}, b"x"),
                ("await", "RECEIPT", 5.0),
                f("SUBSCRIBE", {"destination": f"/topic/{n.own('t')}", "id": "t1", "receipt": "r2"}), ("await", "RECEIPT", 5.0)]
    cases.append(Case("g7-retained-queue-stream", "issue39 g7", retained_stream, needs=frozenset({"retained_messages"})))

    # -- research (hard-errors.md) ------------------------------------------------------------
    for label, value in (("bogus", "bogus"), ("empty", ""), ("negative", "-1h")):
        cases.append(Case(f"r-max-age-{label}-send", "research", lambda n, value=value: [
            f("SEND", {"destination": f"/queue/{n.own('s')}", "x-queue-type": "stream", "x-max-age": value,
                       "receipt": "r1"}, b"x"), ("await", "RECEIPT", 5.0)], brokers=frozenset({"4.0"})))
    cases.append(Case("r-max-age-subscribe", "research", lambda n: [
        f("SUBSCRIBE", {"destination": f"/queue/{n.own('s')}", "id": "x", "x-queue-type": "stream", "x-max-age": "1x1",
                        "prefetch-count": "1", "receipt": "r1"}), ("await", "RECEIPT", 5.0)], brokers=frozenset({"4.0"})))
    cases.append(Case("r-topic-stream-autoack-offset", "research", lambda n: [
        f("SUBSCRIBE", {"destination": f"/topic/{n.own('t')}", "id": "t", "x-queue-type": "stream", "durable": "true", "auto-delete": "false",
                        "x-stream-offset": "first", "receipt": "r1"}), ("await", "RECEIPT", 5.0)]))
    cases.append(Case("r-exchange-stream-nack", "research", lambda n: [
        f("SUBSCRIBE", {"destination": f"/exchange/amq.fanout/{n.own('k')}", "id": "e", "x-queue-type": "stream",
                        "durable": "true", "auto-delete": "false", "ack": "client", "prefetch-count": "5", "receipt": "r1"}),
        ("await", "RECEIPT", 5.0), f("SEND", {"destination": "/exchange/amq.fanout/x"}, b"m"), ("await", "MESSAGE", 5.0),
        ("settle", "NACK", {}, 5.0)], brokers=frozenset({"system"})))
    # an Artemis UNSUBSCRIBE deletes <client-id>.<name>: one part of the client's own composite
    cases.append(Case("r-resubscribe-deleted-composite", "research", lambda n: [
        f("SUBSCRIBE", {"destination": f"/queue/{n.own('d')}.a,/queue/{n.own('d')}.b", "id": "c", "receipt": "r1"}),
        ("await", "RECEIPT", 5.0),
        f("UNSUBSCRIBE", {"id": "gone", "durable-subscription-name": "a", "receipt": "r2"}), ("await", "RECEIPT", 5.0),
        ("sleep", 1.0), f("SEND", {"destination": f"/queue/{n.own('d')}.a", "receipt": "r3"}, b"m"),
        ("await", "RECEIPT", 5.0)], connect=lambda n: {"client-id": n.own("d")}))
    cases.append(Case("r-stream-named-nack", "research", lambda n: [
        stream_subscribe(f"/queue/{n.stream}", "s1", "client-individual", name=n.own("n2"), xqt=True),
        ("await", "MESSAGE", 10.0), ("settle", "NACK", {"requeue": "false"}, 5.0),
        f("UNSUBSCRIBE", {"id": "s1", "receipt": "u"}), ("await", "RECEIPT", 5.0),
        stream_subscribe(f"/queue/{n.stream}", "s2", "client", name=n.own("n2"), xqt=True), ("await", "MESSAGE", 10.0),
        ("settle", "NACK", {}, 5.0)], brokers=frozenset({"system"})))
    cases.append(Case("r-browse-stream-selector", "research", lambda n: [
        f("SUBSCRIBE", {"destination": f"/amq/queue/{n.stream}", "id": "b", "browser": "true", "selector": "a = 1"}),
        ("await", "MESSAGE", 3.0)]))
    cases.append(Case("r-scheduled-level-stream", "research", lambda n: [
        f("SEND", {"destination": f"/queue/stomp-bridge.delay.{n.own('lvl')}", "x-queue-type": "stream",
                   "receipt": "r1"}, b"x"), ("await", "RECEIPT", 5.0),
        f("SEND", {"destination": f"/queue/{n.own('sched')}", "AMQ_SCHEDULED_DELAY": "100", "receipt": "r2"}, b"m"),
        ("await", "RECEIPT", 5.0)]))
    cases.append(Case("r-big-queue-arguments", "research", lambda n: [
        f("SUBSCRIBE", {"destination": f"/queue/{n.own('big')}", "id": "x", "x-dead-letter-exchange": "v" * 60_000,
                        "x-dead-letter-routing-key": "v" * 60_000, "x-overflow": "v" * 30_000,
                        "receipt": "r1"}), ("await", "RECEIPT", 5.0)]))
    cases.append(Case("r-big-message-headers", "research", lambda n: [
        f("SEND", {"destination": f"/queue/{n.own('big')}", **{f"h{i}": "v" * 40_000 for i in range(4)},
                   "receipt": "r1"}), ("await", "RECEIPT", 5.0)]))
    cases.append(Case("r-reply-to-consumer-twice", "research", lambda n: [
        f("SUBSCRIBE", {"destination": "/amq/queue/amq.rabbitmq.reply-to", "id": "r1"}),
        f("SUBSCRIBE", {"destination": "/amq/queue/amq.rabbitmq.reply-to", "id": "r2", "receipt": "r"}),
        ("await", "RECEIPT", 5.0)]))
    cases.append(Case("r-same-id-after-error", "research", lambda n: [
        f("SUBSCRIBE", {"destination": f"/queue/{n.own('x')}", "id": "same", "receipt": "r1"}), ("await", "RECEIPT", 5.0),
        f("SUBSCRIBE", {"destination": f"/queue/{n.own('y')}", "id": "same", "receipt": "r2"}), ("await", "RECEIPT", 5.0)]))
    cases.append(Case("r-unsubscribe-resubscribe-stream", "research", lambda n: [
        stream_subscribe(f"/amq/queue/{n.stream}", "s", "client"), ("await", "MESSAGE", 10.0),
        f("UNSUBSCRIBE", {"id": "s"}), stream_subscribe(f"/amq/queue/{n.stream}", "s", "client", receipt="r"),
        ("await", "RECEIPT", 5.0)]))
    cases.append(Case("r-quorum-nack-loop", "research", lambda n: [
        f("SUBSCRIBE", {"destination": f"/amq/queue/{n.quorum}", "id": "q", "ack": "client-individual", "prefetch-count": "1"}),
        ("await", "MESSAGE", 10.0), ("settle", "NACK", {}, 5.0), ("await", "MESSAGE", 10.0), ("settle", "NACK", {}, 5.0),
        ("await", "MESSAGE", 10.0), ("settle", "ACK", {}, 5.0)]))
    cases.append(Case("r-stream-filter-classic", "research", lambda n: [
        f("SUBSCRIBE", {"destination": f"/amq/queue/{n.classic}", "id": "c", "x-stream-filter": "a",
                        "x-stream-match-unfiltered": "true", "receipt": "r"}), ("await", "RECEIPT", 5.0)]))
    return cases


# -- random scripts ------------------------------------------------------------------------------

COMMANDS = ["SEND"] * 5 + ["SUBSCRIBE"] * 5 + ["UNSUBSCRIBE", "ACK", "NACK", "BEGIN", "COMMIT", "ABORT", "SETTLE", "SETTLE"]


def random_destination(rng: random.Random, n: Names) -> str:
    k = rng.randrange(3)
    return rng.choice([
        f"/amq/queue/{n.stream}", f"/queue/{n.stream}", f"/amq/queue/{n.quorum}", f"/queue/{n.quorum}",
        f"/amq/queue/{n.classic}", f"/queue/{n.classic}", f"/queue/{n.own(f'q{k}')}", f"/topic/{n.own('t')}.{k}",
        f"/topic/{n.own('t')}.*", f"/exchange/amq.direct/{n.own('k')}{k}", "/exchange/amq.fanout", "/exchange/amq.headers",
        f"/exchange/{n.own('nox')}/k", f"/temp-queue/t{k}", f"/reply-queue/{n.own('r')}", f"/dsub/{n.own('d')}{k}",
        f"/queue/{n.own('q0')},/queue/{n.own('q1')}", f"/amq/queue/{n.stream},/queue/{n.own('q2')}",
        f"/topic/{n.own('t')}.0,/queue/{n.own('q0')}", f"/queue/{n.own('q0')},/amq/queue/{n.quorum}",
        "/temp-topic/x", "/queue/", "/bogus/x", f"/amq/queue/{n.own('missing')}", "/amq/queue/amq.rabbitmq.reply-to",
    ])


def random_headers(rng: random.Random, n: Names, command: str) -> dict[str, str]:
    h: dict[str, str] = {}
    if command in ("SEND", "SUBSCRIBE"):
        h["destination"] = random_destination(rng, n)
    pool: dict[str, Callable[[], str]] = {
        "id": lambda: rng.choice(["s0", "s1", "a@@part1", "w@@window1", "/x", "T_s0", "P1_s0", ""]),
        "ack": lambda: rng.choice(["auto", "client", "client-individual"]),
        "receipt": lambda: f"r{rng.randrange(100)}",
        "transaction": lambda: f"tx{rng.randrange(2)}",
        "prefetch-count": lambda: rng.choice(["0", "1", "10", "70000"]),
        "activemq.prefetchSize": lambda: rng.choice(["0", "-1", "5"]),
        "consumer-window-size": lambda: rng.choice(["0", "-1", "1024"]),
        "credit": lambda: rng.choice(["5", "5,1024", "0"]),
        "x-stream-offset": lambda: rng.choice(["first", "last", "next", "offset=0", "offset=3", "timestamp=1", "1h", "bogus"]),
        "from-seq": lambda: rng.choice(["0", "-1", "3"]),
        "include-seq": lambda: "seq",
        "x-stream-consumer-name": lambda: n.own(rng.choice(["c0", "c1"])),
        "durable-subscription-name": lambda: rng.choice(["d0", "d1"]),
        "activemq.subscriptionName": lambda: "d0",
        "subscription-type": lambda: rng.choice(["ANYCAST", "MULTICAST"]),
        "durable": lambda: rng.choice(["true", "false"]),
        "persistent": lambda: rng.choice(["true", "false"]),
        "auto-delete": lambda: rng.choice(["true", "false"]),
        "exclusive": lambda: rng.choice(["true", "false"]),
        "browser": lambda: "true",
        "browser-end": lambda: rng.choice(["true", "false"]),
        "selector": lambda: rng.choice(["a = 1", "color = 'red'", "bogus ("]),
        "x-queue-type": lambda: rng.choice(["classic", "quorum", "stream", "bogus"]),
        "x-queue-name": lambda: n.own("named"),
        "x-max-age": lambda: rng.choice(["1h", "bogus", ""]),
        "x-max-length": lambda: rng.choice(["1", "0", "-1"]),
        "x-max-length-bytes": lambda: rng.choice(["100", "-1"]),
        "x-max-priority": lambda: rng.choice(["5", "300"]),
        "x-message-ttl": lambda: rng.choice(["1000", "-5"]),
        "x-expires": lambda: rng.choice(["100000", "0"]),
        "x-dead-letter-exchange": lambda: rng.choice(["", "amq.fanout", n.own("nox")]),
        "x-dead-letter-routing-key": lambda: "k",
        "x-overflow": lambda: rng.choice(["drop-head", "reject-publish", "reject-publish-dlx", "bogus"]),
        "x-stream-max-segment-size-bytes": lambda: rng.choice(["1000000", "-1", "99999999999"]),
        "x-stream-filter-size-bytes": lambda: rng.choice(["16", "5"]),
        "x-stream-filter": lambda: rng.choice(["a", "a,b"]),
        "x-stream-match-unfiltered": lambda: rng.choice(["true", "false"]),
        "x-priority": lambda: rng.choice(["1", "-1", "127"]),
        "x-match": lambda: rng.choice(["all", "any", "bogus"]),
        "retain": lambda: rng.choice(["set", "remove", "true"]),
        "AMQ_SCHEDULED_DELAY": lambda: rng.choice(["100", "0", "-1", "x"]),
        "AMQ_SCHEDULED_TIME": lambda: rng.choice(["1", "99999999999999"]),
        "expires": lambda: rng.choice(["1", "0"]),
        "ttl": lambda: rng.choice(["1000", "-1"]),
        "priority": lambda: rng.choice(["1", "9", "300"]),
        "reply-to": lambda: rng.choice(["/temp-queue/rt", f"/queue/{n.own('q0')}", "/bogus"]),
        "content-type": lambda: rng.choice(["text/plain", "application/json"]),
        "mandatory": lambda: rng.choice(["true", "false"]),
        "requeue": lambda: rng.choice(["true", "false"]),
        "expiration": lambda: rng.choice(["1000", "abc"]),
        "a": lambda: rng.choice(["1", "2"]),
        "color": lambda: "red",
    }
    for name in rng.sample(sorted(pool), rng.randrange(6)):
        h[name] = pool[name]()
    if command in ("SUBSCRIBE", "UNSUBSCRIBE") and "id" not in h and rng.random() < 0.8:
        h["id"] = f"s{rng.randrange(3)}"
    if command in ("BEGIN", "COMMIT", "ABORT"):
        h["transaction"] = f"tx{rng.randrange(2)}"
    return h


def random_case(seed: int, index: int) -> Case:
    def build(n: Names) -> list[Step]:
        rng = random.Random(f"{seed}:{index}")
        steps: list[Step] = []
        for _ in range(rng.randrange(1, 9)):
            command = rng.choice(COMMANDS)
            if command == "SETTLE":
                extra = {"requeue": "false"} if rng.random() < 0.2 else {}
                if rng.random() < 0.2:
                    extra["transaction"] = "tx0"
                steps.append(("settle", rng.choice(["ACK", "NACK", "NACK"]), extra, 1.0))
                continue
            headers = random_headers(rng, n, command)
            body = rng.choice([b"", b"m", b"x" * 100])
            steps.append(f(command, headers, body))
            if command == "SUBSCRIBE" and rng.random() < 0.5:
                steps.append(("await", "MESSAGE", 1.0))
        return steps
    return Case(f"random-{seed}-{index}", "random", build)


# -- running a script -------------------------------------------------------------------------------

@dataclass
class Attack:
    frames: list[Frame]
    closed: bool
    refused_connect: bool = False

    def errors(self) -> list[Frame]:
        return [fr for fr in self.frames if fr.command == "ERROR"]


async def attack(port: int, vhost: str, case: Case, names: Names) -> Attack:
    client = await StompClient.open(port)
    frames: list[Frame] = []
    arrived = asyncio.Event()
    state = {"closed": False}

    async def reader() -> None:
        try:
            while True:
                frames.append(await client.next(3600))
                arrived.set()
        except Closed:
            pass
        except Exception:  # noqa: BLE001 - a reset: the end all the same
            pass
        state["closed"] = True
        arrived.set()

    task = asyncio.create_task(reader())

    async def wait_for(match: Callable[[Frame], bool], seconds: float, start: int = 0) -> Frame | None:
        deadline = asyncio.get_running_loop().time() + seconds
        seen = start
        while True:
            for fr in frames[seen:]:
                if match(fr):
                    return fr
            seen = len(frames)
            if state["closed"]:
                return None
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return None
            arrived.clear()
            try:
                await asyncio.wait_for(arrived.wait(), left)
            except TimeoutError:
                return None

    settled = 0  # MESSAGEs settled so far (in arrival order)
    awaited: dict[str, int] = {}  # frames of each command an "await" step has taken

    def count(command: str) -> int:
        return sum(fr.command == command for fr in frames)
    try:
        client.send("CONNECT", {"accept-version": "1.2", "host": vhost, "login": "guest", "passcode": "guest",
                                "heart-beat": "0,0", **(case.connect(names) if case.connect else {})})
        if await wait_for(lambda fr: fr.command in ("CONNECTED", "ERROR"), 10.0) is None or \
                frames[0].command != "CONNECTED":
            return Attack(frames, True, refused_connect=True)
        for step in case.build(names):
            if state["closed"]:
                break
            kind = step[0]
            if kind == "frame":
                try:
                    client.send(step[1])
                except ValueError:  # a header our own serializer cannot write: skip it
                    continue
            elif kind == "await":  # the next frame of that command not awaited before (or an ERROR)
                command = step[1]
                want = awaited.get(command, 0) + 1
                await wait_for(lambda fr, c=command, w=want: fr.command == "ERROR" or count(c) >= w, step[2])
                awaited[command] = min(want, count(command))
            elif kind == "messages":  # read until this many MESSAGEs came (a window that fills)
                await wait_for(lambda fr, want=step[1]: sum(x.command == "MESSAGE" for x in frames) >= want, step[2])
            elif kind == "settle":
                messages = [fr for fr in frames if fr.command == "MESSAGE"]
                if len(messages) <= settled:
                    await wait_for(lambda fr: fr.command == "MESSAGE", step[3], len(frames))
                    messages = [fr for fr in frames if fr.command == "MESSAGE"]
                if len(messages) > settled:
                    message = messages[settled]
                    settled += 1
                    ack = message.headers.get("ack") or message.headers.get("message-id", "")
                    client.send(step[1], {"id": ack, **step[2]})
            elif kind == "sleep":
                await asyncio.sleep(step[1])
            await client.drain()
        if not state["closed"]:
            client.send("DISCONNECT", {"receipt": "fz-end"})
            await client.drain()
            await wait_for(lambda fr: fr.command == "RECEIPT" and fr.headers.get("receipt-id") == "fz-end", 10.0)
        return Attack(list(frames), state["closed"])
    except (ConnectionError, OSError):
        return Attack(list(frames), True)
    finally:
        task.cancel()
        try:
            await task
        except BaseException:  # noqa: BLE001
            pass
        client.abort()


# -- the neighbours ---------------------------------------------------------------------------------

class Neighbour:
    """A well-formed session: SEND to its own destination, wait for the MESSAGE back, ACK it (in
    client-individual mode), again and again."""

    KINDS = ("auto", "client-individual", "topic")

    def __init__(self, port: int, vhost: str, index: int, interval: float) -> None:
        self.port, self.vhost, self.index, self.interval = port, vhost, index, interval
        self.kind = self.KINDS[index % len(self.KINDS)]
        tag = uuid.uuid4().hex[:10]
        self.dest = f"/topic/nb.{tag}" if self.kind == "topic" else f"/queue/nb-{tag}"
        self.client: StompClient | None = None
        self.round_trips = 0
        self.progress = asyncio.Event()
        self.error: str | None = None
        self._task: asyncio.Task | None = None
        self._stopping = False

    async def start(self) -> Neighbour:
        self.client = await StompClient.connect(self.port, self.vhost, read_timeout=STALL_SECONDS)
        ack = "client-individual" if self.kind == "client-individual" else "auto"
        self.client.send("SUBSCRIBE", {"destination": self.dest, "id": "nb", "ack": ack, "receipt": "sub"})
        got = await self.client.next(STALL_SECONDS)
        if got.command != "RECEIPT":
            raise AssertionError(f"neighbour {self.index} SUBSCRIBE answered {got.command} {got.headers}")
        self._task = asyncio.create_task(self._loop())
        return self

    async def _loop(self) -> None:
        client = self.client
        assert client is not None
        n = 0
        try:
            while not self._stopping:
                n += 1
                client.send("SEND", {"destination": self.dest, "nb": str(n)}, b"ping")
                while True:
                    got = await client.next(STALL_SECONDS, f"neighbour {self.index}'s MESSAGE {n}")
                    if got.command != "MESSAGE":
                        raise AssertionError(f"{got.command} {got.headers.get('message', '')}: "
                                             f"{got.body[:300].decode('utf-8', 'replace')}")
                    if self.kind == "client-individual":
                        client.send("ACK", {"id": got.headers["ack"]})
                    if got.headers.get("nb") == str(n):
                        break
                self.round_trips += 1
                self.progress.set()
                await asyncio.sleep(self.interval)
        except Exception as exc:  # noqa: BLE001 - what stopped it is the finding
            if not self._stopping:
                self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.progress.set()

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except BaseException:  # noqa: BLE001
                pass
        if self.client is not None:
            self.client.abort()


async def barrier(neighbours: list[Neighbour]) -> list[str]:
    """Every neighbour completes a round trip begun after now; what went wrong with those that did not."""
    for nb in neighbours:
        nb.progress.clear()
    start = {id(nb): nb.round_trips for nb in neighbours}

    async def one(nb: Neighbour) -> str | None:
        deadline = asyncio.get_running_loop().time() + 2 * STALL_SECONDS
        while nb.error is None and nb.round_trips < start[id(nb)] + 2:  # +2: one begun after the case
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return f"neighbour {nb.index} ({nb.kind}) stalled: no round trip in {2 * STALL_SECONDS:g} s"
            nb.progress.clear()
            try:
                await asyncio.wait_for(nb.progress.wait(), left)
            except TimeoutError:
                pass
        return None if nb.error is None else f"neighbour {nb.index} ({nb.kind}): {nb.error}"

    return [p for p in await asyncio.gather(*(one(nb) for nb in neighbours)) if p]


def closed_by_rabbitmq(bridge: BridgeProcess) -> dict[str, int]:
    """The bridge's stomp_bridge_amqp_connections_closed_by_rabbitmq_total, by reply code, from /metrics."""
    url = f"http://127.0.0.1:{bridge.stats()['http_port']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r'stomp_bridge_amqp_connections_closed_by_rabbitmq_total\{code="(\d+)"\} ([\d.e+]+)', line)
        if m:
            out[m.group(1)] = int(float(m.group(2)))
    return out


# -- the run ------------------------------------------------------------------------------------------

class Premade:
    """The stream, quorum and classic queues every case may use, kept filled from the harness's own
    AMQP connection (never the bridge's)."""

    def __init__(self, url: str, names: Names) -> None:
        self.url, self.names = url, names
        self.connection: aiormq.Connection | None = None

    async def ensure(self, fill_big: bool = False) -> None:
        if self.connection is None or self.connection.is_closed:
            self.connection = await aiormq.connect(self.url)
        n = self.names
        for queue, kind, want in ((n.stream, "stream", PREMADE_MESSAGES), (n.quorum, "quorum", PREMADE_MESSAGES),
                                  (n.classic, "classic", PREMADE_MESSAGES), (n.big, "classic", BIG_MESSAGES if fill_big else 0)):
            channel = await self.connection.channel()
            try:
                ok = await channel.queue_declare(queue, durable=True, arguments={"x-queue-type": kind})
            except aiormq.exceptions.AMQPError:  # a case made it something else, or owns it: make it again
                try:
                    channel = await self.connection.channel()
                    await channel.queue_delete(queue)
                    ok = await channel.queue_declare(queue, durable=True, arguments={"x-queue-type": kind})
                except aiormq.exceptions.AMQPError:  # still another connection's exclusive queue: next case
                    if self.connection.is_closed:
                        self.connection = await aiormq.connect(self.url)
                    continue
            have = ok.message_count or 0  # a stream's declare-ok says 0: it gets some every case
            for i in range(max(0, want - have) if kind != "stream" else want // 4):
                await channel.basic_publish(f"m{i}".encode(), routing_key=queue)
            await channel.close()

    async def close(self) -> None:
        if self.connection is not None and not self.connection.is_closed:
            await self.connection.close()


_NORMALISE = [(re.compile(r"amq\.gen-[\w-]+"), "amq.gen-X"), (re.compile(r"session-[\w-]+"), "session-X"),
              (re.compile(r"stomp-subscription-[\w-]+"), "stomp-subscription-X"), (re.compile(r"<\d+\.\d+\.\d+>"), "<pid>")]


def normalise(text: str, names: Names, vhost: str) -> str:
    text = text.replace(names.prefix, "P").replace(vhost, "VHOST")
    for pattern, repl in _NORMALISE:
        text = pattern.sub(repl, text)
    return text.strip()


def error_summary(result: Attack, names: Names, vhost: str) -> list[tuple[str, str]]:
    return [(e.headers.get("message", ""), normalise(e.body.decode("utf-8", "replace"), names, vhost))
            for e in result.errors()]


@dataclass
class Run:
    broker: str
    cases: int = 0
    failures: list[dict] = field(default_factory=list)
    differences: list[dict] = field(default_factory=list)
    per_variant: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {"broker": self.broker, "cases": self.cases, "failures": self.failures,
                "differences": self.differences, "per_variant": self.per_variant, "seconds": self.seconds}


def describe_steps(case: Case, names: Names) -> list[str]:
    out = []
    for step in case.build(names):
        if step[0] == "frame":
            fr = step[1]
            headers = {k: (v if len(v) < 60 else v[:20] + f"...({len(v)})") for k, v in fr.headers.items()}
            out.append(f"{fr.command} {headers}")
        else:
            out.append(" ".join(str(x) for x in step))
    return out


async def run_variant(url: str, vhost: str, broker: str, variant: str, cases: list[Case], run: Run, seed: int,
                      premade: Premade, base: Names, native_port: int | None, log) -> None:
    settings = dict(VARIANTS[variant])
    settings.setdefault("connect_timeout", 10)
    bridge = BridgeProcess(url, settings).start()
    pooled = "amqp_min_connections_per_login" not in settings
    count = POOLED_NEIGHBOURS if pooled else 4
    interval = 0.3 if pooled else 0.05
    neighbours: list[Neighbour] = []

    async def start_neighbours() -> None:
        nonlocal neighbours
        neighbours = [await Neighbour(bridge.port, vhost, i, interval).start() for i in range(count)]

    try:
        await start_neighbours()
        problems = await barrier(neighbours)
        if problems:
            raise AssertionError(f"neighbours not working before any attack: {problems}")
        closed = closed_by_rabbitmq(bridge)
        for index, case in enumerate(cases):
            if case.needs and not all(settings.get(k) for k in case.needs):
                continue
            log(f"  {variant} {index} {case.name}")
            await asyncio.wait_for(premade.ensure(fill_big=case.name.startswith("g5")), 60)
            names = Names(base.stream, base.quorum, base.classic, base.big, f"fz{seed % 1000}-{variant[:3]}{index}b")
            result = await asyncio.wait_for(attack(bridge.port, vhost, case, names), CASE_SECONDS + 30)
            problems = await barrier(neighbours)
            now = closed_by_rabbitmq(bridge) if bridge.alive() else closed
            grown = {code: now[code] - closed.get(code, 0) for code in now if now[code] > closed.get(code, 0)}
            closed = now
            if not bridge.alive():
                problems.append(f"the bridge died:\n{bridge.log_tail()}")
            if grown:
                problems.append("AMQP connections closed by RabbitMQ: " + ", ".join(f"{c} x{k}" for c, k in grown.items()))
            run.cases += 1
            run.per_variant[variant] = run.per_variant.get(variant, 0) + 1
            errors = error_summary(result, names, vhost)
            if problems:
                run.failures.append({"case": case.name, "group": case.group, "variant": variant, "broker": broker,
                                     "problems": problems, "attacker_errors": errors, "closed_codes": grown,
                                     "steps": describe_steps(case, names)})
                log(f"FAIL {broker} {variant} {case.name}: {problems[0][:300]}")
                for nb in neighbours:
                    await nb.stop()
                if not bridge.alive():
                    bridge.start()
                await start_neighbours()
            if native_port is not None and (case.group != "random" or index % 4 == 0):
                native_names = Names(base.stream, base.quorum, base.classic, base.big,
                                     f"fz{seed % 1000}-{variant[:3]}{index}n")
                native = await asyncio.wait_for(attack(native_port, vhost, case, native_names), CASE_SECONDS + 30)
                theirs = error_summary(native, native_names, vhost)
                if [m for m, _ in errors[:1]] != [m for m, _ in theirs[:1]]:
                    run.differences.append({"case": case.name, "variant": variant, "broker": broker,
                                            "bridge": errors[:1], "plugin": theirs[:1]})
        stats = bridge.fresh_stats()
        if stats["log_errors"]:
            run.failures.append({"case": "(the run)", "variant": variant, "broker": broker,
                                 "problems": [f"ERROR records in the bridge's log: {stats['last_error']}"]})
    finally:
        for nb in neighbours:
            await nb.stop()
        bridge.stop()


# What each profile runs: variant -> (crafted cases: "all", name prefixes, or "" for none; random cases)
PROFILES: dict[str, dict[str, tuple[str, int]]] = {
    # CI (reliability/tests): about a minute on this project's machine
    "short": {"shared+features": ("all", 15), "shared": ("g1,g2,g3,r-max-age", 12),
              "pooled+features": ("g2,g3,g6", 8)},
    "long": {"shared+features": ("all", 300), "shared": ("all", 200), "pooled+features": ("all", 100)},
}


def select(cases: list[Case], which: str) -> list[Case]:
    if which == "all":
        return cases
    prefixes = tuple(p for p in which.split(",") if p)
    return [c for c in cases if prefixes and c.name.startswith(prefixes)]


async def run(broker_name: str, amqp_url: str, mgmt: Management, *, seed: int = 1, profile: str = "short",
              plan: dict[str, tuple[str, int]] | None = None, native_port: int | None = None,
              only: set[str] | None = None, log=print) -> dict:
    """The profile's (or ``plan``'s) cases, each variant in a bridge of its own. ``native_port``:
    compare the attacker's ERRORs with the broker's own STOMP plugin there. ``only``: case names or
    name prefixes."""
    started = time.monotonic()
    vhost = mgmt.temporary_vhost("iso")
    url = amqp_url.rstrip("/") + "/" + Management.q(vhost)
    tag = f"fz{seed % 1000}"
    base = Names(f"{tag}-stream", f"{tag}-quorum", f"{tag}-classic", f"{tag}-big", tag)
    premade = Premade(url, base)
    result = Run(broker_name)
    try:
        for variant, (which, randoms) in (plan or PROFILES[profile]).items():
            cases = select(crafted(), which) + [random_case(seed, i) for i in range(randoms)]
            if only:
                cases = [c for c in cases if c.name.startswith(tuple(only))]
            if not cases:
                continue
            log(f"{broker_name} {variant}: {len(cases)} cases")
            await run_variant(amqp_url, vhost, broker_name, variant, cases, result, seed, premade, base, native_port, log)
    finally:
        await premade.close()
        await asyncio.to_thread(mgmt.delete_vhost, vhost)
    result.seconds = round(time.monotonic() - started, 1)
    return result.as_dict()
