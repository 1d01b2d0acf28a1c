"""Destination types and what they create in RabbitMQ."""

from __future__ import annotations

import os
import queue
import time
import urllib.error

import pytest
from testkit.brokers import plugin_words

VALID_TYPES = "/temp-queue, /exchange, /topic, /queue, /amq/queue, /reply-queue/"


def _stomp_queues(rabbit) -> set[str]:
    return {q["name"] for q in rabbit.queues() if q["name"].startswith("stomp-")}


def test_queue_send_then_subscribe_receives(client, rabbit, queues, unique):
    name = f"q-{unique}"
    queues.append(name)
    c = client()
    c.send_with_receipt(f"/queue/{name}", "queued before subscribe")
    c.subscribe(f"/queue/{name}")
    msg = c.next_message()
    assert msg.body == b"queued before subscribe"
    assert msg.headers["destination"] == f"/queue/{name}"
    assert msg.headers["subscription"] == "1"


def test_queue_destination_declares_durable_shared_queue(client, rabbit, queues, unique):
    name = f"q-{unique}"
    queues.append(name)
    client().send_with_receipt(f"/queue/{name}", "x")
    q = rabbit.queue(name)
    assert q is not None
    assert (q["durable"], q["exclusive"], q["auto_delete"]) == (True, False, False)
    assert rabbit.arguments(name) == {}
    assert rabbit.get(name)[0]["routing_key"] == name


def test_queue_delivers_each_message_to_one_subscriber(client, queues, unique):
    name = f"q-{unique}"
    queues.append(name)
    a, b = client(), client()
    a.subscribe(f"/queue/{name}")
    b.subscribe(f"/queue/{name}")
    sender = client()
    for i in range(4):
        sender.send_with_receipt(f"/queue/{name}", f"m{i}")
    got: list[bytes] = []
    deadline = time.monotonic() + 5
    while len(got) < 4 and time.monotonic() < deadline:
        for c in (a, b):
            try:
                got.append(c.listener.messages.get(timeout=0.05).body)
            except queue.Empty:
                pass
    assert sorted(got) == [b"m0", b"m1", b"m2", b"m3"]
    a.no_message(0.3)
    b.no_message(0.1)


def test_amq_queue_sends_to_and_consumes_from_existing_queue(client, rabbit, queues, unique):
    name = f"pre-{unique}"
    queues.append(name)
    rabbit.declare_queue(name, arguments={"x-max-length": 100})
    c = client()
    c.send_with_receipt(f"/amq/queue/{name}", "to existing")
    c.subscribe(f"/amq/queue/{name}")
    msg = c.next_message()
    assert msg.body == b"to existing"
    assert msg.headers["destination"] == f"/queue/{name}"
    q = rabbit.queue(name)
    assert rabbit.arguments(name) == {"x-max-length": 100}


def test_amq_queue_subscribe_to_missing_queue_errors(connected, rabbit, unique):
    conn = connected()
    conn.send_frame("SUBSCRIBE", {"destination": f"/amq/queue/missing-{unique}", "id": "1"})
    error = conn.error_then_close()
    assert error["message"] == "not_found"
    assert error.text == plugin_words(f"NOT_FOUND - no queue 'missing-{unique}' in vhost '/'")
    assert rabbit.queue(f"missing-{unique}") is None


def test_topic_fans_out_to_every_subscriber(client, rabbit, unique):
    before = _stomp_queues(rabbit)
    a, b = client(), client()
    a.subscribe(f"/topic/t.{unique}")
    b.subscribe(f"/topic/t.{unique}")
    created = _stomp_queues(rabbit) - before
    # one queue each, as the plugin's; with fan-out at the edge, one the two share
    assert len(created) == (1 if os.environ.get("STOMP_BRIDGE_TEST_FANOUT") == "1" else 2)
    for name in created:
        assert name.startswith("stomp-subscription-")
        q = rabbit.queue(name)
        assert (q["durable"], q["auto_delete"]) == (False, True)
        keys = {(bd["source"], bd["routing_key"]) for bd in rabbit.bindings(name)}
        assert ("amq.topic", f"t.{unique}") in keys
    client().send_with_receipt(f"/topic/t.{unique}", "fan")
    for c in (a, b):
        msg = c.next_message()
        assert msg.body == b"fan"
        assert msg.headers["destination"] == f"/topic/t.{unique}"


def test_topic_wildcard_subscription(client, unique):
    c = client()
    c.subscribe(f"/topic/w.{unique}.*")
    client().send_with_receipt(f"/topic/w.{unique}.red", "red")
    msg = c.next_message()
    assert msg.body == b"red"
    assert msg.headers["destination"] == f"/topic/w.{unique}.red"


