"""Apollo and Artemis STOMP extensions, as pure header/destination rules (no I/O).

Each rule only applies when a client sends the extension's header or
destination form; everything the RabbitMQ plugin accepts keeps the plugin's
meaning (the session tries the plugin's parser first and only falls back
here). Sources: the Apollo STOMP manual and the Artemis STOMP chapter
(``/work/shared/seeds/003`` and ``004``).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from dataclasses import replace

from stomp_bridge.protocol import destinations as dest
from stomp_bridge.protocol.errors import FrameRejected, InvalidDestination
from stomp_bridge.protocol.integers import ANY, parse_int

# -- composite destinations (Apollo: "destination:/queue/a,/queue/b,/topic/c") ---------------

COMPOSITE_SEPARATOR = ","


def composite_parts(value: str) -> list[str] | None:
    """The parts of a composite destination, or None if ``value`` is not one.

    Only a value whose every comma-separated part starts with ``/`` counts:
    ``/queue/a,b`` stays the plugin's queue named ``a,b``, and every value that
    does count is one the plugin itself refuses (its parts add ``/``-separated
    segments no plugin destination accepts). ``/reply-queue/`` names may hold
    anything, so they are never split.
    """
    if COMPOSITE_SEPARATOR not in value or value.startswith(dest.REPLY_QUEUE_PREFIX):
        return None
    parts = value.split(COMPOSITE_SEPARATOR)
    if len(parts) < 2 or not all(p.startswith("/") for p in parts):
        return None
    return parts


# -- /dsub/<name> (Apollo) --------------------------------------------------------------------

DSUB_PREFIX = "/dsub/"


def durable_subscription_queue(client_id: str | None, name: str) -> str:
    """The queue behind an Artemis-style durable subscription: ``<client-id>.<name>`` (Artemis'
    deterministic name, so it can be pre-declared), or ``<name>`` without a client-id."""
    return f"{client_id}.{name}" if client_id else name


def parse_dsub(value: str, client_id: str | None) -> dest.Destination | None:
    """``/dsub/<name>``: an existing durable subscription queue, used like ``/amq/queue/``
    (SEND publishes to it, SUBSCRIBE consumes from it; neither declares it)."""
    if not value.startswith(DSUB_PREFIX):
        return None
    name = dest.unescape_name(value[len(DSUB_PREFIX):])
    if not name or "/" in value[len(DSUB_PREFIX):]:
        raise InvalidDestination(
            "Invalid destination", f"'{value}' is not a valid durable subscription destination\n"
        )
    return dest.Destination(dest.AMQ_QUEUE, durable_subscription_queue(client_id, name), None, value)


def parse_extended(value: str, client_id: str | None, session_id: str = "") -> list[dest.Destination] | None:
    """Destinations for a value the plugin's parser refused, or None if no extension applies."""
    parts = composite_parts(value)
    if parts is None:
        single = _parse_one(value, client_id, session_id)
        return None if single is None else [single]
    out = []
    for part in parts:
        found = _parse_one(part, client_id, session_id)
        out.append(found if found is not None else dest.parse_destination(part))
    return out


def _parse_one(value: str, client_id: str | None, session_id: str) -> dest.Destination | None:
    found = parse_dsub(value, client_id)
    return found if found is not None else parse_temp_topic(value, session_id)


# -- durable subscriptions the Artemis way ------------------------------------------------------

# Artemis' order of precedence when a frame carries more than one.
DURABLE_NAME_HEADERS = ("durable-subscriber-name", "durable-subscription-name", "activemq.subscriptionName")


def durable_subscription_name(headers: Mapping[str, str]) -> str | None:
    for name in DURABLE_NAME_HEADERS:
        value = headers.get(name)
        if value is not None:
            return value
    return None


def _require_client_id(client_id: str | None, name: str) -> str:
    if not client_id:
        raise FrameRejected(
            "Missing client-id",
            f"The durable subscription {name!r} needs a client-id header on CONNECT: the queue "
            "behind it is named <client-id>.<subscription name>.\n",
        )
    return client_id


def artemis_durable_plan(
    plan: dest.SubscribePlan, destination: dest.Destination, headers: Mapping[str, str],
    client_id: str | None,
) -> dest.SubscribePlan:
    """A topic/exchange subscription backed by the durable queue ``<client-id>.<name>``.

    Other destinations are left as they are: on ``/queue/`` every subscription
    already is durable.
    """
    name = durable_subscription_name(headers)
    if name is None or destination.kind not in (dest.TOPIC, dest.EXCHANGE) or plan.declare is None:
        return plan
    queue = durable_subscription_queue(_require_client_id(client_id, name), name)
    declare = replace(plan.declare, queue=queue, durable=True, auto_delete=False, exclusive=False)
    return replace(plan, queue=queue, declare=declare, delete_on_failure=False)


