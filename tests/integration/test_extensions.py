"""Apollo and Artemis extensions against the real broker (bridge only: the plugin has none).

Selectors, composite destinations, expiration, Artemis and Apollo durable
subscriptions, exclusive and browsing subscriptions. Each test uses
raw-frame or stomp.py clients and checks the effect in RabbitMQ where it
shows there (queues, arguments, bindings).
"""

from __future__ import annotations

import os
import time

import pytest

pytestmark = pytest.mark.skipif(
    os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native", reason="bridge extensions"
)


def _drain(conn, n):
    return [conn.expect("MESSAGE") for _ in range(n)]


# -- headers exchange bindings (beyond the plugin: rabbitmq-stomp #145) -------------------


@pytest.fixture
def headers_exchange(rabbit, unique):
    name = f"hx-{unique}"
    rabbit.declare_exchange(name, "headers")
    yield name
    rabbit.delete_exchange(name)


@pytest.mark.parametrize("enabled", [True, False], ids=["headers_bindings", "plugin-default"])
def test_subscribe_to_a_headers_exchange_binds_with_x_match_and_the_headers(
        bridge, dial, rabbit, headers_exchange, enabled):
    """With headers_bindings, x-match and the application's headers on SUBSCRIBE are the
    binding's arguments: only matching SENDs arrive. Without it (the plugin's way), the
    binding has no arguments and a headers exchange delivers everything."""
    server = bridge(headers_bindings=enabled)
    consumer, producer = dial(server), dial(server)
    consumer.connect()
    producer.connect()
    consumer.receipt("SUBSCRIBE", {"destination": f"/exchange/{headers_exchange}", "id": "s",
                                   "x-match": "all", "code": "100", "region": "eu"})
    for code, region in (("200", "eu"), ("100", "us"), ("100", "eu")):
        producer.receipt("SEND", {"destination": f"/exchange/{headers_exchange}", "code": code,
                                  "region": region}, f"{code}/{region}")
    if enabled:
        assert consumer.expect("MESSAGE").body == b"100/eu"
        consumer.no_frame(0.5)
        [binding] = [b for b in rabbit.request("GET", f"/exchanges/%2F/{headers_exchange}/bindings/source")]
        assert binding["arguments"] == {"x-match": "all", "code": "100", "region": "eu"}
    else:
        assert [consumer.expect("MESSAGE").body for _ in range(3)] == [b"200/eu", b"100/us", b"100/eu"]


def test_a_headers_binding_matches_table_entries_never_properties_nor_the_subscriptions_own(
        bridge, dial, rabbit, headers_exchange):
    """docs/how-it-maps.md, 'Headers exchanges': the SUBSCRIBE's own headers (id, ack, receipt …)
    and its x- headers are not binding arguments; a property header (priority) is one, and no
    STOMP SEND matches it, since a SEND's priority is a property; an extension's header (retain)
    is a table entry, and matches."""
    server = bridge(headers_bindings=True)
    consumer, producer = dial(server), dial(server)
    consumer.connect()
    producer.connect()
    own = {"id": "s", "ack": "client-individual", "receipt": "r", "x-priority": "1", "prefetch-count": "10"}
    consumer.receipt("SUBSCRIBE", {"destination": f"/exchange/{headers_exchange}", "x-match": "any",
                                   "priority": "5", "retain": "set", **own}, receipt_id="r")
    [binding] = rabbit.request("GET", f"/exchanges/%2F/{headers_exchange}/bindings/source")
    assert binding["arguments"] == {"x-match": "any", "priority": "5", "retain": "set"}
    producer.receipt("SEND", {"destination": f"/exchange/{headers_exchange}", "priority": "5"}, "a property")
    producer.receipt("SEND", {"destination": f"/exchange/{headers_exchange}", "retain": "set"}, "a table entry")
    assert consumer.expect("MESSAGE").body == b"a table entry"
    consumer.no_frame(0.5)


def test_a_bad_x_match_is_an_error_that_keeps_the_connection(bridge, dial, headers_exchange):
    conn = dial(bridge(headers_bindings=True))
    conn.connect()
    conn.send_frame("SUBSCRIBE", {"destination": f"/exchange/{headers_exchange}", "id": "s",
                                  "x-match": "most"})
    error = conn.error_then_usable()
    assert error["message"] == "Invalid header" and "x-match must be all, any" in error.text
    conn.receipt("SEND", {"destination": f"/exchange/{headers_exchange}"}, "still here")


# -- mandatory publishing: no silent loss of unroutable messages ---------------------------