def test_topic_without_subscribers_discards(client, rabbit, unique):
    before = _stomp_queues(rabbit)
    client().send_with_receipt(f"/topic/nobody.{unique}", "lost")
    assert _stomp_queues(rabbit) - before == set()
    c = client()
    c.subscribe(f"/topic/nobody.{unique}")
    c.no_message(0.5)


def test_durable_topic_subscription_survives_disconnect(client, rabbit, unique):
    dest = f"/topic/dur.{unique}"
    headers = {"durable": "true", "auto-delete": "false"}
    before = _stomp_queues(rabbit)
    sub = client()
    sub.subscribe(dest, sub_id=f"d-{unique}", headers=headers)
    created = _stomp_queues(rabbit) - before
    assert len(created) == 1
    qname = created.pop()
    assert qname.startswith("stomp-subscription-")
    try:
        q = rabbit.queue(qname)
        assert (q["durable"], q["auto_delete"], q["exclusive"]) == (True, False, False)
        sub.disconnect()
        client().send_with_receipt(dest, "while away")
        again = client()
        again.subscribe(dest, sub_id=f"d-{unique}", headers=headers)
        assert _stomp_queues(rabbit) - before == {qname}  # same queue reused
        assert again.next_message().body == b"while away"
        rid = "unsub"
        again.conn.unsubscribe(f"d-{unique}", headers={**headers, "receipt": rid})
        again.wait_receipt(rid)
        assert rabbit.queue(qname) is None
    finally:
        rabbit.delete_queue(qname)


def test_persistent_header_is_alias_for_durable_on_subscribe(client, rabbit, unique):
    before = _stomp_queues(rabbit)
    c = client()
    c.subscribe(f"/topic/pers.{unique}", sub_id=f"p-{unique}",
                headers={"persistent": "true", "auto-delete": "false"})
    (qname,) = _stomp_queues(rabbit) - before
    try:
        assert rabbit.queue(qname)["durable"] is True
    finally:
        rabbit.delete_queue(qname)


def test_exchange_direct_send_and_subscribe(client, rabbit, unique):
    before = _stomp_queues(rabbit)
    c = client()
    c.subscribe(f"/exchange/amq.direct/k.{unique}")
    (qname,) = _stomp_queues(rabbit) - before
    assert ("amq.direct", f"k.{unique}") in {(b["source"], b["routing_key"]) for b in rabbit.bindings(qname)}
    q = rabbit.queue(qname)
    assert (q["durable"], q["auto_delete"]) == (False, True)
    c.send_with_receipt(f"/exchange/amq.direct/k.{unique}", "direct")
    msg = c.next_message()
    assert msg.body == b"direct"
    assert msg.headers["destination"] == f"/exchange/amq.direct/k.{unique}"


def _delete_unless_exclusive(rabbit, name: str) -> None:
    try:
        rabbit.delete_queue(name)
    except urllib.error.HTTPError as exc:
        if exc.code != 400:  # 400: still owned by the connection that is closing
            raise


def test_exchange_fanout_without_key(client, rabbit, unique):
    c = client()
    c.subscribe("/exchange/amq.fanout", headers={"x-queue-name": f"fan-{unique}"})
    try:
        assert rabbit.bindings(f"fan-{unique}")
        client().send_with_receipt("/exchange/amq.fanout", f"fan {unique}")
        # Other tests may publish to amq.fanout concurrently; find ours.
        while (msg := c.next_message()).body != f"fan {unique}".encode():
            pass
        assert msg.headers["destination"] == "/exchange/amq.fanout"
    finally:
        # 4.x semantics: the queue is exclusive and auto-delete, so it goes with its
        # owner's connection; deleting it is only a safety net for the native plugin.
        c.disconnect()
        _delete_unless_exclusive(rabbit, f"fan-{unique}")


def test_exchange_destination_with_slash_in_key_is_invalid(connected):
    conn = connected()
    conn.send_frame("SUBSCRIBE", {"destination": "/exchange/amq.direct/a/b", "id": "1"})
    error = conn.expect("ERROR")
    assert error["message"] == "Invalid destination"
    assert error.text == "'/amq.direct/a/b' is not a valid exchange destination\n"


def test_x_queue_name_names_topic_subscription_queue(client, rabbit, broker, unique):
    c = client()
    c.subscribe(f"/topic/named.{unique}", headers={"x-queue-name": f"named-{unique}"})
    try:
        q = rabbit.queue(f"named-{unique}")
        assert q is not None
        # exclusive from 4.2 on (rabbitmq-server #13016), shared before
        exclusive = broker.version_tuple >= (4, 2)
        assert (q["durable"], q["auto_delete"], q["exclusive"]) == (False, True, exclusive)
        assert ("amq.topic", f"named.{unique}") in {(b["source"], b["routing_key"])
                                                     for b in rabbit.bindings(f"named-{unique}")}
    finally:
        c.disconnect()
        _delete_unless_exclusive(rabbit, f"named-{unique}")


