"""Header injection: a producer tries to change the MESSAGE frames other clients receive.

The producer is a STOMP client (SEND headers, escaped or raw) or an AMQP client (a headers
table, published here through the management API); the consumer speaks STOMP 1.0, 1.1 or 1.2
and its raw bytes are read. It must get exactly the MESSAGE that was sent, then the next one:
no extra header line, no early end of frame, no frame of the producer's making in between.

CR, LF, ':' and '\\' are escaped with STOMP 1.2's rules, for 1.0 and 1.1 consumers too (the
plugin's choice; 1.1 has no escape for CR, so a 1.1 consumer sees ``\\r``): the plugin and the
bridge are safe there. NUL has no escape in any version: the plugin (3.10.8, 4.0.5, 4.3.6)
writes it raw, and a client that reads a frame up to its NUL (stomp.py, PHP's stomp) ends the
frame there and reads the rest as a frame whose headers the producer chose. The bridge leaves
such a header out, and a header with an empty name, which the plugin writes as ``:value``
(docs/migration/rabbitmq-plugin.md, "Deliberate differences").
"""

from __future__ import annotations

import os

import pytest

from tests.integration.rawstomp import Frame, RawStomp, build_frame, escape_header

NATIVE = os.environ.get("STOMP_BRIDGE_TEST_TARGET") == "native"
VERSIONS = ["1.0", "1.1", "1.2"]
NATIVE_WRITES_NUL = pytest.mark.xfail(
    condition=NATIVE, strict=True,
    reason="the native plugin writes a NUL in a header raw: a NUL-reading consumer sees the frame end "
           "there and a second frame of the producer's making (the bridge leaves the header out)",
)

# Each would add a header named "injected" (or a frame) if it reached the wire unescaped.
ESCAPABLE = {
    "lf-value": "v\ninjected:yes",
    "frame-value": "v\r\n\r\nbody\nMESSAGE\ninjected:yes\n\n",
    "colon:name": "colon in the name",
    "x\ninjected": "LF in the name",
    "back\\slash": "\\c\\n\\r\\\\",  # literal escapes: must not turn into ':' or an EOL
}
NUL_VALUE = {"nul": "x\0MESSAGE\ninjected:yes"}
NUL_NAME = {"n\0ul": "v"}


def naive_frames(raw: bytes) -> list[bytes]:
    """What a client that reads a frame up to its NUL (stomp.py) makes of ``raw``."""
    return [part for part in raw.split(b"\0") if part.strip(b"\r\n")]


def consumer(connected, version: str, queue: str) -> RawStomp:
    conn = connected(version)
    conn.subscribe(f"/queue/{queue}")
    return conn


def received(conn: RawStomp) -> Frame:
    """The attack MESSAGE, after checking that the next frame is the marker sent after it."""
    attack = conn.expect("MESSAGE")
    marker = conn.expect("MESSAGE")
    assert marker.body == b"end", marker
    assert naive_frames(attack.raw) == [attack.raw[:-1]], attack.raw
    head = attack.raw.partition(b"\n\n")[0]
    assert b"\r" not in head, head
    assert all(line.partition(b":")[0] for line in head.split(b"\n")[1:]), head
    assert "injected" not in attack
    assert attack.body == b"attack"
    return attack


def shown(value: str, version: str) -> str:
    """A header as the consumer reads it: 1.0 does not unescape what the server escaped."""
    return escape_header(value) if version == "1.0" else value


def send_attack(producer: RawStomp, queue: str, headers: dict[str, str]) -> None:
    """A SEND carrying ``headers`` (1.2-escaped; a NUL stays raw, as the grammar allows),
    then the marker, receipted so both are in the queue."""
    producer.send_raw(build_frame("SEND", {"destination": f"/queue/{queue}", **headers}, "attack",
                                  escape=True))
    producer.receipt("SEND", {"destination": f"/queue/{queue}"}, "end", receipt_id="marker")


def publish_attack(rabbit, queue: str, headers: dict[str, str], **properties: str) -> None:
    assert rabbit.publish("", queue, "attack", {"headers": headers, **properties})
    assert rabbit.publish("", queue, "end")


