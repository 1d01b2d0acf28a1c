"""Every setting keeps the names deployments use: its config-file key, its ``STOMP_BRIDGE_*``
environment variable and its command-line flag, as written in ``settings_names.txt`` (taken
from the flat settings class before the settings were grouped into sections). A value given
through each source lands in the field of that name, and the sources keep their order
(flags over environment over file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stomp_bridge.cli import build_parser, load_settings
from stomp_bridge.settings import Settings, load

SNAPSHOT = Path(__file__).with_name("settings_names.txt")

# A value for every setting, none of them its default, valid together (each rule across settings
# is met). The profile has its own test: the swaptacular profile turns listeners off.
SAMPLE: dict[str, object] = {
    "host": "127.0.0.2", "port": 61000, "amqp_url": "amqp://svc:pw@rabbit.example:5672/",
    "default_user": "alice", "default_pass": "secret", "default_vhost": "/v",
    "implicit_connect": True, "default_topic_exchange": "topics", "default_nack_requeue": False,
    "host_vhosts": {"stomp.example.com": "v1"}, "unknown_host_default_vhost": True,
    "close_on_error": True, "trailing_lf": False, "retained_messages": True, "temp_queue_prefix": "tmp.",
    "tracing": True, "tracing_endpoint": "http://collector.example:4318/v1/traces", "tracing_sample_ratio": 0.25,
    "redeliveries_header": "redeliveries", "mandatory": True, "resubscribe_on_cancel": True,
    "resubscribe_timeout": 7.5, "headers_bindings": True, "apollo_exclusive": True,
    "loopback_users": ["admin", "ops"], "hide_server_info": True, "rabbitmq_stomp_dialect": "4.4",
    "max_frame_size": 2097152, "max_frame_size_before_login": 32768, "max_headers": 50,
    "max_header_length": 4096, "max_transactions": 4, "max_transaction_actions": 64, "max_transaction_bytes": 8388608,
    "max_subscriptions": 100, "write_buffer_high": 65536, "close_timeout": 2.0, "login_failures_per_minute": 3,
    "client_ack_window": 100, "edge_fanout": True, "fanout_subscriber_buffer": 1048576, "workers": 2, "max_connections": 500, "max_connections_per_ip": 20,
    "idle_timeout": 30.0, "proxy_protocol": True, "proxy_protocol_trusted": ["10.0.0.0/8"],
    "ws_port": 15000, "ws_host": "127.0.0.3", "ws_path": "/stomp", "ws_max_message_size": 131072,
    "ws_compression": False, "ws_allowed_origins": ["https://app.example.com"], "ws_use_http_auth": True,
    "wss_port": 15001, "http_host": "127.0.0.4", "http_port": 9000, "shutdown_grace": 3.0,
    "heartbeat_min": 1.0, "heartbeat_max": 20.0, "heartbeat_tolerance": 3.0, "connect_timeout": 5.0,
    "amqp_heartbeat": 30, "amqp_connect_timeout": 4.0, "amqp_channels_per_connection": 8,
    "amqp_min_connections_per_login": 2, "amqp_separate_publishers": False,
    "amqp_login_reuse_seconds": 60.0, "amqp_login_cache_seconds": 5.0, "auto_ack_window": 200,
    "tls_port": 61614, "tls_cert_file": "/etc/b/cert.pem", "tls_key_file": "/etc/b/key.pem",
    "tls_ca_file": "/etc/b/ca.pem", "tls_min_version": "1.3", "tls_verify_peer": True,
    "tls_fail_if_no_peer_cert": True, "tls_reload_interval": 10.0, "ssl_cert_login": True,
    "ssl_cert_login_from": "common_name", "tls_amqp_auth": "credentials",
    "tls_amqp_signer_cert_file": "/etc/b/signer.pem", "tls_amqp_signer_key_file": "/etc/b/signer-key.pem",
    "tls_amqp_cert_hours": 2.0, "tls_amqp_credentials_file": "/etc/b/credentials.toml",
    "tls_amqp_ca_file": "/etc/b/rabbit-ca.pem", "tls_amqp_verify_hostname": False,
    "swpt_peer_id_from": "CN", "swpt_host": "stomp.${NODE_ID}", "swpt_vhost": "swpt",
    "swpt_destination": "/exchange/peers/${NODE_ID}", "swpt_accepted_content_types": ["application/x-protobuf"],
    "swpt_servers": ["a.example:61614", "b.example:61614"], "swpt_node_id": "1234",
    "swpt_forward_queue": "to-peer", "swpt_peer_manifest": "/etc/b/peer.toml", "swpt_forward_window": 10,
    "swpt_forward_max_backoff": 5.0, "log_level": "DEBUG", "log_format": "json",
}
# The swaptacular profile, with what it needs (mutual TLS) and the listeners it forbids off.
PROFILE = {"profile": "swaptacular", "tls_cert_file": "/etc/b/cert.pem", "tls_key_file": "/etc/b/key.pem",
           "tls_ca_file": "/etc/b/ca.pem"}


def snapshot() -> list[tuple[str, str, str]]:
    """(config key, environment variable, flag or '-') for every setting, as committed."""
    rows = [line.split() for line in SNAPSHOT.read_text().splitlines() if line and not line.startswith("#")]
    assert all(len(row) == 3 for row in rows), "each line: key ENV_NAME --flag-or-dash"
    return [(key, env, flag) for key, env, flag in rows]


def env_text(value: object) -> str:
    """How a chart or a shell spells a value in an environment variable."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def toml_text(values: dict[str, object]) -> str:
    def literal(value: object) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, dict):
            return "{ " + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in value.items()) + " }"
        return json.dumps(value)  # strings, numbers and lists of strings are the same in TOML

    return "".join(f"{key} = {literal(value)}\n" for key, value in values.items())


