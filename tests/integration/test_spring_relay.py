"""The frames Spring's STOMP broker relay sends, replayed against the bridge and the plugin.

Spring's ``StompBrokerRelayMessageHandler`` is the most common STOMP client of RabbitMQ in
production. What it sends (Spring Framework 6, ``StompBrokerRelayMessageHandler``,
``UserDestinationMessageHandler``):

- one "system" session: CONNECT with ``accept-version:1.1,1.2``, ``host`` = the relay's virtual
  host, the system login and ``heart-beat:10000,10000``; it only SENDs what the application
  sends (``SimpMessagingTemplate``): to ``/topic/...``, and to users;
- a session per browser user: the browser's CONNECT with the relay's client login and ``host``;
  SUBSCRIBE forwarded as the browser wrote it, except ``/user/queue/x``, which becomes the
  user's own ``/queue/x-user<session id>``; the application's SENDs to that user go there too;
- UNSUBSCRIBE forwarded for every subscription, also those that went to the application
  (``/app/...``) and never reached the broker;
- DISCONNECT with a receipt when the browser leaves.

Each test runs against the bridge and the native plugin (the differential suite): what works
with the plugin works through the bridge.
"""

from __future__ import annotations

RELAY_CONNECT = {"version": "1.1,1.2", "host": "/", "heart_beat": "10000,10000"}


def test_the_system_session_gets_its_10_second_heart_beats(raw):
    system = raw()
    connected = system.connect(**RELAY_CONNECT)
    assert (connected["version"], connected["heart-beat"]) == ("1.2", "10000,10000")
    system.receipt("SEND", {"destination": "/topic/greetings", "content-type": "application/json"}, "{}")


def test_a_browser_session_through_the_relay(raw, queues, unique, after_error):
    system, browser = raw(), raw()
    system.connect(**RELAY_CONNECT)
    browser.connect(**RELAY_CONNECT)
    user_queue = f"errors-user{unique}"  # /user/queue/errors, as UserDestinationMessageHandler names it
    queues.append(user_queue)
    greetings = f"/topic/greetings-{unique}"
    browser.receipt("SUBSCRIBE", {"id": "sub-0", "destination": f"/queue/{user_queue}"}, receipt_id="s0")
    browser.receipt("SUBSCRIBE", {"id": "sub-1", "destination": greetings}, receipt_id="s1")
    json = {"content-type": "application/json"}
    system.receipt("SEND", {"destination": f"/queue/{user_queue}", **json}, '{"error":"nope"}', receipt_id="p0")
    system.receipt("SEND", {"destination": greetings, **json}, '{"greeting":"hi"}', receipt_id="p1")
    got = {m["subscription"]: m for m in (browser.expect("MESSAGE"), browser.expect("MESSAGE"))}
    assert got["sub-0"].body == b'{"error":"nope"}' and got["sub-0"]["content-type"] == "application/json"
    assert got["sub-1"].body == b'{"greeting":"hi"}'
    # the browser's subscription to /app/... went to the application, yet its UNSUBSCRIBE comes here
    browser.send_frame("UNSUBSCRIBE", {"id": "sub-2"})
    error = browser.expect("ERROR")
    assert error["message"] == "No subscription found"
    after_error(browser, lambda: browser.receipt("UNSUBSCRIBE", {"id": "sub-1"}, receipt_id="u1"))
    browser.receipt("DISCONNECT", {}, receipt_id="bye")
    browser.read_until_closed()
