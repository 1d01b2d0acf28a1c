"""Shared by the configuration tests: an environment without the bridge's own settings."""

import os

import pytest


@pytest.fixture
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("STOMP_BRIDGE_") and not name.startswith("STOMP_BRIDGE_TEST_"):
            monkeypatch.delenv(name)
    return monkeypatch
