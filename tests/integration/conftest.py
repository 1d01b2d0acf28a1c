"""Fixtures for the differential integration tests (native plugin or bridge)."""

from __future__ import annotations

import os

import pytest

from testkit.bridge import BridgeThread
from testkit.brokers import native_stomp
from tests.integration.rawstomp import RawStomp
from tests.integration.stomp_client import Client

pytestmark = pytest.mark.integration

# The native plugin closes a connection whose CONNECT failed about 10 s after its
# ERROR (RabbitMQ's auth-failure delay); allow for it plus slack.
CONNECT_FAILURE_CLOSE_TIMEOUT = 15.0


@pytest.fixture
def raw(stomp_target, dial):
    """Factory for raw-socket connections to the target under test; closed at teardown."""

    def make(timeout: float = 5.0) -> RawStomp:
        return dial(stomp_target.port, host=stomp_target.host, timeout=timeout)

    return make


@pytest.fixture
def connected(raw):
    """Factory: a raw connection that already received CONNECTED (STOMP 1.2 by default)."""

    def make(version: str = "1.2", **kwargs) -> RawStomp:
        conn = raw()
        conn.connect(version=version, **kwargs)
        return conn

    return make


@pytest.fixture
def client(stomp_target):
    """Factory for stomp.py clients; all are disconnected at teardown."""
    made: list[Client] = []

    def make(version: str = "1.2", **kwargs) -> Client:
        c = Client(stomp_target, version=version, **kwargs)
        made.append(c)
        return c

    yield make
    for c in made:
        try:
            c.disconnect()
        except Exception:  # noqa: BLE001 - a test may have broken the connection on purpose
            pass


@pytest.fixture
def queues(rabbit):
    """Names appended here are deleted from RabbitMQ after the test."""
    names: list[str] = []
    yield names
    for name in names:
        rabbit.delete_queue(name)


@pytest.fixture
def after_error():
    """What follows an ERROR the plugin does not close on (its error/3: an unknown command, an
    invalid destination, an unknown transaction ...): the connection goes on, under the plugin
    and the bridge alike. ``check(conn, still_usable)`` runs ``still_usable()`` (by default a
    receipted SEND)."""

    def check(conn: RawStomp, still_usable=None) -> None:
        if still_usable is None:
            conn.receipt("SEND", {"destination": "/topic/still-usable"}, "x")
        else:
            still_usable()

    return check


@pytest.fixture
def bridge(broker):
    """Factory for bridge-only tests: ``bridge(**settings)`` starts a bridge of the test's own
    (``host=``, ``amqp_url=`` and any setting; the HTTP endpoint on a free port); all are
    stopped at teardown."""
    started: list[BridgeThread] = []

    def make(host: str | None = None, amqp_url: str | None = None, **settings: object) -> BridgeThread:
        settings.setdefault("http_port", 0)
        thread = BridgeThread(amqp_url or broker.amqp_url, host=host or "127.0.0.1", **settings)
        thread.start()
        started.append(thread)
        return thread

    yield make
    for thread in started:
        thread.stop()


@pytest.fixture
def dial():
    """Factory: ``dial(bridge_or_port, host=..., timeout=...)`` opens a RawStomp; closed at teardown."""
    opened: list[RawStomp] = []

    def make(target: BridgeThread | int, host: str = "127.0.0.1", timeout: float = 5.0) -> RawStomp:
        port = target if isinstance(target, int) else target.port
        conn = RawStomp((host, port), timeout=timeout)
        opened.append(conn)
        return conn

    yield make
    for conn in opened:
        conn.close()


# -- OAuth 2 (rabbitmq_auth_backend_oauth2) ---------------------------------------------------


@pytest.fixture(scope="module")
def oauth_backend(broker):
    """The 4.x test brokers run the OAuth 2 backend from their start (scripts/rabbitmq4); the
    machine's 3.x gets it for these tests only (tests/rabbit_oauth.py), and loses it again
    afterwards. Both with the key and resource server id of tests/tokens.py."""
    if broker.local is not None and broker.local.name == "system":
        from tests.rabbit_oauth import oauth2_enabled

        with oauth2_enabled():
            yield
    else:
        yield


@pytest.fixture
def oauth(broker, oauth_backend):
    """``oauth(subject, expires_in=…)``: a JWT RabbitMQ takes as that user's passcode."""
    if broker.local is None:
        pytest.skip("the OAuth 2 tests configure a local broker's backend (scripts/rabbitmq4, rabbitmqctl)")
    from tests.tokens import token

    return token