def landed(settings: Settings, names) -> dict[str, object]:
    return {name: getattr(settings, name) for name in names}


def test_the_settings_are_the_snapshots_keys():
    """Adding a setting means adding its line; renaming or removing one fails here. (Their order
    is the sections', which no source sees.)"""
    keys = [key for key, _, _ in snapshot()]
    assert len(keys) == len(set(keys))
    assert sorted(Settings.model_fields) == sorted(keys)


def test_the_sample_gives_every_setting_a_value_other_than_its_default():
    assert set(SAMPLE) | {"profile"} == set(Settings.model_fields)
    defaults = Settings.model_construct()
    same = [name for name, value in SAMPLE.items() if getattr(defaults, name) == value]
    assert same == []


def test_each_environment_variable_lands_in_its_setting(clean_env):
    for key, env, _ in snapshot():
        if key in SAMPLE:
            clean_env.setenv(env, env_text(SAMPLE[key]))
    assert landed(load(), SAMPLE) == SAMPLE


def test_the_profile_comes_from_its_environment_variable(clean_env):
    env = {key: name for key, name, _ in snapshot()}
    for key, value in PROFILE.items():
        clean_env.setenv(env[key], env_text(value))
    assert landed(load(), PROFILE) == PROFILE


def test_a_host_vhosts_entry_can_be_one_variable_of_its_own(clean_env):
    """``env_nested_delimiter``: a chart sets one mapping per variable."""
    clean_env.setenv("STOMP_BRIDGE_HOST_VHOSTS__stomp.example.com", "v1")
    assert load().host_vhosts == {"stomp.example.com": "v1"}


@pytest.mark.parametrize("suffix", [".toml", ".yaml"])
@pytest.mark.parametrize("values", [SAMPLE, PROFILE], ids=["all", "profile"])
def test_each_config_file_key_lands_in_its_setting(clean_env, tmp_path, suffix, values):
    path = tmp_path / f"bridge{suffix}"
    path.write_text(toml_text(values) if suffix == ".toml" else json.dumps(values))  # JSON is YAML
    assert landed(load(path), values) == values


# A flag's argument and where it lands, different from the default and from SAMPLE's value.
FLAG_VALUES: dict[str, tuple[list[str], object]] = {
    "host": (["10.1.1.1"], "10.1.1.1"), "port": (["61001"], 61001),
    "amqp_url": (["amqp://flag@r:5672/"], "amqp://flag@r:5672/"), "default_user": (["bob"], "bob"),
    "default_pass": (["pw2"], "pw2"), "default_vhost": (["/f"], "/f"), "implicit_connect": ([], True),
    "default_topic_exchange": (["ft"], "ft"), "max_frame_size": (["1048576"], 1048576),
    "workers": (["3"], 3), "ws_port": (["none"], None), "http_port": (["none"], None),
    "tls_port": (["61615"], 61615), "log_level": (["warning"], "WARNING"), "log_format": (["text"], "text"),
}


def test_each_flag_lands_in_its_setting_over_the_environment_and_the_file(clean_env, tmp_path):
    flags = {key: flag for key, _, flag in snapshot() if flag != "-"}
    assert set(FLAG_VALUES) == set(flags)
    parser_flags = {a.dest: a.option_strings[0] for a in build_parser()._actions
                    if a.option_strings and a.dest in Settings.model_fields}
    assert parser_flags == flags
    base = {**SAMPLE, "implicit_connect": False}  # so the store_true flag changes something
    path = tmp_path / "bridge.yaml"
    path.write_text(json.dumps(base))
    clean_env.setenv("STOMP_BRIDGE_HOST", "10.2.2.2")
    clean_env.setenv("STOMP_BRIDGE_PORT", "61002")
    for key, flag in flags.items():
        args, expected = FLAG_VALUES[key]
        settings = load_settings(["--config", str(path), flag, *args])
        assert getattr(settings, key) == expected, flag
    assert load_settings(["--config", str(path)]).port == 61002  # the environment over the file
