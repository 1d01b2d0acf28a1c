"""The STOMP core with no broker: frames and RabbitMQ's answers in, frames and plans out.

In the manner of websockets' tests/test_protocol.py: each test feeds the core (through
testkit.core.Harness, a fake RabbitMQ that answers every plan) and asserts the frames it
wrote and the plans it made.
"""

from __future__ import annotations

import time
from collections import deque

import pytest

from stomp_bridge.core import plans as p
from stomp_bridge.core import state as machine_state
from stomp_bridge.core.state import CLOSED, FAILING, LOGIN, OPEN
from stomp_bridge.core.subscribe import RESUBSCRIBE_FIRST_DELAY, retry_delay
from stomp_bridge.protocol.errors import AccessRefused
from testkit.core import Harness, refusal
from tests.tokens import token

COMMANDS = sorted(machine_state.ACTIONS[OPEN])


def connected(**rules: object) -> Harness:
    h = Harness(**rules)
    h.connect()
    return h


# -- every command in every state ---------------------------------------------------------


@pytest.mark.parametrize("command", [c for c in COMMANDS if c not in ("CONNECT", "STOMP")] + ["FOO"])
def test_before_connect_every_other_command_is_an_illegal_command_and_the_connection_stays(command):
    h = Harness()
    h.frame(command, {"receipt": "r"})
    [error] = h.frames()
    assert (error.command, error.headers["message"], error.headers["receipt-id"]) == ("ERROR", "Illegal command", "r")
    assert h.core.state is LOGIN and h.closes == 0
    assert h.plans == [] and h.started == [p.SetTimer("connect", 10.0)]  # nothing but the connect timeout


@pytest.mark.parametrize("command, then", [
    ("SEND", p.Publish), ("SUBSCRIBE", p.Consume), ("DISCONNECT", p.Disconnect), ("UNSUBSCRIBE", None),
    ("FOO", None),
])
def test_before_connect_with_implicit_connect_a_frame_logs_in_first_then_is_handled(command, then):
    h = Harness(implicit_connect=True)
    h.frame(command, {"destination": "/queue/q", "id": "1", "receipt": "r"})
    assert [type(plan) for plan in h.plans[:2]] == [p.ResolveSecurity, p.OpenAmqp]
    frames = h.frames()
    assert "CONNECTED" not in [f.command for f in frames]  # the plugin sends none for an implicit connect
    if then is not None:  # the frame itself, after the login
        assert h.of(then), h.plans
    else:  # its own answer: an unknown subscription, an unknown command
        assert [f.headers["message"] for f in frames] == [
            "No subscription found" if command == "UNSUBSCRIBE" else "Bad command"]


@pytest.mark.parametrize("command", ["CONNECT", "STOMP"])
def test_a_second_connect_is_a_fatal_bad_connect(command):
    h = connected()
    h.frame(command, {"accept-version": "1.2"})
    [error] = h.frames()
    assert error.headers["message"] == "Bad CONNECT"
    assert h.core.state is CLOSED and h.closes == 1


def test_an_unknown_command_once_logged_in_is_a_bad_command_and_the_connection_stays():
    h = connected()
    h.frame("FOO")
    [error] = h.frames()
    assert error.headers["message"] == "Bad command"
    assert error.body == b'Could not interpret command "FOO"\n'
    assert h.core.state is OPEN


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("state", [FAILING, CLOSED])
def test_a_failing_or_closed_connection_reads_no_frame(state, command):
    h = connected()
    if state is CLOSED:
        h.core.close()
    else:
        h.core.state = state
    before = len(h.plans)
    h.frame(command, {"destination": "/queue/q", "receipt": "r", "transaction": "t", "id": "1"})
    assert h.frames() == [] and len(h.plans) == before


def test_the_table_names_a_handler_for_every_client_command_in_every_state():
    from stomp_bridge.core.machine import HANDLERS
    from stomp_bridge.protocol.frames import CLIENT_COMMANDS

    assert set(machine_state.ACTIONS) == set(machine_state.STATES) == set(machine_state.OTHERWISE)
    assert set(machine_state.ACTIONS[LOGIN]) == set(machine_state.ACTIONS[OPEN]) == set(CLIENT_COMMANDS)
    assert machine_state.ACTIONS[FAILING] == machine_state.ACTIONS[CLOSED] == {} and machine_state.OTHERWISE[FAILING] is machine_state.OTHERWISE[CLOSED] is None
    named = {machine_state.action(state, command) for state in machine_state.STATES for command in (*CLIENT_COMMANDS, "FOO")}
    assert named - {None} <= set(HANDLERS)


