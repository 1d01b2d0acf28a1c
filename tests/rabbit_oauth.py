"""OAuth 2 on the machine's own RabbitMQ (3.x), for the token tests, and undone afterwards.

The 4.x test brokers run ``rabbitmq_auth_backend_oauth2`` beside the internal users from their
start (scripts/rabbitmq4). The machine's broker is not the project's to reconfigure for good, so
here the plugin is enabled, given the tests' signing key (tests/tokens.py) and put second in
``auth_backends`` at run time with rabbitmqctl, and everything goes back as it was at the end.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterator

from testkit.brokers import rabbitmqctl
from tests.tokens import KEY_ID, RESOURCE_SERVER, SIGNING_KEY

PLUGIN = "rabbitmq_auth_backend_oauth2"


def _eval(expression: str) -> str:
    return rabbitmqctl("eval", expression).strip()


@contextlib.contextmanager
def oauth2_enabled() -> Iterator[None]:
    enabled_before = PLUGIN in rabbitmqctl("list", "-E", "-m", tool="rabbitmq-plugins").split()
    backends_before = _eval("application:get_env(rabbit, auth_backends).")
    if not enabled_before:
        rabbitmqctl("enable", PLUGIN, tool="rabbitmq-plugins", timeout=120)
    k = base64.urlsafe_b64encode(SIGNING_KEY).rstrip(b"=").decode()
    _eval(
        f'application:set_env({PLUGIN}, resource_server_id, <<"{RESOURCE_SERVER}">>), '
        f'application:set_env({PLUGIN}, key_config, [{{default_key, <<"{KEY_ID}">>}}, '
        f'{{signing_keys, #{{<<"{KEY_ID}">> => {{map, #{{<<"kty">> => <<"oct">>, <<"alg">> => <<"HS256">>, '
        f'<<"k">> => <<"{k}">>}}}}}}}}]), '
        "application:set_env(rabbit, auth_backends, [rabbit_auth_backend_internal, rabbit_auth_backend_oauth2])."
    )
    try:
        yield
    finally:
        if backends_before.startswith("{ok,"):
            _eval(f"application:set_env(rabbit, auth_backends, {backends_before[4:-1]}).")
        else:
            _eval("application:set_env(rabbit, auth_backends, [rabbit_auth_backend_internal]).")
        if not enabled_before:
            rabbitmqctl("disable", PLUGIN, tool="rabbitmq-plugins", timeout=120)
