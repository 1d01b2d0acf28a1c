"""TLS listeners, client certificates, certificate login and certificate reload, with real
TLS clients, a real RabbitMQ and (for amqps:// and EXTERNAL) a TLS listener added to it."""

from __future__ import annotations

import ssl
import time

import pytest
from cryptography import x509

from tests import pki
from tests.integration.tls_support import (  # noqa: F401 - fixtures
    amqps,
    refused_handshake,
    subject_dn,
    test_pki,
    tls_dial,
    tls_settings,
)
from tests.rabbit_tls import amqp_connections, broker_cert_login_from, external_enabled, rabbitmqctl_eval


def _send_and_get(conn, rabbit, queues, unique, body="hello") -> None:
    name = f"tls-{unique}"
    queues.append(name)
    conn.receipt("SEND", {"destination": f"/queue/{name}"}, body)
    assert [m["payload"] for m in rabbit.get(name)] == [body]


def test_tls_only_bridge_serves_stomp_over_tls(bridge, tls_settings, tls_dial, rabbit, queues, unique):
    b = bridge(**tls_settings)
    assert b.server._server is None  # port unset: no plain TCP listener
    conn = tls_dial(b)
    assert conn.sock.version() in ("TLSv1.2", "TLSv1.3")
    conn.connect()
    _send_and_get(conn, rabbit, queues, unique)


def test_a_tls_client_that_sends_junk_and_never_reads_is_not_read(bridge, tls_settings, test_pki):
    """As on plain TCP (test_backpressure.py): once write_buffer_high bytes of ERRORs wait for
    the client, the bridge reads nothing more from it; before, it read on and queued them all."""
    from testkit.flood import login, unread_socket, write_until_stalled
    from tests.integration.test_backpressure import JUNK_FRAME, JUNK_LIMIT
    from tests.integration.tls_support import client_context

    b = bridge(**tls_settings)
    sock = client_context(test_pki).wrap_socket(unread_socket(b.tls_port))
    try:
        login(sock)
        written = write_until_stalled(sock, JUNK_FRAME * 64, JUNK_LIMIT)
        assert written < JUNK_LIMIT, "the bridge read every byte of a TLS client that never read its ERRORs"
        assert b._server.counters.reads_held >= 1
    finally:
        sock.close()