@pytest.mark.parametrize("how", ["setting", "header"])
def test_an_unroutable_mandatory_send_is_an_error_and_no_receipt(bridge, dial, queues, unique, how):
    """A persistent SEND no queue takes: the plugin confirms, receipts and drops it; mandatory
    (the setting, or the SEND's header) makes it an ERROR naming its receipt, and no RECEIPT
    follows for it or anything after it. The SEND before it keeps its RECEIPT."""
    server = bridge(mandatory=how == "setting", http_port=0)
    extra = {"mandatory": "true"} if how == "header" else {}
    queue = f"mandatory-{unique}"
    queues.append(queue)
    conn = dial(server)
    conn.connect()
    conn.receipt("SEND", {"destination": f"/queue/{queue}", "persistent": "true", **extra}, "kept",
                 receipt_id="r1")
    conn.send_frame("SEND", {"destination": f"/exchange/amq.direct/nobody-{unique}", "persistent": "true",
                             "receipt": "r2", **extra}, "lost?")
    conn.send_frame("SEND", {"destination": f"/queue/{queue}", "receipt": "r3", **extra}, "after")
    frames = conn.read_until_closed()
    assert [frame.command for frame in frames] == ["ERROR"], [f.headers for f in frames]
    error = frames[0]
    assert (error["message"], error["receipt-id"]) == ("Unroutable message", "r2")
    assert f"'/exchange/amq.direct/nobody-{unique}'" in error.text
    assert f"exchange 'amq.direct' with routing key 'nobody-{unique}'" in error.text
    import urllib.request

    metrics = urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/metrics", timeout=10).read()
    assert b"stomp_bridge_messages_returned_total 1.0" in metrics


@pytest.mark.parametrize("settings,header", [({}, None), ({"mandatory": True}, "false")],
                         ids=["plugin-default", "header-turns-it-off"])
def test_without_mandatory_an_unroutable_send_is_receipted_as_by_the_plugin(bridge, dial, unique, settings, header):
    conn = dial(bridge(**settings))
    conn.connect()
    headers = {"destination": f"/exchange/amq.direct/nobody-{unique}", "persistent": "true"}
    if header is not None:
        headers["mandatory"] = header
    conn.receipt("SEND", headers, "dropped by RabbitMQ")  # the plugin's way: confirmed and gone


# -- resubscribe_on_cancel -----------------------------------------------------------------


def test_a_deleted_queue_is_declared_and_subscribed_again(bridge, dial, rabbit, queues, unique):
    """/queue/: RabbitMQ cancels the consumer when the queue is deleted; the bridge declares it
    again (as the SUBSCRIBE did) and consumes: the client sees no ERROR, and the next SEND
    arrives on the same subscription."""
    server = bridge(resubscribe_on_cancel=True, http_port=0)
    name = f"again-{unique}"
    queues.append(name)
    consumer, producer = dial(server), dial(server)
    consumer.connect()
    producer.connect()
    consumer.subscribe(f"/queue/{name}", sub_id="s-again")
    rabbit.delete_queue(name)
    producer.receipt("SEND", {"destination": f"/queue/{name}"}, "after the delete")  # declares it too
    message = consumer.expect("MESSAGE", timeout=15)
    assert (message.body, message["subscription"]) == (b"after the delete", "s-again")
    import urllib.request

    metrics = urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/metrics", timeout=10).read()
    assert b"stomp_bridge_resubscriptions_total 1.0" in metrics


def test_a_durable_subscription_is_made_again_under_its_own_name(bridge, dial, rabbit, queues, unique):
    """The extensions' naming holds when the bridge subscribes again: Artemis' durable
    subscription comes back as <client-id>.<name>, bound to its topic, not as a plugin name."""
    import time

    server = bridge(resubscribe_on_cancel=True)
    queue = f"c-{unique}.n"
    queues.append(queue)
    consumer, producer = dial(server), dial(server)
    consumer.connect(extra={"client-id": f"c-{unique}"})
    producer.connect()
    consumer.subscribe(f"/topic/t-{unique}", sub_id="d", headers={"durable-subscription-name": "n"})
    rabbit.delete_queue(queue)
    deadline = time.monotonic() + 15
    while not any(b["source"] == "amq.topic" for b in rabbit.bindings(queue)):  # no event says it is back
        assert time.monotonic() < deadline, f"{queue} was not declared and bound again"
        time.sleep(0.1)
    producer.receipt("SEND", {"destination": f"/topic/t-{unique}"}, "to the durable subscription")
    message = consumer.expect("MESSAGE", timeout=15)
    assert (message.body, message["subscription"]) == (b"to the durable subscription", "d")


def test_an_amq_queue_is_subscribed_again_once_it_is_back(bridge, dial, rabbit, queues, unique):
    name = f"back-{unique}"
    queues.append(name)
    rabbit.declare_queue(name)
    consumer, producer = dial(bridge(resubscribe_on_cancel=True)), dial(bridge())
    consumer.connect()
    producer.connect()
    consumer.subscribe(f"/amq/queue/{name}", sub_id="s-back")
    rabbit.delete_queue(name)
    consumer.no_frame(1.0)  # no ERROR while the bridge waits for the queue
    rabbit.declare_queue(name)
    producer.receipt("SEND", {"destination": f"/amq/queue/{name}"}, "it is back")
    message = consumer.expect("MESSAGE", timeout=15)
    assert (message.body, message["subscription"]) == (b"it is back", "s-back")


def test_a_queue_that_stays_away_ends_in_the_plugins_error(bridge, dial, rabbit, queues, unique):
    name = f"gone-{unique}"
    queues.append(name)
    rabbit.declare_queue(name)
    conn = dial(bridge(resubscribe_on_cancel=True, resubscribe_timeout=1.0))
    conn.connect()
    conn.subscribe(f"/amq/queue/{name}", sub_id="s-gone")
    rabbit.delete_queue(name)
    error = conn.expect("ERROR", timeout=15)
    assert (error["message"], error["subscription"]) == ("Server cancelled subscription", "s-gone")
    conn.receipt("SEND", {"destination": "/topic/still-usable"}, "x")  # the connection stays


