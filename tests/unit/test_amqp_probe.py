"""What the broker probe makes of a reply (the network part runs against RabbitMQ in
tests/integration/test_bridge_settings.py)."""

from pamqp import commands, frame

from stomp_bridge.amqp.handshake import describe


def test_connection_start_is_a_broker():
    start = frame.marshal(commands.Connection.Start(), 0)
    assert describe(start) is None
    assert describe(start[:11]) is None  # the first 11 bytes are enough


def test_anything_else_is_named():
    assert describe(b"AMQP\x00\x00\x09\x01") == "it speaks another AMQP version (b'AMQP\\x00\\x00\\t\\x01')"
    assert describe(b"") == "it closed the connection without a word"
    assert describe(b"HTTP/1.1 400 Bad Request\r\nServer: x\r\n") == (
        "it is not AMQP (it answered 'HTTP/1.1 400 Bad Request')")
    close = frame.marshal(commands.Connection.Close(reply_code=320, reply_text="bye", class_id=0, method_id=0), 0)
    assert describe(close).startswith("it is not AMQP")
