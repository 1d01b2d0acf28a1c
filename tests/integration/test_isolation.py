"""One client's bad behaviour must not disturb another client."""

from __future__ import annotations


def test_garbage_on_one_connection_does_not_affect_another(connected, rabbit, queues, unique):
    name = f"iso-{unique}"
    queues.append(name)
    good = connected()
    good.subscribe(f"/queue/{name}")
    bad = connected()
    bad.send_raw(b"\x00\x01\x02GARBAGE\nno-colon\n\n\x00" + bytes(range(256)))
    bad.read_until_closed()
    good.receipt("SEND", {"destination": f"/queue/{name}"}, "after garbage")
    assert good.expect("MESSAGE").body == b"after garbage"


def test_protocol_error_on_one_connection_does_not_affect_another(connected, client, queues, unique):
    name = f"iso2-{unique}"
    queues.append(name)
    good = client()
    good.subscribe(f"/queue/{name}")
    bad = connected()
    bad.send_frame("SUBSCRIBE", {"destination": "/amq/queue/does-not-exist-" + unique, "id": "x"})
    assert bad.error_then_close()["message"] == "not_found"
    good.send_with_receipt(f"/queue/{name}", "still fine")
    assert good.next_message().body == b"still fine"


def test_unauthenticated_garbage_connection_does_not_affect_others(raw, connected, queues, unique):
    name = f"iso3-{unique}"
    queues.append(name)
    good = connected()
    for _ in range(3):
        junk = raw()
        junk.send_raw(b"NOT-STOMP" * 100)
    good.subscribe(f"/queue/{name}")
    good.receipt("SEND", {"destination": f"/queue/{name}"}, "ok")
    assert good.expect("MESSAGE").body == b"ok"
