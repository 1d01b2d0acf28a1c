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


def test_proxy_protocol_without_trusted_networks_does_not_start(clean_env, capsys):
    """Trust is explicit: no list, no PROXY header from anyone (and no start-up)."""
    clean_env.setenv("STOMP_BRIDGE_PROXY_PROTOCOL", "true")
    assert main(["config", "show"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("stomp-bridge: invalid configuration: proxy_protocol needs proxy_protocol_trusted")


@pytest.mark.parametrize("value", ['["10.0.0.0/8", "127.0.0.1"]', "10.0.0.0/8, 127.0.0.1"])
def test_trusted_proxies_from_the_environment_as_json_or_commas(clean_env, capsys, value):
    clean_env.setenv("STOMP_BRIDGE_PROXY_PROTOCOL", "true")
    clean_env.setenv("STOMP_BRIDGE_PROXY_PROTOCOL_TRUSTED", value)
    data = show(capsys)
    assert data["proxy_protocol"] is True
    assert data["proxy_protocol_trusted"] == ["10.0.0.0/8", "127.0.0.1/32"]


def test_every_bad_trusted_network_gets_its_own_line(clean_env, capsys):
    clean_env.setenv("STOMP_BRIDGE_PROXY_PROTOCOL", "true")
    clean_env.setenv("STOMP_BRIDGE_PROXY_PROTOCOL_TRUSTED", '["10.0.0.0/8", "10.0.0.0/33", "lb.local", "10.1.2.3/8"]')
    assert main(["config", "show"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "stomp-bridge: invalid setting proxy_protocol_trusted.1: '10.0.0.0/33' is not a network in CIDR "
        "form (e.g. 10.0.0.0/8, 192.0.2.10/32 or fd00::/8)",
        "stomp-bridge: invalid setting proxy_protocol_trusted.2: 'lb.local' is not a network in CIDR "
        "form (e.g. 10.0.0.0/8, 192.0.2.10/32 or fd00::/8)",
        "stomp-bridge: invalid setting proxy_protocol_trusted.3: '10.1.2.3/8' has host bits set; the "
        "network is 10.0.0.0/8",
    ]


def test_a_trusted_list_that_is_not_json_says_so(clean_env, capsys):
    clean_env.setenv("STOMP_BRIDGE_PROXY_PROTOCOL_TRUSTED", '["10.0.0.0/8",')
    assert main(["config", "show"]) == 2
    assert "invalid setting proxy_protocol_trusted: starts with '[' but is not a JSON list" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["config", "show", "--port", "61700"],
    ["--port", "61700", "config", "show"],  # the Helm chart's NOTES order: flags first
    ["--port", "61700", "config", "show", "--log-level", "debug"],
])
def test_commands_before_or_after_the_flags(clean_env, capsys, argv):
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert '"port": 61700' in out


def test_an_unknown_command_names_the_commands(clean_env, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["config", "frob"])
    assert exit_.value.code == 2
    assert "unknown command 'config frob'; the commands are config show" in capsys.readouterr().err


@pytest.mark.parametrize("level", ["LOUD", "verbose"])
def test_a_wrong_log_level_is_one_line_not_a_traceback(clean_env, capsys, level):
    assert main(["--log-level", level, "config", "show"]) == 2
    err = capsys.readouterr().err
    assert err == (f"stomp-bridge: invalid setting log_level: {level!r} is not a log level; "
                   "use one of DEBUG, INFO, WARNING, ERROR, CRITICAL\n")
    clean_env.setenv("STOMP_BRIDGE_LOG_LEVEL", level)
    assert main(["config", "show"]) == 2
    assert "invalid setting log_level" in capsys.readouterr().err


def test_a_port_that_is_not_a_number_says_so(clean_env, capsys):
    with pytest.raises(SystemExit):
        main(["--port", "abc", "config", "show"])
    err = capsys.readouterr().err
    assert "argument --port: 'abc' is not a port number (0-65535) or none" in err
    assert "_port_or_none" not in err


def test_none_turns_the_http_endpoint_off_too(clean_env, capsys):
    assert show(capsys, "--http-port", "none")["http_port"] is None
    clean_env.setenv("STOMP_BRIDGE_HTTP_PORT", "none")
    assert show(capsys)["http_port"] is None
