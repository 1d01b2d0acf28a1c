"""Every STOMP login is RabbitMQ's decision, also when the bridge shares AMQP connections.

RabbitMQ checks credentials when an AMQP connection opens. The plugin opens one per STOMP
login, so a changed password, a deleted user or a revoked vhost permission is refused at the
next login. The bridge shares connections between the sessions of one login; these tests keep
20 sessions of a user open on shared connections, change what RabbitMQ knows about the user,
and check that new logins get RabbitMQ's new answer (differential: the plugin's too).

Exclusivity belongs to the STOMP connection as well: a queue one session declared exclusive
is RESOURCE_LOCKED for every other session, even one on the same shared AMQP connection.
"""

from __future__ import annotations

import os

import pytest

from tests.integration.rawstomp import RawStomp
from tests.integration.test_operations import get
from testkit.brokers import plugin_words

SESSIONS = 20


@pytest.fixture
def user(rabbit, unique):
    name = f"login-{unique}"
    rabbit.create_user(name, "old-password")
    rabbit.set_permissions(name)
    yield name
    rabbit.delete_user(name)


@pytest.fixture
def crowd(raw, user):
    """SESSIONS logged-in sessions of ``user`` (on shared AMQP connections through the bridge)."""
    sessions = []
    for _ in range(SESSIONS):
        # RabbitMQ 4.3 can take ~5 s over a login right after refusing a deleted user's
        # (seen with its own plugin as well): a generous deadline
        conn = raw(timeout=15)
        conn.connect(login=user, passcode="old-password")
        sessions.append(conn)
    return sessions


def _refused(raw, user: str, passcode: str, host: str = "/") -> RawStomp:
    conn = raw(timeout=15)
    conn.send_frame("CONNECT", {"accept-version": "1.2", "login": user, "passcode": passcode, "host": host})
    error = conn.read_frame()
    assert error.command == "ERROR", f"logged in: {error.command} {error.headers}"
    assert error["message"] == "Bad CONNECT"
    return error


def test_a_changed_password_is_refused_at_the_next_login(raw, rabbit, user, crowd):
    rabbit.create_user(user, "new-password")  # PUT replaces the password (and keeps the user)
    for _ in range(5):
        # (3.10's plugin ends the text with a newline)
        assert _refused(raw, user, "old-password").text.rstrip("\n") == f"Access refused for user '{user}'"
    assert raw().connect(login=user, passcode="new-password")["version"] == "1.2"
    # the sessions that logged in before go on, as they would on AMQP connections of their own
    crowd[0].receipt("SEND", {"destination": "/topic/still-here"}, "x")


def test_a_deleted_user_is_refused_at_the_next_login(raw, rabbit, user, crowd):
    rabbit.delete_user(user)  # RabbitMQ also closes the user's connections
    for _ in range(5):
        _refused(raw, user, "old-password")


def test_a_revoked_vhost_permission_is_refused_at_the_next_login(raw, rabbit, user, crowd):
    rabbit.request("DELETE", f"/permissions/%2F/{rabbit.q(user)}")
    for _ in range(5):
        assert _refused(raw, user, "old-password").text == "Virtual host '/' access denied"


@pytest.fixture
def two_on_one_connection(stomp_target, bridge, dial, raw):
    """Two sessions of the same login: on one shared AMQP connection through the bridge, on two
    connections of their own under the plugin."""

    def make() -> tuple[RawStomp, RawStomp]:
        if stomp_target.native:
            a, b = raw(), raw()
        else:
            server = bridge(amqp_min_connections_per_login=1)
            a, b = dial(server), dial(server)
        a.connect()
        b.connect()
        return a, b

    return make


def _locked(conn: RawStomp, queue: str) -> None:
    frames = conn.read_until_closed()
    assert frames and frames[0]["message"] == "resource_locked", frames
    assert frames[0].text == plugin_words(
        f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{queue}' in vhost '/'. It "
        "could be originally declared on another connection or the exclusive property value does not "
        "match that of the original declaration.")


