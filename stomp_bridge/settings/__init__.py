"""The bridge's configuration: :class:`Settings` (model.py) holds every setting under its flat
name, grouped into sections (sections.py) that code takes one at a time (``settings.limits``);
the rules across settings are rules.py; the reference table, reference.py."""

from stomp_bridge.settings.model import SECRET_FIELDS, Settings, load, mask_url, masked
from stomp_bridge.settings.names import UnknownSetting
from stomp_bridge.settings.reference import reference
from stomp_bridge.settings.sections import (
    LOG_LEVELS, SECTIONS, AdmissionSettings, AmqpSettings, CertLoginSettings, ExtensionSettings,
    FlowSettings, ForwarderSettings, HeartbeatSettings, LimitSettings, ListenerSettings, LoginSettings,
    OperationsSettings, Section, StompSettings, SwaptacularSettings, TlsSettings, TracingSettings,
    WebSocketSettings,
)

__all__ = [
    "LOG_LEVELS", "SECRET_FIELDS", "SECTIONS", "AdmissionSettings", "AmqpSettings", "CertLoginSettings",
    "ExtensionSettings", "FlowSettings", "ForwarderSettings", "HeartbeatSettings", "LimitSettings",
    "ListenerSettings", "LoginSettings", "OperationsSettings", "Section", "Settings", "StompSettings",
    "SwaptacularSettings", "TlsSettings", "TracingSettings", "UnknownSetting", "WebSocketSettings", "load",
    "mask_url", "masked", "reference",
]
