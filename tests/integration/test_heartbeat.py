"""Heart-beat negotiation and enforcement."""

from __future__ import annotations

import time

import pytest

from tests.integration.rawstomp import ConnectionClosed, FrameTimeout


@pytest.mark.parametrize("offered,expected", [
    ("0,0", "0,0"),
    ("1000,1000", "1000,1000"),
    ("0,300", "1000,0"),   # native rounds up to whole seconds, minimum 1000 ms
    ("300,0", "0,1000"),
    ("500,500", "1000,1000"),
])
def test_connected_heart_beat_negotiation(raw, offered, expected):
    assert raw().connect(heart_beat=offered)["heart-beat"] == expected


def test_no_heart_beat_header_means_none(raw):
    assert raw().connect(heart_beat=None)["heart-beat"] == "0,0"


def _count_heartbeats(conn, window: float) -> int:
    deadline = time.monotonic() + window
    while (left := deadline - time.monotonic()) > 0:
        try:
            frame = conn.read_frame(left)
        except FrameTimeout:
            break
        raise AssertionError(f"unexpected frame {frame.command}")
    return conn.heartbeats


def test_server_sends_heart_beats_at_negotiated_interval(raw):
    conn = raw()
    assert conn.connect(heart_beat="0,1000")["heart-beat"] == "1000,0"
    count = _count_heartbeats(conn, 3.0)
    # 1000 ms negotiated: about 3 EOLs in 3 s; RabbitMQ sends up to twice per interval.
    assert 2 <= count <= 8, count


def test_server_heart_beats_come_at_half_the_interval_as_the_plugins_do(raw):
    """rabbit_heartbeat's sender ticks every half interval and sends at a tick when nothing went
    out since the previous one: 8 EOLs in 4.25 s of silence at 1000 ms (ticks at 0.5 s ... 4 s),
    where one per interval would be 4. Half, so a frame sent just after a tick cannot stretch
    the silence to nearly twice the interval."""
    conn = raw()
    assert conn.connect(heart_beat="0,1000")["heart-beat"] == "1000,0"
    count = _count_heartbeats(conn, 4.25)
    assert 7 <= count <= 9, count  # a late tick on a busy machine may fall past the window


def test_no_heart_beats_when_not_negotiated(raw):
    conn = raw()
    conn.connect(heart_beat="0,0")
    assert _count_heartbeats(conn, 2.5) == 0


def test_client_that_stops_heart_beating_is_disconnected(raw):
    conn = raw(timeout=10)
    assert conn.connect(heart_beat="1000,0")["heart-beat"] == "0,1000"
    started = time.monotonic()
    frames = conn.read_until_closed(10)
    elapsed = time.monotonic() - started
    assert all(f.command == "ERROR" for f in frames), frames
    assert 1.0 <= elapsed <= 8.0, elapsed


def test_client_heart_beats_keep_connection_alive(raw):
    conn = raw()
    conn.connect(heart_beat="1000,0")
    deadline = time.monotonic() + 4.0
    while time.monotonic() < deadline:
        conn.send_raw(b"\n")
        try:
            frame = conn.read_frame(0.4)
        except FrameTimeout:
            continue
        except ConnectionClosed:
            raise AssertionError("server closed a connection whose client kept heart-beating") from None
        raise AssertionError(f"unexpected frame {frame.command}")
    conn.receipt("SEND", {"destination": "/topic/heartbeat-alive"}, "x")