# -- OAuth 2 token refresh ------------------------------------------------------------------


def test_a_token_sent_on_the_open_connection_outlives_the_first(bridge, dial, oauth):
    """A JWT as the passcode logs in; SEND to /bridge/token hands RabbitMQ a new one
    (connection.update-secret), and the connection lives past the first token's expiry."""
    import time

    server = bridge(http_port=0)
    conn = dial(server, timeout=15)
    expires = time.time() + 3
    conn.connect(login="oauth-user", passcode=oauth("oauth-user", expires_in=3))
    conn.receipt("SEND", {"destination": "/bridge/token"}, oauth("oauth-user", expires_in=120), receipt_id="new")
    time.sleep(max(0.0, expires - time.time()) + 2.0)  # no event says a token expired: the clock
    conn.receipt("SEND", {"destination": "/exchange/amq.direct/after-the-first-token"}, "still here",
                 receipt_id="alive")
    import urllib.request

    metrics = urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/metrics", timeout=10).read()
    assert b"stomp_bridge_token_updates_total 1.0" in metrics


def test_an_expired_token_ends_the_connection_with_an_error_saying_so(bridge, dial, oauth):
    conn = dial(bridge(), timeout=15)
    conn.connect(login="oauth-user", passcode=oauth("oauth-user", expires_in=2))
    error = conn.error_then_close(timeout=15)  # RabbitMQ closes at the expiry
    assert error["message"] == "Credential expired"  # the plugin's (4.3.6), tests/integration/test_login_checks.py
    assert error.text == "The credential used to authenticate this connection has expired"


def test_a_token_for_another_user_is_refused_and_the_connection_ends(bridge, dial, oauth):
    conn = dial(bridge(), timeout=15)
    conn.connect(login="oauth-user", passcode=oauth("oauth-user"))
    conn.send_frame("SEND", {"destination": "/bridge/token", "receipt": "r"}, oauth("someone-else"))
    error = conn.error_then_close(timeout=15)
    assert error["message"] == "Token refused"
    assert "someone-else" in error.text or "New secret was refused" in error.text


def test_an_empty_token_is_an_error_that_keeps_the_connection(bridge, dial, oauth):
    conn = dial(bridge(), timeout=15)
    conn.connect(login="oauth-user", passcode=oauth("oauth-user"))
    conn.send_frame("SEND", {"destination": "/bridge/token"}, "")
    error = conn.expect("ERROR")
    assert "needs the new token as its body" in error.text
    conn.receipt("SEND", {"destination": "/exchange/amq.direct/x"}, "the connection stays")


def test_a_password_login_gets_token_refused_from_bridge_token_and_keeps_its_connection(connected):
    """An internal (password) user's connection: RabbitMQ would take the token and ignore it;
    the bridge says so instead, and the connection goes on (no token expiry ends it later)."""
    from tests.tokens import token

    conn = connected()
    conn.send_frame("SEND", {"destination": "/bridge/token", "receipt": "t"}, token("guest", expires_in=2))
    error = conn.error_then_usable()
    assert (error["message"], error["receipt-id"]) == ("Token refused", "t")
    assert "logged in with a password" in error.text


# -- selectors ---------------------------------------------------------------------------


@pytest.mark.parametrize("ack", ["auto", "client-individual"])
def test_selector_on_topic_delivers_only_matching_messages(connected, unique, ack):
    sub = connected()
    sub.subscribe(f"/topic/sel-{unique}", ack=ack,
                  headers={"selector": "type = 'car' AND weight > 2500", "prefetch-count": "1"})
    pub = connected()
    sent = [("car", "3000"), ("car", "1000"), ("bike", "3000"), ("car", "2600")]
    for i, (kind, weight) in enumerate(sent):
        pub.receipt("SEND", {"destination": f"/topic/sel-{unique}", "type": kind, "weight": weight},
                    f"m{i}", receipt_id=f"r{i}")
    got = []
    for _ in range(2):
        msg = sub.expect("MESSAGE")
        got.append(msg.body)
        if ack != "auto":
            sub.send_frame("ACK", {"id": msg["ack"]})
    # prefetch 1 with client acks: the dropped deliveries were acknowledged by the bridge
    assert got == [b"m0", b"m3"]
    sub.no_frame()


def test_selector_on_exchange_subscription_with_like_and_null(connected, unique):
    sub = connected()
    sub.subscribe("/exchange/amq.fanout", headers={"selector": "name LIKE 'a!_%' ESCAPE '!' OR region IS NULL"})
    pub = connected()
    for i, headers in enumerate([{"name": "a_1", "region": "eu"}, {"name": "ab", "region": "eu"},
                                 {"name": "zz"}]):
        pub.receipt("SEND", {"destination": "/exchange/amq.fanout", "run": unique, **headers},
                    f"m{i}", receipt_id=f"r{i}")
    got = [m.body for m in _drain(sub, 2) if m["run"] == unique]
    assert got == [b"m0", b"m2"]


def test_malformed_selector_is_an_error_at_subscribe(connected, unique):
    conn = connected()
    conn.send_frame("SUBSCRIBE", {"destination": f"/topic/x-{unique}", "id": "1",
                                  "selector": "type = 'car' AND", "receipt": "r"})
    error = conn.error_then_usable()
    assert error["message"] == "Invalid selector"
    assert "type = 'car' AND" in error.text


