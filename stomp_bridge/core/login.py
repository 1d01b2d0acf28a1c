"""CONNECT's decisions, without I/O: who logs in, to which vhost, with which heart-beats,
and what CONNECTED says.

The driver does the I/O around them (the certificate lookup, the login
throttle's bookkeeping, opening the AMQP connection); the order of the checks
here is the order of the ERRORs a client sees, the plugin's where it has one:
credentials, then heart-beat, then ``loopback_users``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from stomp_bridge.protocol.connect import heartbeat_seconds, is_loopback, parse_heartbeat
from stomp_bridge.protocol.errors import AccessRefused

if TYPE_CHECKING:
    from stomp_bridge.core.peer import PeerPolicy
    from stomp_bridge.core.rules import Rules


class AmqpLogin(Protocol):
    """A client certificate's login to RabbitMQ (``swaptacular.certlogin.AmqpLogin``)."""

    user: str
    password: str


@dataclass(frozen=True, slots=True)
class LoginRequest:
    """What CONNECT asks for, once the bridge's rules have been applied."""

    user: str
    passcode: str
    vhost: str
    heartbeat: tuple[int, int]  # (server sends every, server expects every) ms, whole seconds


def credentials(
    settings: Rules,
    headers: Mapping[str, str],
    cert_login: AmqpLogin | None,
    transport: tuple[str | None, str | None] | None,
) -> tuple[str, str | None]:
    """(user, passcode), by precedence: the client certificate's login; the credentials the
    transport established (web-stomp's use_http_auth: CONNECT's ``login`` and ``passcode``
    are then ignored, as the plugin's force_default_creds); CONNECT's ``login`` and
    ``passcode``, each replaced by ``default_user`` or ``default_pass`` only where it is
    missing (rabbit_stomp_processor:creds/3): a passcode without a login (an OAuth 2 token)
    is checked as it came, never swapped for the default user's password."""
    login = headers.get("login")
    if cert_login is not None:
        return cert_login.user, cert_login.password
    if transport is not None:
        login, passcode = transport
        if login is None:
            raise AccessRefused(
                "Bad CONNECT",
                "No HTTP Basic credentials on the WebSocket upgrade request (the bridge's "
                "ws_use_http_auth) and no default_user configured on the bridge",
            )
        return login, passcode
    if login is None:
        if settings.default_user is None:
            raise AccessRefused("Bad CONNECT", "No login header and no default_user configured on the bridge")
        login = settings.default_user
    return login, headers.get("passcode", settings.default_pass or "")


def vhost_for(settings: Rules, host: str) -> str:
    """``host_vhosts``: clients such as stompman always send ``host:<server host name>``, which
    the plugin takes for a vhost name; the map names the vhost instead."""
    mapped = settings.host_vhosts
    return mapped.get(host, host) if mapped else host


def requested_vhost(settings: Rules, headers: Mapping[str, str], policy: PeerPolicy | None) -> str:
    if policy is not None:  # Swaptacular: host names the peer, the vhost is configured
        return policy.vhost
    return vhost_for(settings, headers.get("host", settings.default_vhost))


def negotiate_heartbeat(header: str, minimum: float = 0.0, maximum: float = 0.0) -> tuple[int, int]:
    """(server sends every, server expects every) ms from the client's ``heart-beat: cx,cy``:
    the bridge sends every cy and expects every cx, in whole seconds as the plugin rounds them
    (0 stays 0: none).

    The server's bounds (seconds; 0 is none, the plugin's way), as Artemis' connection-TTL
    bounds: ``minimum`` raises an interval a client asked to be shorter, either way (STOMP
    takes the larger of the two sides' values, so the client follows); ``maximum`` is the
    longest silence the bridge accepts: a client that offers no heart-beats, or slower ones,
    is told that interval in CONNECTED and dropped after ``heartbeat_tolerance`` times it
    without a byte. The bridge never sends heart-beats to a client that asked for none.
    """
    cx, cy = parse_heartbeat(header)
    sends, expects = heartbeat_seconds(cy) * 1000, heartbeat_seconds(cx) * 1000
    floor, ceiling = round(minimum * 1000), round(maximum * 1000)
    if floor:
        sends = max(sends, floor) if sends else 0
        expects = max(expects, floor) if expects else 0
    if ceiling and (expects == 0 or expects > ceiling):
        expects = ceiling
    return sends, expects


def login_request(
    settings: Rules,
    headers: Mapping[str, str],
    *,
    peer: str | None,
    cert_login: AmqpLogin | None = None,
    transport: tuple[str | None, str | None] | None = None,
    policy: PeerPolicy | None = None,
) -> LoginRequest:
    """CONNECT's login, or its ERROR: credentials, vhost, heart-beat, ``loopback_users``."""
    user, passcode = credentials(settings, headers, cert_login, transport)
    vhost = requested_vhost(settings, headers, policy)
    heartbeat = negotiate_heartbeat(headers.get("heart-beat", "0,0"), settings.heartbeat_min, settings.heartbeat_max)
    if user in settings.loopback_users and not is_loopback(peer):
        raise AccessRefused("Bad CONNECT", "non-loopback access denied")
    return LoginRequest(user, passcode or "", vhost, heartbeat)


def throttled(throttle: Any, peer: str | None, user: str, wait: float) -> AccessRefused:
    """The refusal of a login the throttle holds back for ``wait`` more seconds."""
    return AccessRefused(
        "Bad CONNECT",
        f"Access refused for user '{user}': {throttle.limit} failed logins from "
        f"{peer} within {throttle.window:g} s; try again in {math.ceil(wait)} s",
        private="login_failures_per_minute",
    )


def connected_headers(
    session_id: str, heartbeat: tuple[int, int], version: str, server: str | None
) -> dict[str, str]:
    """CONNECTED's headers, in the plugin's order; ``server`` None when hidden."""
    out = {"session": session_id, "heart-beat": f"{heartbeat[0]},{heartbeat[1]}", "version": version}
    if server is not None:
        out["server"] = server
    return out


def server_header(broker_version: str, bridge_version: str) -> str:
    # Clients match on "RabbitMQ/"; the comment (STOMP 1.2 grammar) names the bridge.
    return f"RabbitMQ/{broker_version} (stomp-bridge/{bridge_version})"


def fallback_vhost(settings: Rules, vhost: str) -> str | None:
    """``unknown_host_default_vhost`` (opt-in): the vhost to log in to instead if RabbitMQ refuses
    ``vhost`` as a vhost (``vhost_refused``): ``default_vhost``, for a host that is not it and
    not one ``host_vhosts`` maps to; None otherwise."""
    if (
        settings.unknown_host_default_vhost
        and vhost != settings.default_vhost
        and vhost not in settings.host_vhosts.values()
    ):
        return settings.default_vhost
    return None


def vhost_refused(error: AccessRefused) -> bool:
    """RabbitMQ refused the vhost (not the credentials)."""
    return error.detail.startswith("Virtual host")