def test_another_session_cannot_consume_from_an_exclusive_subscription_queue(two_on_one_connection, unique):
    owner, other = two_on_one_connection()
    name = f"mine-{unique}"
    # exclusive:true: /exchange/ queues are exclusive by default from 3.12 only
    owner.subscribe("/exchange/amq.fanout", sub_id="s", headers={"x-queue-name": name, "exclusive": "true"})
    other.send_frame("SUBSCRIBE", {"destination": f"/amq/queue/{name}", "id": "steal"})
    _locked(other, name)
    owner.receipt("SEND", {"destination": "/exchange/amq.fanout"}, f"for the owner {unique}")
    while owner.expect("MESSAGE").body != f"for the owner {unique}".encode():
        pass  # other tests may publish to amq.fanout meanwhile


def test_another_session_cannot_take_the_replies_meant_for_a_temp_queue(two_on_one_connection, queues, unique):
    requester, responder = two_on_one_connection()
    name = f"requests-{unique}"
    queues.append(name)
    responder.subscribe(f"/queue/{name}", sub_id="r")
    requester.receipt("SEND", {"destination": f"/queue/{name}", "reply-to": "/temp-queue/answers"}, "ping")
    reply_to = responder.expect("MESSAGE")["reply-to"]
    assert reply_to.startswith("/reply-queue/")
    responder.send_frame("SUBSCRIBE", {"destination": reply_to, "id": "steal"})
    _locked(responder, reply_to[len("/reply-queue/"):])


