"""Peer identity as RabbitMQ names it, the listener context, and its reload."""

from __future__ import annotations

import socket
import ssl
import threading

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from stomp_bridge.tls import (
    HANDSHAKE_FAILURES,
    PeerCertificate,
    ServerTLS,
    ServerTLSConfig,
    build_client_context,
    common_name,
    handshake_failure,
    rabbit_dn,
)
from tests import pki


def _name(*attrs: tuple[x509.ObjectIdentifier, str]) -> x509.Name:
    return x509.Name([x509.NameAttribute(oid, value) for oid, value in attrs])


O, CN, C, SN = NameOID.ORGANIZATION_NAME, NameOID.COMMON_NAME, NameOID.COUNTRY_NAME, NameOID.SERIAL_NUMBER


@pytest.mark.parametrize(
    "name, expected",
    [
        # rabbit_cert_info:format_rdn_sequence/1: last RDN first, joined with ","
        (_name((C, "US"), (O, "Example"), (CN, "alice")), "CN=alice,O=Example,C=US"),
        (_name((O, "Acme, Inc."), (CN, "bob")), "CN=bob,O=Acme\\, Inc."),
        (_name((CN, "#lead")), "CN=\\#lead"),
        (_name((CN, " lead and trail ")), "CN=\\ lead and trail\\ "),
        (_name((CN, 'a+b;c<d>e"f\\g')), 'CN=a\\+b\\;c\\<d\\>e\\"f\\\\g'),
        (_name((CN, "tilde~")), "CN=tilde\\7E"),  # RabbitMQ escapes >= 126
        (_name((CN, "zoë")), "CN=zo\\C3\\AB"),  # UTF-8 bytes, upper-case hex
        (_name((SN, "1234abcd"), (CN, "node")), "CN=node,SERIALNUMBER=1234abcd"),
        (_name((NameOID.USER_ID, "u1")), "UID=u1"),
        (_name((NameOID.BUSINESS_CATEGORY, "x")), "2.5.4.15=x"),  # unknown: dotted OID
        (
            x509.Name([x509.RelativeDistinguishedName(
                [x509.NameAttribute(CN, "a"), x509.NameAttribute(O, "b")]
            )]),
            None,  # multi-valued RDN: joined with "+" in DER (set) order
        ),
    ],
)
def test_rabbit_dn_matches_rabbitmq_formatting(name: x509.Name, expected: str | None) -> None:
    if expected is None:
        assert sorted(rabbit_dn(name).split("+")) == ["CN=a", "O=b"]
    else:
        assert rabbit_dn(name) == expected


@pytest.mark.parametrize(
    "name, expected",
    [
        (_name((O, "Example"), (CN, "alice")), "alice"),
        (_name((CN, "one"), (CN, "two")), "one,two"),  # rabbit_ssl joins every CN in subject order
        (_name((O, "no cn")), None),
    ],
)
def test_common_name(name: x509.Name, expected: str | None) -> None:
    assert common_name(name) == expected


def test_peer_certificate_names_and_attributes() -> None:
    ca = pki.make_ca("unit CA")
    cert = pki.client_cert(ca, pki.name(("O", "Org"), ("serialNumber", "00ff"), ("CN", "peer")))
    peer = PeerCertificate.from_der(cert.cert_der)
    assert peer.login_name("distinguished_name") == "CN=peer,SERIALNUMBER=00ff,O=Org"
    assert peer.login_name("common_name") == "peer"
    assert peer.attribute("serialNumber") == "00ff"
    assert peer.attribute("2.5.4.5") == "00ff"
    assert peer.attribute("OU") is None


def _handshake_subject(server: ServerTLS, ca_file: str) -> str:
    """Handshake a client against ``server.context`` over a socket pair; the server's CN."""
    left, right = socket.socketpair()
    result: dict[str, object] = {}

    def serve() -> None:
        try:
            with server.context.wrap_socket(right, server_side=True) as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError) as exc:
            result["error"] = exc

    thread = threading.Thread(target=serve)
    thread.start()
    client = build_client_context(None, None, ca_file, check_hostname=False)
    with client.wrap_socket(left, server_hostname=None) as tls:  # no SNI, as for an IP address
        der = tls.getpeercert(binary_form=True)
        tls.sendall(b"x")
    thread.join(5)
    subject = x509.load_der_x509_certificate(der).subject
    return subject.get_attributes_for_oid(CN)[0].value


