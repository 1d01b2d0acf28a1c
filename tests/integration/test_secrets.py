"""Secrets stay in the bridge: never in its logs (DEBUG included), `config show`, /metrics or an
ERROR frame, whichever way a login goes."""

from __future__ import annotations

import logging
import os
import time
import urllib.parse

import pytest
import yaml

from stomp_bridge.cli import main
from stomp_bridge.logs import JsonFormatter, TextFormatter
from tests.integration.conftest import CONNECT_FAILURE_CLOSE_TIMEOUT
from tests.integration.rawstomp import Frame, RawStomp
from tests.integration.test_operations import get
from tests.integration.tls_support import test_pki, tls_dial, tls_settings  # noqa: F401 - fixtures

pytestmark = pytest.mark.skipif(
    os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native", reason="the bridge's own logs and settings"
)
# A login, good or bad, is RabbitMQ's to answer; a shared broker can be slow to.
LOGIN_TIMEOUT = CONNECT_FAILURE_CLOSE_TIMEOUT


@pytest.fixture
def users(rabbit):
    """``users(name, password)`` creates a RabbitMQ user with every permission on /; deleted after."""
    made: list[str] = []

    def make(name: str, password: str) -> str:
        rabbit.create_user(name, password)
        made.append(name)
        rabbit.set_permissions(name, "/")
        return name

    yield make
    for name in made:
        rabbit.delete_user(name)


def _with_password(url: str, password: str) -> str:
    parts = urllib.parse.urlsplit(url)
    netloc = f"{parts.username}:{password}@{parts.hostname}:{parts.port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _key_line(key_file: str) -> str:
    """A line of the base64 body of a PEM private key: if it shows up, so did the key."""
    lines = open(key_file, encoding="ascii").read().splitlines()
    return max(lines[1:-1], key=len)


def _connect(conn: RawStomp, **headers: str) -> Frame:
    conn.send_frame("CONNECT", {"accept-version": "1.2", "host": "/", **headers})
    return conn.read_frame()


def test_secrets_never_reach_logs_config_show_metrics_or_errors(
    bridge, dial, tls_dial, tls_settings, test_pki, broker, users, queues, unique, caplog, capsys, tmp_path
):
    secrets = {
        "amqp_url password": f"amqp-url-pw-{unique}",
        "default_pass": f"default-pass-{unique}",
        "passcode": f"good-passcode-{unique}",
        "wrong passcode": f"wrong-passcode-{unique}",
        "credentials file password": f"cert-user-pw-{unique}",
        "wrong credentials file password": f"cert-user-wrong-pw-{unique}",
        "TLS private key": _key_line(tls_settings["tls_key_file"]),
    }
    default_user = users(f"secrets-default-{unique}", secrets["default_pass"])
    user = users(f"secrets-user-{unique}", secrets["passcode"])
    cert_user = users(f"secrets-cert-{unique}", secrets["credentials file password"])
    credentials = tmp_path / "credentials.toml"
    credentials.write_text(
        f'["alice-{unique}"]\nuser = "{cert_user}"\npassword = "{secrets["credentials file password"]}"\n'
        f'["mallory-{unique}"]\nuser = "{cert_user}"\npassword = "{secrets["wrong credentials file password"]}"\n'
    )
    settings = {
        **tls_settings,
        "port": 0,
        "amqp_url": _with_password(broker.amqp_url, secrets["amqp_url password"]),
        "default_user": default_user,
        "default_pass": secrets["default_pass"],
        "tls_verify_peer": True,
        "ssl_cert_login": True,
        "ssl_cert_login_from": "common_name",
        "tls_amqp_auth": "credentials",
        "tls_amqp_credentials_file": str(credentials),
        "log_level": "DEBUG",
    }
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="aiormq")  # its DEBUG lines too (logs.configure's choice)
    server = bridge(**settings)
    errors: list[Frame] = []
    queue = f"secrets-{unique}"
    queues.append(queue)

    ok = dial(server, timeout=LOGIN_TIMEOUT)
    assert _connect(ok, login=user, passcode=secrets["passcode"]).command == "CONNECTED"
    ok.subscribe(f"/queue/{queue}")
    ok.receipt("SEND", {"destination": f"/queue/{queue}"}, "hello", receipt_id="sent")
    assert ok.expect("MESSAGE").body == b"hello"
    bad = dial(server, timeout=LOGIN_TIMEOUT)
    errors.append(_connect(bad, login=user, passcode=secrets["wrong passcode"]))
    default = dial(server, timeout=LOGIN_TIMEOUT)  # no login: default_user with default_pass
    assert _connect(default).command == "CONNECTED"
    default.send_frame("SEND", {"destination": f"/topic/{queue}"}, "from the default user")
    alice = tls_dial(server, cert=test_pki.client(("CN", f"alice-{unique}")), timeout=LOGIN_TIMEOUT)
    assert _connect(alice).command == "CONNECTED"
    mallory = tls_dial(server, cert=test_pki.client(("CN", f"mallory-{unique}")), timeout=LOGIN_TIMEOUT)
    errors.append(_connect(mallory))
    # And an ERROR quoting RabbitMQ's reply text, from a logged-in session.
    ok.send_frame("SUBSCRIBE", {"destination": f"/amq/queue/missing-{unique}", "id": "s-2"})
    errors.append(ok.error_then_close())
    for conn in (default, alice):
        conn.send_frame("DISCONNECT", {"receipt": "bye"})
        conn.read_until_closed()
    assert [(e.command, e["message"]) for e in errors] == [
        ("ERROR", "Bad CONNECT"), ("ERROR", "Bad CONNECT"), ("ERROR", "not_found")
    ]
    deadline = time.monotonic() + LOGIN_TIMEOUT  # every connection's "connection closed" line is in
    while server._server.connection_count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server._server.connection_count == 0

    outputs = {"/metrics": get(server, "/metrics")[1]}
    config = tmp_path / "bridge.yaml"
    config.write_text(yaml.safe_dump(settings))
    capsys.readouterr()
    assert main(["config", "show", "--config", str(config)]) == 0
    outputs["config show"] = capsys.readouterr().out
    records = list(caplog.records)
    outputs["logs"] = "\n".join(
        f"{TextFormatter().format(r)}\n{JsonFormatter().format(r)}" for r in records
    )
    for i, error in enumerate(errors):
        outputs[f"ERROR frame {i}"] = error.raw.decode("utf-8", "replace")

    # The outputs are the real thing: the frame log saw the passcodes, every connection's end
    # (failed logins included) was logged.
    frames = [r for r in records if r.getMessage() == "frame"]
    assert sum(r.command == "CONNECT" and "passcode" in r.headers for r in frames) == 2
    assert sum(r.getMessage() == "connection closed" for r in records) == 5
    assert "amqp_url" in outputs["config show"] and "stomp_bridge_errors_total" in outputs["/metrics"]
    leaks = [f"{name} in {where}" for name, secret in secrets.items()
             for where, text in outputs.items() if secret in text]
    assert not leaks, leaks
