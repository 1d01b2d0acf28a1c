"""Configuration, read from CLI flags, ``STOMP_BRIDGE_*`` environment variables and defaults.

Names echo the RabbitMQ STOMP plugin's (``default_user``, ``implicit_connect``,
``default_topic_exchange``, ``max_frame_size`` …) so an operator moving from the
plugin finds the same knobs.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="STOMP_BRIDGE_", env_nested_delimiter="__", extra="ignore"
    )

    host: str = Field("0.0.0.0", description="Interface the STOMP TCP listener binds to.")
    port: int = Field(61613, ge=0, le=65535, description="STOMP TCP port (0 picks a free one).")
    amqp_url: str = Field(
        "amqp://guest:guest@localhost:5672/",
        description="RabbitMQ node(s), comma-separated for a cluster (amqp:// or amqps://). Their "
        "user and vhost are ignored: each STOMP connection logs in as its own user on the vhost "
        "from its `host` header.",
    )

    # The plugin's defaults: guest/guest is used when CONNECT has no login.
    default_user: str | None = Field("guest", description="Login when CONNECT has none (unset: refuse).")
    default_pass: str | None = Field("guest", description="Passcode that goes with default_user.")
    default_vhost: str = Field("/", description="Vhost when CONNECT has no host header.")
    implicit_connect: bool = Field(
        False, description="A first frame other than CONNECT logs in as the default user (no CONNECTED)."
    )
    default_topic_exchange: str = Field("amq.topic", description="The exchange behind /topic/.")
    default_nack_requeue: bool = Field(True, description="NACK without a requeue header requeues.")
    loopback_users: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["guest"],
        description="Users that may only log in from a loopback address, as RabbitMQ's own "
        "loopback_users: RabbitMQ sees the bridge's address, so the bridge checks the client's.",
    )
    hide_server_info: bool = Field(False, description="Leave the server header out of CONNECTED.")

    max_frame_size: int = Field(4 * 1024 * 1024, ge=1024, description="Bytes per frame; more: ERROR, close.")
    max_frame_size_before_login: int = Field(
        64 * 1024, ge=1024, description="The same limit until CONNECT has succeeded."
    )
    max_headers: int = Field(1000, ge=1, description="Header lines per frame.")
    max_header_length: int = Field(64 * 1024, ge=64, description="Bytes per header line.")
    max_transactions: int = Field(16, ge=1, description="Open transactions per connection (plugin's limit).")
    max_transaction_actions: int = Field(1024, ge=1, description="Frames held per transaction.")
    max_subscriptions: int = Field(10000, ge=1, description="Subscriptions per connection.")

    write_buffer_high: int = Field(
        1024 * 1024,
        ge=16 * 1024,
        description="Bytes queued for a client before the bridge stops reading its deliveries "
        "from RabbitMQ (TCP backpressure instead of memory).",
    )
    max_connections: int = Field(0, ge=0, description="Open STOMP connections at most (0: no limit).")
    max_connections_per_ip: int = Field(0, ge=0, description="Per client address (0: no limit).")
    idle_timeout: float = Field(
        0.0,
        ge=0,
        description="Seconds without a byte from a client that agreed no heart-beats before it is "
        "dropped, like Artemis' connection TTL (0: never).",
    )
    proxy_protocol: bool = Field(
        False,
        description="Expect a PROXY protocol v1/v2 header from a TCP load balancer on every "
        "connection and take the client address from it (the plugin's proxy_protocol).",
    )
    http_host: str = Field("0.0.0.0", description="Interface of the /metrics, /healthz, /readyz endpoint.")
    http_port: int | None = Field(
        9410, ge=0, le=65535, description="Port of that endpoint (0 picks a free one; unset to disable)."
    )
    shutdown_grace: float = Field(
        10.0, ge=0, description="Seconds SIGTERM waits for in-flight publishes to be confirmed."
    )
    heartbeat_tolerance: float = Field(
        2.0, ge=1.0, description="A peer silent for this many agreed intervals is disconnected."
    )
    connect_timeout: float = Field(
        10.0, gt=0, description="Seconds a client has to send CONNECT before it is dropped."
    )
    amqp_heartbeat: int = Field(60, ge=0, description="AMQP heart-beat to RabbitMQ, seconds.")
    amqp_connect_timeout: float = Field(
        10.0, gt=0, description="Seconds to open an AMQP connection before trying the next node."
    )

    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING or ERROR.")
    log_format: str = Field("text", pattern="^(text|json)$", description="text (key=value) or json lines.")

    @field_validator("loopback_users", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return [v for v in (p.strip() for p in value.split(",")) if v]
        return value


SECRET_FIELDS = ("default_pass",)


def load(config_file: str | Path | None = None, **overrides: Any) -> Settings:
    """Settings from, highest first: ``overrides`` (CLI flags), ``STOMP_BRIDGE_*``
    environment variables, the TOML or YAML ``config_file``, defaults."""
    if config_file is None:
        return Settings(**overrides)
    path = Path(config_file)
    if not path.is_file():
        raise FileNotFoundError(f"configuration file {path} does not exist")
    if path.suffix not in (".toml", ".yaml", ".yml"):
        raise ValueError(f"configuration file {path} must end in .toml, .yaml or .yml")

    class FileSettings(Settings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            if path.suffix == ".toml":
                file_source: PydanticBaseSettingsSource = TomlConfigSettingsSource(settings_cls, path)
            else:
                file_source = YamlConfigSettingsSource(settings_cls, path)
            return init_settings, env_settings, file_source

    return FileSettings(**overrides)


def masked(settings: Settings) -> dict[str, Any]:
    """The effective settings with passwords replaced, for ``config show`` and logs."""
    data = settings.model_dump(mode="json")
    for name in SECRET_FIELDS:
        if data.get(name):
            data[name] = "***"
    data["amqp_url"] = ",".join(mask_url(url) for url in settings.amqp_url.split(","))
    return data


def mask_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url.strip())
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return url.strip()


def reference() -> str:
    """The configuration reference table in the README, made from this model."""
    rows = [
        "| setting | environment variable | default | meaning |",
        "|---|---|---|---|",
    ]
    for name, field in Settings.model_fields.items():
        default = field.get_default(call_default_factory=True)
        if isinstance(default, list):
            default = ",".join(default)
        shown = "(unset)" if default is None else f"`{default}`"
        rows.append(
            f"| `{name}` | `STOMP_BRIDGE_{name.upper()}` | {shown} | {field.description or ''} |"
        )
    return "\n".join(rows) + "\n"
