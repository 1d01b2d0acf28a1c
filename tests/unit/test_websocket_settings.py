"""The WebSocket settings as an operator (or the Helm chart) writes them: variables, flags, files."""

import pytest

from stomp_bridge.cli import main
from tests.unit.config_show import show


def test_defaults_echo_web_stomp(clean_env, capsys):
    data = show(capsys)
    assert (data["ws_port"], data["ws_path"], data["wss_port"]) == (15674, "/ws", None)
    assert data["ws_allowed_origins"] == [] and data["ws_use_http_auth"] is False
    assert data["ws_max_message_size"] is None  # follows max_frame_size


@pytest.mark.parametrize("value, port", [("none", None), ("off", None), ("", None), ("0", 0), ("15675", 15675)])
def test_ws_port_from_the_environment(clean_env, capsys, value, port):
    clean_env.setenv("STOMP_BRIDGE_WS_PORT", value)
    assert show(capsys)["ws_port"] == port


def test_ws_port_flag_turns_the_listener_off(clean_env, capsys):
    assert show(capsys, "--ws-port", "none")["ws_port"] is None
    assert show(capsys, "--ws-port", "15999")["ws_port"] == 15999


def test_allowed_origins_from_a_comma_list_or_a_file_list(clean_env, capsys, tmp_path):
    clean_env.setenv("STOMP_BRIDGE_WS_ALLOWED_ORIGINS", "https://a.example, https://b.example")
    assert show(capsys)["ws_allowed_origins"] == ["https://a.example", "https://b.example"]
    clean_env.delenv("STOMP_BRIDGE_WS_ALLOWED_ORIGINS")
    path = tmp_path / "bridge.yaml"
    path.write_text("ws_allowed_origins: [https://c.example]\nws_use_http_auth: true\nws_path: /stomp\n")
    data = show(capsys, "--config", str(path))
    assert data["ws_allowed_origins"] == ["https://c.example"]
    assert data["ws_use_http_auth"] is True and data["ws_path"] == "/stomp"


def test_wss_without_a_certificate_is_refused_at_start(clean_env, capsys):
    clean_env.setenv("STOMP_BRIDGE_WSS_PORT", "15673")
    assert main(["config", "show"]) == 2
    assert "wss_port needs tls_cert_file and tls_key_file" in capsys.readouterr().err


def test_ws_path_must_be_absolute(clean_env, capsys):
    clean_env.setenv("STOMP_BRIDGE_WS_PATH", "ws")
    assert main(["config", "show"]) == 2
    assert "ws_path" in capsys.readouterr().err
