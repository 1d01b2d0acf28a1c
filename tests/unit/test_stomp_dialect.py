"""Whose STOMP plugin a connection behaves as: RabbitMQ 4.3's (and older) or 4.4's native one
(the ``rabbitmq_stomp_dialect`` setting, ``core/rules.native_stomp``), and what each changes."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from stomp_bridge.core.rules import native_stomp
from stomp_bridge.settings import Settings
from testkit.core import Harness


@pytest.mark.parametrize("dialect, version, native", [
    ("auto", (4, 3, 6), False),  # 4.3.6, and the 4.4 preview built on it: 4.3's rules
    ("auto", (3, 10, 8), False),
    ("auto", (4, 4, 0), True),
    ("auto", (4, 4), True),
    ("auto", (5, 0, 1), True),
    ("auto", (), False),  # a version it cannot read: 4.3's, the plugin most brokers have
    ("4.3", (4, 4, 0), False),
    ("4.4", (4, 3, 6), True),
    ("4.4", (), True),
])
def test_the_dialect_is_the_setting_or_with_auto_the_version_rabbitmq_reports(dialect, version, native):
    assert native_stomp(dialect, version) is native


@pytest.mark.parametrize("dialect, broker, native", [
    ("auto", (4, 3, 6), False), ("auto", (4, 4, 0), True), ("4.4", (4, 3, 6), True), ("4.3", (4, 4, 1), False),
])
def test_a_connection_takes_its_dialect_when_rabbitmq_took_the_login(dialect, broker, native):
    h = Harness(broker=broker, rabbitmq_stomp_dialect=dialect)
    assert h.core.native_stomp is False  # before the login: nothing is known of the broker
    h.connect()
    assert h.core.native_stomp is native


def test_an_unknown_dialect_is_refused_and_named():
    with pytest.raises(ValidationError, match=r"rabbitmq_stomp_dialect\n.*'auto', '4.3' or '4.4'"):
        Settings(rabbitmq_stomp_dialect="4.5")