def test_reload_serves_the_new_certificate_and_keeps_the_old_one_when_files_are_broken(tmp_path) -> None:
    ca = pki.make_ca("unit CA")
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(ca.cert_pem)
    cert_file, key_file = pki.server_cert(ca, "first").write(tmp_path, "server")
    server = ServerTLS(ServerTLSConfig(cert_file, key_file))
    assert _handshake_subject(server, str(ca_file)) == "first"
    assert server.reload_if_changed() is False  # nothing changed on disk

    pki.server_cert(ca, "second").write(tmp_path, "server")
    assert server.reload_if_changed() is True
    assert _handshake_subject(server, str(ca_file)) == "second"

    # A certificate whose key is not the one on disk: refused, "second" stays.
    (tmp_path / "server.crt").write_bytes(pki.server_cert(ca, "third").cert_pem)
    assert server.reload() is False
    assert _handshake_subject(server, str(ca_file)) == "second"


def _client_accepted(server: ServerTLS, ca_file: str, cert: tuple[str, str]) -> bool:
    """Mutual-TLS handshake over a socket pair; whether the server accepted the client."""
    left, right = socket.socketpair()
    result: dict[str, object] = {}

    def serve() -> None:
        try:
            with server.context.wrap_socket(right, server_side=True) as tls:
                tls.sendall(b"ok")
                result["ok"] = True
        except (ssl.SSLError, OSError) as exc:
            result["error"] = exc
            right.close()

    thread = threading.Thread(target=serve)
    thread.start()
    client = build_client_context(*cert, ca_file, check_hostname=False)
    try:
        with client.wrap_socket(left, server_hostname=None) as tls:
            tls.recv(2)
    except (ssl.SSLError, OSError):
        pass
    thread.join(5)
    return bool(result.get("ok"))


def test_reloaded_ca_file_replaces_the_trusted_client_cas(tmp_path) -> None:
    server_ca, old_ca, new_ca = pki.make_ca("server"), pki.make_ca("old clients"), pki.make_ca("new clients")
    trust = tmp_path / "server-ca.pem"
    trust.write_bytes(server_ca.cert_pem)
    clients = tmp_path / "clients-ca.pem"
    clients.write_bytes(old_ca.cert_pem)
    cert_file, key_file = pki.server_cert(server_ca).write(tmp_path, "server")
    server = ServerTLS(ServerTLSConfig(cert_file, key_file, str(clients), verify_peer=True, fail_if_no_peer_cert=True))
    old_client = pki.client_cert(old_ca, pki.name(("CN", "old"))).write(tmp_path, "old")
    new_client = pki.client_cert(new_ca, pki.name(("CN", "new"))).write(tmp_path, "new")
    assert _client_accepted(server, str(trust), old_client)
    assert not _client_accepted(server, str(trust), new_client)

    clients.write_bytes(new_ca.cert_pem)
    assert server.reload()
    assert _client_accepted(server, str(trust), new_client)
    assert not _client_accepted(server, str(trust), old_client)


def _ssl_error(cls, reason):
    exc = cls(1, reason)
    exc.reason = reason
    return exc


@pytest.mark.parametrize("exc,label", [
    (_ssl_error(ssl.SSLError, "UNSUPPORTED_PROTOCOL"), "version"),
    (_ssl_error(ssl.SSLError, "TLSV1_ALERT_PROTOCOL_VERSION"), "version"),
    (_ssl_error(ssl.SSLError, "PEER_DID_NOT_RETURN_A_CERTIFICATE"), "no_certificate"),
    (_ssl_error(ssl.SSLError, "TLSV13_ALERT_CERTIFICATE_REQUIRED"), "no_certificate"),
    (_ssl_error(ssl.SSLError, "CERTIFICATE_VERIFY_FAILED"), "certificate"),
    (_ssl_error(ssl.SSLError, "TLSV1_ALERT_UNKNOWN_CA"), "certificate"),
    (_ssl_error(ssl.SSLError, "SSLV3_ALERT_BAD_CERTIFICATE"), "certificate"),
    (_ssl_error(ssl.SSLEOFError, "UNEXPECTED_EOF_WHILE_READING"), "closed"),
    (_ssl_error(ssl.SSLError, "WRONG_VERSION_NUMBER"), "protocol"),  # plain STOMP on the TLS port
    (_ssl_error(ssl.SSLError, "HTTP_REQUEST"), "protocol"),
    (_ssl_error(ssl.SSLError, "NO_SHARED_CIPHER"), "protocol"),
])
def test_failed_handshakes_get_one_of_a_fixed_set_of_labels(exc, label):
    assert handshake_failure(exc) == label
    assert label in HANDSHAKE_FAILURES


def test_importing_the_bridge_does_not_load_cryptography():
    """Its x509 module costs about 9 MB of RSS: loaded where a certificate is read, not before."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", "import sys, stomp_bridge.cli; print('cryptography.x509' in sys.modules)"],
        capture_output=True, text=True, check=True,
    )
    assert done.stdout.strip() == "False"