def test_message_destination_from_default_exchange(client, rabbit, queues, unique):
    name = f"dx-{unique}"
    queues.append(name)
    c = client()
    c.subscribe(f"/queue/{name}")
    assert rabbit.publish("", name, "via api")
    assert c.next_message().headers["destination"] == f"/queue/{name}"


def test_message_destination_from_amq_topic(client, rabbit, unique):
    c = client()
    c.subscribe(f"/topic/api.{unique}")
    assert rabbit.publish("amq.topic", f"api.{unique}", "via api")
    assert c.next_message().headers["destination"] == f"/topic/api.{unique}"


def test_message_destination_from_other_exchange_escapes_key(client, rabbit, unique):
    c = client()
    c.subscribe("/exchange/amq.fanout", headers={"x-queue-name": f"esc-{unique}"})
    try:
        key = f"a/b%c.{unique}"
        assert rabbit.publish("amq.fanout", key, "escaped")
        while (msg := c.next_message()).body != b"escaped" or unique not in msg.headers["destination"]:
            pass
        assert msg.headers["destination"] == f"/exchange/amq.fanout/a%2Fb%25c.{unique}"
    finally:
        # 4.x semantics: the queue is exclusive and auto-delete, so it goes with its
        # owner's connection; deleting it is only a safety net for the native plugin.
        c.disconnect()
        _delete_unless_exclusive(rabbit, f"esc-{unique}")


def test_temp_queue_reply_to_round_trip(client, rabbit, queues, unique):
    name = f"req-{unique}"
    queues.append(name)
    responder = client()
    responder.subscribe(f"/queue/{name}")
    requester = client()
    requester.send(f"/queue/{name}", "request", headers={"reply-to": "/temp-queue/foo"})
    request = responder.next_message()
    reply_to = request.headers["reply-to"]
    assert reply_to.startswith("/reply-queue/amq.gen-")
    qname = reply_to[len("/reply-queue/"):]
    q = rabbit.queue(qname)
    assert q is not None and q["exclusive"] is True and q["auto_delete"] is True
    responder.send(reply_to, "reply")
    reply = requester.next_message()
    assert reply.body == b"reply"
    assert reply.headers["subscription"] == "/temp-queue/foo"
    assert reply.headers["destination"] == f"/queue/{qname}"


@pytest.mark.parametrize("command,destination,message,text", [
    ("SEND", "/foo/bar", "Unknown destination",
     f"'/foo/bar' is not a valid destination.\nValid destination types are: {VALID_TYPES}.\n"),
    ("SUBSCRIBE", "/foo/bar", "Unknown destination",
     f"'/foo/bar' is not a valid destination.\nValid destination types are: {VALID_TYPES}.\n"),
    ("SEND", "/queue/", "Invalid destination", "'/' is not a valid queue destination\n"),
    ("SEND", "/temp-queue/x", "Invalid destination", "'/temp-queue/x' is not a valid destination for 'SEND'\n"),
    ("SUBSCRIBE", "/temp-queue/x", "Invalid destination",
     "'/temp-queue/x' is not a valid destination for 'SUBSCRIBE'\n"),
])
def test_invalid_destination_gets_error(connected, after_error, command, destination, message, text):
    conn = connected()
    conn.send_frame(command, {"destination": destination, "id": "1"}, "x" if command == "SEND" else "")
    error = conn.expect("ERROR")
    assert error["message"] == message
    assert error.text == text
    # still usable: a frame RabbitMQ need not route (4.4 never receipts an unroutable SEND)
    after_error(conn, lambda: conn.receipt("BEGIN", {"transaction": "alive"}))


@pytest.mark.parametrize("command", ["SEND", "SUBSCRIBE"])
def test_missing_destination_gets_error(connected, command):
    conn = connected()
    conn.send_frame(command, {"id": "1"})
    error = conn.expect("ERROR")
    assert error["message"] == "Missing destination"
    assert error.text == f"\"{command}\" must include a 'destination' header\n"


def test_deleting_a_subscribed_queue_cancels_the_subscription_with_an_error(connected, after_error, rabbit,
                                                                            unique):
    name = f"doomed-{unique}"
    conn = connected()
    conn.subscribe(f"/queue/{name}", sub_id="s-doomed")
    rabbit.delete_queue(name)
    error = conn.expect("ERROR")
    assert error["message"] == "Server cancelled subscription"
    assert error["subscription"] == "s-doomed"
    assert error.text == ("The server has canceled a subscription.\n"
                          "No more messages will be delivered for \"id='s-doomed'\".\n")
    after_error(conn)
