"""The configuration reference (docs/configuration.md, ``stomp-bridge config reference``): a
table per section, made from the sections' fields, so the page cannot drift from the model."""

from __future__ import annotations

import inspect

from stomp_bridge.settings.sections import SECTIONS, Section

HEADER = ("| setting | environment variable | default | meaning |", "|---|---|---|---|")


def section_table(section: type[Section]) -> str:
    """One section: its title as a heading, its introduction, and a row per setting."""
    title, _, intro = inspect.cleandoc(section.__doc__ or section.__name__).partition("\n")
    rows = [f"### {title}", "", intro.strip(), "", *HEADER]
    for name, field in section.model_fields.items():
        default = field.get_default(call_default_factory=True)
        if isinstance(default, list):
            default = ",".join(default)
        shown = "(unset)" if default is None else f"`{default}`"
        rows.append(f"| `{name}` | `STOMP_BRIDGE_{name.upper()}` | {shown} | {field.description or ''} |")
    return "\n".join(rows) + "\n"


def reference() -> str:
    """Every section's table, in the order of ``SECTIONS``."""
    return "\n".join(section_table(section) for section in SECTIONS)
