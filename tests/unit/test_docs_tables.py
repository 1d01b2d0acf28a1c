"""The documentation's generated tables are the ones their sources generate: the configuration
reference (docs/configuration.md) from the settings model, the Helm values (docs/helm-values.md)
from the chart's values.yaml; and the README's compatibility table is the docs' one."""

import importlib.util
import re
from pathlib import Path

from stomp_bridge.settings import reference

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "docs-tables.py"


def _docs_tables():
    spec = importlib.util.spec_from_file_location("docs_tables", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_configuration_page_settings_table_matches_the_model():
    text = (ROOT / "docs" / "configuration.md").read_text()
    start = text.index("<!-- settings:begin -->\n") + len("<!-- settings:begin -->\n")
    end = text.index("<!-- settings:end -->")
    assert text[start:end] == reference(), "run `.venv/bin/python scripts/docs-tables.py`"


def test_every_generated_docs_table_is_up_to_date():
    module = _docs_tables()
    assert module.stale() == [], "run `.venv/bin/python scripts/docs-tables.py`"


def test_the_settings_table_lives_in_the_docs_not_the_readme():
    assert "<!-- settings:begin -->" not in (ROOT / "README.md").read_text()


def _table_after(text: str, heading: str) -> str:
    start = text.index(heading)
    match = re.search(r"(?m)^\|.*\|\n(?:^\|.*\|\n)+", text[start:])
    assert match, f"no table after {heading!r}"
    return match.group(0)


def test_readme_compatibility_table_is_the_compatibility_page():
    readme = _table_after((ROOT / "README.md").read_text(), "## Compatibility")
    page = _table_after((ROOT / "docs" / "compatibility.md").read_text(), "# Compatibility")
    assert readme == page, "README.md's compatibility table differs from docs/compatibility.md's"


def _toml_blocks():
    for page in sorted((ROOT / "docs").rglob("*.md")):
        text = page.read_text()
        for block in re.finditer(r"(?ms)^```toml([^\n]*)\n(.*?)^```", text):
            line = text[: block.start()].count("\n") + 1
            yield f"{page.relative_to(ROOT)}:{line}", block.group(2)


def test_every_settings_file_in_the_docs_names_real_settings():
    """A TOML block in the docs is a bridge settings file (unless its first line names another
    file, as ``# credentials.toml: …`` does): each of its keys must be a setting."""
    import tomllib

    from stomp_bridge.settings import Settings

    checked = 0
    for where, body in _toml_blocks():
        first = body.splitlines()[0] if body.strip() else ""
        if re.match(r"#\s*[\w.-]+\.toml\b", first):
            continue
        unknown = set(tomllib.loads(body)) - set(Settings.model_fields)
        assert not unknown, f"{where}: not settings: {sorted(unknown)}"
        checked += 1
    assert checked >= 5


def _between(text: str, begin: str, end: str) -> str:
    start = text.index(begin) + len(begin)
    return text[start:text.index(end, start)]


def test_operations_page_lists_every_metric_the_bridge_serves():
    """The metrics table is generated from metrics.METRICS, which the collector serves from: every
    family a scrape returns is a row (the counters' ``_total`` names as Prometheus shows them)."""
    from prometheus_client.parser import text_string_to_metric_families

    from stomp_bridge.metrics import Metrics, reference

    table = _between((ROOT / "docs" / "operations.md").read_text(), "<!-- metrics:begin -->\n", "<!-- metrics:end -->")
    assert table == reference(), "run `.venv/bin/python scripts/docs-tables.py`"
    live = {"connections": 1, "receipts_pending": 0, "login_checks": 0, "amqp_connections": 1}
    served = {family.name for family in text_string_to_metric_families(Metrics(lambda: live).render().decode())}
    rows = set(re.findall(r"^\| `((?:stomp_bridge|process)_\w+?)(?:_total)?`", table, re.M))
    assert served <= rows, f"served but not in docs/operations.md: {sorted(served - rows)}"
    for name in ("messages_returned", "resubscriptions", "token_updates"):  # once missing from the page
        assert f"`stomp_bridge_{name}_total`" in table


def test_how_it_maps_names_every_send_header_that_becomes_a_property():
    """The SEND-header table lists PROPERTY_HEADERS; with destination they are every header the
    plugin keeps out of the headers table (properties_from_send copies all the others)."""
    from stomp_bridge.protocol import headers

    assert {name for name, _ in headers.PROPERTY_HEADERS} | {"destination"} == headers.NOT_USER_HEADERS
    table = _between((ROOT / "docs" / "how-it-maps.md").read_text(), "<!-- send-headers:begin -->\n",
                     "<!-- send-headers:end -->")
    for name in headers.NOT_USER_HEADERS:
        assert f"| `{name}` |" in table
    props = headers.properties_from_send({"destination": "/topic/t", "code": "100", "receipt": "r", "priority": "5"})
    assert props["headers"] == {"code": "100", "receipt": "r"} and props["priority"] == 5
