"""The settings' sections: every setting in exactly one, each section handed out as a frozen
view of the whole settings (``settings.limits``), and one reference table per section."""

from __future__ import annotations

import inspect

import pytest
from pydantic import ValidationError

from stomp_bridge.settings import (
    SECTIONS, AmqpSettings, LimitSettings, ListenerSettings, Section, Settings, reference,
)

# The view of each section on Settings, by its property's name.
VIEWS = {
    "listeners": "ListenerSettings", "websocket": "WebSocketSettings", "admission": "AdmissionSettings",
    "login": "LoginSettings", "limits": "LimitSettings", "flow": "FlowSettings",
    "heartbeats": "HeartbeatSettings", "stomp": "StompSettings", "extensions": "ExtensionSettings",
    "amqp": "AmqpSettings", "tls": "TlsSettings", "cert_login": "CertLoginSettings",
    "swaptacular": "SwaptacularSettings", "forwarder": "ForwarderSettings", "operations": "OperationsSettings",
    "telemetry": "TracingSettings",
}


def test_every_setting_is_in_exactly_one_section():
    owners: dict[str, list[str]] = {}
    for section in SECTIONS:
        for name in section.model_fields:
            owners.setdefault(name, []).append(section.__name__)
    assert {name: where for name, where in owners.items() if len(where) > 1} == {}
    assert set(owners) == set(Settings.model_fields)


def test_each_section_has_a_view_and_settings_is_every_section():
    assert sorted(VIEWS.values()) == sorted(section.__name__ for section in SECTIONS)
    settings = Settings()
    for section in SECTIONS:
        assert isinstance(settings, section)  # code that takes a section takes the whole settings too


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_a_view_holds_its_sections_values_and_nothing_else(view):
    settings = Settings(port=61000, max_frame_size=2048, amqp_url="amqp://r:5672/", log_level="debug",
                        swpt_node_id="7", tls_reload_interval=1.5, ws_path="/stomp", mandatory=True)
    got = getattr(settings, view)
    assert type(got).__name__ == VIEWS[view]
    assert got.model_dump() == {name: getattr(settings, name) for name in type(got).model_fields}


def test_a_view_is_frozen_and_a_copy():
    settings = Settings(max_frame_size=2048)
    limits = settings.limits
    with pytest.raises(ValidationError, match="frozen"):
        limits.max_frame_size = 4096
    settings.max_frame_size = 8192  # the settings stay assignable (tests and tools do it)
    assert limits.max_frame_size == 2048 and settings.limits.max_frame_size == 8192
    same = Settings(max_frame_size=2048).limits
    assert limits == same and hash(limits) == hash(same)  # a value: comparable, usable as a key
    with pytest.raises(TypeError, match="unhashable"):  # assignable, so no hash (as before the sections)
        hash(settings)


def test_a_view_has_only_its_sections_fields():
    listeners = Settings().listeners
    assert listeners.port == 61613
    assert not hasattr(listeners, "max_frame_size") and not hasattr(listeners, "amqp_url")


def test_a_section_alone_validates_its_fields():
    """Tests and tools build one section without the whole settings."""
    assert LimitSettings(max_frame_size=2048).max_headers == 1000
    assert ListenerSettings(port="none").port is None
    with pytest.raises(ValidationError, match="max_frame_size"):
        LimitSettings(max_frame_size=10)
    assert AmqpSettings().amqp_url == Settings().amqp_url


def test_the_reference_has_a_table_per_section_with_every_setting_once():
    text = reference()
    titles = [line[4:] for line in text.splitlines() if line.startswith("### ")]
    assert titles == [inspect.cleandoc(section.__doc__).splitlines()[0] for section in SECTIONS]
    rows = [line.split("`")[1] for line in text.splitlines() if line.startswith("| `")]
    assert sorted(rows) == sorted(Settings.model_fields)
    assert text.count("| setting | environment variable | default | meaning |") == len(SECTIONS)


@pytest.mark.parametrize("section", SECTIONS, ids=lambda s: s.__name__)
def test_each_section_says_what_it_is(section: type[Section]):
    title, blank, *intro = inspect.cleandoc(section.__doc__ or "").splitlines()
    assert title and not blank and intro, "a title line, a blank line, an introduction"
