"""The rules across settings, run once the fields are valid one by one: first the Swaptacular
profile's overrides, then the checks, each a small function of the sections it reads.

A check raises ``ValueError`` with one sentence that names the settings to change; the command
line prints it as ``invalid configuration: …`` and start-up stops. The order is
:meth:`Settings._rules`' (stomp_bridge/settings/model.py): the first broken rule is the one
reported.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from stomp_bridge.settings.sections import (
    AdmissionSettings, AmqpSettings, CertLoginSettings, HeartbeatSettings, ListenerSettings,
    OperationsSettings, TlsSettings,
)

LISTENER_PORTS = ("port", "tls_port", "ws_port", "wss_port")

# The Swaptacular transport is mutual TLS 1.3 on the TLS STOMP listener alone.
SWAPTACULAR_REQUIRES: Mapping[str, object] = {
    "tls_min_version": "1.3", "tls_verify_peer": True, "tls_fail_if_no_peer_cert": True,
}
SWAPTACULAR_OFF = ("port", "ws_port", "wss_port")
# Its own defaults, where the settings give no value: a peer's message that routes nowhere is an error.
SWAPTACULAR_DEFAULTS: Mapping[str, object] = {"tls_port": 61614, "mandatory": True}


def profile_overrides(values: Mapping[str, object], explicit: Set[str]) -> dict[str, object]:
    """The values the profile imposes on ``values`` (the settings by name; ``explicit``: the
    names given by some source, not defaulted). A given value the profile forbids is an error,
    not silently replaced. The default profile imposes nothing."""
    if values["profile"] != "swaptacular":
        return {}
    changes: dict[str, object] = {}
    for name, wanted in SWAPTACULAR_REQUIRES.items():
        if name in explicit and values[name] != wanted:
            raise ValueError(f"profile=swaptacular requires {name}={wanted!s}")
        changes[name] = wanted
    for name in SWAPTACULAR_OFF:
        if name in explicit and values[name] is not None:
            raise ValueError(f"profile=swaptacular serves TLS STOMP only: unset {name}")
        changes[name] = None
    for name, value in SWAPTACULAR_DEFAULTS.items():
        if name not in explicit:
            changes[name] = value
    return changes


def check_a_listener(listeners: ListenerSettings) -> None:
    if all(getattr(listeners, name) is None for name in LISTENER_PORTS):
        raise ValueError("no listener: set port, tls_port, ws_port or wss_port")


def check_heartbeat_bounds(heartbeats: HeartbeatSettings) -> None:
    low, high = heartbeats.heartbeat_min, heartbeats.heartbeat_max
    if low and high and low > high:
        raise ValueError(f"heartbeat_min ({low:g} s) is above heartbeat_max ({high:g} s)")


def check_workers_share_fixed_ports(operations: OperationsSettings, listeners: ListenerSettings) -> None:
    if operations.workers > 1:
        picked = [name for name in LISTENER_PORTS if getattr(listeners, name) == 0]
        if picked:
            raise ValueError(
                f"workers={operations.workers} share their ports: set {', '.join(picked)} to a port "
                "number, not 0 (each worker would pick a port of its own)"
            )


def check_proxy_trust(admission: AdmissionSettings) -> None:
    if admission.proxy_protocol and not admission.proxy_protocol_trusted:
        raise ValueError(
            "proxy_protocol needs proxy_protocol_trusted: the networks of the load balancers "
            "that send the PROXY header (e.g. 10.0.0.0/8); a header from anywhere else could "
            "claim any client address"
        )


def check_tls_listener_files(listeners: ListenerSettings, tls: TlsSettings) -> None:
    for name in ("wss_port", "tls_port"):
        if getattr(listeners, name) is not None and not (tls.tls_cert_file and tls.tls_key_file):
            raise ValueError(f"{name} needs tls_cert_file and tls_key_file")


def check_verify_peer_ca(tls: TlsSettings) -> None:
    if tls.tls_verify_peer and not tls.tls_ca_file:
        raise ValueError("tls_verify_peer needs tls_ca_file (the CAs client certificates chain to)")


def check_cert_login(cert_login: CertLoginSettings, tls: TlsSettings, amqp: AmqpSettings) -> None:
    if not cert_login.ssl_cert_login:
        return
    if not tls.tls_verify_peer:
        raise ValueError("ssl_cert_login needs tls_verify_peer (as the plugin: verify_peer)")
    if cert_login.tls_amqp_auth == "external":
        if not (cert_login.tls_amqp_signer_cert_file and cert_login.tls_amqp_signer_key_file):
            raise ValueError(
                "ssl_cert_login with tls_amqp_auth=external needs tls_amqp_signer_cert_file and "
                "tls_amqp_signer_key_file (or tls_amqp_auth=credentials)"
            )
        if any(not u.strip().startswith("amqps://") for u in amqp.amqp_url.split(",") if u.strip()):
            raise ValueError("tls_amqp_auth=external needs amqps:// RabbitMQ URLs (EXTERNAL is TLS-only)")
    elif not cert_login.tls_amqp_credentials_file:
        raise ValueError("tls_amqp_auth=credentials needs tls_amqp_credentials_file")
