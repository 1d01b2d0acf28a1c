"""The settings, by section: each section is a frozen model of the fields one part of the
bridge reads, and :class:`~stomp_bridge.settings.model.Settings` is all of them, flat.

Flat, because deployments name every setting on its own: ``port``, ``STOMP_BRIDGE_PORT`` and
``--port``, never ``listeners.port``. A section groups the fields in the documentation (one
table each) and in code: ``settings.limits`` is a frozen :class:`LimitSettings`, so a part that
needs only the limits takes only them, and its signature says so.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import NoDecode

from stomp_bridge.protocol.proxy import parse_network
from stomp_bridge.settings.names import unknown_keys

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = ("text", "json")


def split_list(value: object) -> object:
    """A list from the environment: comma-separated, or a JSON list (``["a", "b"]``)."""
    if isinstance(value, str):
        if value.lstrip().startswith("["):
            try:
                return json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"starts with '[' but is not a JSON list ({exc})") from None
        return [v for v in (p.strip() for p in value.split(",")) if v]
    return value


def off_is_none(value: object) -> object:
    """An environment variable cannot be unset from a chart's values; these spell "off"."""
    if isinstance(value, str) and value.strip().lower() in ("", "none", "off", "false", "disabled"):
        return None
    return value


def network(text: str) -> str:
    """A ``proxy_protocol_trusted`` entry, checked and written as its network (``10.0.0.5``
    becomes ``10.0.0.5/32``): start-up fails with one line per bad entry."""
    return str(parse_network(text))


def url_path(text: str) -> str:
    """``ws_path``: a URL path, so it starts with ``/`` (in words, not a pattern's text)."""
    if not text.startswith("/"):
        raise ValueError(f"{text!r} is not a URL path: it must start with '/' (e.g. /ws)")
    return text


SPLIT = BeforeValidator(split_list)
OFF_IS_NONE = BeforeValidator(off_is_none)
CommaList = Annotated[list[str], NoDecode, SPLIT]
Network = Annotated[str, AfterValidator(network)]


