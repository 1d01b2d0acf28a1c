"""Names that are no setting: refused wherever settings enter (keyword arguments, a settings
file, ``STOMP_BRIDGE_*`` variables), each named with the setting it nearly is.

A misspelt name that is ignored leaves its setting at the default, silently (``madatory = true``
left ``mandatory`` off, ``max_conections`` no limit); RabbitMQ's own configuration refuses
unknown keys at boot for the same reason.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Mapping
from typing import Any, get_origin

ENV_PREFIX = "STOMP_BRIDGE_"
# STOMP_BRIDGE_* variables that are not settings: the command's (the settings file's path) and the
# tools' around it (the container helpers' image, the test suite's and the broker script's own).
ENV_NOT_SETTINGS = frozenset({"STOMP_BRIDGE_CONFIG", "STOMP_BRIDGE_IMAGE", "STOMP_BRIDGE_BROKER_CACHE"})
ENV_NOT_SETTINGS_PREFIXES = ("STOMP_BRIDGE_TEST_",)
REFERENCE = "`stomp-bridge config reference` lists every setting"


class UnknownSetting(ValueError):
    """Names given as settings that are none: ``problems`` has one sentence each (naming it and
    the nearest setting), ``where`` the file they are in, if any."""

    def __init__(self, problems: list[str], where: str = "") -> None:
        self.problems = [f"{where}: {p}" if where else p for p in problems]
        super().__init__("; ".join(self.problems))


def nearest(name: str, known: Iterable[str]) -> str | None:
    """The known name ``name`` is most likely a misspelling of, if any is close."""
    found = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return found[0] if found else None


def unknown_keys(names: Iterable[str], fields: Collection[str], values: Mapping[str, Any] | None = None) -> list[str]:
    """One sentence per name in ``names`` that is not in ``fields``; a table (a mapping value,
    from ``values``) is told that settings have no tables."""
    problems = []
    for name in names:
        if name in fields:
            continue
        value = values.get(name) if values is not None else None
        if isinstance(value, Mapping):
            inner = ", ".join(str(k) for k in list(value)[:5])
            problems.append(f"unknown setting {name!r} (a table): settings are flat, with no tables or "
                            f"sections; write its keys ({inner}) at the top level, before any table")
            continue
        guess = nearest(name, fields)
        problems.append(f"unknown setting {name!r} (did you mean {guess!r}?)" if guess
                        else f"unknown setting {name!r} ({REFERENCE})")
    return problems


def unknown_environment(environ: Mapping[str, str], fields: Mapping[str, Any]) -> list[str]:
    """One sentence per ``STOMP_BRIDGE_*`` variable that names no setting (case as pydantic-settings
    reads them: any). ``NAME__KEY`` is one entry of a mapping setting (``host_vhosts``)."""
    problems = []
    for variable in environ:
        upper = variable.upper()
        if not upper.startswith(ENV_PREFIX) or upper in ENV_NOT_SETTINGS or upper.startswith(ENV_NOT_SETTINGS_PREFIXES):
            continue
        name = upper[len(ENV_PREFIX):].lower()
        if "__" in name:
            head = name.split("__", 1)[0]
            field = fields.get(head)
            if field is not None and (get_origin(field.annotation) or field.annotation) is dict:
                continue
            name = head if field is not None else name
        if name in fields:
            if "__" not in upper[len(ENV_PREFIX):]:
                continue
            problems.append(f"environment variable {variable}: {name} is not a mapping, so it takes no "
                            f"__KEY; set {ENV_PREFIX}{name.upper()}")
            continue
        guess = nearest(name, fields)
        problems.append(f"unknown environment variable {variable} (did you mean {ENV_PREFIX}{guess.upper()}?)"
                        if guess else f"unknown environment variable {variable} ({REFERENCE})")
    return problems
