"""A name that is no setting is refused wherever settings enter (a settings file, a
``STOMP_BRIDGE_*`` variable, keyword arguments of Settings, running_bridge, a section), naming it
and the setting it nearly is; a file that does not parse is named; a wrong log format is said in
words; ``config show`` into a closed pipe ends quietly."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from pydantic import ValidationError

from stomp_bridge.cli import main
from stomp_bridge.settings import Settings, TracingSettings, UnknownSetting, load
from stomp_bridge.testing import BackgroundBridge, running_bridge

TYPOS = {"heartbeat_maxx": "heartbeat_max", "madatory": "mandatory", "max_conections": "max_connections"}


@pytest.mark.parametrize("suffix", [".toml", ".yaml"])
def test_a_misspelt_key_in_a_file_names_the_file_the_key_and_the_setting(clean_env, tmp_path, suffix):
    path = tmp_path / f"bridge{suffix}"
    sep = " = " if suffix == ".toml" else ": "
    path.write_text("".join(f"{key}{sep}{'true' if key == 'madatory' else 5}\n" for key in TYPOS))
    with pytest.raises(UnknownSetting) as caught:
        load(path)
    assert caught.value.problems == [
        f"configuration file {path}: unknown setting {typo!r} (did you mean {right!r}?)" for typo, right in TYPOS.items()
    ]


def test_a_table_is_told_that_settings_are_flat(clean_env, tmp_path):
    path = tmp_path / "bridge.toml"
    path.write_text("mandatory = true\n[listeners]\nport = 61000\nhost = '127.0.0.1'\n")
    with pytest.raises(UnknownSetting, match=r"unknown setting 'listeners' \(a table\): settings are flat.*"
                                             r"write its keys \(port, host\) at the top level"):
        load(path)


def test_host_vhosts_is_a_table_that_is_a_setting(clean_env, tmp_path):
    path = tmp_path / "bridge.toml"
    path.write_text("[host_vhosts]\n'stomp.example.com' = 'v1'\n")
    assert load(path).host_vhosts == {"stomp.example.com": "v1"}


def test_a_misspelt_environment_variable_names_the_variable_it_nearly_is(clean_env):
    clean_env.setenv("STOMP_BRIDGE_MANDATROY", "true")
    with pytest.raises(UnknownSetting) as caught:
        Settings()
    assert caught.value.problems == [
        "unknown environment variable STOMP_BRIDGE_MANDATROY (did you mean STOMP_BRIDGE_MANDATORY?)"]


def test_a_variable_far_from_every_setting_points_to_the_reference(clean_env):
    clean_env.setenv("STOMP_BRIDGE_XYZZY", "1")
    with pytest.raises(UnknownSetting, match=r"STOMP_BRIDGE_XYZZY \(`stomp-bridge config reference` lists"):
        Settings()


def test_a_mapping_key_only_goes_to_a_mapping_setting(clean_env):
    clean_env.setenv("STOMP_BRIDGE_PORT__X", "1")
    with pytest.raises(UnknownSetting, match="port is not a mapping, so it takes no __KEY"):
        Settings()
    clean_env.delenv("STOMP_BRIDGE_PORT__X")
    clean_env.setenv("STOMP_BRIDGE_HOST_VHOSTS__a.example", "v")
    assert Settings().host_vhosts == {"a.example": "v"}


@pytest.mark.parametrize("name", ["STOMP_BRIDGE_CONFIG", "STOMP_BRIDGE_IMAGE", "STOMP_BRIDGE_BROKER_CACHE",
                                  "STOMP_BRIDGE_TEST_BROKER"])
def test_the_tools_own_variables_are_not_settings_and_pass(clean_env, name):
    clean_env.setenv(name, "x")
    assert Settings().port == 61613


def test_a_misspelt_keyword_argument_is_refused(clean_env):
    with pytest.raises(UnknownSetting, match=r"unknown setting 'max_conections' \(did you mean 'max_connections'\?\)"):
        Settings(max_conections=5)


def test_running_bridge_refuses_a_misspelt_setting_before_it_starts(clean_env):
    with pytest.raises(UnknownSetting, match="did you mean 'max_connections'"):
        with running_bridge("amqp://guest:guest@127.0.0.1:1/", max_conections=5):
            raise AssertionError("started")  # pragma: no cover


def test_background_bridge_takes_settings_that_refused_the_typo(clean_env):
    with pytest.raises(UnknownSetting, match="did you mean 'mandatory'"):
        BackgroundBridge(Settings(madatory=True))


def test_a_section_alone_refuses_a_name_it_does_not_have():
    with pytest.raises(ValidationError, match=r"unknown setting 'tracing_endpointt' \(did you mean 'tracing_endpoint'"):
        TracingSettings(tracing_endpointt="http://collector:4318/v1/traces")


def test_the_command_prints_one_line_per_unknown_name(clean_env, capsys, tmp_path):
    path = tmp_path / "bridge.toml"
    path.write_text("madatory = true\nmax_conections = 5\n")
    assert main(["config", "show", "--config", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"stomp-bridge: configuration file {path}: unknown setting 'madatory' (did you mean 'mandatory'?)",
        f"stomp-bridge: configuration file {path}: unknown setting 'max_conections' (did you mean 'max_connections'?)",
    ]


@pytest.mark.parametrize(("suffix", "text", "kind"), [
    (".toml", "port = \n", "TOML"), (".yaml", "port: [\n", "YAML"), (".toml", b"port = '\xff'\n", "TOML"),
])
def test_a_file_that_does_not_parse_is_named(clean_env, capsys, tmp_path, suffix, text, kind):
    path = tmp_path / f"bridge{suffix}"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert main(["config", "show", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"stomp-bridge: configuration file {path} is not valid {kind}: ")
    assert "line" in err or "position" in err  # where in the file


def test_a_file_that_is_not_a_mapping_says_so(clean_env, capsys, tmp_path):
    path = tmp_path / "bridge.yaml"
    path.write_text("- port\n")
    assert main(["config", "show", "--config", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"stomp-bridge: configuration file {path} must be a mapping of settings (key: value), not a list\n")


def test_an_empty_yaml_file_is_no_settings(clean_env, tmp_path):
    path = tmp_path / "bridge.yaml"
    path.write_text("")
    assert load(path).port == 61613


@pytest.mark.parametrize(("env", "message"), [
    ({"STOMP_BRIDGE_LOG_FORMAT": "jsn"},
     "invalid setting log_format: 'jsn' is not a log format; use text (key=value) or json (one object per line)"),
    ({"STOMP_BRIDGE_WS_PATH": "ws"}, "invalid setting ws_path: 'ws' is not a URL path: it must start with '/' (e.g. /ws)"),
])
def test_a_wrong_format_or_path_is_said_in_words(clean_env, capsys, env, message):
    for name, value in env.items():
        clean_env.setenv(name, value)
    assert main(["config", "show"]) == 2
    assert capsys.readouterr().err == f"stomp-bridge: {message}\n"


def test_the_log_format_takes_any_case(clean_env):
    assert Settings(log_format="JSON").log_format == "json"


@pytest.mark.parametrize("command", [["config", "show"], ["config", "reference"]])
def test_output_into_a_closed_pipe_ends_without_a_traceback(command):
    """``stomp-bridge config show | head``: the reader is gone before the output is written."""
    read, write = os.pipe()
    os.close(read)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOMP_BRIDGE_")}
    try:
        done = subprocess.run([sys.executable, "-m", "stomp_bridge", *command], stdout=write,
                              stderr=subprocess.PIPE, env=env, timeout=60)
    finally:
        os.close(write)
    assert done.stderr.decode() == ""
    assert done.returncode == 0