def test_selector_on_shared_queue_is_refused_with_the_reason(connected, unique, queues):
    queues.append(f"q-{unique}")
    conn = connected()
    conn.send_frame("SUBSCRIBE", {"destination": f"/queue/q-{unique}", "id": "1", "selector": "a = 1"})
    error = conn.error_then_usable()
    assert error["message"] == "Selector not supported on shared queues"
    assert "other consumers" in error.text


def test_subscription_without_selector_gets_everything(connected, unique):
    sub = connected()
    sub.subscribe(f"/topic/nosel-{unique}")
    pub = connected()
    pub.receipt("SEND", {"destination": f"/topic/nosel-{unique}", "selector": "ignored"}, "x")
    assert sub.expect("MESSAGE").body == b"x"


# -- composite destinations -----------------------------------------------------------------


def test_composite_send_reaches_every_target_before_the_receipt(connected, rabbit, unique, queues):
    a, b = f"ca-{unique}", f"cb-{unique}"
    queues.extend([a, b])
    topic_sub = connected()
    topic_sub.subscribe(f"/topic/cc-{unique}")
    pub = connected()
    pub.subscribe(f"/queue/{a}", sub_id="decl-a")  # declare both queues, then stop consuming
    pub.receipt("UNSUBSCRIBE", {"id": "decl-a"}, receipt_id="u")
    rabbit.declare_queue(b, durable=True)
    pub.receipt("SEND", {"destination": f"/queue/{a},/amq/queue/{b},/topic/cc-{unique}",
                         "persistent": "true"}, "all", receipt_id="one")
    # The single RECEIPT came after RabbitMQ confirmed every publish: both queues hold it now.
    assert [m["payload"] for m in rabbit.get(a, count=5)] == ["all"]
    assert [m["payload"] for m in rabbit.get(b, count=5)] == ["all"]
    assert topic_sub.expect("MESSAGE").body == b"all"


def test_composite_subscribe_feeds_one_subscription_from_all_parts(connected, unique, queues):
    a = f"cs-{unique}"
    queues.append(a)
    sub = connected()
    sub.subscribe(f"/queue/{a},/topic/ct-{unique}", sub_id="both", ack="client-individual")
    pub = connected()
    pub.receipt("SEND", {"destination": f"/queue/{a}"}, "from-queue", receipt_id="1")
    pub.receipt("SEND", {"destination": f"/topic/ct-{unique}"}, "from-topic", receipt_id="2")
    msgs = _drain(sub, 2)
    assert sorted(m.body for m in msgs) == [b"from-queue", b"from-topic"]
    assert {m["subscription"] for m in msgs} == {"both"}
    assert {m["destination"] for m in msgs} == {f"/queue/{a}", f"/topic/ct-{unique}"}
    for m in msgs:
        sub.send_frame("ACK", {"id": m["ack"]})
    sub.receipt("UNSUBSCRIBE", {"id": "both"}, receipt_id="unsub")
    # (not to the topic: its auto-delete queue is being deleted, and RabbitMQ 4.3 may nack a
    # publish that races the deletion)
    pub.receipt("SEND", {"destination": f"/queue/{a}"}, "after", receipt_id="3")
    sub.no_frame()


def test_comma_in_a_plain_queue_name_keeps_the_plugin_meaning(connected, rabbit, unique, queues):
    name = f"a,b-{unique}"
    queues.append(name)
    conn = connected()
    conn.receipt("SEND", {"destination": f"/queue/{name}"}, "x")
    assert [m["payload"] for m in rabbit.get(name, count=5)] == ["x"]


# -- expiration -----------------------------------------------------------------------------


def test_ttl_becomes_amqp_expiration_and_an_expires_header(connected, rabbit, unique, queues):
    name = f"ttl-{unique}"
    queues.append(name)
    conn = connected()
    before = int(time.time() * 1000)
    conn.receipt("SEND", {"destination": f"/queue/{name}", "ttl": "60000"}, "x")
    (msg,) = rabbit.get(name)
    assert msg["properties"]["expiration"] == "60000"
    expires = int(msg["properties"]["headers"]["expires"])
    assert before + 60000 <= expires <= int(time.time() * 1000) + 60000


def test_expired_messages_are_never_delivered(connected, rabbit, unique, queues):
    name = f"exp-{unique}"
    queues.append(name)
    conn = connected()
    now = int(time.time() * 1000)
    conn.receipt("SEND", {"destination": f"/queue/{name}", "expires": str(now - 1000)}, "past", receipt_id="1")
    conn.receipt("SEND", {"destination": f"/queue/{name}", "ttl": "1"}, "short", receipt_id="2")
    conn.receipt("SEND", {"destination": f"/queue/{name}", "expires": str(now + 600_000)}, "future",
                 receipt_id="3")
    sub = connected()
    sub.subscribe(f"/queue/{name}")
    msg = sub.expect("MESSAGE")
    assert msg.body == b"future"
    assert 0 < int(msg["expiration"]) <= 600_000
    sub.no_frame()


def test_invalid_expires_is_an_error(connected, unique):
    conn = connected()
    conn.send_frame("SEND", {"destination": f"/topic/e-{unique}", "expires": "soon"})
    assert conn.error_then_usable()["message"] == "Invalid header"


# -- durable subscriptions -------------------------------------------------------------------


