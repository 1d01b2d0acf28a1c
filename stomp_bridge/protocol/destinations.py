"""STOMP destinations <-> AMQP 0-9-1 routing, the way RabbitMQ's STOMP plugin does it.

Sources (rabbitmq-server): ``rabbit_routing_util.erl`` (``parse_endpoint``,
``ensure_endpoint``, ``queue_declare_method``; in 4.x moved into the processor
and ``rabbit_stomp_routing_util.erl``), ``rabbit_stomp_util.erl``
(``build_params``, ``subscription_queue_name``, ``format_destination``) and
``rabbit_stomp_processor.erl`` (``with_destination``, ``ensure_endpoint``,
``parse_routing``, ``ensure_reply_to``). Behaviour marked "verified" was checked
against the native plugin of RabbitMQ 3.10.8.

Everything here is pure: the session keeps the per-session state (the set of
``/queue`` names already declared, the temp-queue map) and does the I/O.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
import secrets
import struct
from dataclasses import dataclass, field
from typing import Any, Mapping

from stomp_bridge.protocol.dialect import NEWEST, Dialect
from stomp_bridge.protocol.arguments import QUEUE_ARGUMENTS, binding_arguments, queue_arguments
from stomp_bridge.protocol import refusals
from stomp_bridge.protocol.errors import FrameRejected, InvalidDestination, processing_error

EXCHANGE = "exchange"
QUEUE = "queue"
AMQ_QUEUE = "amq/queue"
TOPIC = "topic"
TEMP_QUEUE = "temp-queue"
REPLY_QUEUE = "reply-queue"

# The Erlang atoms the plugin prints (with ~p) in "is not a valid ~p destination".
_TYPE_ATOM = {
    EXCHANGE: "exchange",
    QUEUE: "queue",
    AMQ_QUEUE: "amqqueue",
    TOPIC: "topic",
    TEMP_QUEUE: "temp_queue",
    REPLY_QUEUE: "reply_queue",
}
_SIMPLE = {"exchange": EXCHANGE, "queue": QUEUE, "topic": TOPIC, "temp-queue": TEMP_QUEUE}

# rabbit_routing_util:all_dest_prefixes/0, in its order; quoted in "Unknown destination".
ALL_DEST_PREFIXES = ("/temp-queue", "/exchange", "/topic", "/queue", "/amq/queue", "/reply-queue/")
# dest_prefixes/0: a MESSAGE reply-to starting with none of these gets "/reply-queue/" prepended.
DEST_PREFIXES = ALL_DEST_PREFIXES[1:]
REPLY_QUEUE_PREFIX = "/reply-queue/"
TEMP_QUEUE_ID_PREFIX = "/temp-queue/"

DEFAULT_TOPIC_EXCHANGE = "amq.topic"
SUBSCRIPTION_QUEUE_PREFIX = "stomp-subscription"


def _queue_arguments(headers: Mapping[str, str], dialect: Dialect) -> dict[str, Any]:
    return queue_arguments(headers, dialect.queue_argument_names)


@dataclass(frozen=True, slots=True)
class Destination:
    """A parsed ``destination`` (or ``reply-to``) header.

    ``name`` is the exchange name for ``exchange`` and the queue / routing key /
    temp-queue id otherwise, with ``%2F`` already turned into ``/``. ``pattern``
    is only used by ``/exchange/<name>/<pattern>``: ``None`` when absent, ``""``
    for a trailing slash. ``header`` is the header text as the client sent it
    (quoted in some ERROR bodies); it does not take part in equality.
    """

    kind: str
    name: str
    pattern: str | None = None
    header: str = field(default="", compare=False)

    def routing(self, default_topic_exchange: str = DEFAULT_TOPIC_EXCHANGE) -> tuple[str, str]:
        """(exchange, routing key) for SEND, (exchange, binding key) for SUBSCRIBE.

        Like the plugin's ``parse_routing/2``, *any* destination that names
        ``amq.topic`` (``/topic/...`` but also ``/exchange/amq.topic/...``) is
        redirected to ``default_topic_exchange``.
        """
        kind = self.kind
        if kind == TOPIC:
            exchange, key = "amq.topic", self.name
        elif kind == EXCHANGE:
            exchange, key = self.name, self.pattern or ""
        elif kind in (QUEUE, AMQ_QUEUE, REPLY_QUEUE):
            return "", self.name
        else:  # temp-queue: no routing; the plugin never asks (invalid_endpoint first)
            raise ValueError(f"{kind} destinations have no routing")
        if exchange == "amq.topic":
            exchange = default_topic_exchange
        return exchange, key


def unescape_name(text: str) -> str:
    """A name in a destination header: "%2F" stands for "/" (the plugin's only escape).

    Only the upper-case "%2F" is decoded; "%25", "%2f", "%C3" stay as they are."""
    return text.replace("%2F", "/") if "%2F" in text else text


def _invalid(kind: str, rest: list[str], header: str) -> InvalidDestination:
    content = "/" + "/".join(rest) if rest else ""
    return InvalidDestination(
        "Invalid destination",
        f"'{content}' is not a valid {_TYPE_ATOM[kind]} destination\n",
        private=f"destination header {header!r}",
    )


# The parse caches hold destinations up to this long: the longest a valid one can be (an exchange
# and a routing key of 255 bytes each, every byte escaped as %2F) is about 1,550 characters; a
# longer header (up to max_header_length, 64 KiB) is parsed each time, never kept: 4,096 cached
# 60 KB destinations held 470 MB of a bridge that a client had sent 240 MB.
CACHED_LENGTH = 2048
CACHE_SIZE = 4096


def parse_destination(value: str) -> Destination:
    """:func:`_parse_destination`, cached for a value up to CACHED_LENGTH characters."""
    if len(value) > CACHED_LENGTH:
        return _parse_destination(value)
    return _cached_destination(value)


def _parse_destination(value: str) -> Destination:
    """Parse a ``destination`` header as ``rabbit_routing_util:parse_endpoint/1`` does.

    A value without any ``/`` is a queue name (``foo`` is ``/queue/foo``), and
    the empty string parses to a queue named ``""`` that ``DestinationRules.send_target`` and
    ``subscribe_plan`` refuse as blank. ``/reply-queue/`` keeps the slashes
    of its name. Raises :class:`InvalidDestination` with the plugin's texts
    (the plugin reports these and keeps the connection; the bridge closes it, see docs/migration/rabbitmq-plugin.md).
    """
    parts = value.split("/")
    if len(parts) == 1:
        return Destination(QUEUE, unescape_name(value), None, value)
    if parts[0] == "" and len(parts) >= 2:
        head = parts[1]
        kind = _SIMPLE.get(head)
        if kind is not None:
            return _parse_rest(kind, parts[2:], value)
        if head == "amq" and len(parts) >= 3 and parts[2] == "queue":
            return _parse_rest(AMQ_QUEUE, parts[3:], value)
        if head == "reply-queue" and len(parts) >= 3:
            # reply queue names may contain slashes: no further splitting
            return _parse_rest(REPLY_QUEUE, [value[len(REPLY_QUEUE_PREFIX):]], value)
    raise InvalidDestination(
        "Unknown destination",
        f"'{value}' is not a valid destination.\n"
        f"Valid destination types are: {', '.join(ALL_DEST_PREFIXES)}.\n",
    )


_cached_destination = functools.lru_cache(maxsize=CACHE_SIZE)(_parse_destination)


def _parse_rest(kind: str, rest: list[str], header: str) -> Destination:
    if kind == EXCHANGE:
        if rest and rest[0] == "":
            # the default exchange cannot be named this way
            raise _invalid(kind, rest, header)
        if len(rest) == 1:
            return Destination(EXCHANGE, unescape_name(rest[0]), None, header)
        if len(rest) == 2:
            return Destination(EXCHANGE, unescape_name(rest[0]), unescape_name(rest[1]), header)
    elif len(rest) == 1 and rest[0]:
        return Destination(kind, unescape_name(rest[0]), None, header)
    raise _invalid(kind, rest, header)


# -- MESSAGE destination ---------------------------------------------------------------

# Bytes that format_destination/2 writes as %XX: '/', '%', and X < 32 or X > 127.
# DEL (127) and space are left alone (verified on 3.10.8).
_NEEDS_ESCAPE = re.compile(r"[^\x20-\x24\x26-\x2e\x30-\x7f]").search
_ESCAPED_BYTE = [chr(b) if 32 <= b <= 127 and b not in (0x25, 0x2F) else f"%{b:02X}" for b in range(256)]


def escape_destination_part(text: str) -> str:
    """``%XX`` (upper-case hex) for '/', '%' and every byte outside 32..127 of the UTF-8 text."""
    if _NEEDS_ESCAPE(text) is None:
        return text
    table = _ESCAPED_BYTE
    return "".join([table[b] for b in text.encode("utf-8", "surrogateescape")])


@functools.lru_cache(maxsize=CACHE_SIZE)  # keys from RabbitMQ: AMQP short strings, 255 bytes at most
def message_destination(exchange: str, routing_key: str) -> str:
    """The ``destination`` of a MESSAGE, rebuilt from the delivery (``format_destination/2``).

    Default exchange -> ``/queue/<rk>``; ``amq.topic`` -> ``/topic/<rk>`` (always
    ``amq.topic``: ``default_topic_exchange`` does not change this mapping, so
    messages from another default topic exchange show as ``/exchange/<x>/<rk>``);
    anything else -> ``/exchange/<x>`` or ``/exchange/<x>/<rk>``.
    """
    if exchange == "":
        return "/queue/" + escape_destination_part(routing_key)
    if exchange == "amq.topic":
        return "/topic/" + escape_destination_part(routing_key)
    if routing_key == "":
        return "/exchange/" + escape_destination_part(exchange)
    return "/exchange/" + escape_destination_part(exchange) + "/" + escape_destination_part(routing_key)


# -- queue names -----------------------------------------------------------------------


def base64url(raw: bytes) -> str:
    """``rabbit_misc:base64url/1``: URL-safe alphabet, no padding."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def guid_string(raw: bytes, prefix: str) -> str:
    """``rabbit_guid:string/2``: ``<prefix>-<base64url(raw)>``."""
    return f"{prefix}-{base64url(raw)}"


def _term_string(value: str | bytes) -> bytes:
    """External term format of an Erlang string (a list of bytes) or, for bytes, a binary."""
    if isinstance(value, bytes):
        return b"m" + struct.pack(">I", len(value)) + value  # BINARY_EXT
    data = value.encode("utf-8")
    if not data:
        return b"j"  # NIL_EXT: "" is []
    if len(data) < 65536:
        return b"k" + struct.pack(">H", len(data)) + data  # STRING_EXT
    # LIST_EXT of SMALL_INTEGER_EXT, NIL tail
    return b"l" + struct.pack(">I", len(data)) + b"".join(b"a" + bytes((c,)) for c in data) + b"j"


def term_to_binary_pair(first: str | bytes, second: str | bytes) -> bytes:
    """``term_to_binary({First, Second})`` for strings (as the 3.x/4.0 plugin holds them) or binaries."""
    return b"\x83h\x02" + _term_string(first) + _term_string(second)


def subscription_queue_name(name: str, subscription_id: str | bytes, x_queue_name: str | None = None) -> str:
    """``rabbit_stomp_util:subscription_queue_name/3``.

    ``name`` is the routing part of the destination (the topic name, or the
    exchange pattern, ``""`` when there is none) and ``subscription_id`` the
    ``id`` header of a durable subscription, or 16 random bytes for a transient
    one. An ``x-queue-name`` header wins. Verified on 3.10.8 for ASCII and
    non-ASCII names and ids and for an empty id.
    """
    if x_queue_name is not None:
        return x_queue_name
    digest = hashlib.md5(term_to_binary_pair(name, subscription_id)).digest()
    return guid_string(digest, SUBSCRIPTION_QUEUE_PREFIX)


def durable_subscription_queue_name(name: str, subscription_id: str) -> str:
    """The queue shared by every durable subscription with this (topic, id) pair."""
    return subscription_queue_name(name, subscription_id)


def transient_subscription_queue_name(name: str, random: bytes | None = None) -> str:
    """A fresh ``stomp-subscription-...`` name; the plugin hashes 16 random bytes (``gen_secure``)."""
    return subscription_queue_name(name, secrets.token_bytes(16) if random is None else random)


# -- what the session must do ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueDeclare:
    """A ``queue.declare`` the session must send. ``queue == ""`` asks for a server-named queue.

    ``once_per_session``: the plugin declares a ``/queue/<name>`` only the first
    time a session SENDs or SUBSCRIBEs to it (one set shared by both commands),
    with ``nowait``.
    """

    queue: str
    durable: bool
    auto_delete: bool
    exclusive: bool
    arguments: dict[str, Any]
    once_per_session: bool = False


@dataclass(frozen=True, slots=True)
class SendTarget:
    exchange: str
    routing_key: str
    declare: QueueDeclare | None


@dataclass(frozen=True, slots=True)
class SubscribePlan:
    """Declare (maybe), consume from ``queue``, then bind (maybe), in that order.

    ``queue`` is the name to consume from (for a declared queue, the name in
    ``declare``). ``delete_on_failure``: topic and exchange queues are deleted
    again if the consume or bind fails.
    """

    queue: str
    declare: QueueDeclare | None
    binding: tuple[str, str] | None
    delete_on_failure: bool
    binding_arguments: dict[str, str] | None = None  # a headers-exchange binding (headers_bindings)


# A reply queue behind /temp-queue/<id>: server-named ("amq.gen-..."), one per id per session.
TEMP_QUEUE_DECLARE = QueueDeclare("", durable=False, auto_delete=True, exclusive=True, arguments={})


def temp_queue_declare(prefix: str | None, session_id: str, temp_id: str) -> QueueDeclare:
    """The reply queue of ``/temp-queue/<temp_id>``: server-named as in the plugin, or (with
    ``temp_queue_prefix``) ``<prefix><session>.<temp_id>``, unique per connection like the
    server's names, but recognisable by policies and monitoring."""
    if prefix is None:
        return TEMP_QUEUE_DECLARE
    name = f"{prefix}{session_id.removeprefix('session-')}.{temp_id}"
    if len(name.encode()) > 255:
        raise InvalidDestination(
            "Invalid destination",
            f"'/temp-queue/{temp_id}' makes a queue name over 255 bytes with temp_queue_prefix "
            f"'{prefix}'; use a shorter temp-queue id.",
        )
    return QueueDeclare(name, durable=False, auto_delete=True, exclusive=True, arguments={})


def _bool(value: str) -> bool | None:
    # rabbit_stomp_util:string_to_boolean/1; anything else is 'undefined'
    if value == "true" or value == "True":
        return True
    if value == "false" or value == "False":
        return False
    return None


_PARAM_HEADERS = {"durable": "durable", "persistent": "durable", "auto-delete": "auto_delete", "exclusive": "exclusive"}


def has_durable_header(headers: Mapping[str, str]) -> bool:
    """``durable`` or its alias ``persistent`` is true (``true`` or ``True``)."""
    return _bool(headers.get("durable", "")) is True or _bool(headers.get("persistent", "")) is True


def queue_declare(
    kind: str,
    queue: str,
    headers: Mapping[str, str],
    arguments: dict[str, Any],
    dialect: Dialect = NEWEST,
    vhost: str = "/",
) -> QueueDeclare:
    """durable/auto_delete/exclusive for a queue behind ``kind``, from headers over per-kind defaults.

    Defaults (``rabbit_stomp_util:default_params/1``): ``/queue`` durable;
    ``/topic`` auto-delete (and, before 4.2, non-exclusive); ``/exchange``
    exclusive auto-delete (3.10: non-exclusive, verified). Then
    ``queue_declare_method/3``: durable -> durable; not durable -> auto-delete and
    exclusive; explicit ``exclusive`` / ``auto-delete`` headers override. A
    durable/persistent value other than true/false crashes the plugin
    ("Processing error"); an unreadable ``auto-delete``/``exclusive`` still
    replaces the kind's default, so the durable-derived value stays (verified:
    ``/topic`` + ``exclusive:yes`` is exclusive). In 4.x a quorum queue or stream is
    always durable and non-exclusive. ``dialect``: the connected broker's rules.
    """
    if kind == QUEUE:
        params: dict[str, bool | None] = {"durable": True}
    elif kind == EXCHANGE:
        params = {"exclusive": dialect.exchange_queues_exclusive, "auto_delete": True}
    elif kind == TOPIC:
        params = {"auto_delete": True}
        if not dialect.topic_queues_exclusive:
            params["exclusive"] = False
    else:
        params = {"durable": False}
    for name, value in headers.items():  # the later of durable/persistent wins
        key = _PARAM_HEADERS.get(name)
        if key is not None:
            params[key] = _bool(value)
    durable = params.get("durable", False)
    if durable is None:
        raise processing_error(f"durable/persistent header is not a boolean: {headers}")
    if durable:
        auto_delete = exclusive = False
    else:
        auto_delete = exclusive = True
    if params.get("exclusive") is not None:
        exclusive = bool(params["exclusive"])
    if params.get("auto_delete") is not None:
        auto_delete = bool(params["auto_delete"])
    if dialect.replicated_queues_durable and arguments.get("x-queue-type") in ("quorum", "stream"):
        durable, exclusive = True, False
    if arguments.get("x-queue-type") == "stream" and "x-max-age" in arguments:
        refusals.check_max_age(queue, vhost, arguments["x-max-age"])
    return QueueDeclare(queue, durable, auto_delete, exclusive, arguments, once_per_session=kind == QUEUE)


QUEUE_ARGUMENT_NAMES = frozenset(QUEUE_ARGUMENTS)
_ROUTED = frozenset((QUEUE, AMQ_QUEUE, REPLY_QUEUE, TOPIC, EXCHANGE))


def _send_target_of(value: str, default_topic_exchange: str) -> tuple[Destination, SendTarget] | None:
    try:
        dest = parse_destination(value)
    except InvalidDestination:
        return None
    if dest.kind not in _ROUTED or (dest.kind == QUEUE and dest.name == ""):
        return None  # send_target refuses it: its ERROR comes from there
    exchange, routing_key = dest.routing(default_topic_exchange)
    return dest, SendTarget(exchange, routing_key, None)


_cached_send_target = functools.lru_cache(maxsize=CACHE_SIZE)(_send_target_of)


def _check_blank(dest: Destination) -> None:
    if dest.kind == QUEUE and dest.name == "":
        raise InvalidDestination("Invalid destination", "Destination cannot be blank")


def _not_for(dest: Destination, command: str) -> InvalidDestination:
    return InvalidDestination(
        "Invalid destination", f"'{dest.header}' is not a valid destination for '{command}'\n")


@dataclass(frozen=True, slots=True)
class DestinationRules:
    """What SEND and SUBSCRIBE do with a destination, for one session: the exchange behind
    ``/topic/`` and the connected broker's version (``Dialect``) are fixed once it logged in."""

    default_topic_exchange: str = DEFAULT_TOPIC_EXCHANGE
    dialect: Dialect = NEWEST
    # /exchange/ SUBSCRIBEs with x-match bind with arguments (settings.headers_bindings)
    headers_bindings: bool = False
    vhost: str = "/"  # the session's, for RabbitMQ's words in a refusal decided here
    # the x- headers that are queue arguments on this broker (the dialect's, looked up once)
    argument_names: frozenset[str] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "argument_names", self.dialect.queue_argument_names or QUEUE_ARGUMENT_NAMES)

    def plain_send_target(self, value: str, headers: Mapping[str, str]) -> tuple[Destination, SendTarget] | None:
        """``send_target`` of the usual SEND, from a cache: a destination header that parses, has
        no ``x-`` queue argument beside it and is refused by none of ``send_target``'s checks.
        A ``/queue/`` target declares nothing here: the caller uses it only for a queue the
        session has declared. None: ask ``parse_destination`` and ``send_target``."""
        if not self.argument_names.isdisjoint(headers):
            return None
        if len(value) > CACHED_LENGTH:  # here, not in a wrapper: no Python call more per SEND
            return _send_target_of(value, self.default_topic_exchange)
        return _cached_send_target(value, self.default_topic_exchange)

    def send_target(self, dest: Destination, headers: Mapping[str, str], *, declare: bool = True) -> SendTarget:
        """Where a SEND goes, and the queue to declare first (``/queue`` only).

        Pass ``declare=False`` once the session has declared that ``/queue`` name:
        the plugin then skips the declaration and its checks. The checks run in the
        plugin's order: blank destination, the ``x-`` queue arguments (a bad integer
        is a "Processing error" for every destination kind), ``/temp-queue``.
        ``/topic``, ``/exchange``, ``/amq/queue`` and ``/reply-queue`` never declare.
        """
        _check_blank(dest)
        arguments = _queue_arguments(headers, self.dialect)
        if dest.kind == TEMP_QUEUE:
            raise _not_for(dest, "SEND")
        plan = None
        if dest.kind == QUEUE and declare:
            plan = queue_declare(QUEUE, dest.name, headers, arguments, self.dialect, self.vhost)
        exchange, routing_key = dest.routing(self.default_topic_exchange)
        return SendTarget(exchange, routing_key, plan)

    def subscribe_plan(
        self, dest: Destination, headers: Mapping[str, str], *, declare: bool = True, random: bytes | None = None
    ) -> SubscribePlan:
        """What a SUBSCRIBE to ``dest`` does on the AMQP side.

        ``/queue/<n>``: declare ``n`` (unless ``declare=False``: already declared in
        this session), consume. ``/amq/queue/<n>`` and ``/reply-queue/<n>``: consume
        only; a missing queue fails the consume with NOT_FOUND (verified: ERROR
        ``not_found`` / ``NOT_FOUND - no queue 'n' in vhost '/'`` and the connection
        closes). ``/topic/<t>``: declare a ``stomp-subscription-...`` queue (shared
        per (t, id) when durable), consume, bind it to the default topic exchange
        with ``t``. ``/exchange/<x>[/<p>]``: the same bound to ``x`` with ``p`` (or
        ``""``). ``x-queue-name`` names topic/exchange queues. ``/temp-queue`` is
        refused. ``random`` (16 bytes) makes transient names deterministic in tests.
        """
        _check_blank(dest)
        arguments = _queue_arguments(headers, self.dialect)
        kind = dest.kind
        if kind == TEMP_QUEUE:
            raise _not_for(dest, "SUBSCRIBE")
        if kind in (TOPIC, EXCHANGE):
            decl = queue_declare(kind, "", headers, arguments, self.dialect, self.vhost)
            routing_name = dest.name if kind == TOPIC else dest.pattern or ""
            if has_durable_header(headers):
                sub_id: str | bytes | None = headers.get("id")
                if sub_id is None:  # "durable:True" slips past the "Missing Header" check, then crashes
                    raise processing_error("durable subscription without an id header")
            else:
                sub_id = secrets.token_bytes(16) if random is None else random
            name = subscription_queue_name(routing_name, sub_id, headers.get("x-queue-name"))
            decl = QueueDeclare(name, decl.durable, decl.auto_delete, decl.exclusive, decl.arguments)
            exchange, key = dest.routing(self.default_topic_exchange)
            bind_with = binding_arguments(headers) if self.headers_bindings and kind == EXCHANGE else None
            return SubscribePlan(name, decl, (exchange, key), delete_on_failure=True, binding_arguments=bind_with)
        plan = None
        if kind == QUEUE and declare:
            plan = queue_declare(QUEUE, dest.name, headers, arguments, self.dialect, self.vhost)
        return SubscribePlan(dest.name, plan, None, delete_on_failure=False)


