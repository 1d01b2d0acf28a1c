"""The Swaptacular peer profile over mutual TLS 1.3, with real TLS clients and RabbitMQ."""

from __future__ import annotations

import ssl

import pytest

from tests.integration.tls_support import (  # noqa: F401 - fixtures
    amqps,
    refused_handshake,
    subject_dn,
    test_pki,
    tls_dial,
    tls_settings,
)

NODE = "1234abcd"


@pytest.fixture
def peer(test_pki):
    """A peer node's certificate: its node id in the subject's serialNumber."""
    return test_pki.client(("O", "Swaptacular node"), ("serialNumber", NODE), ("CN", "peer node"))


@pytest.fixture
def swpt(bridge, tls_settings, queues, unique):
    """A bridge with profile=swaptacular; peers post to /queue/swpt-<unique>-<their node id>."""

    def make(**settings):
        queues.append(f"swpt-{unique}-{NODE}")
        return bridge(
            **tls_settings, profile="swaptacular", swpt_destination=f"/queue/swpt-{unique}-${{NODE_ID}}",
            **settings,
        )

    return make


def _smp(destination: str, receipt: str, **extra: str) -> dict[str, str]:
    return {
        "destination": destination,
        "receipt": receipt,
        "type": "PrepareTransfer",
        "content-type": "application/json",
        "persistent": "true",
        **extra,
    }


def _connect(conn, host: str = "/"):
    return conn.connect(version="1.2", login=None, passcode=None, host=host)


def test_peer_messages_are_confirmed_by_receipts_in_order(swpt, tls_dial, peer, rabbit, unique):
    b = swpt()
    conn = tls_dial(b, cert=peer)
    assert conn.sock.version() == "TLSv1.3"
    assert _connect(conn)["version"] == "1.2"
    destination = f"/queue/swpt-{unique}-{NODE}"
    for i in range(1, 4):
        conn.send_frame("SEND", _smp(destination, f"m-{i}"), f'{{"n": {i}}}')
    receipts = [conn.expect("RECEIPT")["receipt-id"] for _ in range(3)]
    assert receipts == ["m-1", "m-2", "m-3"]
    got = rabbit.get(f"swpt-{unique}-{NODE}", count=10)
    assert [m["payload"] for m in got] == ['{"n": 1}', '{"n": 2}', '{"n": 3}']
    props = got[0]["properties"]
    assert (props["type"], props["content_type"], props["delivery_mode"]) == (
        "PrepareTransfer", "application/json", 2,
    )


@pytest.mark.parametrize("missing", ["receipt", "type", "content-type", "persistent"])
def test_send_without_a_required_header_gets_an_error_naming_it(swpt, tls_dial, peer, rabbit, unique, missing):
    b = swpt()
    conn = tls_dial(b, cert=peer)
    _connect(conn)
    headers = {k: v for k, v in _smp(f"/queue/swpt-{unique}-{NODE}", "m-1").items() if k != missing}
    conn.send_frame("SEND", headers, "{}")
    error = conn.error_then_close()
    assert error["message"] == "Missing header"
    assert f"'{missing}'" in error.text
    assert rabbit.get(f"swpt-{unique}-{NODE}") == []


@pytest.mark.parametrize(
    "change, message",
    [
        ({"persistent": "false"}, "Invalid header"),
        ({"content-type": "text/plain"}, "Unsupported content type"),
        ({"destination": "/queue/swpt-someone-else"}, "Invalid destination"),
    ],
)
def test_send_breaking_the_profile_is_refused(swpt, tls_dial, peer, unique, change, message):
    conn = tls_dial(swpt(), cert=peer)
    _connect(conn)
    conn.send_frame("SEND", {**_smp(f"/queue/swpt-{unique}-{NODE}", "m-1"), **change}, "{}")
    error = conn.error_then_close()
    assert (error["message"], error["receipt-id"]) == (message, "m-1")


def test_accepted_content_types_extend_json(swpt, tls_dial, peer, rabbit, unique):
    conn = tls_dial(swpt(swpt_accepted_content_types="application/msgpack"), cert=peer)
    _connect(conn)
    conn.receipt("SEND", _smp(f"/queue/swpt-{unique}-{NODE}", "m-1", **{"content-type": "application/msgpack"}),
                 b"\x81\xa1n\x01", receipt_id="m-1")
    assert len(rabbit.get(f"swpt-{unique}-{NODE}")) == 1


def test_only_mutual_tls_13_is_accepted(swpt, tls_dial, peer):
    b = swpt()
    assert isinstance(refused_handshake(lambda: tls_dial(b, cert=peer, max_version=ssl.TLSVersion.TLSv1_2)),
                      ssl.SSLError)
    refused_handshake(lambda: tls_dial(b))  # no client certificate


def test_only_stomp_12_is_spoken(swpt, tls_dial, peer):
    conn = tls_dial(swpt(), cert=peer)
    conn.send_frame("CONNECT", {"accept-version": "1.0,1.1", "host": "/"})
    error = conn.error_then_close()
    assert error["message"] == "Bad CONNECT"
    assert "1.2 only" in error.text


def test_host_carries_the_peers_own_node_id(swpt, tls_dial, peer):
    b = swpt(swpt_host="/${NODE_ID}")
    _connect(tls_dial(b, cert=peer), host=f"/{NODE}")
    conn = tls_dial(b, cert=peer)
    conn.send_frame("CONNECT", {"accept-version": "1.2", "host": "/99999999"})
    error = conn.error_then_close()
    assert error["message"] == "Bad CONNECT"
    assert f"'/{NODE}'" in error.text


def test_certificate_without_node_id_is_refused(swpt, tls_dial, test_pki):
    conn = tls_dial(swpt(), cert=test_pki.client(("O", "Swaptacular node"), ("CN", "no serial number")))
    conn.send_frame("CONNECT", {"accept-version": "1.2", "host": "/"})
    error = conn.error_then_close()
    assert "serialNumber" in error.text


@pytest.mark.amqps
def test_each_peer_can_log_in_to_rabbitmq_as_its_own_certificate_user(
    swpt, tls_dial, test_pki, amqps, rabbit, unique
):
    from tests.rabbit_tls import amqp_connections

    peer = test_pki.client(("O", f"Swaptacular node {unique}"), ("serialNumber", NODE), ("CN", "peer node"))
    user = subject_dn(peer[0])
    rabbit.create_user(user, "unused")
    try:
        rabbit.set_permissions(user)
        b = swpt(amqp_url=amqps.url, tls_amqp_ca_file=test_pki.ca_file, ssl_cert_login=True,
                 tls_amqp_signer_cert_file=test_pki.signer_cert, tls_amqp_signer_key_file=test_pki.signer_key)
        conn = tls_dial(b, cert=peer)
        _connect(conn)
        conn.receipt("SEND", _smp(f"/queue/swpt-{unique}-{NODE}", "m-1"), "{}", receipt_id="m-1")
        assert {c["auth_mechanism"] for c in amqp_connections() if c["user"] == user} == {"EXTERNAL"}
        assert len(rabbit.get(f"swpt-{unique}-{NODE}")) == 1
    finally:
        rabbit.delete_user(user)
