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