def test_every_move_of_the_machine_and_no_other():
    assert machine_state.move(LOGIN, "logged_in") is OPEN
    assert machine_state.move(OPEN, "refused") is machine_state.move(FAILING, "refused") is FAILING
    assert {machine_state.move(state, "closed") for state in (LOGIN, OPEN, FAILING)} == {CLOSED}
    for state, event in [(OPEN, "logged_in"), (CLOSED, "closed"), (LOGIN, "refused"), (CLOSED, "logged_in")]:
        with pytest.raises(KeyError):
            machine_state.move(state, event)


def test_the_connection_moves_through_the_table_only():
    h = connected()
    assert h.core.state is OPEN
    h.frame("SEND", {"destination": "/queue/q"})
    h.frame("SEND", {"destination": "/queue/q", "receipt": "r", "mandatory": "true"})
    h.return_("", "q")  # the ERROR waits for the confirm of the SEND before
    assert h.core.state is FAILING
    h.confirm(1)
    assert h.core.state is CLOSED and h.closes == 1


# -- CONNECT --------------------------------------------------------------------------------


def test_connect_logs_in_as_the_client_and_answers_connected_with_the_negotiated_values():
    h = Harness()
    frame = h.connect(login="u", passcode="pw", **{"heart-beat": "1000,2000", "accept-version": "1.0,1.1"})
    [open_amqp] = h.of(p.OpenAmqp)
    assert (open_amqp.user, open_amqp.passcode, open_amqp.vhost) == ("u", "pw", "/")
    assert frame.headers["version"] == "1.1"
    assert frame.headers["session"] == "session-test"
    assert frame.headers["heart-beat"] == "2000,1000"
    assert frame.headers["server"].startswith("RabbitMQ/4.3.6 (stomp-bridge/")


def test_a_refused_login_is_a_fatal_error_and_leaves_the_connection_logged_out():
    h = Harness()
    h.refuse[p.OpenAmqp] = deque([AccessRefused("Bad CONNECT", "Access refused for user 'u'")])
    h.frame("CONNECT", {"accept-version": "1.2", "login": "u", "passcode": "no", "receipt": "r"})
    [error] = h.frames()
    assert (error.headers["message"], error.headers["receipt-id"]) == ("Bad CONNECT", "r")
    assert h.core.state is CLOSED and h.core.session_id == ""


def test_an_unknown_host_falls_back_to_the_default_vhost_only_when_enabled():
    h = Harness(unknown_host_default_vhost=True)
    h.connect(host="elsewhere")
    assert h.of(p.OpenAmqp)[0].fallback_vhost == "/"
    h = Harness(unknown_host_default_vhost=True, host_vhosts={"h": "elsewhere"})
    h.connect(host="elsewhere")  # a vhost configured on purpose: RabbitMQ's refusal stands
    assert h.of(p.OpenAmqp)[0].fallback_vhost is None
    h = Harness()
    h.connect(host="elsewhere")
    assert h.of(p.OpenAmqp)[0].fallback_vhost is None


def test_a_jwt_passcode_sets_the_token_timer_at_its_expiry():
    h = Harness()
    h.now = time.time()
    h.connect(login="u", passcode=token("u", expires_in=60))
    [timer] = [t for t in h.of(p.SetTimer) if t.name == "token"]
    assert timer.delay == pytest.approx(60, abs=1)
    h.advance(61)
    [error] = h.frames()
    assert error.headers["message"] == "Credential expired" and h.core.state is CLOSED


# -- SEND and RECEIPT -----------------------------------------------------------------------


def test_a_send_publishes_and_its_receipt_waits_for_rabbitmqs_confirm():
    h = connected()
    h.frame("SEND", {"destination": "/queue/q", "receipt": "r1"}, b"hello")
    declare, publish = h.plans[-2:]
    assert declare.declare.queue == "q" and declare.declare.durable
    assert publish == p.Publish("", "q", {"headers": {"receipt": "r1"}}, b"hello", False)
    assert h.frames() == []
    h.confirm(1)
    assert [f.headers["receipt-id"] for f in h.frames()] == ["r1"]


def test_headers_over_rabbitmqs_frame_max_are_refused_before_a_publish_and_the_session_goes_on():
    """RabbitMQ answers a content header frame over its frame_max by closing the whole AMQP
    connection, which other sessions share: the core refuses such a SEND itself."""
    h = Harness()
    h.frame_max = 8192  # the tune of the session's connection, reported at login
    h.connect()
    h.frame("SEND", {"destination": "/queue/q", "receipt": "r1", "big": "é" * 4000})
    error = h.frames()[-1]
    assert (error.command, error.headers["message"], error.headers["receipt-id"]) == ("ERROR", "Invalid header", "r1")
    assert "frame_max of 8192" in error.body.decode()
    assert h.of(p.Publish) == [] and h.core.state is OPEN
    h.frame("SEND", {"destination": "/queue/q", "fits": "é" * 3000})
    assert len(h.of(p.Publish)) == 1


