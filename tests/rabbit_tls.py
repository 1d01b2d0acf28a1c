"""An extra amqps:// listener and the EXTERNAL mechanism on the shared test RabbitMQ.

Everything here is additive and undone at the end of the test session (the broker is left as
the tests found it): a TLS
listener on a free port (rabbit_networking:start_ssl_listener/4 with the
certificates inline, so the broker needs no files), ``EXTERNAL`` appended to
``auth_mechanisms``, and ``verify_peer`` in the (empty) global ``ssl_options``,
which rabbit_ssl checks before it lets EXTERNAL name a user ("TLS
configuration is unsafe" otherwise). Needs ``rabbitmqctl`` on this machine,
as scripts/ensure-rabbitmq sets up.
"""

from __future__ import annotations

import base64
import contextlib

from testkit.brokers import RabbitCtlError, rabbitmqctl

__all__ = ["RabbitCtlError", "rabbitmqctl_eval"]


def rabbitmqctl_eval(expression: str, timeout: float = 60) -> str:
    return rabbitmqctl("eval", expression, timeout=timeout).strip()


def _bin(data: bytes) -> str:
    return f'base64:decode(<<"{base64.b64encode(data).decode()}">>)'


def start_tls_listener(port: int, cacerts_der: list[bytes], cert_der: bytes, key_der: bytes) -> None:
    options = (
        f"[{{cacerts, [{', '.join(_bin(c) for c in cacerts_der)}]}}, {{cert, {_bin(cert_der)}}}, "
        f"{{key, {{'PrivateKeyInfo', {_bin(key_der)}}}}}, {{verify, verify_peer}}, "
        "{fail_if_no_peer_cert, false}, {versions, ['tlsv1.3', 'tlsv1.2']}]"
    )
    out = rabbitmqctl_eval(
        "{ok, _} = application:ensure_all_started(ssl), "
        f'rabbit_networking:start_ssl_listener({{"127.0.0.1", {port}}}, {options}, 2, 1).'
    )
    if out != "ok":
        raise RabbitCtlError(f"RabbitMQ did not start a TLS listener on {port}: {out}")


def stop_tls_listener(port: int) -> None:
    rabbitmqctl_eval(f'rabbit_networking:stop_tcp_listener({{"127.0.0.1", {port}}}).')


@contextlib.contextmanager
def external_enabled():
    """EXTERNAL offered, and rabbit_ssl sees verify_peer, for the block; then what was added is
    taken away again, so the broker is left as the tests found it (added only where missing)."""
    added = rabbitmqctl_eval(
        "{ok, M} = application:get_env(rabbit, auth_mechanisms), "
        "AddM = not lists:member('EXTERNAL', M), "
        "case AddM of true -> application:set_env(rabbit, auth_mechanisms, M ++ ['EXTERNAL']); false -> ok end, "
        "{ok, O} = application:get_env(rabbit, ssl_options), "
        "AddV = proplists:get_value(verify, O) =:= undefined, "
        "case AddV of true -> application:set_env(rabbit, ssl_options, [{verify, verify_peer} | O]); "
        "false -> ok end, {AddM, AddV}."
    )
    add_mechanism, add_verify = (part == "true" for part in added.strip("{}").split(","))
    try:
        yield
    finally:
        if add_mechanism:
            rabbitmqctl_eval(
                "{ok, M} = application:get_env(rabbit, auth_mechanisms), "
                "application:set_env(rabbit, auth_mechanisms, M -- ['EXTERNAL'])."
            )
        if add_verify:
            rabbitmqctl_eval(
                "{ok, O} = application:get_env(rabbit, ssl_options), "
                "application:set_env(rabbit, ssl_options, O -- [{verify, verify_peer}])."
            )


@contextlib.contextmanager
def broker_cert_login_from(mode: str):
    """RabbitMQ's own ``ssl_cert_login_from`` set to ``mode`` for the block, then put back.

    EXTERNAL reads it at every login, so the change needs no restart; it must match the
    bridge's ``ssl_cert_login_from`` for certificate logins to name the same user.
    """
    before = rabbitmqctl_eval("application:get_env(rabbit, ssl_cert_login_from).").strip()
    rabbitmqctl_eval(f"application:set_env(rabbit, ssl_cert_login_from, {mode}).")
    try:
        yield
    finally:
        if before.startswith("{ok,"):
            rabbitmqctl_eval(f"application:set_env(rabbit, ssl_cert_login_from, {before[4:-1]}).")
        else:
            rabbitmqctl_eval("application:unset_env(rabbit, ssl_cert_login_from).")


def amqp_connections() -> list[dict]:
    """RabbitMQ's own view of its AMQP connections: user, auth_mechanism, ssl, connection_name."""
    import json

    listed = rabbitmqctl("list_connections", "--formatter", "json", "-q", "user", "auth_mechanism", "ssl",
                         "client_properties")
    out = []
    for row in json.loads(listed or "[]"):
        # AMQP clients send [name, type, value] triples; other protocols' connections differ.
        props = {p[0]: p[-1] for p in row.pop("client_properties", None) or [] if isinstance(p, list) and p}
        row["connection_name"] = props.get("connection_name", "")
        out.append(row)
    return out
