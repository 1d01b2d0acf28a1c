"""stomp.toml: parsing, writing, the client's substitutions; the EXTERNAL certificate signer."""

from __future__ import annotations

import random

import pytest
from cryptography import x509

from stomp_bridge.swaptacular.certlogin import CertificateSigner
from stomp_bridge.swaptacular.manifest import Manifest, ManifestError, dumps, from_settings, parse, split_address
from stomp_bridge.settings import Settings
from tests import pki

SPEC_EXAMPLE = """
servers = [
  "server1.example.com:1234",
  "server2.example.com:1234",
  "201.202.203.204:2345",
]
host = "/"
destination = "/exchange/${NODE_ID}"
accepted-content-types = [
  "application/vnd.google.protobuf",
  "application/msgpack",
]
not-described-here = true
"""


def test_the_specs_example_parses_and_round_trips() -> None:
    manifest = parse(SPEC_EXAMPLE)
    assert manifest.servers[2] == "201.202.203.204:2345"
    assert manifest.accepted_content_types == ["application/vnd.google.protobuf", "application/msgpack"]
    assert manifest.extra == {"not-described-here": True}
    assert parse(dumps(manifest)) == manifest


def test_node_id_is_substituted_everywhere_the_spec_says() -> None:
    manifest = Manifest(["a:1"], "/${NODE_ID}", "/exchange/${NODE_ID}", login="n${NODE_ID}",
                        passcode="${NODE_ID}${NODE_ID}")
    assert manifest.for_node("12345678") == {
        "host": "/12345678", "destination": "/exchange/12345678", "login": "n12345678",
        "passcode": "1234567812345678",
    }
    assert "login" not in Manifest(["a:1"], "/", "/q").for_node("1")


def test_repeated_servers_weigh_the_random_choice() -> None:
    manifest = Manifest(["a:1", "a:1", "a:1", "b:2"], "/", "/q")
    rng = random.Random(7)
    picks = [manifest.choose_server(rng) for _ in range(400)]
    assert set(picks) == {("a", 1), ("b", 2)}
    assert picks.count(("a", 1)) > 2 * picks.count(("b", 2))


@pytest.mark.parametrize(
    "server, expected",
    [("example.com:61614", ("example.com", 61614)), ("10.0.0.1:1", ("10.0.0.1", 1)), ("[::1]:99", ("::1", 99))],
)
def test_split_address(server: str, expected: tuple[str, int]) -> None:
    assert split_address(server) == expected


@pytest.mark.parametrize("server", ["example.com", ":1234", "host:0", "host:65536", "host:http"])
def test_bad_server_addresses_are_refused(server: str) -> None:
    with pytest.raises(ManifestError):
        split_address(server)


@pytest.mark.parametrize(
    "text, problem",
    [
        ('host = "/"\ndestination = "/q"\n', "servers must be"),
        ('servers = []\nhost = "/"\ndestination = "/q"\n', "servers must be"),
        ('servers = ["a:1"]\ndestination = "/q"\n', "host must be a string"),
        ('servers = ["a:1"]\nhost = "/"\n', "destination must be a string"),
        ('servers = ["a:1"]\nhost = "/"\ndestination = "/q"\nlogin = 5\n', "login must be"),
        ('servers = ["a:1"]\nhost = "/"\ndestination = "/q"\naccepted-content-types = "x"\n', "accepted-content"),
        ("servers = [", "not TOML"),
    ],
)
def test_invalid_manifests_say_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(ManifestError, match=problem):
        parse(text)


def test_our_manifest_comes_from_the_settings() -> None:
    settings = Settings(swpt_servers="s1.example.com:61614,s2.example.com:61614", swpt_host="/${NODE_ID}",
                        swpt_destination="/exchange/smp/${NODE_ID}", swpt_accepted_content_types="application/msgpack")
    manifest = parse(dumps(from_settings(settings)))
    assert manifest == Manifest(
        ["s1.example.com:61614", "s2.example.com:61614"], "/${NODE_ID}", "/exchange/smp/${NODE_ID}",
        accepted_content_types=["application/msgpack"],
    )
    with pytest.raises(ManifestError, match="swpt_servers"):
        from_settings(Settings())


async def test_signer_copies_the_subject_and_caches_per_subject_until_renewal(tmp_path) -> None:
    ca = pki.make_ca("signer")
    cert_file, key_file = ca.write(tmp_path, "signer")
    now = [1_000_000.0]
    signer = CertificateSigner(cert_file, key_file, hours=1, clock=lambda: now[0])
    alice = pki.name(("O", "Example"), ("CN", "alice"))
    pem = signer.sign(alice, now[0])
    cert = x509.load_pem_x509_certificate(pem)
    assert cert.subject == alice and cert.issuer == ca.cert.subject
    cert.verify_directly_issued_by(ca.cert)
    assert (cert.not_valid_after_utc - cert.not_valid_before_utc).total_seconds() == 3600 + 300

    first = await signer.context_for(alice)
    assert await signer.context_for(alice) is first
    assert await signer.context_for(pki.name(("CN", "bob"))) is not first
    now[0] += 0.81 * 3600  # past 80 % of the lifetime: a fresh certificate
    assert await signer.context_for(alice) is not first
    assert signer.signed == 4


async def test_cert_login_signs_with_its_section_and_checks_rabbitmq_as_the_amqp_section_says(tmp_path) -> None:
    """CertLogin takes settings.cert_login and settings.amqp: the signer and lifetime from the one,
    how the signed certificate's connection checks RabbitMQ (tls_amqp_ca_file,
    tls_amqp_verify_hostname) from the other."""
    from stomp_bridge.swaptacular.certlogin import CertLogin
    from stomp_bridge.tls import PeerCertificate

    signer_ca, rabbit_ca = pki.make_ca("signer"), pki.make_ca("rabbit")
    signer_cert, signer_key = signer_ca.write(tmp_path, "signer")
    rabbit_ca_file = tmp_path / "rabbit-ca.pem"
    rabbit_ca_file.write_bytes(rabbit_ca.cert_pem)
    settings = Settings(
        tls_port=0, tls_cert_file="c", tls_key_file="k", tls_ca_file="ca", tls_verify_peer=True,
        ssl_cert_login=True, tls_amqp_signer_cert_file=signer_cert, tls_amqp_signer_key_file=signer_key,
        tls_amqp_cert_hours=2, amqp_url="amqps://rabbit:5671/", tls_amqp_ca_file=str(rabbit_ca_file),
        tls_amqp_verify_hostname=False,
    )
    peer = PeerCertificate(b"", pki.name(("CN", "alice")))
    login = await CertLogin(settings.cert_login, settings.amqp).login(peer)
    assert login.external and login.context is not None
    assert login.context.check_hostname is False
    assert [dict(x[0] for x in ca["subject"])["commonName"] for ca in login.context.get_ca_certs()] == ["rabbit"]