def test_a_queue_is_declared_once_per_session():
    h = connected()
    for _ in range(3):
        h.frame("SEND", {"destination": "/queue/q"})
    assert len(h.of(p.Declare)) == 1 and len(h.of(p.Publish)) == 3


def test_receipts_leave_in_frame_order_whatever_order_the_confirms_come_in():
    h = connected()
    h.frame("SEND", {"destination": "/topic/a", "receipt": "1"})
    h.frame("SUBSCRIBE", {"destination": "/queue/q", "id": "s", "receipt": "2"})
    h.frame("SEND", {"destination": "/topic/b", "receipt": "3"})
    h.confirm(2)
    assert h.frames() == []  # RECEIPT 1 (and so 2 and 3) waits for publish 1
    h.confirm(1)
    assert [f.headers["receipt-id"] for f in h.frames()] == ["1", "2", "3"]


def test_a_transactional_send_is_published_and_receipted_only_after_commit():
    h = connected()
    h.frame("BEGIN", {"transaction": "t"})
    h.frame("SEND", {"destination": "/topic/a", "transaction": "t", "receipt": "s"})
    assert h.of(p.Publish) == [] and h.frames() == []
    h.frame("COMMIT", {"transaction": "t", "receipt": "c"})
    assert len(h.of(p.Publish)) == 1
    h.confirm(1)
    assert [f.headers["receipt-id"] for f in h.frames()] == ["s", "c"]


def test_a_failed_action_of_a_commit_gets_its_error_and_the_others_still_run():
    h = connected()
    h.frame("BEGIN", {"transaction": "t"})
    h.frame("SEND", {"destination": "/bogus/x", "transaction": "t", "receipt": "bad"})
    h.frame("SEND", {"destination": "/topic/a", "transaction": "t"})
    h.frame("COMMIT", {"transaction": "t"})
    [error] = h.frames()
    assert (error.headers["message"], error.headers["receipt-id"]) == ("Unknown destination", "bad")
    assert len(h.of(p.Publish)) == 1 and h.core.state is OPEN


def test_an_expired_apollo_message_is_not_published_and_still_receipted():
    h = connected()
    h.frame("SEND", {"destination": "/topic/a", "expires": str(int(h.now * 1000) - 1), "receipt": "r"})
    assert h.of(p.Publish) == []
    assert [f.headers["receipt-id"] for f in h.frames()] == ["r"]


def test_reply_to_a_temp_queue_declares_and_consumes_its_reply_queue_once():
    h = connected()
    for _ in range(2):
        h.frame("SEND", {"destination": "/topic/a", "reply-to": "/temp-queue/x"})
    assert [type(plan) for plan in h.plans[-4:]] == [p.Declare, p.Consume, p.Publish, p.Publish]
    assert h.of(p.Publish)[0].properties["reply_to"] == "amq.gen-1"


def test_a_nacked_publish_ends_the_session_after_the_receipts_before_it():
    h = connected()
    h.frame("SEND", {"destination": "/topic/a", "receipt": "1"})
    h.frame("SEND", {"destination": "/topic/b", "receipt": "2"})
    h.confirm(2, nack=True)
    assert h.frames() == [] and h.core.state is FAILING
    h.confirm(1)
    receipt, error = h.frames()
    assert receipt.headers["receipt-id"] == "1"
    assert (error.headers["message"], error.headers["receipt-id"]) == ("Message rejected", "2")
    assert h.core.state is CLOSED


# -- mandatory: issue 26, defect 3 -------------------------------------------------------------


def test_a_routable_send_pipelined_before_an_unroutable_mandatory_one_is_receipted():
    h = connected()
    h.frame("SEND", {"destination": "/queue/stored", "receipt": "1", "persistent": "true"})
    h.frame("SEND", {"destination": "/topic/nobody", "receipt": "2", "mandatory": "true"})
    h.frame("SEND", {"destination": "/queue/stored", "receipt": "3"})
    # RabbitMQ returns the unroutable one (and confirms it) before the persistent one's confirm
    h.return_("amq.topic", "nobody")
    h.confirm(2)
    assert h.frames() == []
    h.confirm(1)
    receipt, error = h.frames()
    assert receipt.headers["receipt-id"] == "1"
    assert error.headers["message"] == "Unroutable message"
    assert error.headers["receipt-id"] == "2"
    assert h.core.state is CLOSED
    h.confirm(3)
    assert h.frames() == []  # nothing after the returned one is ever receipted


