"""The rules across settings (stomp_bridge/settings/rules.py), one step at a time on the
sections each reads, and their order in Settings: the profile first, then the checks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from stomp_bridge.settings import (
    AdmissionSettings, AmqpSettings, CertLoginSettings, HeartbeatSettings, ListenerSettings,
    OperationsSettings, Settings, TlsSettings,
)
from stomp_bridge.settings.rules import (
    check_a_listener, check_cert_login, check_heartbeat_bounds, check_proxy_trust, check_tls_listener_files,
    check_verify_peer_ca, check_workers_share_fixed_ports, profile_overrides,
)

FILES = TlsSettings(tls_cert_file="c.pem", tls_key_file="k.pem")
VERIFIED = TlsSettings(tls_cert_file="c.pem", tls_key_file="k.pem", tls_ca_file="ca.pem", tls_verify_peer=True)


def values(**given: object) -> dict[str, object]:
    """The settings by name as the profile step sees them: defaults, and ``given``."""
    return dict(Settings.model_construct(**given))


# -- the profile's overrides ----------------------------------------------------------------


def test_the_default_profile_imposes_nothing():
    assert profile_overrides(values(port=None, tls_min_version="1.2"), {"port", "tls_min_version"}) == {}


def test_swaptacular_imposes_mutual_tls_13_on_the_tls_listener_alone():
    assert profile_overrides(values(profile="swaptacular"), {"profile"}) == {
        "tls_min_version": "1.3", "tls_verify_peer": True, "tls_fail_if_no_peer_cert": True,
        "port": None, "ws_port": None, "wss_port": None, "tls_port": 61614, "mandatory": True,
    }


def test_swaptacular_keeps_what_was_given_where_it_only_has_a_default():
    given = values(profile="swaptacular", tls_port=7000, mandatory=False)
    changes = profile_overrides(given, {"profile", "tls_port", "mandatory"})
    assert "tls_port" not in changes and "mandatory" not in changes


def test_swaptacular_accepts_what_it_would_impose_anyway():
    given = values(profile="swaptacular", tls_min_version="1.3", tls_verify_peer=True, port=None)
    assert profile_overrides(given, {"profile", "tls_min_version", "tls_verify_peer", "port"})["port"] is None


@pytest.mark.parametrize("given,message", [
    ({"tls_min_version": "1.2"}, "profile=swaptacular requires tls_min_version=1.3"),
    ({"tls_verify_peer": False}, "profile=swaptacular requires tls_verify_peer=True"),
    ({"tls_fail_if_no_peer_cert": False}, "profile=swaptacular requires tls_fail_if_no_peer_cert=True"),
    ({"port": 61613}, "profile=swaptacular serves TLS STOMP only: unset port"),
    ({"ws_port": 15674}, "profile=swaptacular serves TLS STOMP only: unset ws_port"),
    ({"wss_port": 15673}, "profile=swaptacular serves TLS STOMP only: unset wss_port"),
])
def test_swaptacular_refuses_a_given_value_it_forbids(given, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        profile_overrides(values(profile="swaptacular", **given), {"profile", *given})


# -- the checks ---------------------------------------------------------------------------


def test_some_listener_must_be_on():
    with pytest.raises(ValueError, match="^no listener: set port, tls_port, ws_port or wss_port$"):
        check_a_listener(ListenerSettings(port=None, ws_port=None))
    check_a_listener(ListenerSettings(port=None, ws_port=None, wss_port=0))


def test_heartbeat_min_may_not_exceed_heartbeat_max():
    with pytest.raises(ValueError, match=r"^heartbeat_min \(5 s\) is above heartbeat_max \(2 s\)$"):
        check_heartbeat_bounds(HeartbeatSettings(heartbeat_min=5, heartbeat_max=2))
    check_heartbeat_bounds(HeartbeatSettings(heartbeat_min=5, heartbeat_max=5))
    check_heartbeat_bounds(HeartbeatSettings(heartbeat_min=5))  # no maximum


def test_workers_need_fixed_ports():
    both = ListenerSettings(port=0, ws_port=0)
    with pytest.raises(ValueError, match="^workers=2 share their ports: set port, ws_port to a port number"):
        check_workers_share_fixed_ports(OperationsSettings(workers=2), both)
    check_workers_share_fixed_ports(OperationsSettings(workers=1), both)
    check_workers_share_fixed_ports(OperationsSettings(workers=2), ListenerSettings(port=61613, ws_port=None))


def test_proxy_protocol_needs_its_trusted_networks():
    with pytest.raises(ValueError, match="^proxy_protocol needs proxy_protocol_trusted"):
        check_proxy_trust(AdmissionSettings(proxy_protocol=True))
    check_proxy_trust(AdmissionSettings(proxy_protocol=True, proxy_protocol_trusted=["10.0.0.0/8"]))
    check_proxy_trust(AdmissionSettings())


@pytest.mark.parametrize("listener", ["tls_port", "wss_port"])
def test_tls_listeners_need_a_certificate_and_its_key(listener):
    listeners = ListenerSettings(**{listener: 0})
    for tls in (TlsSettings(), TlsSettings(tls_cert_file="c.pem"), TlsSettings(tls_key_file="k.pem")):
        with pytest.raises(ValueError, match=f"^{listener} needs tls_cert_file and tls_key_file$"):
            check_tls_listener_files(listeners, tls)
    check_tls_listener_files(listeners, FILES)
    check_tls_listener_files(ListenerSettings(), TlsSettings())  # no TLS listener, no files needed


def test_verify_peer_needs_the_client_cas():
    with pytest.raises(ValueError, match="^tls_verify_peer needs tls_ca_file"):
        check_verify_peer_ca(TlsSettings(tls_verify_peer=True))
    check_verify_peer_ca(VERIFIED)


@pytest.mark.parametrize("cert_login,tls,amqp,message", [
    (CertLoginSettings(ssl_cert_login=True, tls_amqp_auth="credentials", tls_amqp_credentials_file="c.toml"),
     FILES, AmqpSettings(), "ssl_cert_login needs tls_verify_peer"),
    (CertLoginSettings(ssl_cert_login=True), VERIFIED, AmqpSettings(amqp_url="amqps://r:5671/"),
     "ssl_cert_login with tls_amqp_auth=external needs tls_amqp_signer_cert_file and tls_amqp_signer_key_file"),
    (CertLoginSettings(ssl_cert_login=True, tls_amqp_signer_cert_file="s.pem", tls_amqp_signer_key_file="sk.pem"),
     VERIFIED, AmqpSettings(amqp_url="amqps://r1:5671/, amqp://r2:5672/"),
     "tls_amqp_auth=external needs amqps:// RabbitMQ URLs"),
    (CertLoginSettings(ssl_cert_login=True, tls_amqp_auth="credentials"), VERIFIED, AmqpSettings(),
     "tls_amqp_auth=credentials needs tls_amqp_credentials_file"),
])
def test_certificate_login_needs_verified_peers_and_a_way_into_rabbitmq(cert_login, tls, amqp, message):
    with pytest.raises(ValueError, match=f"^{message}"):
        check_cert_login(cert_login, tls, amqp)


def test_certificate_login_passes_with_either_way_into_rabbitmq():
    check_cert_login(CertLoginSettings(), TlsSettings(), AmqpSettings())  # off: nothing needed
    external = CertLoginSettings(ssl_cert_login=True, tls_amqp_signer_cert_file="s.pem",
                                 tls_amqp_signer_key_file="sk.pem")
    check_cert_login(external, VERIFIED, AmqpSettings(amqp_url="amqps://r1:5671/,amqps://r2:5671/"))
    credentials = CertLoginSettings(ssl_cert_login=True, tls_amqp_auth="credentials",
                                    tls_amqp_credentials_file="c.toml")
    check_cert_login(credentials, VERIFIED, AmqpSettings())


# -- in Settings ----------------------------------------------------------------------------


def test_the_profile_applies_before_the_checks():
    """The profile turns the TLS listener on, so the check that it has its files sees it."""
    with pytest.raises(ValidationError, match="tls_port needs tls_cert_file and tls_key_file"):
        Settings(profile="swaptacular")


def test_the_first_broken_rule_is_the_one_reported():
    with pytest.raises(ValidationError) as caught:
        Settings(port=None, ws_port=None, heartbeat_min=5, heartbeat_max=2, proxy_protocol=True)
    assert [e["msg"] for e in caught.value.errors()] == [
        "Value error, no listener: set port, tls_port, ws_port or wss_port"
    ]


def test_values_the_profile_imposes_do_not_count_as_given():
    settings = Settings(profile="swaptacular", tls_cert_file="c", tls_key_file="k", tls_ca_file="ca")
    assert (settings.tls_port, settings.port, settings.mandatory) == (61614, None, True)
    assert settings.model_fields_set == {"profile", "tls_cert_file", "tls_key_file", "tls_ca_file"}