class Section(BaseModel):
    """A group of settings, frozen: ``settings.<section>`` hands a part of the bridge a value
    it cannot change and that names what it depends on. Its docstring's first line is the
    section's title in the configuration reference, the rest its introduction."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_names(cls, data: object) -> object:
        """A name that is no field of the section is refused with the field it nearly is (the
        whole Settings checks its sources before this: ``names.py``)."""
        if isinstance(data, dict):
            problems = unknown_keys(data, cls.model_fields, values=data)
            if problems:
                raise ValueError("; ".join(problems))
        return data


class ListenerSettings(Section):
    """Listeners

    Where clients connect: plain STOMP, STOMP over TLS, STOMP over WebSocket (ws and wss). A port
    set to `none` (or `off`, or empty) turns its listener off.
    """

    host: str = Field("0.0.0.0", description="Interface the STOMP TCP listener binds to.")
    port: Annotated[int | None, OFF_IS_NONE] = Field(
        61613, ge=0, le=65535, description="STOMP TCP port (0 picks a free one; unset: no plain TCP listener)."
    )
    tls_port: Annotated[int | None, OFF_IS_NONE] = Field(
        None, ge=0, le=65535,
        description="STOMP over TLS port, conventionally 61614 (unset: no TLS listener; 0 picks one).",
    )
    ws_host: str | None = Field(
        None, description="Interface of the WebSocket listeners (unset: the same as `host`)."
    )
    ws_port: Annotated[int | None, OFF_IS_NONE] = Field(
        15674,
        ge=0,
        le=65535,
        description="STOMP over WebSocket port, as RabbitMQ's web-stomp (0 picks a free one; "
        "`none` disables).",
    )
    wss_port: Annotated[int | None, OFF_IS_NONE] = Field(
        None,
        ge=0,
        le=65535,
        description="STOMP over secure WebSocket (wss) port, with tls_cert_file and tls_key_file "
        "(unset: no wss listener).",
    )


class WebSocketSettings(Section):
    """WebSocket

    STOMP over WebSocket, as RabbitMQ's web-stomp: its path, message size, compression, and which
    pages and credentials it accepts.
    """

    ws_path: Annotated[str, AfterValidator(url_path)] = Field(
        "/ws", json_schema_extra={"pattern": "^/"}, description="URL path of the WebSocket endpoint.")
    ws_max_message_size: Annotated[int | None, OFF_IS_NONE] = Field(
        None,
        ge=1024,
        description="Bytes per incoming WebSocket message; more: close 1009 after an ERROR "
        "(unset: max_frame_size).",
    )
    ws_compression: bool = Field(True, description=(
        "Negotiate permessage-deflate with clients that offer it, as web-stomp does (about 40 KB per "
        "compressing connection); a compressed message is never inflated past ws_max_message_size."))
    ws_allowed_origins: CommaList = Field(
        default_factory=list,
        description="Comma-separated Origins a browser page may connect from, e.g. "
        "`https://app.example.com` (empty: any; requests without Origin are not from a browser "
        "and always pass).",
    )
    ws_use_http_auth: bool = Field(
        False,
        description="Log in with the HTTP Basic credentials of the WebSocket upgrade request, "
        "ignoring CONNECT's login/passcode; none: the default user (web-stomp's use_http_auth).",
    )


class AdmissionSettings(Section):
    """Admission

    Which connections the listeners accept: how many in all and per client address, and the
    PROXY protocol header that tells a load balancer's clients apart.
    """

    max_connections: int = Field(0, ge=0, description="Open STOMP connections at most (0: no limit).")
    max_connections_per_ip: int = Field(0, ge=0, description="Per client address (0: no limit).")
    proxy_protocol: bool = Field(
        False,
        description="Expect a PROXY protocol v1/v2 header from a TCP load balancer on every "
        "connection, STOMP and WebSocket, and take the client address from it (the plugins' "
        "proxy_protocol). Needs proxy_protocol_trusted.",
    )
    proxy_protocol_trusted: Annotated[list[Network], NoDecode, SPLIT] = Field(
        default_factory=list,
        description="Networks (CIDR) of the load balancers that may send the PROXY header, "
        "comma-separated or a JSON list, e.g. `10.0.0.0/8,fd00::/8`; a connection from any other "
        "address is refused with an ERROR (connections_refused `untrusted_proxy`). No default: "
        "whoever sends the header picks the address loopback_users and the per-address limits "
        "see, so proxy_protocol without this list does not start.",
    )


class LoginSettings(Section):
    """Login

    What CONNECT logs in as (the plugin's defaults), which vhost a `host` header means, and who
    may log in from where and how often.
    """

    # The plugin's defaults, each used where CONNECT lacks its header (rabbit_stomp_processor:creds/3).
    default_user: str | None = Field(
        "guest", description="Login when CONNECT has no login header (unset: refuse); a passcode that "
        "came with it (an OAuth 2 token) is kept, as the plugin keeps it.",
    )
    default_pass: str | None = Field("guest", description="Passcode when CONNECT has no passcode header.")
    default_vhost: str = Field("/", description="Vhost when CONNECT has no host header.")
    implicit_connect: bool = Field(
        False, description="A first frame other than CONNECT logs in as the default user (no CONNECTED)."
    )
    host_vhosts: dict[str, str] = Field(
        default_factory=dict,
        description="Map from CONNECT `host` values to vhosts (JSON in the environment), for clients "
        "that always send the server's host name (stompman). Unlisted hosts are vhost names, as in "
        "the plugin.",
    )
    unknown_host_default_vhost: bool = Field(
        False,
        description="A `host` that is not in host_vhosts and that RabbitMQ refuses as a vhost logs "
        "in to default_vhost instead of failing (off: the plugin's behaviour).",
    )
    loopback_users: CommaList = Field(
        default_factory=lambda: ["guest"],
        description="Users that may only log in from a loopback address, as RabbitMQ's own "
        "loopback_users: RabbitMQ sees the bridge's address, so the bridge checks the client's.",
    )
    login_failures_per_minute: int = Field(
        10,
        ge=0,
        description="After this many failed logins of one user from one client address within a "
        "minute, RabbitMQ checks that user's logins from that address one at a time, 6 s apart "
        "(60 s / this), then twice as far apart after each further failure, up to a minute; a "
        "login whose turn is more than 10 s away is refused at once (stomp_bridge_logins_delayed_total, "
        "stomp_bridge_logins_throttled_total). A password RabbitMQ accepted for that user in the last 24 hours "
        "takes no turn, so guessing cannot lock the rightful user out; other users and addresses "
        "are not affected. 0: no limit.",
    )


class LimitSettings(Section):
    """Limits

    What one connection may send or hold: frame and header sizes, transactions, subscriptions.
    """

    max_frame_size: int = Field(4 * 1024 * 1024, ge=1024, description="Bytes per frame; more: ERROR, close.")
    max_frame_size_before_login: int = Field(
        64 * 1024, ge=1024, description="The same limit until CONNECT has succeeded."
    )
    max_headers: int = Field(1000, ge=1, description="Header lines per frame.")
    max_header_length: int = Field(64 * 1024, ge=64, description="Bytes per header line.")
    max_transactions: int = Field(16, ge=1, description="Open transactions per connection (plugin's limit).")
    max_transaction_actions: int = Field(1024, ge=1, description="Frames held per transaction.")
    # 64 MiB: all 1,024 actions of a transaction at 64 KiB each, or 16 frames of the largest size
    # (max_frame_size); a client holding more in the bridge's memory until COMMIT should commit
    # more often. Counting frames alone let 16 x 1,024 x 4 MiB (64 GiB) wait on one connection.
    max_transaction_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024,
        description="Bytes (bodies and header text) that a connection's open transactions hold "
        "together until COMMIT or ABORT; a SEND, ACK or NACK past it: ERROR, the connection goes on.",
    )
    max_subscriptions: int = Field(10000, ge=1, description="Subscriptions per connection.")


class FlowSettings(Section):
    """Flow

    Backpressure: how much the bridge holds for a client that does not read, and how many
    deliveries RabbitMQ may have in flight to it.
    """

    write_buffer_high: int = Field(
        1024 * 1024,
        ge=16 * 1024,
        description="Bytes queued for a client (MESSAGEs, RECEIPTs, ERRORs) before the bridge stops "
        "reading its frames and stops acknowledging its deliveries to RabbitMQ, which then stops "
        "sending (prefetch, auto_ack_window), until the client has taken all but a quarter: a client "
        "that does not read costs a bounded amount of memory, before login and after.",
    )
    close_timeout: float = Field(
        5.0,
        gt=0,
        description="Seconds a connection being closed (after an ERROR, a DISCONNECT, at shutdown) has "
        "to take what is still queued for it (and a WebSocket client to answer the close frame); "
        "then its socket is aborted (stomp_bridge_connections_aborted_total).",
    )
    auto_ack_window: int = Field(
        500,
        ge=1,
        le=65535,
        description="Deliveries of an ack:auto subscription in flight between RabbitMQ and a client "
        "that stopped reading (the bridge acks them once the client's socket takes them).",
    )
    client_ack_window: int = Field(
        500,
        ge=1,
        le=65535,
        description="An ack:client or client-individual subscription without prefetch-count is "
        "consumed this many deliveries at a time, one consumer more each time the client holds "
        "them all unacknowledged and keeps reading (the plugin's unlimited prefetch), none while "
        "it does not read: what a stalled client costs stays bounded.",
    )
    edge_fanout: bool = Field(
        False,
        description="Fan-out at the edge: ack:auto SUBSCRIBEs of one login to the same /topic/ or "
        "/exchange/ binding (non-durable, no x- arguments, no prefetch) share one AMQP queue and "
        "consumer, and the bridge copies each delivery to every subscriber, so RabbitMQ routes one "
        "copy per bridge, not per subscriber. RabbitMQ still checks each SUBSCRIBE (its queue is "
        "declared, bound and deleted again). A subscriber that does not keep up is closed past "
        "fanout_subscriber_buffer (docs/how-it-maps.md, Fan-out at the edge).",
    )
    fanout_subscriber_buffer: int = Field(
        4 * 1024 * 1024,
        ge=64 * 1024,
        description="Bytes of shared deliveries queued for one fan-out subscriber that does not take "
        "them; past it the subscriber gets ERROR `Slow subscriber` and is closed, so that it slows "
        "no one else (stomp_bridge_fanout_slow_subscribers_total).",
    )


class HeartbeatSettings(Section):
    """Heart-beats and timeouts

    How long a client may stay silent: before CONNECT, between heart-beats, with none agreed.
    """

    connect_timeout: float = Field(
        10.0, gt=0, description="Seconds a client has to send CONNECT before it is dropped."
    )
    heartbeat_min: float = Field(
        0.0, ge=0, description="Seconds: a client asking for heart-beats more often (either way) gets "
        "this interval (0: as the client asks, like the plugin).",
    )
    heartbeat_max: float = Field(
        0.0, ge=0, description="Seconds: the longest a client may stay silent, whatever it asked for; "
        "one offering no heart-beats or slower ones is told this interval in CONNECTED and dropped "
        "after heartbeat_tolerance times it without a byte, like Artemis' connection-ttl-max (0: none).",
    )
    heartbeat_tolerance: float = Field(
        2.0, ge=1.0, description="A peer silent for this many agreed intervals is disconnected."
    )
    idle_timeout: float = Field(
        0.0,
        ge=0,
        description="Seconds without a byte from a client that agreed no heart-beats before it is "
        "dropped, like Artemis' connection TTL (0: never).",
    )


class StompSettings(Section):
    """STOMP

    The plugin's choices about STOMP itself, and the few places where the bridge may differ.
    """

    default_topic_exchange: str = Field("amq.topic", description="The exchange behind /topic/.")
    default_nack_requeue: bool = Field(True, description="NACK without a requeue header requeues.")
    trailing_lf: bool = Field(
        True,
        description="End every frame with NUL and a newline, as the plugin's `trailing_lf` (clients "
        "read the newline as a heart-beat; PHP's stomp extension needs it). Off: NUL only.",
    )
    close_on_error: bool = Field(
        False,
        description="Close the connection after every ERROR, as STOMP 1.2 says a server MUST (off: "
        "the plugin's choice, error by error: a bad destination, header, transaction or "
        "subscription id, or an unknown command gets an ERROR and the connection stays).",
    )
    hide_server_info: bool = Field(False, description="Leave the server header out of CONNECTED.")
    rabbitmq_stomp_dialect: Literal["auto", "4.3", "4.4"] = Field(
        "auto",
        description="Whose STOMP plugin the bridge behaves as: 4.3 (the plugin of RabbitMQ 4.3 and "
        "older, on an AMQP 0-9-1 client), 4.4 (4.4's native plugin: ERROR bodies without the AMQP "
        "prefix, an ACK of an unknown tag keeps the connection …, see Compatibility), or auto: 4.4 "
        "when RabbitMQ reports 4.4 or later, else 4.3.",
    )


class ExtensionSettings(Section):
    """Extensions

    Features beyond the plugin (Apollo's, Artemis' and AMQP's), each off by default.
    """

    mandatory: bool = Field(
        False,
        description="Publish SENDs with AMQP's mandatory flag: one that no queue takes gets the ERROR "
        "'Unroutable message' and no RECEIPT (for it or anything after it) instead of a RECEIPT for a "
        "message RabbitMQ dropped, as under the plugin. A SEND's own `mandatory:true|false` header "
        "wins. On by default in the Swaptacular profile.",
    )
    retained_messages: bool = Field(
        False,
        description="Apollo retained messages: `retain:set` on a /topic/ SEND keeps it in a "
        "one-message queue per topic, delivered first to each new subscriber of that topic "
        "(costs a lookup per /topic/ SUBSCRIBE, hence opt-in).",
    )
    temp_queue_prefix: str | None = Field(
        None,
        description="Name /temp-queue/<id> reply queues `<prefix><session>.<id>` instead of "
        "RabbitMQ's `amq.gen-…`, so policies and monitoring can match them (unset: the plugin's "
        "server-named queues).",
    )
    redeliveries_header: str | None = Field(
        None,
        description="Apollo's add_redeliveries_header: redelivered MESSAGEs carry this header with "
        "the delivery count (quorum queues' x-acquired-count, or x-delivery-count before RabbitMQ 4.3; "
        "1 where RabbitMQ keeps no count).",
    )
    resubscribe_on_cancel: bool = Field(
        False,
        description="When RabbitMQ cancels a subscription's consumer (its queue deleted, a quorum "
        "queue's consumer timeout, a node down), subscribe again on the client's behalf once the "
        "queue is there (a /queue/ is declared again), instead of the plugin's ERROR 'Server "
        "cancelled subscription', which comes only after resubscribe_timeout.",
    )
    resubscribe_timeout: float = Field(
        60.0, gt=0, description="Seconds resubscribe_on_cancel keeps asking for the queue (0.5 s, doubling "
        "up to 30 s, between attempts).",
    )
    headers_bindings: bool = Field(
        False,
        description="A SUBSCRIBE to /exchange/<name> with an x-match header (all, any, all-with-x, "
        "any-with-x) binds with x-match and its other non-STOMP headers as binding arguments, for "
        "headers exchanges (the plugin ignores them and binds with none).",
    )
    apollo_exclusive: bool = Field(
        False,
        description="`exclusive:true` on SUBSCRIBE means Apollo's exclusive subscription (one active "
        "consumer with failover: an `x-single-active-consumer` queue) instead of the plugin's "
        "exclusive (connection-owned) queue.",
    )


class AmqpSettings(Section):
    """AMQP

    The RabbitMQ nodes, and how the bridge shares AMQP connections among STOMP sessions.
    """

    amqp_url: str = Field(
        "amqp://guest:guest@localhost:5672/",
        description="RabbitMQ node(s), comma-separated for a cluster (amqp:// or amqps://). Their "
        "user and vhost are ignored: each STOMP connection logs in as its own user on the vhost "
        "from its `host` header.",
    )
    amqp_heartbeat: int = Field(60, ge=0, description="AMQP heart-beat to RabbitMQ, seconds.")
    amqp_connect_timeout: float = Field(
        10.0, gt=0, description="Seconds to open an AMQP connection before trying the next node."
    )
    amqp_channels_per_connection: int = Field(
        64,
        ge=1,
        le=2047,
        description="STOMP sessions (one AMQP channel each) that share one AMQP connection, when they "
        "log in with the same user, passcode and vhost; 1 gives every session its own connection.",
    )
    amqp_min_connections_per_login: int = Field(
        16,
        ge=1,
        description="The first this many STOMP sessions of one user/passcode/vhost get an AMQP "
        "connection each (RabbitMQ works each connection in its own processes); later sessions "
        "share the least loaded one.",
    )
    amqp_separate_publishers: bool = Field(
        True,
        description="A STOMP session publishes on an AMQP connection of its login's publishing "
        "connections (opened at its first SEND), never on the one it consumes and acknowledges on: "
        "a resource alarm, which stops RabbitMQ reading a connection that publishes, then holds back "
        "only publishers, as under the plugin. false: one channel per session for everything (one "
        "connection fewer per publishing login; a blocked publisher holds back the sessions that "
        "share its connection).",
    )
    amqp_login_reuse_seconds: float = Field(
        300.0,
        ge=0,
        description="A shared AMQP connection takes new STOMP sessions for this long after it "
        "opened; later ones open a new connection (spreading logins over the nodes again after a "
        "failover). Every login is checked by RabbitMQ either way.",
    )
    amqp_login_cache_seconds: float = Field(
        0.0,
        ge=0,
        description="A login (user, passcode, vhost) that RabbitMQ accepted this recently joins a "
        "shared AMQP connection without RabbitMQ checking it again; 0 (the default): every STOMP "
        "login is checked by RabbitMQ, so a revoked credential never logs in. The only window in "
        "which one could (docs/operations.md, 'What the bridge caches').",
    )
    tls_amqp_ca_file: str | None = Field(
        None, description="PEM CA bundle to verify RabbitMQ's certificate on amqps:// (default: system)."
    )
    tls_amqp_verify_hostname: bool = Field(
        True, description="Check that RabbitMQ's certificate names the host in amqp_url."
    )


class TlsSettings(Section):
    """TLS

    The TLS and wss listeners' certificate, the client certificates they ask for, and reloads
    (the plugin's `stomp.listeners.ssl` and `ssl_options`).
    """

    tls_cert_file: str | None = Field(None, description="PEM certificate chain of the TLS listener.")
    tls_key_file: str | None = Field(None, description="PEM private key of tls_cert_file.")
    tls_ca_file: str | None = Field(
        None, description="PEM CA bundle that client certificates must chain to (verify_peer)."
    )
    tls_min_version: Literal["1.2", "1.3"] = Field("1.2", description="Oldest TLS version accepted.")
    tls_verify_peer: bool = Field(
        False, description="Ask clients for a certificate and verify it against tls_ca_file."
    )
    tls_fail_if_no_peer_cert: bool = Field(
        False, description="With tls_verify_peer: refuse the handshake when a client sends no certificate."
    )
    tls_reload_interval: float = Field(
        30.0, ge=0,
        description="Seconds between checks of the TLS files for a new certificate (0: only on "
        "SIGHUP). Open connections keep theirs; new ones get the new one.",
    )

    @field_validator("tls_min_version", mode="before")
    @classmethod
    def _tls_version(cls, value: object) -> object:
        """Also RabbitMQ's and the chart's spelling: TLSv1.2, tlsv1.3."""
        if isinstance(value, str) and value.lower().startswith("tlsv"):
            return value[4:]
        return value


class CertLoginSettings(Section):
    """Certificate login

    A TLS client logs in as the user its certificate names (the plugin's `ssl_cert_login`), and
    how that user logs in to RabbitMQ.
    """

    ssl_cert_login: bool = Field(
        False,
        description="A TLS client with a verified certificate and no login header logs in as the "
        "user named by its certificate (the plugin's ssl_cert_login).",
    )
    ssl_cert_login_from: Literal["distinguished_name", "common_name"] = Field(
        "distinguished_name",
        description="The certificate's subject DN (RFC 4514, as RabbitMQ writes it) or its CN.",
    )
    tls_amqp_auth: Literal["external", "credentials"] = Field(
        "external",
        description="How a certificate-login user logs in to RabbitMQ: external (amqps + EXTERNAL "
        "with a short-lived certificate for that user, signed by tls_amqp_signer_*) or "
        "credentials (user and password from tls_amqp_credentials_file).",
    )
    tls_amqp_signer_cert_file: str | None = Field(
        None, description="PEM CA certificate RabbitMQ trusts for client certificates (external)."
    )
    tls_amqp_signer_key_file: str | None = Field(None, description="Its private key.")
    tls_amqp_cert_hours: float = Field(
        24.0, gt=0, description="Lifetime of the per-user certificates the bridge signs (external)."
    )
    tls_amqp_credentials_file: str | None = Field(
        None,
        description="TOML: `[\"<certificate user name>\"]` tables with `user` and `password` "
        "(credentials).",
    )


class SwaptacularSettings(Section):
    """Swaptacular

    The Swaptacular peer profile: the STOMP transport between Swaptacular nodes, and the manifest
    (`stomp.toml`) that describes this node to its peers.
    """

    profile: Literal["default", "swaptacular"] = Field(
        "default",
        description="swaptacular: the Swaptacular STOMP transport (TLS 1.3 and client certificates "
        "required, STOMP 1.2 only, SEND header rules, per-peer destination; plain TCP and WebSocket off).",
    )
    swpt_peer_id_from: str = Field(
        "serialNumber", description="Subject attribute of the client certificate that holds the peer's node id."
    )
    swpt_host: str = Field(
        "/", description="The host header peers send (manifest `host`); ${NODE_ID} is the peer's node id."
    )
    swpt_vhost: str = Field("/", description="The RabbitMQ vhost peers' messages go to.")
    swpt_destination: str = Field(
        "/exchange/smp/${NODE_ID}",
        description="The destination peers SEND to (manifest `destination`); ${NODE_ID} is the "
        "sending peer's node id, so each peer can only post to its own.",
    )
    swpt_accepted_content_types: CommaList = Field(
        default_factory=list,
        description="Content types accepted besides application/json, most preferred first.",
    )
    swpt_servers: CommaList = Field(
        default_factory=list, description="host:port list written to the manifest's `servers`."
    )


class ForwarderSettings(Section):
    """Forwarder

    `stomp-bridge forward`: sends a local queue to a Swaptacular peer's bridge.
    """

    swpt_node_id: str | None = Field(
        None, description="This node's id (the forwarder substitutes it for ${NODE_ID})."
    )
    swpt_forward_queue: str | None = Field(None, description="Local queue the forwarder sends to the peer.")
    swpt_peer_manifest: str | None = Field(None, description="The peer's stomp.toml (path) for the forwarder.")
    swpt_forward_window: int = Field(
        100, ge=1, description="Messages the forwarder may have sent and not yet seen receipted."
    )
    swpt_forward_max_backoff: float = Field(
        30.0, gt=0, description="Longest wait between the forwarder's reconnection attempts, seconds."
    )


class OperationsSettings(Section):
    """Operations

    Processes, the metrics and health endpoint, shutdown and logs.
    """

    http_host: str = Field("0.0.0.0", description="Interface of the /metrics, /healthz, /readyz endpoint.")
    http_port: Annotated[int | None, OFF_IS_NONE] = Field(
        9410, ge=0, le=65535, description="Port of that endpoint (0 picks a free one; none disables it)."
    )
    workers: int = Field(
        1, ge=1, le=256,
        description="Bridge processes sharing the listening ports (SO_REUSEPORT), one core each, with "
        "their own AMQP connections; /metrics on http_port sums them. Connection and login limits "
        "apply per worker.",
    )
    shutdown_grace: float = Field(
        10.0, ge=0, description="Seconds SIGTERM waits for in-flight publishes to be confirmed."
    )
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING or ERROR.")
    log_format: Literal["text", "json"] = Field("text", description="text (key=value) or json lines.")

    @field_validator("log_level", mode="before")
    @classmethod
    def _log_level(cls, value: object) -> object:
        """Checked here, not when logging starts: a wrong level is one line, not a traceback."""
        if isinstance(value, str):
            level = value.strip().upper()
            if level not in LOG_LEVELS:
                raise ValueError(f"{value!r} is not a log level; use one of {', '.join(LOG_LEVELS)}")
            return level
        return value

    @field_validator("log_format", mode="before")
    @classmethod
    def _log_format(cls, value: object) -> object:
        """In words, as the log level's (a pattern's error was pydantic's ``String should match
        pattern '^(text|json)$'``)."""
        if isinstance(value, str):
            text = value.strip().lower()
            if text not in LOG_FORMATS:
                raise ValueError(f"{value!r} is not a log format; use text (key=value) or json (one object per line)")
            return text
        return value


class TracingSettings(Section):
    """Tracing

    OpenTelemetry spans for each SEND and delivery, in the client's trace (`traceparent`), exported
    over OTLP/HTTP. Needs the `otel` extra (`pip install 'stomp-bridge[otel]'`); see
    [Tracing](operations.md#tracing).
    """

    tracing: bool = Field(
        False,
        description="Record spans as children of the client's traceparent: `SEND` (to its RECEIPT) and its "
        "`publish` (to RabbitMQ's confirm), and `MESSAGE` (from the delivery to the client's ACK), and export "
        "them over OTLP (needs the otel extra; the bridge does not start without it).",
    )
    tracing_endpoint: str | None = Field(
        None,
        description="OTLP/HTTP URL the spans go to (unset: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, "
        "OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces, else http://localhost:4318/v1/traces).",
    )
    tracing_sample_ratio: float = Field(
        1.0, ge=0.0, le=1.0,
        description="Share of the traces the bridge starts (a SEND or delivery without a traceparent) "
        "that it records; a client's traceparent decides for its own trace (its sampled flag).",
    )


# In the order of the configuration reference; Settings has every field of every section.
SECTIONS: tuple[type[Section], ...] = (
    ListenerSettings, WebSocketSettings, AdmissionSettings, LoginSettings, LimitSettings, FlowSettings,
    HeartbeatSettings, StompSettings, ExtensionSettings, AmqpSettings, TlsSettings, CertLoginSettings,
    SwaptacularSettings, ForwarderSettings, OperationsSettings, TracingSettings,
)