def artemis_queue_to_delete(headers: Mapping[str, str], client_id: str | None) -> str | None:
    """UNSUBSCRIBE with a durable subscription name destroys that subscription's queue."""
    name = durable_subscription_name(headers)
    if name is None:
        return None
    return durable_subscription_queue(_require_client_id(client_id, name), name)


# -- selectors: only where the bridge may drop what does not match -----------------------------

PRIVATE_KINDS = (dest.TOPIC, dest.EXCHANGE)


def check_selector_destination(destination: dest.Destination) -> None:
    """A selector is applied in the bridge by acknowledging and dropping what does not match.
    That is only safe on a queue the subscription owns; on a shared queue it would take messages
    that another consumer's selector (or no selector) wants."""
    if destination.kind not in PRIVATE_KINDS:
        raise FrameRejected(
            "Selector not supported on shared queues",
            f"'{destination.header}' is a queue other consumers may share: the bridge applies "
            "selectors by dropping the messages that do not match, which would take them from "
            "the other consumers. Use selectors on /topic/ or /exchange/ subscriptions (their "
            "queue is private to the subscription), or route with a binding instead.\n",
        )


# -- message expiration (Apollo "expires", "ttl") -----------------------------------------------

def _millis(headers: Mapping[str, str], name: str) -> int | None:
    value = headers.get(name)
    if value is None:
        return None
    number = parse_int(value, blanks=ANY, signed=False)
    if number is None:
        raise FrameRejected(
            "Invalid header", f"'{name}' must be a whole number of milliseconds, not {value!r}\n"
        )
    return number


def expiration(headers: Mapping[str, str], now_ms: int) -> tuple[str | None, int | None]:
    """(AMQP ``expiration`` in ms, absolute ``expires`` in epoch ms) for a SEND.

    ``ttl`` (ms from now) wins over ``expires`` (absolute epoch ms), as Apollo
    turns a ttl into an expires; ``expires:0`` and ``ttl:0`` mean "never"
    (JMS). An explicit plugin ``expiration`` header wins over both. The second
    value is the message's absolute expiry (None: never); when it is not later
    than ``now_ms`` the message has already expired and is not published.
    """
    ttl = _millis(headers, "ttl")
    expires = _millis(headers, "expires")
    if ttl:
        expires = now_ms + ttl
    if not expires:
        return None, None
    if "expiration" in headers:
        return None, expires
    return str(max(expires - now_ms, 0)), expires


# -- exclusive and browsing subscriptions ------------------------------------------------------


def is_true(headers: Mapping[str, str], name: str) -> bool:
    return headers.get(name) == "true"


def exclusive_plan(plan: dest.SubscribePlan) -> dest.SubscribePlan:
    """Apollo's ``exclusive:true``: one active consumer with failover, which RabbitMQ calls a
    single-active-consumer queue. The queue is declared with ``x-single-active-consumer`` (and
    not as an AMQP exclusive queue, which is what the plugin's ``exclusive`` header means)."""
    if plan.declare is None:
        return plan
    arguments = dict(plan.declare.arguments)
    arguments["x-single-active-consumer"] = True
    return replace(plan, declare=replace(plan.declare, exclusive=False, arguments=arguments))


def browse_queue(destination: dest.Destination) -> str:
    """The queue a ``browser:true`` subscription reads (queues only: a topic has nothing stored)."""
    if destination.kind not in (dest.QUEUE, dest.AMQ_QUEUE):
        raise FrameRejected(
            "Browsing needs a queue",
            f"'{destination.header}' is not a queue: only /queue/, /amq/queue/ and /dsub/ "
            "destinations hold messages to browse.\n",
        )
    return destination.name


# -- SUBSCRIBE headers that translate into the plugin's own ------------------------------------

# Headers of other brokers that become plugin headers before the plugin's rules run.
TRANSLATED_SUBSCRIBE_HEADERS = ("credit", "consumer-window-size", "activemq.prefetchSize", "from-seq")


def _integer_header(headers: Mapping[str, str], name: str) -> int:
    value = headers[name]
    number = parse_int(value, lenient=True)  # int()'s syntax, as these headers always took
    if number is None:
        raise FrameRejected("Invalid header", f"'{name}' must be an integer, not {value!r}\n")
    return number


