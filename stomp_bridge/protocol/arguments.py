"""Header values that become AMQP arguments: the ``x-`` queue arguments of SEND and SUBSCRIBE.

Its own module because both ``destinations`` (what a SEND or SUBSCRIBE declares) and
``headers`` (the rest of the header mapping) need it, and ``headers`` needs
``destinations``: here neither imports the other's way back.
"""

from __future__ import annotations

from typing import Any, Mapping

from stomp_bridge.protocol.errors import FrameRejected, processing_error
from stomp_bridge.protocol.integers import SPACES, parse_int

# Queue arguments taken from SEND/SUBSCRIBE headers, with their AMQP type: int is
# 'long', str is 'longstr'.
QUEUE_ARGUMENTS: dict[str, type] = {
    "x-dead-letter-exchange": str,
    "x-dead-letter-routing-key": str,
    "x-expires": int,
    "x-max-length": int,
    "x-max-age": str,  # 3.11+
    "x-stream-max-segment-size-bytes": int,  # 3.11+
    "x-max-length-bytes": int,
    "x-max-priority": int,
    "x-message-ttl": int,
    "x-queue-type": str,
    "x-stream-filter-size-bytes": int,  # 3.13+
    # Not in the plugin's list, but in its documentation: a client following the
    # docs gets the argument it asked for instead of a silently different queue.
    "x-overflow": str,
}

_QUEUE_ARGUMENT_NAMES = frozenset(QUEUE_ARGUMENTS)
_INT64 = (-(1 << 63), (1 << 63) - 1)


def integer_header(name: str, value: str) -> int:
    """An integer header the plugin reads with ``list_to_integer(string:strip(V))``; else a
    "Processing error", as the plugin's crash on it."""
    # list_to_integer(string:strip(V)): spaces only (3.10 to 4.3.6; verified on 4.3.6)
    number = parse_int(value, blanks=SPACES)
    if number is None:
        raise processing_error(f"header {name!r}: {value!r} is not an integer")
    return number


def queue_arguments(headers: Mapping[str, str], names: frozenset[str] | None = None) -> dict[str, Any]:
    """The ``x-`` queue arguments of a SEND or SUBSCRIBE (``build_arguments/1``).

    Integers become ``int`` (AMQP long), the rest ``str``, both stripped of spaces. A value
    that is not an integer is a "Processing error" (verified), whatever the destination
    kind, even when no queue is declared. ``names``: the broker's list (``Dialect``).
    """
    if names is None:
        names = _QUEUE_ARGUMENT_NAMES
    if names.isdisjoint(headers):  # the usual SEND: no queue argument at all
        return {}
    args: dict[str, Any] = {}
    for name, value in headers.items():
        if name in names:
            if QUEUE_ARGUMENTS[name] is int:
                number = integer_header(name, value)
                if not _INT64[0] <= number <= _INT64[1]:
                    raise processing_error(f"header {name!r}: {value!r} does not fit an AMQP long")
                args[name] = number
            else:
                args[name] = value.strip(" ")
    return args


# -- binding arguments: SUBSCRIBE to a headers exchange ----------------------------------------

X_MATCH = "x-match"
X_MATCH_VALUES = ("all", "any", "all-with-x", "any-with-x")
# What SUBSCRIBE's own headers mean to the plugin, the bridge and the Apollo/Artemis extensions:
# never binding arguments. Every ``x-`` header is left out too (queue and consume arguments,
# stream offsets), so a binding matches on the application's own headers.
SUBSCRIBE_HEADERS = frozenset({
    "destination", "id", "ack", "receipt", "selector", "prefetch-count", "durable", "persistent",
    "auto-delete", "exclusive", "browser", "browser-end", "credit", "from-seq", "include-seq",
    "consumer-window-size", "activemq.prefetchSize", "activemq.subscriptionName",
    "durable-subscription-name", "durable-subscriber-name", "subscription-type", "content-type",
    "content-length", "transaction",
})


def binding_arguments(headers: Mapping[str, str]) -> dict[str, str] | None:
    """A headers-exchange binding from a SUBSCRIBE (rabbitmq-stomp #145): None without an
    ``x-match`` header, else ``x-match`` and every header that is not SUBSCRIBE's own (nor an
    ``x-`` header), as strings: a STOMP SEND's headers reach RabbitMQ as strings, so
    ``code:100`` on SUBSCRIBE matches ``code:100`` on SEND."""
    match = headers.get(X_MATCH)
    if match is None:
        return None
    if match not in X_MATCH_VALUES:
        raise FrameRejected(
            "Invalid header",
            f"x-match must be {', '.join(X_MATCH_VALUES[:-1])} or {X_MATCH_VALUES[-1]}, not {match!r}",
        )
    arguments = {X_MATCH: match}
    for name, value in headers.items():
        if name not in SUBSCRIBE_HEADERS and not name.startswith("x-"):
            arguments[name] = value
    return arguments
