"""A small reader for the Dockerfile: stages of (instruction, arguments), continuations joined."""

from __future__ import annotations

import re
from pathlib import Path

from .support import ROOT

DOCKERFILE = ROOT / "Dockerfile"


def instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pending = ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        whole = pending + stripped
        pending = ""
        word, _, rest = whole.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def stages(path: Path = DOCKERFILE) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for word, rest in instructions(path):
        if word == "FROM":
            result.append([])
        if result:
            result[-1].append((word, rest))
    return result


def env_pairs(args: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)=("[^"]*"|\S+)', args))