def test_frames_after_a_returned_publish_are_not_handled():
    h = connected()
    h.frame("SEND", {"destination": "/queue/q", "receipt": "1"})
    h.frame("SEND", {"destination": "/topic/nobody", "mandatory": "true"})
    h.return_("amq.topic", "nobody")
    h.frame("SEND", {"destination": "/topic/a"})
    assert len(h.of(p.Publish)) == 2


# -- mandatory and retained: issue 26, defect 1 ------------------------------------------------


def test_a_returned_retain_set_send_gets_its_receipt_id_and_keeps_no_retained_copy():
    h = connected(mandatory=True, retained_messages=True)
    h.frame("SEND", {"destination": "/topic/news", "retain": "set", "receipt": "r"}, b"m")
    assert len(h.of(p.Publish)) == 1 and h.of(p.Declare) == []  # waits for RabbitMQ's verdict
    h.return_("amq.topic", "news")
    h.confirm(1)
    [error] = h.frames()
    assert (error.headers["message"], error.headers["receipt-id"]) == ("Unroutable message", "r")
    assert len(h.of(p.Publish)) == 1 and h.of(p.Declare) == []


def test_a_routed_retain_set_send_keeps_its_copy_and_its_receipt_covers_the_copy():
    h = connected(mandatory=True, retained_messages=True)
    h.frame("SEND", {"destination": "/topic/news", "retain": "set", "receipt": "r"}, b"m")
    h.confirm(1)
    declare, copy = h.plans[-2:]
    assert declare.declare.queue.startswith("stomp-retained-") and copy.routing_key == declare.declare.queue
    assert copy.body == b"m"
    assert h.frames() == []
    h.confirm(2)
    assert [f.headers["receipt-id"] for f in h.frames()] == ["r"]


def test_without_mandatory_the_retained_copy_is_published_at_once():
    h = connected(retained_messages=True)
    h.frame("SEND", {"destination": "/topic/news", "retain": "set"}, b"m")
    assert [type(plan) for plan in h.plans[-3:]] == [p.Publish, p.Declare, p.Publish]


# -- SUBSCRIBE --------------------------------------------------------------------------------


def test_subscribe_declares_consumes_and_binds_then_receipts_before_any_message():
    h = connected()
    h.frame("SUBSCRIBE", {"destination": "/topic/t", "id": "s", "receipt": "r", "ack": "client"})
    declare, consume, bind = h.plans[-3:]
    assert consume.queue == declare.declare.queue and consume.consumer_tag == "T_s" and not consume.no_ack
    assert consume.prefetch == 500  # the client-ack window
    assert (bind.exchange, bind.routing_key) == ("amq.topic", "t")
    assert [f.headers["receipt-id"] for f in h.frames()] == ["r"]
    h.deliver("T_s", 1, b"one")
    [message] = h.frames()
    assert (message.command, message.headers["subscription"], message.body) == ("MESSAGE", "s", b"one")


def test_messages_that_come_before_the_subscribe_receipt_wait_for_it():
    h = connected()
    h.frame("SEND", {"destination": "/topic/a"})  # unconfirmed: RECEIPTs wait
    h.frame("SUBSCRIBE", {"destination": "/queue/q", "id": "s", "receipt": "r"})
    h.deliver("T_s", 1)
    assert h.frames() == []
    h.confirm(1)
    assert h.commands() == ["RECEIPT", "MESSAGE"]


def test_a_duplicate_subscription_id_is_fatal():
    h = connected()
    h.frame("SUBSCRIBE", {"destination": "/queue/q", "id": "s"})
    h.frame("SUBSCRIBE", {"destination": "/queue/r", "id": "s"})
    [error] = h.frames()
    assert error.headers["message"] == "Duplicated subscription identifier" and h.core.state is CLOSED


def test_the_subscription_limit_is_an_error():
    h = connected(max_subscriptions=1)
    h.frame("SUBSCRIBE", {"destination": "/queue/q", "id": "1"})
    h.frame("SUBSCRIBE", {"destination": "/queue/q", "id": "2"})
    [error] = h.frames()
    assert error.headers["message"] == "Too many subscriptions"


def test_prefetch_count_is_clamped_to_what_basic_qos_carries():
    h = connected()
    h.frame("SUBSCRIBE", {"destination": "/queue/q", "id": "1", "prefetch-count": "100000"})
    assert h.of(p.Consume)[0].prefetch == 65535


