"""The driver (session/session.py): one frame loop for every link, the writes and wake-ups it
owns, and a runner for every plan, over the real parser and core with a fake RabbitMQ
(testkit/core.py's Harness: it stands where the transport stands)."""

from __future__ import annotations

import inspect

from stomp_bridge.core import plans as p
from stomp_bridge.core.machine import FAIR_SHARE
from stomp_bridge.core.state import CLOSED, OPEN
from stomp_bridge.protocol.frames import Frame, serialize
from stomp_bridge.session import session as driver
from testkit.core import Harness


def connected(**rules: object) -> Harness:
    h = Harness(**rules)
    h.connect()
    return h


def sends(n: int, receipt_every: int = 0) -> bytes:
    return b"".join(
        serialize(Frame("SEND", {"destination": "/topic/t", **({"receipt": f"r{i}"} if receipt_every and i % receipt_every == 0 else {})}, b"%d" % i))
        for i in range(n)
    )


def test_every_plan_has_its_runner_and_every_runner_its_plan():
    made = {cls for _, cls in vars(p).items() if isinstance(cls, type) and issubclass(cls, tuple)
            and cls.__module__ == p.__name__}
    to_amqp = {p.Publish, p.Ack, p.Nack}  # sent by _to_amqp, in order, never run as a plan
    assert set(driver.RUNNERS) == made - to_amqp - {p.Opened}


def test_runners_call_the_typed_channel_by_name_not_by_string():
    """A runner per plan, each calling a SessionChannel method in code (checked by mypy), none
    through getattr of a name (which nothing checks)."""
    assert "getattr(" not in inspect.getsource(driver)


def test_a_burst_in_one_chunk_is_handled_in_order_a_fair_share_at_a_time():
    h = connected()
    h.send(sends(FAIR_SHARE * 3 + 5))
    bodies = [plan.body for plan in h.of(p.Publish)]
    assert bodies == [b"%d" % i for i in range(FAIR_SHARE * 3 + 5)]
    assert h.counters.frames_in["SEND"] == FAIR_SHARE * 3 + 5


def test_the_fast_path_hands_the_rest_of_a_burst_to_the_loop():
    """receive_now handles a fair share in the pass that read the bytes, receive() the rest."""
    h = connected()
    session = h.session
    done = h._call(lambda: session.receive_now(sends(FAIR_SHARE + 1)))
    assert done is False and 0 < len(h.of(p.Publish)) <= FAIR_SHARE
    h.loop.run_until_complete(session.receive())
    assert len(h.of(p.Publish)) == FAIR_SHARE + 1


def test_the_fast_path_leaves_the_rest_of_a_begun_frame_and_an_ended_session_to_the_loop():
    """receive_now takes nothing (None) once a frame is begun, so that its rest is gathered by
    the loop and parsed once, nor after the session ended; the loop's receive() then has it."""
    h = connected()
    session = h.session
    data = serialize(Frame("SEND", {"destination": "/topic/t"}, b"body"))
    assert h._call(lambda: session.receive_now(data[:10])) is True  # nothing whole yet: all done
    assert h._call(lambda: session.receive_now(data[10:])) is None
    assert h.of(p.Publish) == []
    h.loop.run_until_complete(session.receive(data[10:]))
    assert [plan.body for plan in h.of(p.Publish)] == [b"body"]
    h._call(lambda: h.core.fail(driver.StompError("x", "y")))
    assert h._call(lambda: session.receive_now(data)) is None and len(h.of(p.Publish)) == 1


def test_a_frame_split_over_chunks_is_one_frame():
    h = connected()
    data = serialize(Frame("SEND", {"destination": "/topic/t", "receipt": "r"}, b"body"))
    for i in range(len(data)):
        h.send(data[i:i + 1])
    h.confirm(1)
    assert [plan.body for plan in h.of(p.Publish)] == [b"body"] and h.commands() == ["RECEIPT"]


def test_answers_of_one_chunk_are_one_write():
    h = connected()
    h.written.clear()
    h.send(b"".join(serialize(Frame("BEGIN", {"transaction": f"t{i}", "receipt": f"r{i}"})) for i in range(5)))
    assert len(h.written) == 5 and h.commands() == ["RECEIPT"] * 5  # the frames of one write call
    h.written.clear()
    writes: list[int] = []
    h.session._write = lambda frames: writes.append(len(frames))  # type: ignore[attr-defined]
    h.send(b"".join(serialize(Frame("BEGIN", {"transaction": f"u{i}", "receipt": f"s{i}"})) for i in range(5)))
    assert writes == [5]