@pytest.mark.parametrize("header", ["durable-subscription-name", "durable-subscriber-name",
                                    "activemq.subscriptionName"])
def test_artemis_durable_subscription_survives_disconnect(connected, rabbit, unique, queues, header):
    client_id, name = f"cid-{unique}", "orders"
    queue = f"{client_id}.{name}"
    queues.append(queue)
    first = connected(extra={"client-id": client_id})
    first.subscribe(f"/topic/dur-{unique}", sub_id="s", headers={header: name})
    q = rabbit.queue(queue)
    assert q["durable"] is True and q["auto_delete"] is False and q["exclusive"] is False
    first.receipt("DISCONNECT", {}, receipt_id="bye")
    pub = connected()
    pub.receipt("SEND", {"destination": f"/topic/dur-{unique}"}, "while-away")
    again = connected(extra={"client-id": client_id})
    again.subscribe(f"/topic/dur-{unique}", sub_id="s", headers={header: name})
    assert again.expect("MESSAGE").body == b"while-away"
    again.receipt("UNSUBSCRIBE", {"id": "s", header: name}, receipt_id="gone")
    assert rabbit.queue(queue) is None


def test_artemis_durable_subscription_needs_a_client_id(connected, unique):
    conn = connected()
    conn.send_frame("SUBSCRIBE", {"destination": f"/topic/d-{unique}", "id": "s",
                                  "durable-subscription-name": "n"})
    error = conn.error_then_usable()
    assert error["message"] == "Missing client-id"


def test_dsub_sends_to_and_subscribes_to_an_existing_durable_subscription(connected, unique, queues):
    client_id = f"cid-{unique}"
    queues.append(f"{client_id}.sub")
    owner = connected(extra={"client-id": client_id})
    owner.subscribe(f"/topic/ds-{unique}", sub_id="s", headers={"durable-subscription-name": "sub"})
    owner.receipt("UNSUBSCRIBE", {"id": "s"}, receipt_id="u")  # detach, keep the queue
    other = connected(extra={"client-id": client_id})
    other.receipt("SEND", {"destination": "/dsub/sub"}, "direct")
    other.subscribe("/dsub/sub", sub_id="d")
    assert other.expect("MESSAGE").body == b"direct"


def test_dsub_to_a_missing_subscription_is_an_error(connected, unique):
    conn = connected()
    conn.send_frame("SUBSCRIBE", {"destination": f"/dsub/none-{unique}", "id": "d"})
    assert conn.error_then_close()["message"] == "not_found"


def test_unknown_destination_keeps_the_plugin_error(connected):
    conn = connected()
    conn.send_frame("SEND", {"destination": "/nowhere/x"})
    assert conn.error_then_usable()["message"] == "Unknown destination"


# -- exclusive subscriptions -------------------------------------------------------------------


def test_apollo_exclusive_fails_over_to_the_next_subscriber(bridge, dial, rabbit, unique, queues):
    name = f"excl-{unique}"
    queues.append(name)
    b = bridge(apollo_exclusive=True)
    first, second = dial(b), dial(b)
    for conn in (first, second):
        conn.connect()
        conn.subscribe(f"/queue/{name}", headers={"exclusive": "true"})
    assert rabbit.arguments(name) == {"x-single-active-consumer": True}
    pub = dial(b)
    pub.connect()
    # /amq/queue: a /queue/ SEND would declare the queue without the argument (inequivalent)
    pub.receipt("SEND", {"destination": f"/amq/queue/{name}"}, "one", receipt_id="1")
    assert first.expect("MESSAGE").body == b"one"
    second.no_frame()
    first.receipt("DISCONNECT", {}, receipt_id="bye")
    assert first.read_until_closed() == []  # the bridge closed its AMQP connection first
    pub.receipt("SEND", {"destination": f"/amq/queue/{name}"}, "two", receipt_id="2")
    assert second.expect("MESSAGE").body == b"two"


def test_exclusive_header_keeps_the_plugin_meaning_by_default(connected, rabbit, unique):
    # an exclusive queue: RabbitMQ deletes it with the connection
    conn = connected()
    conn.subscribe(f"/queue/px-{unique}", headers={"exclusive": "true"})
    q = rabbit.queue(f"px-{unique}")
    assert q["exclusive"] is True and "x-single-active-consumer" not in q["arguments"]


# -- browsing ------------------------------------------------------------------------------------


def test_browser_reads_without_consuming_and_ends(connected, rabbit, unique, queues):
    name = f"br-{unique}"
    queues.append(name)
    pub = connected()
    for i in range(3):
        pub.receipt("SEND", {"destination": f"/queue/{name}", "n": str(i)}, f"m{i}", receipt_id=f"r{i}")
    browser = connected()
    browser.send_frame("SUBSCRIBE", {"destination": f"/queue/{name}", "id": "b", "browser": "true",
                                     "receipt": "sub"})
    frames = [browser.read_frame() for _ in range(5)]
    messages = [f for f in frames if f.command == "MESSAGE"]
    assert [m.body for m in messages[:3]] == [b"m0", b"m1", b"m2"]
    assert messages[3]["browser"] == "end" and messages[3].body == b""
    assert any(f.command == "RECEIPT" for f in frames)
    browser.receipt("UNSUBSCRIBE", {"id": "b"}, receipt_id="u")
    # Still there, in order, for a real consumer (now flagged redelivered).
    consumer = connected()
    consumer.subscribe(f"/queue/{name}")
    got = _drain(consumer, 3)
    assert [m.body for m in got] == [b"m0", b"m1", b"m2"]
    assert [m["redelivered"] for m in got] == ["true"] * 3