def test_a_failed_topic_subscribe_unregisters_its_tag_and_discards_its_queue_at_close():
    """Issue 26, defect 5: the plugin's maybe_clean_up_queue (delete_on_failure was unused)."""
    h = connected()
    h.refuse[p.Bind] = deque([refusal("ACCESS_REFUSED - read access to topic 't'")])
    h.frame("SUBSCRIBE", {"destination": "/topic/t", "id": "s", "receipt": "r"})
    [error] = h.frames()
    assert (error.headers["message"], error.headers["receipt-id"]) == ("access_refused", "r")
    assert error.body.startswith(b"read access")  # the plugin quotes it without the reply code
    assert h.core.subscriptions == {}
    assert h.core.discard_on_close == [h.of(p.Declare)[0].declare.queue]


def test_a_failed_queue_subscribe_discards_nothing():
    h = connected()
    h.refuse[p.Consume] = deque([refusal()])
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/q", "id": "s"})
    assert h.core.discard_on_close == [] and h.core.state is CLOSED


def test_unsubscribe_cancels_every_consumer_of_the_subscription():
    h = connected()
    h.frame("SUBSCRIBE", {"destination": "/queue/a,/queue/b", "id": "s"})
    h.frame("UNSUBSCRIBE", {"id": "s", "receipt": "r"})
    assert [plan.consumer_tag for plan in h.of(p.Cancel)] == ["T_s", "P1_T_s"]
    assert h.core.subscriptions == {} and h.commands() == ["RECEIPT"]


def test_unsubscribe_of_an_unknown_subscription_is_an_error_and_the_connection_stays():
    h = connected()
    h.frame("UNSUBSCRIBE", {"id": "nope"})
    [error] = h.frames()
    assert error.headers["message"] == "No subscription found" and h.core.state is OPEN


# -- browsing: issue 26, defect 4 -------------------------------------------------------------


def test_a_browse_receipts_before_its_messages_and_hands_them_back():
    h = connected()
    h.gets["q"] = [("", 1, False, "", "q", {"headers": {}}, b"one"), ("", 2, False, "", "q", {"headers": {}}, b"two")]
    h.frame("SUBSCRIBE", {"destination": "/queue/q", "id": "b", "browser": "true", "receipt": "r"})
    frames = h.frames()
    assert [f.command for f in frames] == ["RECEIPT", "MESSAGE", "MESSAGE", "MESSAGE"]
    assert [f.body for f in frames[1:3]] == [b"one", b"two"] and frames[3].headers["browser"] == "end"
    assert h.of(p.Nack) == [] and len(h.of(p.EndBrowse)) == 1  # both back before browser:end
    assert type(h.plans[-1]) is p.EndBrowse


def test_a_browse_of_a_stream_gets_what_the_plugin_subscribing_gets():
    """RabbitMQ refuses a stream's basic.get with a connection error, on the browse's connection of
    its own (amqp/channel.get); the plugin, which knows no browse, subscribes, and a stream refuses
    a consume with no prefetch: its words."""
    h = connected()
    h.refuse[p.Get] = deque([refusal("NOT_IMPLEMENTED - basic.get not supported by stream queue 'q' in vhost '/'")])
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/q", "id": "b", "browser": "true", "receipt": "r"})
    [error] = h.frames()
    assert (error.headers["message"], error.body, error.headers["receipt-id"]) == (
        "precondition_failed", b"PRECONDITION_FAILED - consumer prefetch count is not set for stream queue 'q' in vhost '/'",
        "r")
    assert h.core.state is CLOSED


def test_a_browse_behind_unconfirmed_publishes_holds_its_messages_behind_its_receipt():
    h = connected()
    h.frame("SEND", {"destination": "/topic/a"})
    h.gets["q"] = [("", 1, False, "", "q", {"headers": {}}, b"one")]
    h.frame("SUBSCRIBE", {"destination": "/queue/q", "id": "b", "browser": "true", "receipt": "r"})
    assert h.frames() == []
    h.confirm(1)
    assert h.commands() == ["RECEIPT", "MESSAGE", "MESSAGE"]


# -- ACK / NACK, windows, selectors ------------------------------------------------------------


def test_ack_settles_what_the_client_holds_cumulatively_with_ack_client():
    h = connected()
    h.frame("SUBSCRIBE", {"destination": "/queue/q", "id": "s", "ack": "client"})
    for tag in (1, 2, 3):
        h.deliver("T_s", tag)
    acks = [f.headers["ack"] for f in h.frames()]
    h.frame("ACK", {"id": acks[1], "receipt": "r"})
    assert h.of(p.Ack) == [p.Ack(2, True)]
    assert len(h.core.unacked) == 1 and h.commands() == ["RECEIPT"]


def test_nack_requeue_follows_the_header_then_the_setting():
    h = connected(default_nack_requeue=False)
    h.frame("SUBSCRIBE", {"destination": "/queue/q", "id": "s", "ack": "client-individual"})
    h.deliver("T_s", 1)
    h.deliver("T_s", 2)
    first, second = (f.headers["ack"] for f in h.frames())
    h.frame("NACK", {"id": first})
    h.frame("NACK", {"id": second, "requeue": "true"})
    assert h.of(p.Nack) == [p.Nack(1, False, False), p.Nack(2, False, True)]


