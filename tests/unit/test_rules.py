"""The core's Rules restate the defaults of the settings they are built from (the core may not
import the settings model: it is pure); held together here, every one."""

from __future__ import annotations

from dataclasses import fields
from types import MappingProxyType

from stomp_bridge.core.rules import Rules
from stomp_bridge.settings import Settings


def _default(name: str):
    value = Settings.model_fields[name].get_default(call_default_factory=True)
    if isinstance(value, dict):
        return MappingProxyType(value)
    if isinstance(value, list):
        return tuple(value)
    return value


def test_every_rule_defaults_to_its_settings_default():
    rules = Rules()
    differing = {f.name: (getattr(rules, f.name), _default(f.name)) for f in fields(Rules)
                 if getattr(rules, f.name) != _default(f.name)}
    assert not differing, f"Rules defaults that are not the settings' (rule, setting): {differing}"