def test_browser_with_selector_on_a_queue_filters_without_taking(connected, rabbit, unique, queues):
    name = f"brs-{unique}"
    queues.append(name)
    pub = connected()
    for i in range(4):
        pub.receipt("SEND", {"destination": f"/queue/{name}", "n": str(i)}, f"m{i}", receipt_id=f"r{i}")
    browser = connected()
    browser.subscribe(f"/queue/{name}", sub_id="b", headers={"browser": "true", "selector": "n >= 2"})
    messages = _drain(browser, 3)
    assert [m.body for m in messages] == [b"m2", b"m3", b""]
    assert messages[-1]["browser"] == "end"


def test_browser_end_false_on_a_queue_is_refused(connected, unique, queues):
    queues.append(f"bre-{unique}")
    conn = connected()
    conn.send_frame("SUBSCRIBE", {"destination": f"/queue/bre-{unique}", "id": "b", "browser": "true",
                                  "browser-end": "false"})
    assert conn.error_then_usable()["message"] == "Unsupported browser-end"


# -- flow control and stream sequences ----------------------------------------------------------


@pytest.mark.parametrize("headers", [{"credit": "1,0"}, {"consumer-window-size": "0"}])
def test_flow_control_headers_limit_unacknowledged_messages(connected, unique, queues, headers):
    name = f"fc-{unique}"
    queues.append(name)
    pub = connected()
    for i in range(3):
        pub.receipt("SEND", {"destination": f"/queue/{name}"}, f"m{i}", receipt_id=f"r{i}")
    sub = connected()
    sub.subscribe(f"/queue/{name}", ack="client-individual", headers=headers)
    first = sub.expect("MESSAGE")
    sub.no_frame()  # one message at a time until it is acknowledged
    sub.send_frame("ACK", {"id": first["ack"]})
    assert sub.expect("MESSAGE").body == b"m1"


def test_from_seq_and_include_seq_on_a_stream(connected, unique, queues):
    name = f"seq-{unique}"
    queues.append(name)
    conn = connected()
    conn.subscribe(f"/queue/{name}", sub_id="decl", ack="client",
                   headers={"prefetch-count": "10", "x-queue-type": "stream"})
    conn.receipt("UNSUBSCRIBE", {"id": "decl"}, receipt_id="undecl")
    for i in range(4):
        conn.receipt("SEND", {"destination": f"/amq/queue/{name}"}, f"m{i}", receipt_id=f"s{i}")
    reader = connected()
    reader.subscribe(f"/amq/queue/{name}", ack="client",
                     headers={"credit": "10", "from-seq": "2", "include-seq": "seq"})
    msgs = _drain(reader, 2)
    assert [m.body for m in msgs] == [b"m2", b"m3"]
    assert [m["seq"] for m in msgs] == ["2", "3"]


# -- host -> vhost, non-fatal errors -------------------------------------------------------------


def test_host_header_maps_to_a_vhost(bridge, dial, rabbit, unique):
    vhost = f"mapped-{unique}"
    rabbit.create_vhost(vhost)
    try:
        b = bridge(host_vhosts={"broker.example.com": vhost})
        conn = dial(b)
        conn.connect(host="broker.example.com")
        conn.receipt("SEND", {"destination": f"/queue/m-{unique}"}, "x")
        assert rabbit.queue(f"m-{unique}", vhost=vhost) is not None
    finally:
        rabbit.delete_vhost(vhost)


def test_unknown_host_is_refused_unless_the_fallback_is_on(bridge, dial, rabbit, unique, queues):
    plain = dial(bridge())
    plain.send_frame("CONNECT", {"accept-version": "1.2", "host": f"nohost-{unique}",
                                 "login": "guest", "passcode": "guest"})
    assert plain.error_then_close()["message"] == "Bad CONNECT"
    queues.append(f"fb-{unique}")
    conn = dial(bridge(unknown_host_default_vhost=True))
    conn.connect(host=f"nohost-{unique}")
    conn.receipt("SEND", {"destination": f"/queue/fb-{unique}"}, "x")
    assert rabbit.queue(f"fb-{unique}", vhost="/") is not None


def test_refused_frames_keep_the_connection_and_its_subscriptions(bridge, dial, unique):
    conn = dial(bridge())
    conn.connect()
    conn.subscribe(f"/topic/nf-{unique}", sub_id="good")
    conn.send_frame("SUBSCRIBE", {"destination": f"/topic/nf-{unique}", "id": "bad", "selector": "a ="})
    error = conn.expect("ERROR")
    assert error["message"] == "Invalid selector"
    conn.send_frame("SEND", {"destination": "/nowhere/x", "receipt": "bad-send"})
    error = conn.expect("ERROR")
    assert error["message"] == "Unknown destination" and error["receipt-id"] == "bad-send"
    conn.receipt("SEND", {"destination": f"/topic/nf-{unique}"}, "still here", receipt_id="ok")
    assert conn.expect("MESSAGE").body == b"still here"


# -- retained messages, temp topics, redelivery count ----------------------------------------------


