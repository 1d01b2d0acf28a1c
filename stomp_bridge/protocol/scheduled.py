"""Scheduled delivery (ActiveMQ's and Artemis' ``AMQ_SCHEDULED_DELAY`` / ``AMQ_SCHEDULED_TIME``)
as pure rules: when a SEND is due, and the RabbitMQ topology its message waits in.

The message waits in RabbitMQ, never in the bridge, with no plugin: a delay of ``d`` ms is
written in binary, and the message passes through one queue per set bit, from the highest to
the lowest. Queue ``k`` (quorum, ``x-message-ttl`` 2^k ms) holds only messages that wait
exactly 2^k ms there, so its head always expires first: no message waits behind a later one
(the head-of-line blocking of per-message TTL). An expired message is dead-lettered (quorum's
at-least-once: it leaves queue ``k`` only once the next queue confirmed it) to exchange
``k-1``, a headers exchange that takes it into queue ``k-1`` if its bit ``k-1`` is set, and
otherwise hands it down to its alternate exchange ``k-2``, and so on; below level 0 is the
``due`` exchange, which routes it by its ``stomp-bridge-exchange`` header into an exit queue
of the SEND's own exchange (``x-message-ttl`` 0, dead-lettered at once to that exchange), where
the SEND's routing key (never changed on the way) and headers route it as a plain publish
would have.

A message that nothing takes at its time is dropped, as a plain publish is, unless the SEND
was ``mandatory``: then RabbitMQ keeps it (at-least-once dead-lettering retries a message
with no route) and delivers it once a queue takes it. See docs/features.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stomp_bridge.protocol import destinations as dest
from stomp_bridge.protocol.errors import FrameRejected
from stomp_bridge.protocol.integers import ANY, parse_int

DELAY_HEADER = "AMQ_SCHEDULED_DELAY"  # ms from now (ActiveMQ Classic, Artemis)
TIME_HEADER = "AMQ_SCHEDULED_TIME"  # epoch ms (Artemis); wins over the delay, as in Artemis
DUE_HEADER = "_AMQ_SCHED_DELIVERY"  # the due time (epoch ms), Artemis' own property name

LEVELS = 32  # 2^0 .. 2^31 ms: a delay of at most 2^32 - 1 ms (49.7 days)
MAX_DELAY_MS = (1 << LEVELS) - 1

PREFIX = "stomp-bridge.delay."
DUE_EXCHANGE = PREFIX + "due"

BIT_HEADER = "stomp-bridge-delay-"  # + k: present (1) for each set bit of the delay
EXCHANGE_HEADER = "stomp-bridge-exchange"  # the SEND's exchange
UNROUTABLE_HEADER = "stomp-bridge-unroutable"  # "keep" (mandatory) or "drop"
INTERNAL_PREFIX = "stomp-bridge-"  # each of the three above

# Quorum queues: replicated in a cluster, and at-least-once dead-lettering, so no hop loses a
# message; reject-publish is what at-least-once dead-lettering requires.
_QUORUM = {"x-queue-type": "quorum", "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}


def level_exchange(level: int) -> str:
    return f"{PREFIX}{level}"


def level_queue(level: int) -> str:
    return f"{PREFIX}{level}"


def below(level: int) -> str:
    """Where a message goes after level ``level`` (its queue expired, or its bit is not set)."""
    return DUE_EXCHANGE if level == 0 else level_exchange(level - 1)


def _millis(headers: Mapping[str, str], name: str) -> int | None:
    value = headers.get(name)
    if value is None:
        return None
    number = parse_int(value, blanks=ANY)
    if number is None:
        raise FrameRejected("Invalid header", f"'{name}' must be a whole number of milliseconds, not {value!r}\n")
    return number


def delay_of(headers: Mapping[str, str], now_ms: int) -> int | None:
    """How many ms the SEND's message waits, or None when it goes at once. As Artemis: a
    positive ``AMQ_SCHEDULED_TIME`` (epoch ms) wins over a positive ``AMQ_SCHEDULED_DELAY``
    (ms); zero, negative or past values mean now. A delay past 2^32 - 1 ms is refused."""
    delay = _millis(headers, DELAY_HEADER)
    at = _millis(headers, TIME_HEADER)
    if at is not None and at > 0:
        delay = at - now_ms
    if delay is None or delay <= 0:
        return None
    if delay > MAX_DELAY_MS:
        raise FrameRejected(
            "Invalid header",
            f"A scheduled delivery waits at most {MAX_DELAY_MS} ms (49.7 days); this one would wait {delay} ms\n",
        )
    return delay


@dataclass(frozen=True, slots=True)
class Scheduled:
    """Where the bridge publishes a message due in ``delay`` ms, and the headers it adds."""

    exchange: str  # the level exchange of the delay's highest bit
    headers: dict[str, Any] = field(default_factory=dict)


def schedule(delay: int, due_ms: int, *, exchange: str, mandatory: bool) -> Scheduled:
    """The publish of a message due in ``delay`` ms (> 0) for ``exchange``."""
    headers: dict[str, Any] = {BIT_HEADER + str(k): "1" for k in range(delay.bit_length()) if delay >> k & 1}
    headers[EXCHANGE_HEADER] = exchange
    headers[UNROUTABLE_HEADER] = "keep" if mandatory else "drop"
    headers[DUE_HEADER] = due_ms
    return Scheduled(level_exchange(delay.bit_length() - 1), headers)


def without_schedule_headers(table: dict[str, Any]) -> None:
    """The SEND's own scheduling headers do not travel on (Artemis removes them too): a consumer
    that forwards a MESSAGE as a SEND must not schedule it again. Nor do headers a SEND brings
    that name the levels' (a ``stomp-bridge-delay-<k>`` the delay has no bit for would make the
    message wait 2^k ms more at level k)."""
    table.pop(DELAY_HEADER, None)
    table.pop(TIME_HEADER, None)
    drop_internal(table)


def drop_internal(headers: dict[str, Any]) -> None:
    """Remove the levels' own headers (``stomp-bridge-delay-<k>``, ``stomp-bridge-exchange``,
    ``stomp-bridge-unroutable``): they route a message through the delay levels and mean nothing
    to its consumer. ``_AMQ_SCHED_DELIVERY`` stays: Artemis' consumers read it."""
    for name in [name for name in headers if name.startswith(INTERNAL_PREFIX)]:
        if name.startswith(BIT_HEADER) or name in (EXCHANGE_HEADER, UNROUTABLE_HEADER):
            del headers[name]