def _handshake_failures(b) -> dict[str, float]:
    """stomp_bridge_tls_handshake_failures_total by reason, as /metrics shows it."""
    import re
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{b._server.ops.port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {m[1]: float(m[2]) for m in re.finditer(
        r'^stomp_bridge_tls_handshake_failures_total\{reason="([^"]+)"\} (\S+)$', text, re.M)}


def test_tls_version_floor_refuses_older_clients(bridge, tls_settings, tls_dial):
    b = bridge(**tls_settings, tls_min_version="1.3")
    error = refused_handshake(lambda: tls_dial(b, max_version=ssl.TLSVersion.TLSv1_2))
    assert isinstance(error, ssl.SSLError)
    assert tls_dial(b).sock.version() == "TLSv1.3"
    assert _handshake_failures(b) == {"version": 1}


def test_fail_if_no_peer_cert_refuses_clients_without_certificate(bridge, tls_settings, tls_dial, test_pki):
    b = bridge(**tls_settings, tls_verify_peer=True, tls_fail_if_no_peer_cert=True)
    refused_handshake(lambda: tls_dial(b))
    conn = tls_dial(b, cert=test_pki.client(("O", "tests"), ("CN", "with-cert")))
    conn.connect()
    assert _handshake_failures(b) == {"no_certificate": 1}


def test_certificate_from_an_unknown_ca_is_refused(bridge, tls_settings, tls_dial, test_pki):
    b = bridge(**tls_settings, tls_verify_peer=True)
    stranger = pki.make_ca("someone else's CA")
    refused_handshake(lambda: tls_dial(b, cert=test_pki.client(("CN", "mallory"), ca=stranger)))
    assert _handshake_failures(b) == {"certificate": 1}


def test_expired_client_certificate_is_refused(bridge, tls_settings, tls_dial, test_pki, tmp_path):
    b = bridge(**tls_settings, tls_verify_peer=True)
    expired = pki.client_cert(test_pki.ca, pki.name(("CN", "expired")), days=-1).write(tmp_path, "expired")
    refused_handshake(lambda: tls_dial(b, cert=expired))


def test_verify_peer_without_fail_if_no_peer_cert_lets_password_clients_in(bridge, tls_settings, tls_dial):
    b = bridge(**tls_settings, tls_verify_peer=True, tls_fail_if_no_peer_cert=False)
    tls_dial(b).connect()


# -- certificate login ---------------------------------------------------------------


@pytest.fixture
def cert_user(rabbit):
    """``cert_user(name)``: a RabbitMQ user with that name (a DN or CN) and full rights on /."""
    made: list[str] = []

    def make(name: str, password: str = "unused-pw") -> str:
        rabbit.create_user(name, password)
        rabbit.set_permissions(name)
        made.append(name)
        return name

    yield make
    for name in made:
        rabbit.delete_user(name)


def _external_settings(tls_settings, test_pki, amqps) -> dict[str, object]:
    return {
        **tls_settings,
        "amqp_url": amqps.url,
        "tls_amqp_ca_file": test_pki.ca_file,
        "tls_verify_peer": True,
        "ssl_cert_login": True,
        "tls_amqp_signer_cert_file": test_pki.signer_cert,
        "tls_amqp_signer_key_file": test_pki.signer_key,
    }


@pytest.mark.amqps
def test_dn_login_opens_the_amqp_connection_with_external(
    bridge, tls_settings, tls_dial, test_pki, amqps, cert_user, rabbit, queues, unique
):
    cert = test_pki.client(("O", "stomp-bridge tests"), ("OU", f"dn-{unique}"), ("CN", "alice, the tester"))
    dn = subject_dn(cert[0])
    assert dn == f"CN=alice\\, the tester,OU=dn-{unique},O=stomp-bridge tests"
    cert_user(dn)
    b = bridge(**_external_settings(tls_settings, test_pki, amqps))
    conn = tls_dial(b, cert=cert)
    conn.connect(login=None, passcode=None)
    _send_and_get(conn, rabbit, queues, unique)
    # RabbitMQ itself named the user from the certificate the bridge signed.
    ours = [c for c in amqp_connections() if c["user"] == dn]
    assert {(c["auth_mechanism"], c["ssl"]) for c in ours} == {("EXTERNAL", True)}  # its publishing one too
    # A second connection of the same user reuses the signed certificate.
    signer = b.server.tls_security.cert_login.signer
    tls_dial(b, cert=cert).connect(login=None, passcode=None)
    assert signer.signed == 1


@pytest.mark.amqps
def test_implicit_connect_logs_in_as_the_certificate_user(
    bridge, tls_settings, tls_dial, test_pki, amqps, cert_user, rabbit, queues, unique
):
    cert = test_pki.client(("O", "stomp-bridge tests"), ("CN", f"implicit-{unique}"))
    cert_user(subject_dn(cert[0]))
    b = bridge(**_external_settings(tls_settings, test_pki, amqps), implicit_connect=True, default_user=None)
    conn = tls_dial(b, cert=cert)
    conn.version = "1.2"
    _send_and_get(conn, rabbit, queues, unique)  # no CONNECT at all
    assert {c["auth_mechanism"] for c in amqp_connections() if c["user"] == subject_dn(cert[0])} == {"EXTERNAL"}


@pytest.mark.amqps
def test_cert_login_user_unknown_to_rabbitmq_is_refused(bridge, tls_settings, tls_dial, test_pki, amqps, unique):
    b = bridge(**_external_settings(tls_settings, test_pki, amqps))
    conn = tls_dial(b, cert=test_pki.client(("O", "tests"), ("CN", f"nobody-{unique}")))
    conn.send_frame("CONNECT", {"accept-version": "1.2", "host": "/"})
    error = conn.error_then_close()
    assert error["message"] == "Bad CONNECT"
    assert error.text == f"Access refused for user 'CN=nobody-{unique},O=tests'"


@pytest.mark.amqps
def test_cert_login_refuses_login_and_passcode(bridge, tls_settings, tls_dial, test_pki, amqps):
    b = bridge(**_external_settings(tls_settings, test_pki, amqps))
    conn = tls_dial(b, cert=test_pki.client(("CN", "alice")))
    conn.send_frame("CONNECT", {"accept-version": "1.2", "host": "/", "login": "guest", "passcode": "guest"})
    error = conn.error_then_close()
    assert error["message"] == "Bad CONNECT"
    assert "leave out login and passcode" in error.text


@pytest.mark.amqps
def test_cn_login_opens_the_amqp_connection_with_external(
    bridge, tls_settings, tls_dial, test_pki, amqps, cert_user, rabbit, queues, unique
):
    cert = test_pki.client(("O", "stomp-bridge tests"), ("OU", "cn"), ("CN", f"cn-ext-{unique}"))
    user = cert_user(f"cn-ext-{unique}")
    b = bridge(**_external_settings(tls_settings, test_pki, amqps), ssl_cert_login_from="common_name")
    with broker_cert_login_from("common_name"):
        conn = tls_dial(b, cert=cert)
        conn.connect(login=None, passcode=None)
        _send_and_get(conn, rabbit, queues, unique)
        ours = [c for c in amqp_connections() if c["user"] == user]
    assert {(c["auth_mechanism"], c["ssl"]) for c in ours} == {("EXTERNAL", True)}  # its publishing one too


@pytest.mark.amqps
def test_cn_login_with_a_credentials_file_over_amqps(
    bridge, tls_settings, tls_dial, test_pki, amqps, cert_user, rabbit, queues, unique, tmp_path
):
    user = cert_user(f"amqp-user-{unique}", password="pw-" + unique)
    creds = tmp_path / "credentials.toml"
    creds.write_text(f'["cn-{unique}"]\nuser = "{user}"\npassword = "pw-{unique}"\n')
    b = bridge(
        **tls_settings, amqp_url=amqps.url, tls_amqp_ca_file=test_pki.ca_file, tls_verify_peer=True,
        ssl_cert_login=True, ssl_cert_login_from="common_name", tls_amqp_auth="credentials",
        tls_amqp_credentials_file=str(creds),
    )
    conn = tls_dial(b, cert=test_pki.client(("O", "tests"), ("CN", f"cn-{unique}")))
    conn.connect(login=None, passcode=None)
    _send_and_get(conn, rabbit, queues, unique)
    ours = [c for c in amqp_connections() if c["user"] == user]
    assert {(c["auth_mechanism"], c["ssl"]) for c in ours} == {("PLAIN", True)}  # its publishing one too
    # Without a certificate the same listener takes a password (verify_peer, no fail_if_no_peer_cert).
    tls_dial(b).connect()


@pytest.mark.amqps
def test_amqps_password_login_verifies_rabbitmq_certificate(bridge, tls_settings, tls_dial, test_pki, amqps):
    good = bridge(**tls_settings, amqp_url=amqps.url, tls_amqp_ca_file=test_pki.ca_file)
    tls_dial(good).connect()
    # Without the test CA, RabbitMQ's certificate does not verify: the broker is unavailable.
    wrong = bridge(**tls_settings, amqp_url=amqps.url)
    conn = tls_dial(wrong)
    conn.send_frame("CONNECT", {"accept-version": "1.2", "host": "/", "login": "guest", "passcode": "guest"})
    assert conn.error_then_close()["message"] == "Broker unavailable"


# -- reload ------------------------------------------------------------------------------


def _server_cn(conn) -> str:
    der = conn.sock.getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value


def test_rotated_certificate_is_served_to_new_connections_while_old_ones_stay_open(
    bridge, tls_settings, tls_dial, test_pki, rabbit, queues, unique, tmp_path
):
    cert_file, key_file = pki.server_cert(test_pki.ca, "before-rotation").write(tmp_path, "server")
    b = bridge(**{**tls_settings, "tls_cert_file": cert_file, "tls_key_file": key_file},
               tls_reload_interval=0.1)
    old = tls_dial(b)
    old.connect()
    assert _server_cn(old) == "before-rotation"

    # What cert-manager does: new files in place (the file watch notices them).
    pki.server_cert(test_pki.ca, "after-rotation").write(tmp_path, "server")
    deadline = time.monotonic() + 10
    while b.server.tls.reloads == 0:
        assert time.monotonic() < deadline, "the file watch did not reload the certificate"
        time.sleep(0.05)
    new = tls_dial(b)
    new.connect()
    assert _server_cn(new) == "after-rotation"
    _send_and_get(old, rabbit, queues, unique, "old connection still works")

    # SIGHUP's path, with a broken pair on disk: the previous certificate stays.
    (tmp_path / "server.crt").write_bytes(pki.server_cert(test_pki.ca, "broken").cert_pem)
    assert b.call(b.server.reload_tls) is False
    assert _server_cn(tls_dial(b)) == "after-rotation"


def test_sighup_reloads_the_certificate_of_a_running_bridge(broker, test_pki, tls_dial, tmp_path):
    import os
    import re
    import signal
    import subprocess
    import sys
    import threading
    from types import SimpleNamespace

    cert_file, key_file = pki.server_cert(test_pki.ca, "before-sighup").write(tmp_path, "server")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOMP_BRIDGE_")}
    env.update({
        "STOMP_BRIDGE_PORT": "none", "STOMP_BRIDGE_TLS_PORT": "0", "STOMP_BRIDGE_HTTP_PORT": "0",
        "STOMP_BRIDGE_WS_PORT": "none",  # never the fixed 15674 (others may hold it)
        "STOMP_BRIDGE_TLS_CERT_FILE": cert_file, "STOMP_BRIDGE_TLS_KEY_FILE": key_file,
        "STOMP_BRIDGE_TLS_RELOAD_INTERVAL": "0",  # no file watch: only the signal reloads
        "STOMP_BRIDGE_AMQP_URL": broker.amqp_url, "STOMP_BRIDGE_HOST": "127.0.0.1",
    })
    proc = subprocess.Popen([sys.executable, "-m", "stomp_bridge"], env=env, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
    reader.start()

    def wait_line(pattern: str) -> re.Match:
        deadline = time.monotonic() + 30
        while True:
            for line in list(lines):
                found = re.search(pattern, line)
                if found:
                    return found
            assert proc.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, f"no log line {pattern!r} in {''.join(lines)}"
            time.sleep(0.05)

    try:
        port = int(wait_line(r"stomp-bridge listening.*tls_port=(\d+)").group(1))
        target = SimpleNamespace(tls_port=port)
        before = tls_dial(target)
        before.connect()
        assert _server_cn(before) == "before-sighup"
        pki.server_cert(test_pki.ca, "after-sighup").write(tmp_path, "server")
        proc.send_signal(signal.SIGHUP)
        wait_line("TLS certificate reloaded")
        after = tls_dial(target)
        after.connect()
        assert _server_cn(after) == "after-sighup"
        before.receipt("SEND", {"destination": "/topic/sighup"}, "still here")
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.amqps
def test_wss_shares_the_tls_context_and_certificate_login(
    bridge, tls_settings, test_pki, amqps, cert_user, unique
):
    from websockets.sync.client import connect

    cert = test_pki.client(("O", "stomp-bridge tests"), ("CN", f"wss-{unique}"))
    dn = cert_user(subject_dn(cert[0]))
    b = bridge(**{**_external_settings(tls_settings, test_pki, amqps), "tls_port": None, "wss_port": 0},
               tls_min_version="1.3")
    context = ssl.create_default_context(cafile=test_pki.ca_file)
    context.check_hostname = False
    context.load_cert_chain(*cert)
    with connect(f"wss://127.0.0.1:{b.wss_port}/ws", ssl=context, subprotocols=["v12.stomp"],
                 open_timeout=30) as ws:  # a deadline: three test runs on two cores once took more than 10 s
        assert ws.socket.version() == "TLSv1.3"
        ws.send("CONNECT\naccept-version:1.2\nhost:/\n\n\0")
        assert ws.recv(timeout=20).split("\n", 1)[0] == "CONNECTED"
        assert {c["auth_mechanism"] for c in amqp_connections() if c["user"] == dn} == {"EXTERNAL"}


@pytest.mark.rabbitmqctl
def test_external_enabled_leaves_the_broker_as_it_found_it(broker):
    """The amqps tests add EXTERNAL and verify_peer to the shared broker, and take them away
    again: after a test run, RabbitMQ's auth_mechanisms and ssl_options are what they were."""

    def state() -> tuple[str, str]:
        return (rabbitmqctl_eval("application:get_env(rabbit, auth_mechanisms)."),
                rabbitmqctl_eval("application:get_env(rabbit, ssl_options)."))

    before = state()
    with external_enabled():
        during = state()
        assert "'EXTERNAL'" in during[0] and "verify_peer" in during[1]
    assert state() == before