def test_deliveries_of_one_amqp_read_are_one_write():
    h = connected()
    h.frame("SUBSCRIBE", {"destination": "/queue/q", "id": "s"})
    writes: list[int] = []
    h.session._write = lambda frames: writes.append(len(frames))  # type: ignore[attr-defined]
    events = h.channel.events
    h._call(lambda: ([events.delivered(("T_s", n, False, "", "q", {"headers": {}}, b"m")) for n in (1, 2, 3)],
                     events.batch_ended()))
    assert writes == [3]  # one write for the read, not one per delivery


def test_a_frame_queued_outside_the_loops_is_written_in_the_next_pass():
    h = connected()
    h.written.clear()
    h._call(lambda: h.core.emit(b"\n"))  # as a timer's or a task's frame
    assert h.written == [b"\n"]


def test_a_heartbeat_goes_out_behind_what_is_queued():
    h = connected()
    h.written.clear()
    h._call(lambda: (h.core.emit(b"RECEIPT\nreceipt-id:x\n\n\x00"), h.session.send_heartbeat()))
    assert h.written == [b"RECEIPT\nreceipt-id:x\n\n\x00", b"\n"]


def test_the_transport_hears_of_the_login_once():
    opened = []
    h = Harness()
    h.session._on_open = lambda: opened.append(h.session.logged_in)  # type: ignore[attr-defined]
    assert not h.session.logged_in
    h.connect()
    h.frame("SEND", {"destination": "/topic/t"})
    assert opened == [True] and h.core.state is OPEN


def test_no_connect_in_time_is_the_connect_timeout():
    h = Harness(connect_timeout=5.0)
    h.advance(4.9)
    assert h.frames() == []
    h.advance(0.2)
    [error] = h.frames()
    assert error.headers["message"] == "Connect timeout" and h.core.state is CLOSED


def test_a_connect_that_arrived_is_not_timed_out_by_connect_timeout():
    """From the CONNECT on amqp_connect_timeout bounds the wait (the login may be slow)."""
    h = Harness(connect_timeout=5.0)
    h.pause.add(p.OpenAmqp)
    h.frame("CONNECT", {"accept-version": "1.2", "host": "/"})
    h.advance(10)
    assert h.frames() == [] and h.core.state is not CLOSED
    assert h.of(p.SetTimer) == [] or all(t.name != "connect" or t.delay is None for t in h.of(p.SetTimer))


def test_a_login_cancels_the_connect_timer():
    h = Harness(connect_timeout=5.0)
    h.connect()
    assert p.SetTimer("connect", None) in h.plans
    h.advance(6)
    assert h.frames() == [] and h.core.state is OPEN


def test_a_publish_waits_for_the_publishing_channel_and_goes_in_order():
    h = connected()
    h.publisher_open = False
    h.frame("SEND", {"destination": "/topic/t"}, b"1")
    h.frame("SEND", {"destination": "/topic/t"}, b"2")
    assert h.of(p.Publish) == []  # waiting for the channel, in order
    h.open_publisher()
    assert [plan.body for plan in h.of(p.Publish)] == [b"1", b"2"]


def test_frames_after_a_job_wait_for_it():
    h = connected()
    h.pause.add(p.Declare)
    h.frame("SUBSCRIBE", {"destination": "/queue/q", "id": "s"})
    h.frame("SEND", {"destination": "/topic/t"}, b"after")
    assert h.of(p.Publish) == []
    h.pause.clear()
    h.resume("q")
    assert [plan.body for plan in h.of(p.Publish)] == [b"after"]
    assert h.of(p.Consume)[0].queue == "q"


def test_the_session_closes_its_channel_and_cancels_its_work():
    h = connected(resubscribe_on_cancel=True)
    h.frame("SUBSCRIBE", {"destination": "/amq/queue/q", "id": "s"})
    h.missing.add("q")
    h.cancel("T_s")  # a resubscribe waits for the queue (a task and a sleep)
    h.close()
    assert h.core.state is CLOSED and h.session.closed