def test_an_ack_for_an_unknown_subscription_is_an_error_and_the_connection_stays():
    h = connected()
    h.frame("ACK", {"id": "T_x@@session-test@@1"})
    [error] = h.frames()
    assert error.headers["message"] == "Subscription not found" and h.core.state is OPEN


def test_a_full_window_adds_one_consumer_once():
    h = connected(client_ack_window=2)
    h.frame("SUBSCRIBE", {"destination": "/queue/q", "id": "s", "ack": "client"})
    for tag in (1, 2, 3):
        h.deliver("T_s", tag)
    consumes = h.of(p.Consume)
    assert [c.consumer_tag for c in consumes] == ["T_s", "W1_T_s"]
    assert consumes[1].prefetch == 2


def test_a_selector_drops_what_does_not_match_by_acknowledging_it():
    h = connected()
    h.frame("SUBSCRIBE", {"destination": "/topic/t", "id": "s", "ack": "client", "selector": "color = 'red'"})
    h.deliver("T_s", 1, b"b", routing_key="t", headers={"color": "blue"})
    h.deliver("T_s", 2, b"r", routing_key="t", headers={"color": "red"})
    assert [f.body for f in h.frames()] == [b"r"]
    assert h.of(p.Ack) == [p.Ack(1, False)]


# -- RabbitMQ cancels a consumer; resubscribe: issue 26, defect 2 --------------------------------


def test_a_server_cancel_is_an_error_that_keeps_the_connection():
    h = connected()
    h.frame("SUBSCRIBE", {"destination": "/queue/q", "id": "s"})
    h.cancel("T_s")
    [error] = h.frames()
    assert (error.headers["message"], error.headers["subscription"]) == ("Server cancelled subscription", "s")
    assert h.core.state is OPEN and h.core.subscriptions == {}


def test_retry_delay_never_passes_the_deadline():
    assert retry_delay(0.0, 3.0, 2.0) == 2.0
    assert retry_delay(2.5, 3.0, 4.0) == 0.5  # the last try is at the deadline itself
    assert retry_delay(3.0, 3.0, 4.0) is None


def test_resubscribe_tries_a_last_time_at_the_deadline_and_subscribes_a_queue_back_by_then():
    h = connected(resubscribe_on_cancel=True, resubscribe_timeout=3.0)
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/q", "id": "s"})
    h.missing.add("q")
    h.cancel("T_s")  # asks at once, then at 0.5 and 1.5 s: still gone
    h.advance(0.5)
    h.advance(1.0)
    assert len(h.of(p.QueueExists)) == 3 and h.frames() == []
    h.advance(0.7)  # 2.2 s: the queue is back; the next try, at the deadline (3 s), finds it
    h.missing.clear()
    h.advance(0.8)
    assert len(h.of(p.QueueExists)) == 4
    assert [c.consumer_tag for c in h.of(p.Consume)] == ["T_s", "T_s"]
    assert h.frames() == [] and "T_s" in h.core.subscriptions


def test_resubscribe_gives_up_with_the_plugins_error_at_the_deadline_not_before():
    h = connected(resubscribe_on_cancel=True, resubscribe_timeout=3.0)
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/q", "id": "s"})
    h.missing.add("q")
    start = h.now
    h.cancel("T_s")
    h.advance(2.9)
    assert h.frames() == []
    h.advance(0.2)
    [error] = h.frames()
    assert error.headers["message"] == "Server cancelled subscription"
    assert h.now - start >= 3.0


def test_resubscribe_after_one_parts_cancel_cancels_the_others_before_consuming_again():
    """A composite subscription whose one part's queue went: the other parts still consume, so
    resubscribing must cancel them first (the harness fails on a Consume of a live tag: 530)."""
    h = connected(resubscribe_on_cancel=True)
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/a,/amq/queue/b", "id": "s"})
    h.cancel("P1_T_s")
    assert [c.consumer_tag for c in h.of(p.Cancel)] == ["T_s"]
    assert [c.consumer_tag for c in h.of(p.Consume)] == ["T_s", "P1_T_s", "T_s", "P1_T_s"]
    assert h.frames() == [] and set(h.core.subscriptions) == {"T_s", "P1_T_s"}


