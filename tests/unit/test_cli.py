"""Configuration sources and `stomp-bridge config show` (no broker needed)."""

import pytest

from stomp_bridge.cli import main
from tests.unit.config_show import show


def test_defaults_echo_the_plugin(clean_env, capsys):
    data = show(capsys)
    assert data["port"] == 61613
    assert data["default_user"] == "guest" and data["default_pass"] == "***"
    assert data["max_frame_size"] == 4 * 1024 * 1024
    assert data["default_topic_exchange"] == "amq.topic"


@pytest.mark.parametrize("suffix,text", [
    (".toml", 'port = 61700\nimplicit_connect = true\nloopback_users = ["ops"]\n'
              'amqp_url = "amqp://svc:pw@r1:5672/,amqp://svc:pw@r2:5672/"\n'),
    (".yaml", "port: 61700\nimplicit_connect: true\nloopback_users: [ops]\n"
              "amqp_url: amqp://svc:pw@r1:5672/,amqp://svc:pw@r2:5672/\n"),
])
def test_file_then_environment_then_flags(clean_env, capsys, tmp_path, suffix, text):
    path = tmp_path / f"bridge{suffix}"
    path.write_text(text)
    data = show(capsys, "--config", str(path))
    assert data["port"] == 61700 and data["implicit_connect"] is True
    assert data["loopback_users"] == ["ops"]
    assert data["amqp_url"] == "amqp://svc:***@r1:5672/,amqp://svc:***@r2:5672/"
    clean_env.setenv("STOMP_BRIDGE_PORT", "61701")
    assert show(capsys, "--config", str(path))["port"] == 61701
    assert show(capsys, "--config", str(path), "--port", "61702")["port"] == 61702
    clean_env.setenv("STOMP_BRIDGE_CONFIG", str(path))
    assert show(capsys)["implicit_connect"] is True


def test_every_wrong_field_is_named(clean_env, capsys, tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('port = 70000\nmax_frame_size = 10\nlog_format = "xml"\n')
    assert main(["config", "show", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    for field in ("port", "max_frame_size", "log_format"):
        assert f"invalid setting {field}:" in err


def test_missing_or_unknown_config_file_is_a_clear_error(clean_env, capsys, tmp_path):
    assert main(["config", "show", "--config", str(tmp_path / "none.toml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    other = tmp_path / "bridge.ini"
    other.write_text("port=1\n")
    assert main(["config", "show", "--config", str(other)]) == 2
    assert ".toml, .yaml or .yml" in capsys.readouterr().err