# -- the topology: declared once per session, when it is not there yet -----------------------


@dataclass(frozen=True, slots=True)
class ExchangeSpec:
    name: str
    kind: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class QueueSpec:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class BindingSpec:
    queue: str
    exchange: str
    arguments: dict[str, Any]


MARKER_QUEUE = level_queue(LEVELS - 1)  # declared last but for its binding: when it exists, so does the rest


def topology() -> list[ExchangeSpec | QueueSpec | BindingSpec]:
    """The levels and the ``due`` exchange, in the order to declare them (an exchange before
    what is bound to it or names it as its alternate; :data:`MARKER_QUEUE` last but its binding)."""
    out: list[ExchangeSpec | QueueSpec | BindingSpec] = [ExchangeSpec(DUE_EXCHANGE, "headers", {})]
    for level in range(LEVELS):
        out.append(ExchangeSpec(level_exchange(level), "headers", {"alternate-exchange": below(level)}))
        out.append(QueueSpec(level_queue(level), {
            **_QUORUM, "x-message-ttl": 1 << level, "x-dead-letter-exchange": below(level),
        }))
        out.append(BindingSpec(level_queue(level), level_exchange(level), {"x-match": "all", BIT_HEADER + str(level): "1"}))
    return out


def exit_queue(exchange: str, unroutable: str) -> str:
    """The queue a due message leaves through for ``exchange``: ``x-message-ttl`` 0, dead-lettered
    at once to ``exchange``, which then routes it with the SEND's routing key and records itself
    as the message's exchange (what a MESSAGE's ``destination`` is made of). A long name is
    hashed (255 bytes at most)."""
    if not exchange:
        return f"{PREFIX}to-default.{unroutable}"
    name = f"{PREFIX}to.{exchange}.{unroutable}"
    if len(name.encode("utf-8")) <= 255:
        return name
    return f"{PREFIX}to-{dest.base64url(hashlib.sha256(exchange.encode('utf-8')).digest()[:18])}.{unroutable}"


def exits(exchange: str) -> list[QueueSpec | BindingSpec]:
    """The two exit queues of ``exchange``, and their bindings from the ``due`` exchange. ``keep``
    (mandatory) is a quorum queue with at-least-once dead-lettering: a message no queue takes
    stays in it and RabbitMQ routes it again later (every
    ``dead_letter_worker_publisher_confirm_timeout``, 3 minutes by default); ``drop`` is a
    classic queue, whose dead-lettering drops such a message, as a plain publish would be."""
    out: list[QueueSpec | BindingSpec] = []
    for unroutable, arguments in (("keep", dict(_QUORUM)), ("drop", {})):
        queue = exit_queue(exchange, unroutable)
        arguments.update({"x-message-ttl": 0, "x-dead-letter-exchange": exchange})
        out.append(QueueSpec(queue, arguments))
        out.append(BindingSpec(queue, DUE_EXCHANGE, {
            "x-match": "all", EXCHANGE_HEADER: exchange, UNROUTABLE_HEADER: unroutable,
        }))
    return out
