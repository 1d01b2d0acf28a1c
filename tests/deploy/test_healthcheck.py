"""python -m stomp_bridge.healthcheck: where it looks and what it says (no bridge running).

The passing case runs against the installed bridge in test_image_install.py.
"""

from __future__ import annotations

import socket

import pytest

from stomp_bridge.healthcheck import main, url_for


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("0.0.0.0", "http://127.0.0.1:9410/healthz"),
        ("::", "http://127.0.0.1:9410/healthz"),
        ("", "http://127.0.0.1:9410/healthz"),
        ("10.1.2.3", "http://10.1.2.3:9410/healthz"),
        ("::1", "http://[::1]:9410/healthz"),
    ],
)
def test_url_asks_loopback_when_the_endpoint_listens_everywhere(host, url):
    assert url_for(host, 9410, "healthz") == url


def test_reads_the_port_from_the_bridges_environment(monkeypatch, capsys):
    with socket.socket() as closed:  # a port with nothing listening
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("STOMP_BRIDGE_HTTP_HOST", "127.0.0.1")
    monkeypatch.setenv("STOMP_BRIDGE_HTTP_PORT", str(port))
    assert main(["readyz"]) == 1
    assert f"http://127.0.0.1:{port}/readyz did not answer" in capsys.readouterr().err


def test_reads_a_config_file(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("STOMP_BRIDGE_HTTP_PORT", raising=False)
    config = tmp_path / "bridge.yaml"
    config.write_text("http_port: null\n")
    assert main(["--config", str(config)]) == 1
    assert "http_port is unset" in capsys.readouterr().err


def test_says_when_the_settings_are_wrong(monkeypatch, capsys):
    monkeypatch.setenv("STOMP_BRIDGE_HTTP_PORT", "not-a-port")
    assert main([]) == 1
    assert "cannot read the bridge's settings" in capsys.readouterr().err