# -- RabbitMQ 4.4's native plugin where the bridge does not follow it --------------------------
# STOMP_BRIDGE_TEST_TARGET=native in front of the 4.4 preview: tests that hold the plugin to what
# the bridge keeps (docs/compatibility.md, "RabbitMQ 4.4"), each with why. Not run: most of them
# wait out a read deadline for a frame the plugin never sends (run, they cost the native:4.4 run
# minutes); `--runxfail` runs them to see which still differ. The bridge runs (bridge:4.4) hold
# the bridge to every one of these tests.
_ERLANG_TERMS = "4.4 formats ERROR details as Erlang terms (<<\"id\">>), likely unintended: kept"
_UNROUTABLE = "4.4 never receipts an unroutable SEND, likely unintended: kept"
_NO_EQUIVALENCE = "4.4 has no argument-equivalence check on a re-declare, likely unintended: kept"
_EXCLUSIVE = "4.4 does not refuse another connection's exclusive queue, likely unintended: kept"
_STREAMS = "4.4 consumes streams natively (no prefetch needed, other refusals): not examined yet"
_UNEXAMINED = "differs on the 4.4 preview, not examined yet"
NATIVE_44_DIFFERENCES = {
    "test_ack.py::test_bad_ack_headers_are_errors": _ERLANG_TERMS,
    "test_destinations.py::test_missing_destination_gets_error": _ERLANG_TERMS,
    "test_destinations.py::test_deleting_a_subscribed_queue_cancels_the_subscription_with_an_error": _ERLANG_TERMS,
    "test_transactions.py::test_unknown_transaction_is_an_error": _ERLANG_TERMS,
    **{f"test_errors.py::test_a_refused_frame_gets_its_error_and_the_connection_goes_on[{case}]": _ERLANG_TERMS
       for case in ("SEND without destination", "SEND in an unknown transaction", "COMMIT of an unknown transaction",
                    "ABORT of an unknown transaction", "BEGIN without transaction", "ACK without id",
                    "ACK with a malformed id", "UNSUBSCRIBE of an unknown id", "UNSUBSCRIBE of an unknown destination",
                    "SUBSCRIBE without destination")},
    "test_errors.py::test_a_refused_frame_gets_its_error_and_the_connection_goes_on[prefetch-count not a number]":
        "4.4 takes a prefetch-count that is not a number (4.3: Processing error): kept, not examined yet",
    "test_errors.py::test_every_frame_ends_with_nul_and_a_newline": _UNROUTABLE,
    "test_auth.py::test_topic_permissions_apply_to_topic_send": _UNROUTABLE,
    "test_destinations.py::test_topic_without_subscribers_discards": _UNROUTABLE,
    "test_heartbeat.py::test_client_heart_beats_keep_connection_alive": _UNEXAMINED,  # closed after a heart-beating client SENDs
    "test_destinations.py::test_temp_queue_reply_to_round_trip":
        "4.4 names reply queues stomp.gen-…, not amq.gen-…: kept (the name is RabbitMQ's)",
    "test_messaging.py::test_message_id_format_is_per_subscription_and_session":
        "4.4 numbers a session's deliveries from 0, RabbitMQ's channels from 1: kept (the id is opaque)",
    "test_messaging.py::test_redeclare_with_different_arguments_is_precondition_failed": _NO_EQUIVALENCE,
    "test_messaging.py::test_send_without_arguments_to_queue_with_arguments_fails": _NO_EQUIVALENCE,
    "test_login_checks.py::test_another_session_cannot_consume_from_an_exclusive_subscription_queue": _EXCLUSIVE,
    "test_login_checks.py::test_another_session_cannot_take_the_replies_meant_for_a_temp_queue": _EXCLUSIVE,
    "test_rabbitmq4.py::test_a_consumer_timeout_on_a_quorum_queue_cancels_the_subscription":
        "4.4 ends the connection without ERROR at a quorum consumer timeout, likely unintended: kept",
    "test_neighbours.py::test_a_nack_of_a_streams_delivery": _STREAMS,
    "test_neighbours.py::test_ack_auto_with_a_prefetch_on_a_stream": _STREAMS,
    "test_neighbours.py::test_ack_auto_without_a_prefetch_but_with_a_stream_offset": _STREAMS,
    "test_neighbours.py::test_browsing_a_stream": _STREAMS,
    "test_neighbours.py::test_a_stream_declared_with_an_x_max_age_rabbitmq_cannot_read": _STREAMS,
    "test_streams.py::test_stream_needs_prefetch_count": _STREAMS,
    "test_streams.py::test_stream_filter_headers_go_to_rabbitmq_which_decides": _STREAMS,
    "test_neighbours.py::test_an_id_like_a_windows_tag": _UNEXAMINED,
    "test_backpressure.py::test_a_client_that_sends_and_never_reads_is_not_read_until_it_reads": _UNEXAMINED,
    "test_frames.py::test_malformed_frame_closes_connection[content-length-not-a-number]": _UNEXAMINED,
    "test_login_checks.py::test_a_changed_password_is_refused_at_the_next_login": _UNEXAMINED,
    "test_login_checks.py::test_a_login_without_passcode_gets_the_default_passcode": _UNEXAMINED,
    "test_login_checks.py::test_an_expired_token_ends_the_connection_with_the_plugins_error": _UNEXAMINED,
    "test_spring_relay.py::test_the_system_session_gets_its_10_second_heart_beats": _UNEXAMINED,
}


def pytest_collection_modifyitems(config, items):
    if os.environ.get("STOMP_BRIDGE_TEST_TARGET") != "native" or not native_stomp():
        return
    for item in items:
        name = item.nodeid.split("tests/integration/", 1)[-1]
        for prefix, reason in NATIVE_44_DIFFERENCES.items():
            if name == prefix or name.startswith(prefix + "["):
                item.add_marker(pytest.mark.xfail(reason=reason, run=False))
                break
