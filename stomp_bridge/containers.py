"""The bridge image as a testcontainers container, for tests that run Docker.

:func:`bridge_with_rabbitmq` starts RabbitMQ and the bridge on one Docker network and
yields the bridge container; ``bridge.get_stomp_address()`` is where your client connects.
RabbitMQ's guest user may only log in from loopback, and the bridge reaches RabbitMQ over
the network, so the pair uses a user ``stomp``/``stomp`` that is also the bridge's default
login: clients connect with that login or none.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import Any

from docker.errors import DockerException

try:
    from testcontainers.community.rabbitmq import RabbitMqContainer
except ImportError:  # testcontainers before the community split
    from testcontainers.rabbitmq import RabbitMqContainer  # type: ignore[no-redef]
from testcontainers.core.container import DockerContainer
from testcontainers.core.network import Network
from testcontainers.core.wait_strategies import HttpWaitStrategy

from stomp_bridge import __version__
from stomp_bridge.settings import Settings, UnknownSetting
from stomp_bridge.settings.names import unknown_keys

STOMP_PORT = 61613
WS_PORT = 15674
HTTP_PORT = 9410
DEFAULT_IMAGE = os.environ.get("STOMP_BRIDGE_IMAGE", f"stomp-bridge:{__version__}")
RABBITMQ_IMAGE = "rabbitmq:4.3-management"
RABBITMQ_ALIAS = "rabbitmq"
USER = PASSWORD = "stomp"


class DockerUnavailable(RuntimeError):
    """No Docker engine answers: the container helpers cannot run (the message says what can)."""


@contextmanager
def _docker(what: str) -> Iterator[None]:
    """docker-py's refusal when no engine answers, as a :class:`DockerUnavailable` that says
    what to use instead."""
    try:
        yield
    except DockerException as exc:
        raise DockerUnavailable(
            f"{what} needs a Docker engine, and none answers ({exc}). Start Docker (or set DOCKER_HOST), "
            "or run the bridge in this process without Docker: stomp_bridge.testing.running_bridge(amqp_url), "
            "against any RabbitMQ."
        ) from exc


def setting_env(name: str, value: Any) -> tuple[str, str]:
    """``("max_frame_size", 1024)`` -> ``("STOMP_BRIDGE_MAX_FRAME_SIZE", "1024")``."""
    problems = unknown_keys([name], Settings.model_fields, values={name: value})
    if problems:
        raise UnknownSetting(problems)
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (list, tuple)):
        text = ",".join(str(v) for v in value)
    elif isinstance(value, (dict,)):
        text = json.dumps(value)
    else:
        text = str(value)
    return f"STOMP_BRIDGE_{name.upper()}", text


class StompBridgeContainer(DockerContainer):
    """The bridge image (``docker build -t stomp-bridge:<version> .``, or ``STOMP_BRIDGE_IMAGE``)."""

    def __init__(
        self,
        image: str = DEFAULT_IMAGE,
        amqp_url: str = f"amqp://{RABBITMQ_ALIAS}:5672/",
        settings: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        with _docker("StompBridgeContainer"):
            super().__init__(image, **kwargs)
        self.with_exposed_ports(STOMP_PORT, WS_PORT, HTTP_PORT)
        self.with_env("STOMP_BRIDGE_AMQP_URL", amqp_url)
        for name, value in (settings or {}).items():
            self.with_env(*setting_env(name, value))
        # Ready means listening and a RabbitMQ node answering: what a test needs before CONNECT.
        self.waiting_for(HttpWaitStrategy(HTTP_PORT, "/readyz").for_status_code(200).with_startup_timeout(60))

    def get_stomp_address(self) -> tuple[str, int]:
        return (self.get_container_host_ip(), int(self.get_exposed_port(STOMP_PORT)))

    def get_stomp_url(self) -> str:
        host, port = self.get_stomp_address()
        return f"tcp://{host}:{port}"

    def get_ws_url(self, path: str = "/ws") -> str:
        return f"ws://{self.get_container_host_ip()}:{self.get_exposed_port(WS_PORT)}{path}"

    def get_http_url(self) -> str:
        return f"http://{self.get_container_host_ip()}:{self.get_exposed_port(HTTP_PORT)}"


def container_pair(
    network: Network,
    image: str = DEFAULT_IMAGE,
    rabbitmq_image: str = RABBITMQ_IMAGE,
    docker_client_kw: dict[str, Any] | None = None,
    **settings: Any,
) -> tuple[RabbitMqContainer, StompBridgeContainer]:
    """RabbitMQ and the bridge wired to each other on ``network``, not started."""
    with _docker("container_pair"):
        rabbit = RabbitMqContainer(rabbitmq_image, username=USER, password=PASSWORD,
                                   docker_client_kw=docker_client_kw)
    rabbit.with_network(network).with_network_aliases(RABBITMQ_ALIAS)
    settings.setdefault("default_user", USER)
    settings.setdefault("default_pass", PASSWORD)
    bridge = StompBridgeContainer(image, amqp_url=f"amqp://{RABBITMQ_ALIAS}:{rabbit.port}/",
                                  settings=settings, docker_client_kw=docker_client_kw)
    bridge.with_network(network)
    return rabbit, bridge


@contextmanager
def bridge_with_rabbitmq(
    image: str = DEFAULT_IMAGE, rabbitmq_image: str = RABBITMQ_IMAGE, **settings: Any
) -> Iterator[StompBridgeContainer]:
    """Start RabbitMQ, then the bridge in front of it; both removed on exit."""
    with ExitStack() as stack:
        with _docker("bridge_with_rabbitmq"):  # docker-py's own errors, up to both containers started
            network = stack.enter_context(Network())
            rabbit, bridge = container_pair(network, image, rabbitmq_image, **settings)
            stack.enter_context(rabbit)
            stack.enter_context(bridge)
        yield bridge
