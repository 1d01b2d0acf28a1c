"""Configuration, read from CLI flags, ``STOMP_BRIDGE_*`` environment variables and defaults.

Names echo the RabbitMQ STOMP plugin's (``default_user``, ``implicit_connect``,
``default_topic_exchange``, ``max_frame_size`` …) so an operator moving from the
plugin finds the same knobs. :class:`Settings` has the fields of every section
(sections.py) side by side, so every name stays flat; its properties hand out one
section at a time, frozen.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any, TypeVar

from pydantic import model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)

from stomp_bridge.settings import rules
from stomp_bridge.settings.sections import (
    AdmissionSettings, AmqpSettings, CertLoginSettings, ExtensionSettings, FlowSettings,
    ForwarderSettings, HeartbeatSettings, LimitSettings, ListenerSettings, LoginSettings,
    OperationsSettings, Section, StompSettings, SwaptacularSettings, TlsSettings, TracingSettings,
    WebSocketSettings,
)

S = TypeVar("S", bound=Section)


class Settings(  # pydantic takes the last base's fields first: model_fields read listeners to tracing
    BaseSettings, TracingSettings, OperationsSettings, ForwarderSettings, SwaptacularSettings, CertLoginSettings, TlsSettings,
    AmqpSettings, ExtensionSettings, StompSettings, HeartbeatSettings, FlowSettings, LimitSettings,
    LoginSettings, AdmissionSettings, WebSocketSettings, ListenerSettings,
):
    """Every setting, flat (``settings.port``), and each section as a frozen view of them
    (``settings.listeners``). A Settings is an instance of every section, so code that takes
    a section also takes the whole settings; the view is for handing over no more than that."""

    model_config = SettingsConfigDict(
        env_prefix="STOMP_BRIDGE_", env_nested_delimiter="__", extra="ignore", frozen=False
    )
    __hash__ = None  # type: ignore[assignment]  # assignable, so unhashable (not a section's hash)

    @model_validator(mode="after")
    def _rules(self) -> Settings:
        """The rules across settings (rules.py): the profile's overrides, then the checks."""
        for name, value in rules.profile_overrides(dict(self), self.model_fields_set).items():
            object.__setattr__(self, name, value)  # imposed, not given: model_fields_set stays as it was
        rules.check_a_listener(self.listeners)
        rules.check_heartbeat_bounds(self.heartbeats)
        rules.check_workers_share_fixed_ports(self.operations, self.listeners)
        rules.check_proxy_trust(self.admission)
        rules.check_tls_listener_files(self.listeners, self.tls)
        rules.check_verify_peer_ca(self.tls)
        rules.check_cert_login(self.cert_login, self.tls, self.amqp)
        return self

    def section(self, kind: type[S]) -> S:
        """The fields of section ``kind``, as a frozen copy (no validation: they were validated)."""
        return kind.model_construct(**{name: getattr(self, name) for name in kind.model_fields})

    @property
    def listeners(self) -> ListenerSettings:
        return self.section(ListenerSettings)

    @property
    def websocket(self) -> WebSocketSettings:
        return self.section(WebSocketSettings)

    @property
    def admission(self) -> AdmissionSettings:
        return self.section(AdmissionSettings)

    @property
    def login(self) -> LoginSettings:
        return self.section(LoginSettings)

    @property
    def limits(self) -> LimitSettings:
        return self.section(LimitSettings)

    @property
    def flow(self) -> FlowSettings:
        return self.section(FlowSettings)

    @property
    def heartbeats(self) -> HeartbeatSettings:
        return self.section(HeartbeatSettings)

    @property
    def stomp(self) -> StompSettings:
        return self.section(StompSettings)

    @property
    def extensions(self) -> ExtensionSettings:
        return self.section(ExtensionSettings)

    @property
    def amqp(self) -> AmqpSettings:
        return self.section(AmqpSettings)

    @property
    def tls(self) -> TlsSettings:
        return self.section(TlsSettings)

    @property
    def cert_login(self) -> CertLoginSettings:
        return self.section(CertLoginSettings)

    @property
    def swaptacular(self) -> SwaptacularSettings:
        return self.section(SwaptacularSettings)

    @property
    def forwarder(self) -> ForwarderSettings:
        return self.section(ForwarderSettings)

    @property
    def operations(self) -> OperationsSettings:
        return self.section(OperationsSettings)

    @property
    def telemetry(self) -> TracingSettings:
        return self.section(TracingSettings)


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
