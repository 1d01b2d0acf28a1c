"""Fixtures for the differential integration tests (native plugin or bridge)."""

from __future__ import annotations

import pytest

from testkit.bridge import BridgeThread
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
