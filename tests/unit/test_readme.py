"""The README's configuration reference is the one the settings model generates."""

from pathlib import Path

from stomp_bridge.settings import reference

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_settings_table_matches_the_model():
    text = README.read_text()
    start = text.index("<!-- settings:begin -->\n") + len("<!-- settings:begin -->\n")
    end = text.index("<!-- settings:end -->")
    assert text[start:end] == reference(), "run `stomp-bridge config reference` and paste it into README.md"
