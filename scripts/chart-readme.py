#!/usr/bin/env python3
"""Write the values table of helm/stomp-bridge/README.md from values.yaml.

Every value, in the file's order, with its default and the comment above it, so that the
chart's README cannot drift from its values (tests/deploy/test_helm_chart.py checks it).

    .venv/bin/python scripts/chart-readme.py
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parent.parent / "helm" / "stomp-bridge"
BEGIN, END = "<!-- values:begin -->\n", "<!-- values:end -->"
PIPE = "\\|"  # a | inside a Markdown table cell
KEY = re.compile(r"^( *)([A-Za-z0-9_./-]+):(.*)$")


def _is_section(value: Any) -> bool:
    """A map of the chart's own keys (not annotations or labels, whose keys are the user's)."""
    return isinstance(value, dict) and bool(value) and not any("." in k or "/" in k for k in value)


def rows(text: str) -> list[tuple[str, Any, str]]:
    """(dotted path, default, the comment above it) for every value in ``text``."""
    data = yaml.safe_load(text)
    out: list[tuple[str, Any, str]] = []
    stack: list[tuple[int, str]] = []
    comment: list[str] = []
    section_comment: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            comment = []
            continue
        if stripped.startswith("#"):
            comment.append(stripped.lstrip("#").strip())
            continue
        match = KEY.match(line)
        if match is None or stripped.startswith("- "):
            comment = []
            continue
        indent, key = len(match.group(1)), match.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = [k for _, k in stack] + [key]
        if any(not _is_section(_get(data, path[:i])) for i in range(1, len(path))):
            comment = []
            continue  # inside a leaf map (annotations, labels)
        value = _get(data, path)
        dotted = ".".join(path)
        if isinstance(value, dict):
            stack.append((indent, key))  # its lines below are its keys (skipped if a leaf map)
        if _is_section(value):
            section_comment[dotted] = " ".join(comment)
        else:
            inherited = " ".join(comment) or ""
            out.append((dotted, value, inherited))
        comment = []
    # a section's comment speaks for its first value when that has none of its own
    seen: set[str] = set()
    for i, (dotted, value, text_) in enumerate(out):
        parent = dotted.rsplit(".", 1)[0] if "." in dotted else ""
        if parent and parent not in seen and not text_ and section_comment.get(parent):
            out[i] = (dotted, value, section_comment[parent])
        if parent:
            seen.add(parent)
    return out


def _get(data: Any, path: list[str]) -> Any:
    for key in path:
        data = data[key]
    return data


def table(text: str) -> str:
    lines = ["| value | default | meaning |", "|---|---|---|"]
    for dotted, value, comment in rows(text):
        default = json.dumps(value, separators=(", ", ": ")).replace("|", PIPE)
        meaning = comment.replace("|", PIPE)
        lines.append(f"| `{dotted}` | `{default}` | {meaning} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    readme = CHART / "README.md"
    text = readme.read_text()
    start = text.index(BEGIN) + len(BEGIN)
    end = text.index(END)
    readme.write_text(text[:start] + table((CHART / "values.yaml").read_text()) + text[end:])
    print(f"wrote {readme}")


if __name__ == "__main__":
    main()
