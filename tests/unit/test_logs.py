"""The log lines' format: key=value text or one JSON object per line, timed in RFC 3339."""

from __future__ import annotations

import json
import logging
import re
from datetime import datetime, timedelta

import pytest

from stomp_bridge.logs import JsonFormatter, TextFormatter

RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)")


def record(message: str = "client connected", **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("stomp_bridge.session", logging.INFO, __file__, 1, message, (), None)
    rec.__dict__.update(extra)
    return rec


def test_a_json_line_has_its_time_in_rfc_3339_with_the_zone():
    rec = record(user="guest")
    data = json.loads(JsonFormatter().format(rec))
    assert RFC3339.fullmatch(data["time"]), data["time"]
    when = datetime.fromisoformat(data["time"])
    assert when.tzinfo is not None
    assert abs(when.timestamp() - rec.created) < 0.001
    assert (data["level"], data["message"], data["user"]) == ("INFO", "client connected", "guest")


def test_a_text_line_starts_with_the_same_time():
    rec = record(peer="127.0.0.1", detail="two words")
    line = TextFormatter().format(rec)
    stamp, level, rest = line.split(" ", 2)
    assert RFC3339.fullmatch(stamp) and level == "INFO"
    assert rest == "stomp_bridge.session: client connected peer=127.0.0.1 detail='two words'"


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata"])
def test_the_offset_is_the_machines_zone(monkeypatch, zone):
    import time

    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        when = datetime.fromisoformat(json.loads(JsonFormatter().format(record()))["time"])
        expected = timedelta(0) if zone == "UTC" else timedelta(hours=5, minutes=30)
        assert when.utcoffset() == expected
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.parametrize(("value", "shown"), [
    ("guest", "guest"),
    ("two words", "'two words'"),
    ("evil\n2026-12-01T00:00:00.000+00:00 INFO x: client connected user=admin", None),
    ("a=b", "'a=b'"),
    ("tab\there", "'tab\\there'"),
])
def test_a_value_a_client_chose_cannot_break_a_text_line(value, shown):
    line = TextFormatter().format(record("connection closed", user=value))
    assert "\n" not in line
    assert line.endswith(f"user={shown if shown is not None else repr(value)}")