def test_retained_message_is_delivered_first_to_each_new_subscriber(bridge, dial, rabbit, unique):
    from stomp_bridge.protocol.features import retained_queue

    topic = f"ret-{unique}"
    b = bridge(retained_messages=True)
    pub = dial(b)
    pub.connect()
    try:
        pub.receipt("SEND", {"destination": f"/topic/{topic}", "retain": "set"}, "old", receipt_id="1")
        pub.receipt("SEND", {"destination": f"/topic/{topic}", "retain": "set"}, "price", receipt_id="2")
        for n in range(2):  # each subscriber gets it; the retained copy stays
            sub = dial(b)
            sub.connect()
            sub.subscribe(f"/topic/{topic}", ack="client-individual")
            msg = sub.expect("MESSAGE")
            assert msg.body == b"price"
            sub.send_frame("ACK", {"id": msg["ack"]})
            pub.receipt("SEND", {"destination": f"/topic/{topic}"}, f"live{n}", receipt_id=f"l{n}")
            assert sub.expect("MESSAGE").body == f"live{n}".encode()
        pub.receipt("SEND", {"destination": f"/topic/{topic}", "retain": "remove"}, "bye", receipt_id="3")
        late = dial(b)
        late.connect()
        late.subscribe(f"/topic/{topic}")
        late.no_frame()
    finally:
        rabbit.delete_queue(retained_queue("amq.topic", topic))


def test_mandatory_bridge_wide_ends_on_a_topic_nobody_hears_and_keeps_no_retained_copy(bridge, dial, rabbit, queues,
                                                                                      unique):
    """docs/migration/rabbitmq-plugin.md, 'Mandatory publishing, topics and retained messages':
    with mandatory=true and retained_messages, a retain:set SEND to a topic with no subscriber is
    returned: ERROR naming its receipt, the connection ends, the RECEIPT of the SEND before it
    still comes, and no retained copy is kept; with mandatory:false it is kept for later
    subscribers."""
    from stomp_bridge.protocol.features import retained_queue

    topic, queue = f"nobody-{unique}", f"routed-{unique}"
    queues.append(queue)
    server = bridge(mandatory=True, retained_messages=True)
    conn = dial(server)
    conn.connect()
    conn.receipt("SUBSCRIBE", {"destination": f"/queue/{queue}", "id": "decl"}, receipt_id="declared")
    conn.send_frame("SEND", {"destination": f"/queue/{queue}", "receipt": "before"}, "routed")
    conn.send_frame("SEND", {"destination": f"/topic/{topic}", "retain": "set", "receipt": "retained"}, "price")
    conn.send_frame("SEND", {"destination": f"/queue/{queue}", "receipt": "after"}, "never receipted")
    frames = [f for f in conn.read_until_closed() if f.command != "MESSAGE"]
    assert [(f.command, f["receipt-id"]) for f in frames] == [("RECEIPT", "before"), ("ERROR", "retained")]
    assert frames[1]["message"] == "Unroutable message"
    try:
        assert rabbit.queue(retained_queue("amq.topic", topic)) is None
        keeper = dial(server)
        keeper.connect()
        keeper.receipt("SEND", {"destination": f"/topic/{topic}", "retain": "set", "mandatory": "false"}, "kept",
                       receipt_id="kept")
        late = dial(server)
        late.connect()
        late.subscribe(f"/topic/{topic}")
        assert late.expect("MESSAGE").body == b"kept"
    finally:
        rabbit.delete_queue(retained_queue("amq.topic", topic))


def test_retain_header_is_only_a_header_by_default(connected, rabbit, unique):
    from stomp_bridge.protocol.features import retained_queue

    pub = connected()
    pub.receipt("SEND", {"destination": f"/topic/nr-{unique}", "retain": "set"}, "x")
    assert rabbit.queue(retained_queue("amq.topic", f"nr-{unique}")) is None


def test_temp_topic_reply_goes_to_the_requester_only(connected, unique, queues):
    service_queue = f"svc-{unique}"
    queues.append(service_queue)
    requester = connected()
    requester.subscribe("/temp-topic/replies", sub_id="r")
    requester.receipt("SEND", {"destination": f"/queue/{service_queue}", "reply-to": "/temp-topic/replies"},
                      "ping")
    service = connected()
    service.subscribe(f"/queue/{service_queue}")
    request = service.expect("MESSAGE")
    assert request["reply-to"].startswith("/topic/temp-topic.")
    service.receipt("SEND", {"destination": request["reply-to"]}, "pong")
    reply = requester.expect("MESSAGE")
    assert reply.body == b"pong" and reply["subscription"] == "r"


def test_temp_queue_prefix_names_reply_queues(bridge, dial, rabbit, unique, queues):
    b = bridge(temp_queue_prefix="stomp-temp-")
    service_queue = f"svc-{unique}"
    queues.append(service_queue)
    requester, service = dial(b), dial(b)
    connected = requester.connect()
    service.connect()
    service.subscribe(f"/queue/{service_queue}")
    requester.receipt("SEND", {"destination": f"/queue/{service_queue}", "reply-to": "/temp-queue/answers"},
                      "ping")
    request = service.expect("MESSAGE")
    session = connected["session"].removeprefix("session-")
    assert request["reply-to"] == f"/reply-queue/stomp-temp-{session}.answers"
    queue = rabbit.queue(f"stomp-temp-{session}.answers")
    assert (queue["exclusive"], queue["auto_delete"], queue["durable"]) == (True, True, False)
    service.receipt("SEND", {"destination": request["reply-to"]}, "pong")
    reply = requester.expect("MESSAGE")
    assert (reply.body, reply["subscription"]) == (b"pong", "/temp-queue/answers")
    requester.receipt("DISCONNECT", {}, receipt_id="bye")
    requester.read_until_closed()
    assert rabbit.queue(f"stomp-temp-{session}.answers") is None


