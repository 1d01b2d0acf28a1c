"""The connector's synchronous STOMP client against the real server, without Spark."""

from __future__ import annotations

import pytest

from stomp_bridge.spark.client import StompClient, StompClientError
from stomp_bridge.spark.options import ConnectionOptions
from stomp_bridge.spark.publishing import Publisher
from stomp_bridge.spark.reading import probe_tail, read_range


def _client(stomp_target, **extra) -> StompClient:
    options = ConnectionOptions.parse({"host": stomp_target.host, "port": str(stomp_target.port),
                                       "login": "guest", "passcode": "guest", **extra})
    return StompClient(options)


def test_publisher_keeps_its_window_and_reads_back_by_offset(stomp_target, stream):
    with _client(stomp_target) as client:
        publisher = Publisher(client, window=4)
        for i in range(20):
            publisher.publish(f"/amq/queue/{stream}", f"m{i}".encode(), {"persistent": "true"})
            assert publisher.sent - publisher.confirmed <= 4
        assert publisher.finish() == 20
    with _client(stomp_target) as client:
        assert probe_tail(client, f"/amq/queue/{stream}", 10, 0.3) == 19
    with _client(stomp_target) as client:
        frames = list(read_range(client, f"/amq/queue/{stream}", 5, 9, prefetch=2))
    assert [(f.headers["x-stream-offset"], f.body) for f in frames] == [(str(i), f"m{i}".encode()) for i in range(5, 9)]


def test_empty_stream_has_no_tail(stomp_target, stream):
    with _client(stomp_target) as client:
        assert probe_tail(client, f"/amq/queue/{stream}", 10, 0.3) == -1


def test_a_range_past_the_end_fails_after_the_read_timeout(stomp_target, stream):
    with _client(stomp_target) as client:
        Publisher(client, window=10).publish(f"/amq/queue/{stream}", b"only", {})
    with _client(stomp_target, readTimeoutMs="500") as client, pytest.raises(StompClientError) as info:
        list(read_range(client, f"/amq/queue/{stream}", 0, 5, prefetch=10))
    assert str(info.value).startswith(f"reading offsets [0, 5) of /amq/queue/{stream}: nothing arrived for 0.5 s "
                                      "after offset 0; was the stream deleted and created again?")


def test_transaction_over_the_bridges_limit_fails_with_its_reason(stomp_target, stream):
    if stomp_target.native:
        pytest.skip("the native plugin has no limit on a transaction's frames")
    with _client(stomp_target) as client, pytest.raises(StompClientError) as info:
        publisher = Publisher(client, window=10, transaction="t1")
        for _ in range(1100):
            publisher.publish(f"/amq/queue/{stream}", b"x", {})
        publisher.finish()
    assert "Transaction too large" in str(info.value)