def test_two_cancels_of_one_subscription_make_one_resubscribe():
    h = connected(resubscribe_on_cancel=True)
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/a,/amq/queue/b", "id": "s"})
    h.pause.add(p.Cancel)
    h.cancel("P1_T_s")  # the resubscribe cancels T_s ...
    h.cancel("T_s")  # ... which RabbitMQ cancels meanwhile too
    h.pause.clear()
    h.resume()
    assert [c.consumer_tag for c in h.of(p.Consume)] == ["T_s", "P1_T_s", "T_s", "P1_T_s"]


def test_resubscribe_with_the_default_timeout_asks_until_60_s():
    h = connected(resubscribe_on_cancel=True)
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/q", "id": "s"})
    h.missing.add("q")
    h.cancel("T_s")
    h.advance(59.0)
    assert h.frames() == []
    h.advance(1.5)
    assert h.commands() == ["ERROR"]
    assert RESUBSCRIBE_FIRST_DELAY == 0.5


# -- DISCONNECT, the token ----------------------------------------------------------------------


def test_disconnect_receipts_after_every_confirm_then_closes_the_amqp_side_first():
    h = connected()
    h.frame("SEND", {"destination": "/topic/a"})
    h.pause.add(p.ReceiptsSent)
    h.frame("DISCONNECT", {"receipt": "bye"})
    assert h.frames() == [] and h.core.state is OPEN
    h.confirm(1)
    assert [f.headers["receipt-id"] for f in h.frames()] == ["bye"]
    h.resume()
    assert [type(plan) for plan in h.plans[-3:]] == [p.Flush, p.ReceiptsSent, p.Disconnect]
    assert h.core.state is CLOSED and h.closes == 1


def test_a_new_token_that_is_not_a_jwt_is_refused_saying_so():
    h = Harness()
    h.now = time.time()
    h.connect(login="u", passcode=token("u", expires_in=60))
    h.frame("SEND", {"destination": "/bridge/token"}, b"not-a-jwt")
    [error] = h.frames()
    assert error.headers["message"] == "Token refused"
    assert b"is not a JWT" in error.body and b"None" not in error.body


def test_a_password_login_gets_an_error_from_bridge_token_and_no_expiry_timer():
    """RabbitMQ would take the token as a no-op on an internal user's connection; the bridge
    refuses it (the connection stays), so no client believes it refreshed anything and the
    token's exp never ends a connection that did not log in with it."""
    h = Harness()
    h.now = time.time()
    h.connect(login="guest", passcode="guest")
    h.frame("SEND", {"destination": "/bridge/token", "receipt": "t"}, token("guest", expires_in=2).encode())
    [error] = h.frames()
    assert (error.headers["message"], error.headers["receipt-id"]) == ("Token refused", "t")
    assert b"logged in with a password" in error.body
    assert h.of(p.UpdateSecret) == [] and [plan for plan in h.of(p.SetTimer) if plan.delay is not None] == []
    h.frame("SEND", {"destination": "/topic/a", "receipt": "after"})
    h.confirm(1)
    assert h.commands() == ["RECEIPT"] and h.core.state is OPEN


# -- features mixed: the promises hold in any combination (hypothesis) ---------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

DESTINATIONS = ["/topic/a", "/topic/nobody", "/queue/q", "/topic/a,/topic/nobody", "/queue/q,/topic/a"]

sends = st.tuples(
    st.just("send"), st.sampled_from(DESTINATIONS), st.booleans(), st.booleans(),
    st.sampled_from([None, "set", "remove"]), st.sampled_from([None, "t1", "t2"]),
)
actions = st.lists(
    st.one_of(
        sends,
        st.tuples(st.just("begin"), st.sampled_from(["t1", "t2"])),
        st.tuples(st.just("commit"), st.sampled_from(["t1", "t2"]), st.booleans()),
        st.tuples(st.just("abort"), st.sampled_from(["t1", "t2"])),
        st.tuples(st.just("confirm"), st.integers(0, 5), st.booleans()),
    ),
    max_size=30,
)