def translate_subscribe_headers(headers: dict[str, str]) -> dict[str, str]:
    """Apollo/Artemis flow control and sequence headers as the plugin's ``prefetch-count`` and
    ``x-stream-offset``; the same dict when the SUBSCRIBE uses none of them.

    Flow control, by precedence: ``prefetch-count`` (plugin) as given; Apollo
    ``credit:count[,size]`` -> prefetch ``count`` (the byte window is not
    enforced: RabbitMQ's prefetch counts messages); Artemis
    ``consumer-window-size`` (bytes) and ``activemq.prefetchSize`` (messages in
    ActiveMQ Classic, bytes in Artemis): ``0`` -> one message at a time,
    ``-1`` -> unlimited, ``N`` -> ``N`` messages (an upper bound for a byte
    window of N). Sequences on streams: ``from-seq:N`` -> ``x-stream-offset``
    ``offset=N``, ``from-seq:-1`` -> ``next`` (only new messages).
    """
    if not any(name in headers for name in TRANSLATED_SUBSCRIBE_HEADERS):
        return headers
    out = dict(headers)
    if "prefetch-count" not in headers:
        prefetch = None
        if "credit" in headers:
            count = headers["credit"].split(",", 1)[0]
            prefetch = _integer_header({"credit": count}, "credit")
            if prefetch < 0:
                raise FrameRejected("Invalid header", "'credit' must not be negative\n")
        else:
            for name in ("consumer-window-size", "activemq.prefetchSize"):
                if name in headers:
                    window = _integer_header(headers, name)
                    prefetch = 1 if window == 0 else 0 if window < 0 else window
                    break
        if prefetch is not None:
            out["prefetch-count"] = str(prefetch)
    if "from-seq" in headers and "x-stream-offset" not in headers:
        seq = _integer_header(headers, "from-seq")
        out["x-stream-offset"] = "next" if seq < 0 else f"offset={seq}"
    return out


def sequence_header(headers: Mapping[str, str]) -> str | None:
    """Apollo ``include-seq:<name>``: MESSAGEs carry the stream offset under that header name."""
    return headers.get("include-seq") or None


# -- retained messages (Apollo "retain:set" / "retain:remove" on topics) --------------------------

RETAINED_QUEUE_PREFIX = "stomp-retained-"
RETAINED_QUEUE_ARGUMENTS = {"x-max-length": 1}  # the newest retained message pushes out the old one


def retained_queue(exchange: str, routing_key: str) -> str:
    """The one-message queue that keeps a topic's retained message, named from the topic's
    exchange and routing key (hashed: an AMQP name has at most 255 bytes)."""
    raw = exchange.encode("utf-8") + b"\x00" + routing_key.encode("utf-8")
    return RETAINED_QUEUE_PREFIX + dest.base64url(hashlib.md5(raw).digest())


def retain_action(headers: Mapping[str, str]) -> str | None:
    """``set`` (Apollo's manual also shows ``retain:true``), ``remove``, or None."""
    value = headers.get("retain")
    if value in ("set", "true"):
        return "set"
    if value == "remove":
        return "remove"
    return None


# -- temporary topics (Apollo "/temp-topic/<name>") ---------------------------------------------

TEMP_TOPIC_PREFIX = "/temp-topic/"
TEMP_TOPIC_KEY_PREFIX = "temp-topic."


def parse_temp_topic(value: str, session_id: str) -> dest.Destination | None:
    """``/temp-topic/<name>``: a topic only this connection can name, ``temp-topic.<session>.<name>``
    on the topic exchange. Other clients reach it through a ``reply-to`` (rewritten to the
    ``/topic/`` form); its subscription queues go with the connection, so nothing outlives it."""
    if not value.startswith(TEMP_TOPIC_PREFIX):
        return None
    name = value[len(TEMP_TOPIC_PREFIX):]
    if not name or "/" in name:
        raise InvalidDestination("Invalid destination", f"'{value}' is not a valid temp-topic destination\n")
    return dest.Destination(dest.TOPIC, f"{TEMP_TOPIC_KEY_PREFIX}{session_id}.{dest.unescape_name(name)}", None, value)


def temp_topic_reply_to(value: str, session_id: str) -> str | None:
    """A SEND's ``reply-to:/temp-topic/<name>`` as the ``/topic/...`` others can send to."""
    found = parse_temp_topic(value, session_id)
    return None if found is None else "/topic/" + found.name


# -- token refresh (OAuth 2): beyond the plugin ------------------------------------------------

# SEND a new token here (the body) and the bridge hands it to RabbitMQ as the connection's new
# secret (connection.update-secret): a client logged in with a JWT as its passcode refreshes it
# without reconnecting. Not a destination of the plugin's (it answers "Unknown destination").
TOKEN_DESTINATION = "/bridge/token"


def token_claims(passcode: str) -> dict | None:
    """The claims of a JWT passcode, or None for a passcode that is not a JWT. Not a
    verification: RabbitMQ checked the token at the login; the bridge only reads when it runs
    out (``exp``: RabbitMQ 4.3 closes the connection then, 4.0 and 3.x do not) and whose it is
    (``sub``: 4.x refuses another user's token as a new secret, 3.10 takes it)."""
    parts = passcode.split(".")
    if len(parts) != 3 or not parts[1]:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:
        return None
    return claims if isinstance(claims, dict) else None


def token_expiry(claims: dict | None) -> float | None:
    """A token's ``exp`` (epoch seconds), if it has one."""
    exp = claims.get("exp") if claims is not None else None
    return float(exp) if isinstance(exp, (int, float)) and not isinstance(exp, bool) else None
