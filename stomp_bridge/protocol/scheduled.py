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
``due`` exchange, which routes it by its ``stomp-bridge-exchange`` header to the SEND's own
exchange (an exchange-to-exchange binding), where the SEND's routing key (never changed on the
way) and headers route it as a plain publish would have. The default exchange cannot be bound:
messages for it pass through a queue with ``x-message-ttl`` 0 that dead-letters to it.

A message that nothing takes at its time is dropped, as a plain publish is, unless the SEND
was ``mandatory``: then RabbitMQ keeps it (at-least-once dead-lettering retries a message
with no route) and delivers it once a queue takes it. See docs/features.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stomp_bridge.protocol.errors import FrameRejected
from stomp_bridge.protocol.integers import ANY, parse_int

DELAY_HEADER = "AMQ_SCHEDULED_DELAY"  # ms from now (ActiveMQ Classic, Artemis)
TIME_HEADER = "AMQ_SCHEDULED_TIME"  # epoch ms (Artemis); wins over the delay, as in Artemis
DUE_HEADER = "_AMQ_SCHED_DELIVERY"  # the due time (epoch ms), Artemis' own property name

LEVELS = 32  # 2^0 .. 2^31 ms: a delay of at most 2^32 - 1 ms (49.7 days)
MAX_DELAY_MS = (1 << LEVELS) - 1

PREFIX = "stomp-bridge.delay."
DUE_EXCHANGE = PREFIX + "due"
DEFAULT_KEEP_QUEUE = PREFIX + "default"  # for the default exchange, mandatory
DEFAULT_DROP_QUEUE = PREFIX + "default-drop"  # for the default exchange, not mandatory
DROP_QUEUE = PREFIX + "drop"  # takes every non-mandatory message at its time, and keeps none

BIT_HEADER = "stomp-bridge-delay-"  # + k: present (1) for each set bit of the delay
EXCHANGE_HEADER = "stomp-bridge-exchange"  # the SEND's exchange
UNROUTABLE_HEADER = "stomp-bridge-unroutable"  # "keep" (mandatory) or "drop"

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


def schedule(delay: int, exchange: str, mandatory: bool, due_ms: int) -> Scheduled:
    """The publish of a message due in ``delay`` ms (> 0) for ``exchange``."""
    headers: dict[str, Any] = {BIT_HEADER + str(k): "1" for k in range(delay.bit_length()) if delay >> k & 1}
    headers[EXCHANGE_HEADER] = exchange
    headers[UNROUTABLE_HEADER] = "keep" if mandatory else "drop"
    headers[DUE_HEADER] = due_ms
    return Scheduled(level_exchange(delay.bit_length() - 1), headers)


def without_schedule_headers(table: dict[str, Any]) -> None:
    """The SEND's own scheduling headers do not travel on (Artemis removes them too): a consumer
    that forwards a MESSAGE as a SEND must not schedule it again."""
    table.pop(DELAY_HEADER, None)
    table.pop(TIME_HEADER, None)


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


MARKER_QUEUE = DROP_QUEUE  # declared last but for its binding: when it exists, so does the rest


def topology() -> list[ExchangeSpec | QueueSpec | BindingSpec]:
    """Every exchange, queue and binding the scheduled messages need, in the order to declare
    them (an exchange before what is bound to it; :data:`MARKER_QUEUE` last but its binding)."""
    out: list[ExchangeSpec | QueueSpec | BindingSpec] = [ExchangeSpec(DUE_EXCHANGE, "headers", {})]
    for terminal, unroutable, arguments in (
        (DEFAULT_KEEP_QUEUE, "keep", dict(_QUORUM)),
        (DEFAULT_DROP_QUEUE, "drop", {}),  # classic: its dead-lettering drops what has no queue
    ):
        arguments.update({"x-message-ttl": 0, "x-dead-letter-exchange": ""})
        out.append(QueueSpec(terminal, arguments))
        out.append(BindingSpec(terminal, DUE_EXCHANGE,
                               {"x-match": "all", EXCHANGE_HEADER: "", UNROUTABLE_HEADER: unroutable}))
    for level in range(LEVELS):
        out.append(ExchangeSpec(level_exchange(level), "headers", {"alternate-exchange": below(level)}))
        out.append(QueueSpec(level_queue(level), {
            **_QUORUM, "x-message-ttl": 1 << level, "x-dead-letter-exchange": below(level),
        }))
        out.append(BindingSpec(level_queue(level), level_exchange(level), {"x-match": "all", BIT_HEADER + str(level): "1"}))
    out.append(QueueSpec(DROP_QUEUE, {"x-max-length": 0}))
    out.append(BindingSpec(DROP_QUEUE, DUE_EXCHANGE, {"x-match": "all", UNROUTABLE_HEADER: "drop"}))
    return out


def exchange_binding(exchange: str) -> dict[str, Any]:
    """The arguments of the binding from the ``due`` exchange to a SEND's own (non-default) exchange."""
    return {"x-match": "all", EXCHANGE_HEADER: exchange}