# -- STOMP producer --------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_escaped_eols_colons_and_backslashes_from_a_stomp_producer_stay_in_their_header(
    connected, queues, unique, version
):
    name = f"inj-stomp-{unique}"
    queues.append(name)
    conn = consumer(connected, version, name)
    send_attack(connected(), name, ESCAPABLE)
    attack = received(conn)
    for key, value in ESCAPABLE.items():
        assert attack[shown(key, version)] == shown(value, version)


@NATIVE_WRITES_NUL
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("headers", [NUL_VALUE, NUL_NAME], ids=["value", "name"])
def test_nul_in_a_stomp_producers_header_cannot_end_the_consumers_frame(
    connected, rabbit, queues, unique, version, headers
):
    name = f"inj-stomp-nul-{unique}"
    queues.append(name)
    conn = consumer(connected, version, name)
    send_attack(connected(), name, {**headers, "after": "ok"})
    attack = received(conn)
    assert attack["after"] == "ok"
    assert not any(key in attack for key in headers)


@NATIVE_WRITES_NUL
@pytest.mark.parametrize("version", VERSIONS)
def test_a_stomp_py_consumer_gets_the_message_and_no_frame_of_the_producers_making(
    client, connected, queues, unique, version
):
    """stomp.py reads a frame up to its NUL: a NUL in a header would give it a cut MESSAGE, then
    a MESSAGE made of what followed (here the producer's ``forged`` header and the body)."""
    name = f"inj-stomppy-{unique}"
    queues.append(name)
    consumer = client(version)
    consumer.subscribe(f"/queue/{name}")
    producer = connected()
    producer.send_raw(f"SEND\ndestination:/queue/{name}\nnul:x\0MESSAGE\nforged:yes\n\nattack\0".encode())
    producer.receipt("SEND", {"destination": f"/queue/{name}"}, "end", receipt_id="marker")
    attack, marker = consumer.next_message(), consumer.next_message()
    assert (attack.body, marker.body) == (b"attack", b"end"), (attack, marker)
    assert attack.headers["forged"] == "yes" and "nul" not in attack.headers


# -- AMQP producer -------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_eols_colons_and_backslashes_in_an_amqp_headers_table_stay_in_their_header(
    connected, rabbit, queues, unique, version
):
    name = f"inj-amqp-{unique}"
    queues.append(name)
    conn = consumer(connected, version, name)
    publish_attack(rabbit, name, ESCAPABLE, correlation_id="c\ninjected:yes")
    attack = received(conn)
    for key, value in ESCAPABLE.items():
        assert attack[shown(key, version)] == shown(value, version)
    assert attack["correlation-id"] == shown("c\ninjected:yes", version)


@NATIVE_WRITES_NUL
@pytest.mark.parametrize("version", VERSIONS)
def test_nul_in_an_amqp_headers_table_or_property_cannot_end_the_consumers_frame(
    connected, rabbit, queues, unique, version
):
    name = f"inj-amqp-nul-{unique}"
    queues.append(name)
    conn = consumer(connected, version, name)
    publish_attack(rabbit, name, {**NUL_VALUE, **NUL_NAME, "after": "ok"},
                   correlation_id="c\0MESSAGE\ninjected:yes")
    attack = received(conn)
    assert attack["after"] == "ok"
    assert "nul" not in attack and "correlation-id" not in attack


@pytest.mark.xfail(condition=NATIVE, strict=True,
                   reason="the native plugin writes an empty header name as ':value', outside STOMP's grammar "
                          "(header-name = 1*OCTET): strict parsers refuse the frame (the bridge leaves it out)")
@pytest.mark.parametrize("version", VERSIONS)
def test_an_empty_header_name_from_amqp_is_left_out(connected, rabbit, queues, unique, version):
    name = f"inj-amqp-empty-{unique}"
    queues.append(name)
    conn = consumer(connected, version, name)
    publish_attack(rabbit, name, {"": "no name", "after": "ok"})
    attack = received(conn)
    assert attack["after"] == "ok"