def require_durable_id(headers: Mapping[str, str]) -> None:
    """SUBSCRIBE/UNSUBSCRIBE check the plugin runs first: ``durable:true`` or ``persistent:true``
    (exactly lower-case ``true``) needs an ``id``."""
    if "id" not in headers and (headers.get("durable") == "true" or headers.get("persistent") == "true"):
        raise FrameRejected("Missing Header", "Header 'id' is required for durable subscriptions")


def durable_queue_to_delete(subscribed: Destination, unsubscribe_headers: Mapping[str, str]) -> str | None:
    """The queue an UNSUBSCRIBE deletes: only a ``/topic`` subscription, and only when the
    UNSUBSCRIBE itself carries durable/persistent true (its ``id`` and ``x-queue-name`` name it)."""
    if subscribed.kind != TOPIC or not has_durable_header(unsubscribe_headers):
        return None
    sub_id = unsubscribe_headers.get("id")
    if sub_id is None:
        raise processing_error("durable UNSUBSCRIBE without an id header")
    return subscription_queue_name(subscribed.name, sub_id, unsubscribe_headers.get("x-queue-name"))


def reply_to_temp_queue(reply_to: str) -> str | None:
    """The temp-queue id if a SEND's ``reply-to`` is ``/temp-queue/<id>``, else ``None``.

    The session maps each id to one server-named queue per session (declared
    as :data:`TEMP_QUEUE_DECLARE`, consumed with no-ack under consumer tag
    ``T_/temp-queue/<id>``) and publishes with ``reply_to`` = that bare queue
    name (``amq.gen-...``, verified); MESSAGE frames then show it as
    ``/reply-queue/amq.gen-...``. A ``reply-to`` the plugin cannot parse makes
    it crash: "Processing error".
    """
    try:
        dest = parse_destination(reply_to)
    except InvalidDestination as exc:
        raise processing_error(f"reply-to {reply_to!r}: {exc}") from None
    return dest.name if dest.kind == TEMP_QUEUE else None