@pytest.mark.skipif(os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native", reason="a bridge setting")
def test_password_guessing_is_held_back_but_never_keeps_the_rightful_user_out(bridge, dial, user):
    """Bridge-only (the plugin does not limit): 30 guesses at once from one address reach
    RabbitMQ login_failures_per_minute times; the rest are refused at once (the pair's next turn
    is 60 s / 3 away or more, longer than a login waits). The user's own client, whose password
    RabbitMQ accepted before, logs in from the same address after the flood and during the
    next one, as does another user."""
    server = bridge(login_failures_per_minute=3)
    dial(server, timeout=15).connect(login=user, passcode="old-password")  # the rightful client, earlier

    def flood(first: int) -> list[RawStomp]:
        guessers = [dial(server, timeout=15) for _ in range(30)]
        for n, conn in enumerate(guessers, first):
            conn.send_frame("CONNECT", {"accept-version": "1.2", "login": user, "passcode": f"guess-{n}", "host": "/"})
        return guessers

    errors = [conn.error_then_close() for conn in flood(0)]
    refused_by_rabbitmq = [e for e in errors if e.text == f"Access refused for user '{user}'"]
    held = [e.text for e in errors if e not in refused_by_rabbitmq]
    assert len(refused_by_rabbitmq) == 3 and len(held) == 27, [e.text for e in errors]
    prefix = f"Access refused for user '{user}': 3 failed logins from 127.0.0.1 within 60 s; try again in "
    assert all(text.startswith(prefix) and 10 < int(text[len(prefix):-2]) <= 60 for text in held), held
    assert dial(server, timeout=15).connect(login=user, passcode="old-password")["version"] == "1.2"
    guessers = flood(30)
    assert dial(server, timeout=15).connect(login=user, passcode="old-password")["version"] == "1.2"
    assert dial(server).connect()["version"] == "1.2"  # guest, from the same address
    assert all(conn.error_then_close().text.startswith(prefix) for conn in guessers)
    _, text = get(server, "/metrics")
    assert "stomp_bridge_logins_throttled_total 57.0" in text
    assert "stomp_bridge_auth_failures_total 60.0" in text


def test_an_expired_token_is_refused_at_the_next_login(raw, oauth):
    """OAuth 2 (RabbitMQ's rabbitmq_auth_backend_oauth2, a JWT as the passcode): once the token
    has expired, a new login with it is refused, also while sessions that logged in with it
    earlier share AMQP connections (which RabbitMQ 4.x closes at the expiry, 3.10 keeps open)."""
    import time

    token = oauth
    lifetime = 3
    jwt = token("oauth-user", expires_in=lifetime)
    expires = time.time() + lifetime
    for _ in range(SESSIONS):
        raw(timeout=15).connect(login="oauth-user", passcode=jwt)
    time.sleep(max(0.0, expires - time.time()) + 1.5)  # no event says a token expired: the clock
    for _ in range(3):
        error = _refused(raw, "oauth-user", jwt)
        assert error.text.rstrip("\n") == "Access refused for user 'oauth-user'"
    assert raw(timeout=15).connect(login="oauth-user", passcode=token("oauth-user"))["version"] == "1.2"


# -- CONNECT's credentials, header by header (rabbit_stomp_processor:creds/3) ----------------


def test_a_passcode_without_login_is_checked_as_the_default_users(raw):
    """The plugin fills in a missing login (default_user: guest, on the plugin and the bridge
    alike) and keeps the passcode that came: a wrong one is refused for that user, never
    swapped for default_pass."""
    conn = raw(timeout=15)
    conn.send_frame("CONNECT", {"accept-version": "1.2", "host": "/", "passcode": "not-guests-password"})
    error = conn.expect("ERROR")
    assert error["message"] == "Bad CONNECT"
    assert error.text.rstrip("\n") == "Access refused for user 'guest'"  # (3.10's plugin ends it with a newline)


def test_a_login_without_passcode_gets_the_default_passcode(raw):
    conn = raw()
    assert conn.connect(login="guest", passcode=None)["version"] == "1.2"  # default_pass: guest, on both
    conn.receipt("SEND", {"destination": "/topic/default-passcode"}, "x")


@pytest.fixture
def tokens(oauth):
    """``tokens(subject, read_only=…, expires_in=…)``: JWTs RabbitMQ takes (every test broker: the
    machine's 3.10 gets the OAuth 2 backend for these tests, see the ``oauth_backend`` fixture)."""
    from tests.tokens import RESOURCE_SERVER, token

    def make(subject: str, *, read_only: bool = False, expires_in: float = 3600) -> str:
        scopes = (f"{RESOURCE_SERVER}.read:*/*",) if read_only else None
        return token(subject, scopes=scopes, expires_in=expires_in)

    return make


def test_a_token_as_passcode_without_login_acts_as_the_tokens_user(raw, tokens, unique, broker):
    """A JWT as the passcode and no login (stompjs with ``login: null``): RabbitMQ gets the
    token with the default login, and its OAuth 2 backend makes the token's subject the user.
    A read-only token's SEND is refused for that user, not receipted as default_user's."""
    reader = f"reader-{unique}"
    conn = raw(timeout=15)
    conn.connect(login=None, passcode=tokens(reader, read_only=True))
    conn.send_frame("SEND", {"destination": f"/exchange/amq.direct/{unique}", "receipt": "r"}, "not allowed")
    error = conn.error_then_close()
    assert error["message"] == "access_refused"
    write = "" if broker.version.startswith("3.") else "write "  # RabbitMQ's own text; 3.10 names no kind
    assert error.text == plugin_words(f"ACCESS_REFUSED - {write}access to exchange 'amq.direct' in vhost '/' refused for "
                          f"user '{reader}'")


def test_an_expired_token_ends_the_connection_with_the_plugins_error(raw, tokens, stomp_target, broker):
    if stomp_target.native and broker.local.name in ("4.0", "system"):
        pytest.skip(f"RabbitMQ {broker.version}'s plugin sends nothing at the token's expiry (it refuses the "
                    "next operation); the bridge ends the connection with 4.3.6's ERROR on every broker")
    conn = raw(timeout=15)
    conn.connect(login="oauth-user", passcode=tokens("oauth-user", expires_in=2))
    error = conn.error_then_close(timeout=15)  # at the expiry: RabbitMQ's close (4.3), the bridge's timer (4.0)
    assert error["message"] == "Credential expired"
    assert error.text == "The credential used to authenticate this connection has expired"
