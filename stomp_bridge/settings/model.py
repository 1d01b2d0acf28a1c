"""Configuration, read from CLI flags, ``STOMP_BRIDGE_*`` environment variables and defaults.

Names echo the RabbitMQ STOMP plugin's (``default_user``, ``implicit_connect``,
``default_topic_exchange``, ``max_frame_size`` …) so an operator moving from the
plugin finds the same knobs. :class:`Settings` has the fields of every section
(sections.py) side by side, so every name stays flat; its properties hand out one
section at a time, frozen.
"""

from __future__ import annotations

import os
import tomllib
import urllib.parse
from pathlib import Path
from typing import Any, TypeVar

from pydantic import model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from stomp_bridge.settings import rules
from stomp_bridge.settings.names import ENV_PREFIX, UnknownSetting, unknown_environment, unknown_keys
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
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", frozen=False
    )
    __hash__ = None  # type: ignore[assignment]  # assignable, so unhashable (not a section's hash)

    def __init__(self, **values: Any) -> None:
        """Refuses a name that is no setting, in the keyword arguments or the environment
        (``STOMP_BRIDGE_*``), with the setting it nearly is (:class:`UnknownSetting`): a typo
        that was silently ignored left its default in force."""
        problems = unknown_keys((k for k in values if not k.startswith("_")), type(self).model_fields)
        problems += unknown_environment(os.environ, type(self).model_fields)
        if problems:
            raise UnknownSetting(problems)
        super().__init__(**values)

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
    environment variables, the TOML or YAML ``config_file``, defaults. A file that does not
    parse, or holds a key that is no setting, is a ValueError naming the file."""
    if config_file is None:
        return Settings(**overrides)
    path = Path(config_file)
    data = read_file(path)

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
            return init_settings, env_settings, _FileSource(settings_cls, data)

    return FileSettings(**overrides)


def read_file(path: Path) -> dict[str, Any]:
    """The settings of a TOML or YAML file, checked: it exists, parses, is a table of settings
    and names only settings; else a ValueError (FileNotFoundError) that starts with its path."""
    if not path.is_file():
        raise FileNotFoundError(f"configuration file {path} does not exist")
    if path.suffix not in (".toml", ".yaml", ".yml"):
        raise ValueError(f"configuration file {path} must end in .toml, .yaml or .yml")
    if path.suffix == ".toml":
        try:
            with path.open("rb") as f:
                data: Any = tomllib.load(f)
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:  # the message has the line and column
            raise ValueError(f"configuration file {path} is not valid TOML: {exc}") from None
    else:
        import yaml  # only for a YAML file

        try:
            with path.open(encoding="utf-8") as f:
                data = yaml.safe_load(f)
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ValueError(f"configuration file {path} is not valid YAML: {exc}") from None
    if data is None:  # an empty YAML file
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"configuration file {path} must be a mapping of settings (key: value), "
                         f"not a {type(data).__name__}")
    problems = unknown_keys(data, Settings.model_fields, values=data)
    if problems:
        raise UnknownSetting(problems, where=f"configuration file {path}")
    return data


class _FileSource(PydanticBaseSettingsSource):
    """A settings file's values, read and checked by :func:`read_file`."""

    def __init__(self, settings_cls: type[BaseSettings], data: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self.data = data

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self.data)


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
