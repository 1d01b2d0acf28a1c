#!/usr/bin/env python3
"""Write the generated tables of the documentation site, or check them (``--check``).

- docs/configuration.md, between ``<!-- settings:begin -->`` and ``<!-- settings:end -->``:
  every setting, a table per section, from the settings model (``stomp_bridge.settings.reference()``,
  the same text ``stomp-bridge config reference`` prints);
- docs/helm-values.md, between ``<!-- values:begin -->`` and ``<!-- values:end -->``: every value
  of the Helm chart, from helm/stomp-bridge/values.yaml (``scripts/chart-readme.py``'s table,
  the same one the chart's README carries);
- docs/operations.md, between ``<!-- metrics:begin -->`` and ``<!-- metrics:end -->``: every
  Prometheus metric, from ``stomp_bridge.metrics.METRICS`` (what /metrics serves);
- docs/how-it-maps.md, between ``<!-- send-headers:begin/end -->``: where each SEND header goes
  in RabbitMQ and whether a headers binding can match it, and between
  ``<!-- binding-headers:begin/end -->`` the SUBSCRIBE headers that never become binding
  arguments, from ``protocol/headers.py`` and ``protocol/arguments.py``.

tests/unit/test_docs_tables.py fails when a checked-in copy differs from what this writes.

    .venv/bin/python scripts/docs-tables.py           # rewrite the tables
    .venv/bin/python scripts/docs-tables.py --check   # exit 1 naming each stale table
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stomp_bridge import metrics  # noqa: E402
from stomp_bridge.protocol import headers  # noqa: E402
from stomp_bridge.protocol.arguments import SUBSCRIBE_HEADERS  # noqa: E402
from stomp_bridge.settings import reference  # noqa: E402


def _chart_readme():
    spec = importlib.util.spec_from_file_location("chart_readme", ROOT / "scripts" / "chart-readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


AMQP_NAMES = {"message_type": "type", "delivery_mode": "delivery-mode"}  # pamqp's field -> AMQP's name


def send_headers() -> str:
    """Where each SEND header goes (``headers.properties_from_send``) and whether a SUBSCRIBE's
    binding can ask for it (``arguments.binding_arguments`` leaves SUBSCRIBE_HEADERS and x- out)."""
    rows = ["| SEND header | in the AMQP message | a headers binding can match it |", "|---|---|---|"]
    for header, field in headers.PROPERTY_HEADERS:
        name = f"`{AMQP_NAMES.get(field, field.replace('_', '-'))}`"
        if header == "persistent":
            name += " (2 for `true`)"
        rows.append(f"| `{header}` | property {name} | no: a property |")
    rows.append("| `destination` | the exchange and routing key; not carried | no |")
    unmatchable = sorted(SUBSCRIBE_HEADERS - headers.NOT_USER_HEADERS)
    rows.append("| " + ", ".join(f"`{h}`" for h in unmatchable) + " | headers table entry (a string) | "
                "no: on SUBSCRIBE these are the subscription's own |")
    rows.append("| `x-…` (`x-dead-letter-exchange`, `x-stream-filter-value` …) | headers table entry (a string; "
                "also a queue argument where it names one) | no: a SUBSCRIBE's `x-` headers are never binding "
                "arguments |")
    rows.append("| every other header: the application's (`code`, `region` …), the extensions' (`expires`, "
                "`retain`, `mandatory` …), `traceparent`/`tracestate` | headers table entry (a string) | yes |")
    return "\n".join(rows) + "\n"


def binding_headers() -> str:
    """The SUBSCRIBE headers ``binding_arguments`` never passes on, as one sentence."""
    return ", ".join(f"`{h}`" for h in sorted(SUBSCRIBE_HEADERS)) + ", and every `x-` header but `x-match`.\n"


def tables() -> list[tuple[Path, str, str, str]]:
    """(file, begin marker, end marker, generated text) for every generated table."""
    chart = _chart_readme()
    values = chart.table((chart.CHART / "values.yaml").read_text())
    return [
        (ROOT / "docs" / "configuration.md", "<!-- settings:begin -->\n", "<!-- settings:end -->", reference()),
        (ROOT / "docs" / "helm-values.md", chart.BEGIN, chart.END, values),
        (ROOT / "docs" / "operations.md", "<!-- metrics:begin -->\n", "<!-- metrics:end -->", metrics.reference()),
        (ROOT / "docs" / "how-it-maps.md", "<!-- send-headers:begin -->\n", "<!-- send-headers:end -->",
         send_headers()),
        (ROOT / "docs" / "how-it-maps.md", "<!-- binding-headers:begin -->\n", "<!-- binding-headers:end -->",
         binding_headers()),
    ]


def split(text: str, begin: str, end: str) -> tuple[str, str, str]:
    start = text.index(begin) + len(begin)
    stop = text.index(end, start)
    return text[:start], text[start:stop], text[stop:]


def stale() -> list[Path]:
    """The files whose generated table differs from the model."""
    out = []
    for path, begin, end, generated in tables():
        _, current, _ = split(path.read_text(), begin, end)
        if current != generated:
            out.append(path)
    return out


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        found = stale()
        for path in found:
            print(f"{path.relative_to(ROOT)}: generated table out of date: run "
                  "`.venv/bin/python scripts/docs-tables.py`", file=sys.stderr)
        return 1 if found else 0
    for path, begin, end, generated in tables():
        head, _, tail = split(path.read_text(), begin, end)
        path.write_text(head + generated + tail)
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
