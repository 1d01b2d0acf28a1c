"""The Swaptacular profile's pure rules, the TLS settings' validation, and credential files."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from stomp_bridge.swaptacular.certlogin import ConnectSecurity, load_credentials
from stomp_bridge.protocol.errors import AccessRefused, ProtocolError
from stomp_bridge.settings import Settings
from stomp_bridge.core.peer import check_send_headers, render
from stomp_bridge.swaptacular.profile import SwaptacularProfile
from stomp_bridge.tls import PeerCertificate
from tests import pki

GOOD = {
    "destination": "/exchange/smp/1234",
    "receipt": "m-1",
    "type": "PrepareTransfer",
    "content-type": "application/json",
    "persistent": "true",
}
ACCEPTED = frozenset({"application/json", "application/msgpack"})
TLS = {"tls_cert_file": "c.pem", "tls_key_file": "k.pem", "tls_ca_file": "ca.pem"}


def test_render_substitutes_every_node_id() -> None:
    assert render("/${NODE_ID}/x/${NODE_ID}", "12345678") == "/12345678/x/12345678"
    assert render("/", "1") == "/"


def test_a_complete_send_passes() -> None:
    check_send_headers(GOOD, "/exchange/smp/1234", ACCEPTED)
    check_send_headers({**GOOD, "content-type": "application/msgpack; q=1"}, "/exchange/smp/1234", ACCEPTED)


@pytest.mark.parametrize("missing", ["receipt", "type", "content-type", "persistent"])
def test_send_without_a_required_header_names_it(missing: str) -> None:
    headers = {k: v for k, v in GOOD.items() if k != missing}
    with pytest.raises(ProtocolError) as info:
        check_send_headers(headers, "/exchange/smp/1234", ACCEPTED)
    assert info.value.message == "Missing header"
    assert f"'{missing}'" in info.value.detail


@pytest.mark.parametrize(
    "change, message",
    [
        ({"persistent": "false"}, "Invalid header"),
        ({"persistent": "TRUE"}, "Invalid header"),
        ({"type": ""}, "Invalid header"),
        ({"content-type": "text/plain"}, "Unsupported content type"),
        ({"destination": "/exchange/smp/9999"}, "Invalid destination"),
    ],
)
def test_send_with_a_wrong_value_is_refused(change: dict[str, str], message: str) -> None:
    with pytest.raises(ProtocolError) as info:
        check_send_headers({**GOOD, **change}, "/exchange/smp/1234", ACCEPTED)
    assert info.value.message == message


def _profile(**settings: object) -> SwaptacularProfile:
    return SwaptacularProfile(Settings(profile="swaptacular", **TLS, **settings))


def _peer(*pairs: tuple[str, str]) -> PeerCertificate:
    return PeerCertificate.from_der(pki.client_cert(pki.make_ca("unit"), pki.name(*pairs)).cert_der)


def test_profile_binds_the_node_id_from_the_certificate() -> None:
    profile = _profile(swpt_host="/${NODE_ID}", swpt_vhost="smp", swpt_destination="/queue/in.${NODE_ID}")
    policy = profile.bind(_peer(("serialNumber", "1234"), ("CN", "peer")), {"host": "/1234"}, "1.2")
    assert (policy.node_id, policy.vhost, policy.destination) == ("1234", "smp", "/queue/in.1234")


@pytest.mark.parametrize(
    "pairs, headers, version, error",
    [
        ((("serialNumber", "1234"),), {"host": "/1234"}, "1.1", ProtocolError),  # 1.2 only
        ((("serialNumber", "1234"),), {"host": "/9999"}, "1.2", AccessRefused),  # another node's id
        ((("serialNumber", "1234"),), {}, "1.2", AccessRefused),  # host is required
        ((("CN", "no serial"),), {"host": "/1234"}, "1.2", AccessRefused),
    ],
)
def test_profile_refuses_connect(pairs, headers, version, error) -> None:
    with pytest.raises(error):
        _profile(swpt_host="/${NODE_ID}").bind(_peer(*pairs), headers, version)


def test_profile_refuses_a_connection_without_certificate() -> None:
    with pytest.raises(AccessRefused):
        _profile().bind(None, {"host": "/"}, "1.2")


async def test_cert_login_refuses_login_headers_beside_a_certificate(tmp_path) -> None:
    from stomp_bridge.swaptacular.certlogin import CertLogin

    creds = tmp_path / "creds.toml"
    creds.write_text('["alice"]\nuser = "amqp-alice"\npassword = "s3cret"\n')
    settings = Settings(
        tls_port=0, **TLS, tls_verify_peer=True, ssl_cert_login=True, ssl_cert_login_from="common_name",
        tls_amqp_auth="credentials", tls_amqp_credentials_file=str(creds),
    )
    security = ConnectSecurity(cert_login=CertLogin(settings.cert_login, settings.amqp))
    peer = _peer(("O", "x"), ("CN", "alice"))
    login, policy = await security.resolve(peer, {}, "1.2")
    assert (login.user, login.password, login.external, policy) == ("amqp-alice", "s3cret", False, None)
    with pytest.raises(AccessRefused):
        await security.resolve(peer, {"login": "alice", "passcode": "x"}, "1.2")
    with pytest.raises(AccessRefused):
        await security.resolve(_peer(("CN", "mallory")), {}, "1.2")
    assert await security.resolve(None, {"login": "guest"}, "1.2") == (None, None)


def test_credentials_file_entries_default_user_to_the_certificate_name() -> None:
    assert load_credentials('["CN=a,O=b"]\npassword = "p"\n["c"]\nuser = "u"\npassword = "q"\n') == {
        "CN=a,O=b": ("CN=a,O=b", "p"),
        "c": ("u", "q"),
    }
    with pytest.raises(ValueError):
        load_credentials('["c"]\nuser = "u"\n')


def test_swaptacular_profile_is_one_switch() -> None:
    s = Settings(profile="swaptacular", **TLS)
    assert (s.port, s.tls_port, s.tls_min_version, s.tls_verify_peer, s.tls_fail_if_no_peer_cert) == (
        None, 61614, "1.3", True, True,
    )
    assert (s.ws_port, s.wss_port) == (None, None)  # only the mutual-TLS STOMP listener
    # a peer's message that no queue takes is an ERROR, not a RECEIPT (swpt_stomp's own server)
    assert s.mandatory is True
    assert Settings(profile="swaptacular", mandatory=False, **TLS).mandatory is False
    assert Settings().mandatory is False  # the plugin's way elsewhere


def test_listeners_can_be_switched_off_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("STOMP_BRIDGE_PORT", "none")
    monkeypatch.setenv("STOMP_BRIDGE_TLS_PORT", "61614")
    s = Settings(**{k: v for k, v in TLS.items()})
    assert (s.port, s.tls_port) == (None, 61614)
    assert Settings(port="", **TLS).port is None and Settings(port="off", **TLS).port is None


@pytest.mark.parametrize(
    "settings",
    [
        {"port": None, "ws_port": None},  # no listener at all
        {"tls_port": 61614},  # no certificate
        {"tls_port": 61614, "tls_cert_file": "c", "tls_key_file": "k", "tls_verify_peer": True},  # no CA
        {"profile": "swaptacular", **TLS, "tls_min_version": "1.2"},
        {"profile": "swaptacular", **TLS, "port": 61613},
        {"profile": "swaptacular", **TLS, "ws_port": 15674},
        {"tls_port": 0, **TLS, "ssl_cert_login": True},  # cert login without verify_peer
        {"tls_port": 0, **TLS, "tls_verify_peer": True, "ssl_cert_login": True},  # external, no signer
        {"tls_port": 0, **TLS, "tls_verify_peer": True, "ssl_cert_login": True,
         "tls_amqp_signer_cert_file": "s", "tls_amqp_signer_key_file": "k"},  # external over amqp://
        {"tls_port": 0, **TLS, "tls_verify_peer": True, "ssl_cert_login": True,
         "tls_amqp_auth": "credentials"},  # no credentials file
    ],
)
def test_inconsistent_tls_settings_stop_start_up(settings: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Settings(**settings)
