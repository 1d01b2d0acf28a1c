"""Options of format("stomp"), parsed without Spark: defaults, every error's wording."""

from __future__ import annotations

import pytest

from stomp_bridge.spark.options import ConnectionOptions, OptionError, ReadOptions, WriteOptions

BASE = {"host": "bridge", "destination": "/amq/queue/events"}


def test_connection_defaults_and_case_insensitive_names():
    opts = ConnectionOptions.parse({"HOST": "bridge", "Port": "61623", "vHost": "prod", "LOGIN": "u", "passCode": "p"})
    assert (opts.host, opts.port, opts.vhost, opts.login, opts.passcode) == ("bridge", 61623, "prod", "u", "p")
    assert ConnectionOptions.parse({"host": "h"}).port == 61613
    assert ConnectionOptions.parse({"host": "h", "readTimeoutMs": "2500"}).read_timeout == 2.5


def test_tls_options():
    opts = ConnectionOptions.parse({"host": "h", "tls": "true", "tlsCaFile": "/ca.pem", "tlsVerify": "false"})
    assert (opts.tls, opts.tls_ca_file, opts.tls_verify) == (True, "/ca.pem", False)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "option host is missing"),
        ({"host": " "}, "option host is empty"),
        ({"host": "h", "port": "x"}, "option port='x' is not an integer"),
        ({"host": "h", "port": "0"}, "option port='0' must be at least 1"),
        ({"host": "h", "port": "70000"}, "option port=70000 is not a TCP port"),
        ({"host": "h", "login": "u"}, "options login and passcode go together"),
        ({"host": "h", "tls": "maybe"}, "option tls='maybe' must be true or false"),
        ({"host": "h", "tlsCaFile": "/ca.pem"}, "option tlscafile needs option tls=true"),
    ],
)
def test_connection_option_errors(options, message):
    with pytest.raises(OptionError, match=message.replace("(", r"\(")):
        ConnectionOptions.parse(options)


def test_read_defaults():
    opts = ReadOptions.parse(BASE)
    assert (opts.mode, opts.starting, opts.ending, opts.num_partitions, opts.prefetch) == (
        "stream", "earliest", "latest", 1, 500)
    assert opts.max_messages_per_trigger is None


def test_read_offsets_and_timestamps():
    assert ReadOptions.parse({**BASE, "startingOffsets": "5", "endingOffsets": "9"}).starting == 5
    opts = ReadOptions.parse({**BASE, "startingTimestamp": "100", "endingTimestamp": "200"})
    assert (opts.starting, opts.starting_timestamp, opts.ending, opts.ending_timestamp) == (
        "timestamp", 100, "timestamp", 200)


def test_drain_accepts_queues():
    opts = ReadOptions.parse({"destination": "/queue/jobs", "mode": "drain", "maxMessages": "10"})
    assert (opts.mode, opts.max_messages, opts.destination) == ("drain", 10, "/queue/jobs")


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({}, False, "option destination is missing"),
        ({"destination": "/queue/q"}, False, "cannot be used for reading a stream"),
        ({"destination": "/amq/queue/"}, False, "must start with /amq/queue/ and name something"),
        ({**BASE, "mode": "peek"}, False, "option mode='peek' must be stream"),
        ({**BASE, "mode": "drain"}, False, "mode=drain needs option maxMessages"),
        ({**BASE, "mode": "drain", "maxMessages": "1", "startingOffsets": "3"}, False, "offsets and timestamps are for mode=stream"),
        ({"destination": "/topic/t", "mode": "drain", "maxMessages": "1"}, False, "cannot be used for draining a queue"),
        ({**BASE, "startingOffsets": "-1"}, False, "option startingOffsets='-1' must not be negative"),
        ({**BASE, "endingOffsets": "earliest"}, False, "option endingOffsets='earliest' must be latest"),
        ({**BASE, "startingOffsets": "9", "endingOffsets": "3"}, False, "endingOffsets=3 is before startingOffsets=9"),
        ({**BASE, "startingOffsets": "1", "startingTimestamp": "1"}, False, "not both"),
        ({**BASE, "startingTimestamp": "9", "endingTimestamp": "3"}, False, "endingTimestamp=3 is before"),
        ({**BASE, "endingOffsets": "3"}, True, "a streaming read has no end"),
        ({"destination": "/queue/q", "mode": "drain", "maxMessages": "1"}, True, "a streaming read needs mode=stream"),
        ({**BASE, "maxMessagesPerTrigger": "0"}, True, "maxMessagesPerTrigger='0' must be at least 1"),
        ({**BASE, "numPartitions": "two"}, False, "option numPartitions='two' is not an integer"),
        ({**BASE, "jsonSchema": " "}, False, "option jsonSchema is empty"),
        ({**BASE, "jsonFailFast": "yes please"}, False, "jsonFailFast='yes please' must be true or false"),
    ],
)
def test_read_option_errors(options, streaming, message):
    with pytest.raises(OptionError) as info:
        ReadOptions.parse(options, streaming=streaming)
    assert message in str(info.value)


def test_write_options():
    opts = WriteOptions.parse({"destination": "/topic/out", "receiptWindow": "10", "persistent": "false"})
    assert (opts.destination, opts.receipt_window, opts.persistent, opts.transactional) == ("/topic/out", 10, False, False)
    assert WriteOptions.parse({}, columns=("destination", "body")).destination is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "option destination is missing"),
        ({"destination": "queue/x"}, "must start with /queue/ or /amq/queue/ or /topic/ or /exchange/"),
        ({"destination": "/topic/t", "receiptWindow": "0"}, "receiptWindow='0' must be at least 1"),
        ({"destination": "/topic/t", "transactional": "sometimes"}, "transactional='sometimes' must be true or false"),
    ],
)
def test_write_option_errors(options, message):
    with pytest.raises(OptionError) as info:
        WriteOptions.parse(options)
    assert message in str(info.value)