class Model:
    """What the client asked for, what RabbitMQ did, and what the core wrote, step by step."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        # receipt id -> (the step it is owed at, the body of its SEND or None)
        self.owed: dict[str, tuple[int, bytes | None]] = {}
        self.held: dict[str, list[str]] = {"t1": [], "t2": []}  # a transaction's SEND receipts
        self.receipts: list[str] = []  # RECEIPTs in the order written
        self.errors: list = []
        self.returned: set[int] = set()
        self.confirmed: set[int] = set()
        self.frames_after_error = 0

    def check_frames(self) -> None:
        for frame in self.h.frames():
            if self.errors and self.errors[-1].headers["message"] in ("Unroutable message", "Message rejected"):
                self.frames_after_error += 1
            if frame.command == "RECEIPT":
                rid = frame.headers["receipt-id"]
                self.receipts.append(rid)
                for seq in range(1, self.covers(rid) + 1):  # every publish before it: confirmed, kept
                    assert seq in self.confirmed and seq not in self.returned, (rid, seq)
            elif frame.command == "ERROR":
                self.errors.append(frame)

    def covers(self, rid: str) -> int:
        """The last publish a RECEIPT confirms: its SEND's last (a retained copy included), or
        the last made by the frames up to its own."""
        step, body = self.owed[rid]
        published = self.h.published.items()
        mine = [seq for seq, (plan, _) in published if body is not None and plan.body == body]
        return max(mine or [seq for seq, (_, made) in published if made <= step] or [0])

    def routable(self, seq: int) -> bool:
        plan, _ = self.h.published[seq]
        return not (plan.exchange == "amq.topic" and plan.routing_key == "nobody")

    def settle(self, seqs: list[int], multiple: bool) -> None:
        h = self.h
        for seq in seqs:  # RabbitMQ: a mandatory message no queue took comes back before its confirm
            plan, _ = h.published[seq]
            if plan.mandatory and not self.routable(seq) and seq not in self.returned:
                self.returned.add(seq)
                h.return_(plan.exchange, plan.routing_key)
                self.check_frames()
        self.confirmed.update(seqs)
        if multiple:
            h.confirm(max(seqs), multiple=True)
        else:
            for seq in seqs:
                h.confirm(seq)
        self.check_frames()

    def outstanding(self) -> list[int]:
        return [seq for seq in self.h.published if seq not in self.confirmed]


@settings(max_examples=300, deadline=None)
@given(actions=actions, mandatory_default=st.booleans())
def test_receipts_in_frame_order_only_for_what_rabbitmq_confirmed_and_kept(actions, mandatory_default):
    h = Harness(mandatory=mandatory_default, retained_messages=True)
    h.connect()
    m = Model(h)
    for number, action in enumerate(actions):
        h.step = number + 1
        kind = action[0]
        if kind == "confirm":
            outstanding = m.outstanding()
            if outstanding:
                _, index, multiple = action
                chosen = outstanding[index % len(outstanding)]
                m.settle([s for s in outstanding if s <= chosen] if multiple else [chosen], multiple)
            continue
        rid = f"r{number}"
        if kind == "send":
            _, destination, mandatory, receipt, retain, tx = action
            body = f"b{number}".encode()
            headers = {"destination": destination, "mandatory": str(mandatory).lower()}
            if receipt:
                headers["receipt"] = rid
            if retain:
                headers["retain"] = retain
            if tx:
                headers["transaction"] = tx
            if receipt:
                if tx is not None and tx in m.held:
                    m.held[tx].append((rid, body))
                else:
                    m.owed[rid] = (h.step, body)
            h.frame("SEND", headers, body)
        elif kind == "begin":
            m.held[action[1]] = []
            h.frame("BEGIN", {"transaction": action[1], "receipt": rid})
            m.owed[rid] = (h.step, None)
        elif kind == "commit":
            for held, body in m.held.get(action[1], []):
                m.owed[held] = (h.step, body)
            m.held[action[1]] = []
            headers = {"transaction": action[1]}
            if action[2]:
                headers["receipt"] = rid
                m.owed[rid] = (h.step, None)
            h.frame("COMMIT", headers)
        elif kind == "abort":
            m.held[action[1]] = []
            h.frame("ABORT", {"transaction": action[1]})
        m.check_frames()
    while m.outstanding():  # RabbitMQ answers everything in the end
        m.settle(m.outstanding()[:1], False)
    m.check_frames()

    # RECEIPTs leave in the order of their frames (a transactional SEND's at its COMMIT)
    order = [(m.owed[r][0], m.covers(r)) for r in m.receipts]
    assert order == sorted(order)
    assert len(set(m.receipts)) == len(m.receipts)
    # a retained copy is only ever of a message RabbitMQ routed
    for seq, (plan, _) in h.published.items():
        if plan.routing_key.startswith("stomp-retained-"):
            original = max(s for s, (q, _) in h.published.items() if s < seq and q.body == plan.body
                           and not q.routing_key.startswith("stomp-retained-"))
            assert original not in m.returned
    errored = {e.headers.get("receipt-id") for e in m.errors}
    refusals = [e for e in m.errors if e.headers["message"] == "Unroutable message"]
    if refusals:
        # the first returned publish ends it all: every RECEIPT owed before it came, none after
        first = min(m.returned)
        assert h.core.state is CLOSED and len(refusals) == 1 and m.frames_after_error == 0
        for rid in m.owed:
            if rid not in errored:
                assert (rid in m.receipts) == (m.covers(rid) < first), (rid, m.covers(rid), first)
    else:
        assert not m.returned
        assert set(m.owed) - errored == set(m.receipts)
