"""CONNECT's decisions without a broker: credentials, vhost, heart-beats, loopback users,
the throttle's refusal and what CONNECTED says.

Each decides who reaches RabbitMQ as whom, so a mistake is a security bug or a
client that cannot log in; the integration tests check the same against the
plugin, these pin each rule on its own.
"""

from __future__ import annotations

import pytest

from stomp_bridge.protocol.errors import AccessRefused, ProtocolError
from stomp_bridge.core import login
from stomp_bridge.protocol import headers as hdr
from stomp_bridge.settings import Settings
from stomp_bridge.swaptacular.certlogin import AmqpLogin


def _settings(**kw) -> Settings:
    return Settings(port=0, ws_port=None, http_port=None, **kw)


def test_connect_login_and_passcode_are_used():
    assert login.credentials(_settings(), {"login": "u", "passcode": "p"}, None, None) == ("u", "p")


def test_a_login_without_passcode_gets_the_default_passcode():
    assert login.credentials(_settings(default_pass="dp"), {"login": "u"}, None, None) == ("u", "dp")
    assert login.credentials(_settings(default_pass=None), {"login": "u"}, None, None) == ("u", "")


def test_no_login_is_the_default_user_or_a_refusal():
    assert login.credentials(_settings(default_user="d", default_pass="dp"), {}, None, None) == ("d", "dp")
    assert login.credentials(_settings(default_user="d", default_pass=None), {}, None, None) == ("d", "")
    with pytest.raises(AccessRefused, match="Bad CONNECT") as err:
        login.credentials(_settings(default_user=None), {}, None, None)
    assert err.value.detail == "No login header and no default_user configured on the bridge"


def test_a_passcode_without_login_is_kept_and_only_the_login_defaulted():
    """rabbit_stomp_processor:creds/3 defaults each header on its own: a JWT as the passcode
    and no login reaches RabbitMQ as (default_user, the JWT), never as default_user's password."""
    settings = _settings(default_user="d", default_pass="dp")
    assert login.credentials(settings, {"passcode": "eyJ.token"}, None, None) == ("d", "eyJ.token")
    assert login.credentials(settings, {"passcode": ""}, None, None) == ("d", "")
    with pytest.raises(AccessRefused, match="no default_user"):
        login.credentials(_settings(default_user=None), {"passcode": "eyJ.token"}, None, None)


def test_a_certificate_login_wins_over_everything():
    cert = AmqpLogin("cert-user", "cert-pass")
    headers = {"login": "u", "passcode": "p"}
    assert login.credentials(_settings(), headers, cert, ("t", "tp")) == ("cert-user", "cert-pass")


def test_transport_credentials_override_connects_login():
    """web-stomp's use_http_auth: CONNECT's login and passcode are ignored."""
    assert login.credentials(_settings(), {"login": "u", "passcode": "p"}, None, ("t", "tp")) == ("t", "tp")
    with pytest.raises(AccessRefused) as err:
        login.credentials(_settings(), {"login": "u"}, None, (None, None))
    assert "ws_use_http_auth" in err.value.detail


def test_vhost_comes_from_host_through_host_vhosts():
    settings = _settings(host_vhosts={"broker.example.com": "prod"})
    assert login.requested_vhost(settings, {"host": "broker.example.com"}, None) == "prod"
    assert login.requested_vhost(settings, {"host": "other"}, None) == "other"
    assert login.requested_vhost(_settings(default_vhost="dv"), {}, None) == "dv"


def test_unknown_host_falls_back_only_when_enabled_and_refused_as_a_vhost():
    on = _settings(unknown_host_default_vhost=True, host_vhosts={"h": "mapped"})
    assert login.fallback_vhost(on, "x") == "/"
    assert login.fallback_vhost(_settings(), "x") is None
    assert login.fallback_vhost(on, "/") is None  # already the default vhost
    assert login.fallback_vhost(on, "mapped") is None  # configured on purpose
    assert login.vhost_refused(AccessRefused("Bad CONNECT", "Virtual host 'x' access denied"))
    assert not login.vhost_refused(AccessRefused("Bad CONNECT", "Access refused for user 'u'"))


@pytest.mark.parametrize(
    ("header", "expected"),
    [("0,0", (0, 0)), ("1000,2000", (2000, 1000)), ("1,10", (1000, 1000)), ("0,2500", (2000, 0))],
)
def test_heartbeats_are_whole_seconds_the_bridge_sends_cy_and_expects_cx(header, expected):
    assert login.negotiate_heartbeat(header) == expected


@pytest.mark.parametrize(
    ("header", "minimum", "maximum", "expected"),
    [
        ("1000,1000", 5, 0, (5000, 5000)),  # more often than the floor: raised, both ways
        ("0,0", 5, 0, (0, 0)),  # the floor never turns heart-beats on
        ("10000,20000", 5, 0, (20000, 10000)),  # slower than the floor: as asked
        ("0,0", 0, 30, (0, 30000)),  # no heart-beats offered: silence is bounded anyway
        ("60000,0", 0, 30, (0, 30000)),  # slower than the ceiling: held to it
        ("10000,60000", 0, 30, (60000, 10000)),  # within: as asked; what it receives is its choice
        ("1000,1000", 5, 30, (5000, 5000)),
    ],
)
def test_server_heartbeat_bounds(header, minimum, maximum, expected):
    assert login.negotiate_heartbeat(header, minimum, maximum) == expected


def test_heartbeat_bounds_from_the_settings_reach_the_login():
    settings = _settings(heartbeat_max=20)
    request = login.login_request(settings, {"login": "guest"}, peer="127.0.0.1")
    assert request.heartbeat == (0, 20000)
    with pytest.raises(ValueError, match="heartbeat_min .5 s. is above heartbeat_max .2 s."):
        _settings(heartbeat_min=5, heartbeat_max=2)


def test_login_request_checks_in_the_plugins_order():
    settings = _settings(loopback_users=["guest"])
    # a bad heart-beat is reported before the loopback refusal
    with pytest.raises(ProtocolError, match="Invalid heart-beat header"):
        login.login_request(settings, {"login": "guest", "heart-beat": "x"}, peer="10.0.0.1")
    with pytest.raises(AccessRefused) as err:
        login.login_request(settings, {"login": "guest"}, peer="10.0.0.1")
    assert err.value.detail == "non-loopback access denied"
    request = login.login_request(settings, {"login": "guest", "heart-beat": "0,5000"}, peer="127.0.0.1")
    assert request == login.LoginRequest("guest", "guest", "/", (5000, 0))


def test_version_1_0_headers_lose_leading_blanks():
    assert hdr.trim_headers({"login": "  u "}, "1.0") == {"login": "u "}
    assert hdr.trim_headers({"login": "  u "}, "1.2") == {"login": "  u "}


def test_the_throttle_refusal_says_when_to_retry():
    class Throttle:
        limit, window = 5, 60.0

    error = login.throttled(Throttle(), "10.0.0.1", "u", 2.1)  # type: ignore[arg-type]
    assert error.detail == "Access refused for user 'u': 5 failed logins from 10.0.0.1 within 60 s; try again in 3 s"
    assert error.private == "login_failures_per_minute"


def test_connected_headers_in_the_plugins_order():
    server = login.server_header("4.3.0", "1.2.3")
    out = login.connected_headers("session-x", (10000, 0), "1.2", server)
    assert list(out.items()) == [
        ("session", "session-x"), ("heart-beat", "10000,0"), ("version", "1.2"),
        ("server", "RabbitMQ/4.3.0 (stomp-bridge/1.2.3)"),
    ]
    assert "server" not in login.connected_headers("session-x", (0, 0), "1.1", None)
