"""STOMP frames (placeholder; the codec module is being written)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Frame:
    command: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