def test_quorum_queue_redeliveries_carry_the_delivery_count(connected, unique, queues):
    name = f"qq-{unique}"
    queues.append(name)
    conn = connected()
    conn.subscribe(f"/queue/{name}", ack="client-individual",
                   headers={"x-queue-type": "quorum", "prefetch-count": "1"})
    conn.receipt("SEND", {"destination": f"/queue/{name}", "x-queue-type": "quorum"}, "x", receipt_id="s")
    first = conn.expect("MESSAGE")
    assert "x-delivery-count" not in first.headers and "x-acquired-count" not in first.headers
    conn.send_frame("NACK", {"id": first["ack"]})  # default_nack_requeue: back to the queue
    again = conn.expect("MESSAGE")
    # RabbitMQ 4.3 counts it in x-acquired-count (x-delivery-count: failed deliveries only);
    # 3.10 and 4.0 in x-delivery-count
    assert again["redelivered"] == "true"
    assert (again.get("x-acquired-count") or again.get("x-delivery-count")) == "1"


def test_redeliveries_header_counts_redeliveries(bridge, dial, unique, queues):
    name = f"rd-{unique}"
    queues.append(name)
    conn = dial(bridge(redeliveries_header="redeliveries"))
    conn.connect()
    conn.subscribe(f"/queue/{name}", ack="client-individual",
                   headers={"x-queue-type": "quorum", "prefetch-count": "1"})
    conn.receipt("SEND", {"destination": f"/queue/{name}", "x-queue-type": "quorum"}, "x", receipt_id="s")
    first = conn.expect("MESSAGE")
    assert "redeliveries" not in first.headers
    conn.send_frame("NACK", {"id": first["ack"]})
    assert conn.expect("MESSAGE")["redeliveries"] == "1"


def test_composite_subscribe_with_a_refused_part_subscribes_to_nothing(bridge, dial, unique, queues):
    queues.append(f"cr-{unique}")
    conn = dial(bridge())
    conn.connect()
    conn.send_frame("SUBSCRIBE", {"destination": f"/queue/cr-{unique},/temp-queue/t", "id": "c"})
    assert conn.expect("ERROR")["message"] == "Invalid destination"
    conn.subscribe(f"/queue/cr-{unique}", sub_id="c")  # the id is free: nothing was registered
    conn.receipt("SEND", {"destination": f"/queue/cr-{unique}"}, "x", receipt_id="s")
    assert conn.expect("MESSAGE")["subscription"] == "c"


def test_artemis_unsubscribe_by_name_deletes_a_detached_durable_subscription(connected, rabbit, unique):
    client_id = f"cid-{unique}"
    first = connected(extra={"client-id": client_id})
    first.subscribe(f"/topic/det-{unique}", sub_id="s", headers={"durable-subscription-name": "n"})
    first.receipt("DISCONNECT", {}, receipt_id="bye")
    assert rabbit.queue(f"{client_id}.n") is not None
    later = connected(extra={"client-id": client_id})
    later.receipt("UNSUBSCRIBE", {"id": "s", "durable-subscription-name": "n"}, receipt_id="gone")
    assert rabbit.queue(f"{client_id}.n") is None


def test_selector_with_cumulative_client_acks(connected, unique):
    sub = connected()
    sub.subscribe(f"/topic/cum-{unique}", ack="client", headers={"selector": "keep = 'y'", "prefetch-count": "2"})
    pub = connected()
    for i, keep in enumerate("ynnyny"):
        pub.receipt("SEND", {"destination": f"/topic/cum-{unique}", "keep": keep}, f"m{i}", receipt_id=f"r{i}")
    first, second = _drain(sub, 2)
    assert (first.body, second.body) == (b"m0", b"m3")
    sub.send_frame("ACK", {"id": second["ack"]})  # cumulative: settles m0 too
    assert sub.expect("MESSAGE").body == b"m5"


def test_composite_send_in_a_transaction_is_published_at_commit(connected, rabbit, unique, queues):
    a, b = f"txa-{unique}", f"txb-{unique}"
    queues.extend([a, b])
    conn = connected()
    conn.receipt("BEGIN", {"transaction": "t"}, receipt_id="b")
    conn.send_frame("SEND", {"destination": f"/queue/{a},/queue/{b}", "transaction": "t"}, "x")
    conn.receipt("COMMIT", {"transaction": "t"}, receipt_id="c")
    assert [m["payload"] for m in rabbit.get(a, count=5)] == ["x"]
    assert [m["payload"] for m in rabbit.get(b, count=5)] == ["x"]


def test_broker_refusals_still_close_the_connection(bridge, dial, unique):
    conn = dial(bridge())
    conn.connect()
    conn.send_frame("SUBSCRIBE", {"destination": f"/amq/queue/missing-{unique}", "id": "m"})
    assert conn.error_then_close()["message"] == "not_found"
