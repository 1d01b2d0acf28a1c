"""docs/oauth2.md's RabbitMQ configuration is what the OAuth 2 tests run against: the 4.x test
brokers' (scripts/rabbitmq4 writes it) and the machine's 3.10 (tests/rabbit_oauth.py sets the
same key and resource server id from tests/tokens.py at run time)."""

from __future__ import annotations

import base64
import re
from pathlib import Path

from tests.tokens import KEY_ID, RESOURCE_SERVER, SIGNING_KEY

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "oauth2.md").read_text()
SCRIPT = (ROOT / "scripts" / "rabbitmq4").read_text()


def _block(language: str) -> str:
    (block,) = re.findall(rf"```{language}\n(.*?)```", GUIDE, re.S)
    return block


def test_the_guides_rabbitmq_conf_is_the_test_brokers():
    lines = _block("ini").splitlines()
    assert lines and all(line in SCRIPT.splitlines() for line in lines), "scripts/rabbitmq4 writes other lines"
    assert f"auth_oauth2.resource_server_id = {RESOURCE_SERVER}" in lines


def test_the_guides_advanced_config_is_the_test_brokers_and_the_tokens_key():
    config = _block("erlang")
    assert config in SCRIPT, "scripts/rabbitmq4 writes another advanced.config"
    key = base64.b64encode(SIGNING_KEY).decode()  # what the script writes (padded base64 of the key)
    assert f'<<"{KEY_ID}">>' in config and key in config


def test_the_guide_is_in_the_site_navigation():
    assert "oauth2.md" in (ROOT / "mkdocs.yml").read_text()


def test_every_page_says_oauth2_is_tested_on_3_10_and_no_oauth_test_skips_it():
    """The docs once disagreed (the migration page: tested on 3.10; compatibility and the README:
    skipped there). The OAuth 2 tests run on the machine's 3.10 with the backend set at run time
    (tests/integration/conftest.py's oauth_backend), and every page says so."""
    compat = (ROOT / "docs" / "compatibility.md").read_text()
    (row,) = [line for line in compat.splitlines() if line.startswith("| 3.10.8")]
    assert "OAuth 2 beside internal users" in row
    assert "tested on 4.3, 4.0 and 3.10" in (ROOT / "docs" / "migration" / "rabbitmq-plugin.md").read_text()
    assert re.search(r"Tested on RabbitMQ 4\.3\.6,\s+4\.0\.5 and 3\.10\.8", GUIDE)
    for path in (ROOT / "tests" / "integration").glob("*.py"):
        for line in path.read_text().splitlines():
            if "pytest.skip(" in line and "OAuth" in line:
                assert "4.x" not in line and "system" not in line, f"{path.name}: {line.strip()}"
