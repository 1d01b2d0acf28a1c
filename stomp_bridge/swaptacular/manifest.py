"""The Swaptacular STOMP servers manifest (``stomp.toml``): write ours, read and check a peer's.

Keys (seeds/002, "STOMP Servers Manifest File"): ``servers`` ("hostname:port",
repeats allowed to weight the random choice), ``host``, optional ``login`` and
``passcode``, ``destination`` (``${NODE_ID}`` in host, login, passcode and
destination is the *client's* node id), optional ``accepted-content-types``
(application/json is implied). Other keys are allowed and kept.
"""

from __future__ import annotations

import json
import random
import tomllib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stomp_bridge.core.peer import render

if TYPE_CHECKING:
    from stomp_bridge.settings.sections import SwaptacularSettings


class ManifestError(ValueError):
    """A manifest that a client cannot use; the message lists every problem."""


@dataclass(frozen=True)
class Manifest:
    servers: list[str]
    host: str
    destination: str
    login: str | None = None
    passcode: str | None = None
    accepted_content_types: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def choose_server(self, rng: random.Random | None = None) -> tuple[str, int]:
        """The spec's random choice (a repeated entry is proportionally likelier)."""
        return split_address((rng or random).choice(self.servers))

    def for_node(self, node_id: str) -> dict[str, str]:
        """host, login, passcode and destination as a client with ``node_id`` sends them."""
        out = {"host": render(self.host, node_id), "destination": render(self.destination, node_id)}
        if self.login is not None:
            out["login"] = render(self.login, node_id)
        if self.passcode is not None:
            out["passcode"] = render(self.passcode, node_id)
        return out


def split_address(server: str) -> tuple[str, int]:
    host, sep, port = server.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ManifestError(f"server {server!r} is not \"hostname:port\"")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def parse(text: str) -> Manifest:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"not TOML: {exc}") from None
    problems = []
    servers = data.get("servers")
    if not isinstance(servers, list) or not servers or not all(isinstance(s, str) for s in servers):
        problems.append('servers must be a non-empty list of "hostname:port" strings')
        servers = []
    for server in servers:
        try:
            split_address(server)
        except ManifestError as exc:
            problems.append(str(exc))
    for key in ("host", "destination"):
        if not isinstance(data.get(key), str):
            problems.append(f"{key} must be a string")
    for key in ("login", "passcode"):
        if key in data and not isinstance(data[key], str):
            problems.append(f"{key} must be a string when present")
    types = data.get("accepted-content-types", [])
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        problems.append("accepted-content-types must be a list of MIME type strings")
        types = []
    if problems:
        raise ManifestError("; ".join(problems))
    known = {"servers", "host", "destination", "login", "passcode", "accepted-content-types"}
    return Manifest(
        servers=servers,
        host=data["host"],
        destination=data["destination"],
        login=data.get("login"),
        passcode=data.get("passcode"),
        accepted_content_types=types,
        extra={k: v for k, v in data.items() if k not in known},
    )


def _toml_value(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        if not value:
            return "[]"
        return "[\n" + "".join(f"  {_toml_value(v)},\n" for v in value) + "]"
    if isinstance(value, (int, float)):
        return repr(value)
    raise TypeError(f"cannot write {value!r} to TOML")


def dumps(manifest: Manifest) -> str:
    lines = [f"servers = {_toml_value(manifest.servers)}", f"host = {_toml_value(manifest.host)}"]
    if manifest.login is not None:
        lines.append(f"login = {_toml_value(manifest.login)}")
    if manifest.passcode is not None:
        lines.append(f"passcode = {_toml_value(manifest.passcode)}")
    lines.append(f"destination = {_toml_value(manifest.destination)}")
    lines.append(f"accepted-content-types = {_toml_value(manifest.accepted_content_types)}")
    for key, value in manifest.extra.items():
        lines.append(f"{json.dumps(key)} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def from_settings(settings: SwaptacularSettings) -> Manifest:
    """Our node's manifest: what peers need to reach this bridge's Swaptacular listener."""
    if not settings.swpt_servers:
        raise ManifestError(
            "swpt_servers is empty: list the public host:port addresses peers connect to "
            "(e.g. STOMP_BRIDGE_SWPT_SERVERS=stomp1.example.com:61614,stomp2.example.com:61614)"
        )
    for server in settings.swpt_servers:
        split_address(server)
    return Manifest(
        servers=list(settings.swpt_servers),
        host=settings.swpt_host,
        destination=settings.swpt_destination,
        accepted_content_types=list(settings.swpt_accepted_content_types),
    )
