"""Super stream rules without Spark or a broker: the key hash, fair shares, planning, offsets."""

from __future__ import annotations

import pytest

from stomp_bridge.spark.options import OptionError, ReadOptions, WriteOptions
from stomp_bridge.spark.partitions import (
    DataLoss,
    dump_offsets,
    fair_shares,
    murmur3_32,
    parse_offset_map,
    partition_for_key,
    plan,
)


@pytest.mark.parametrize(
    ("data", "seed", "expected"),
    [  # MurmurHash3 x86_32 reference values (SMHasher)
        (b"", 0, 0),
        (b"", 1, 0x514E28B7),
        (b"hello", 0, 0x248BFA47),
        (b"The quick brown fox jumps over the lazy dog", 0x9747B28C, 0x2FA826CD),
        (b"\xff\xff\xff\xff", 0, 0x76293B50),
    ],
)
def test_murmur3_matches_the_reference(data, seed, expected):
    assert murmur3_32(data, seed) == expected


def test_keys_go_where_rabbitmqs_stream_clients_send_them():
    # The Go stream client's own table for three partitions (pkg/stream/super_stream_producer_test.go)
    expected = {"hello1": 1, "hello2": 0, "hello3": 1, "hello4": 2, "hello5": 0, "hello6": 2, "hello7": 0,
                "hello8": 1, "hello9": 0, "hello10": 2, "hello88": 1}
    assert {key: partition_for_key(key, 3) for key in expected} == expected


def test_keys_are_hashed_as_utf8():
    assert partition_for_key("clé", 7) == murmur3_32("clé".encode(), 104729) % 7
    assert partition_for_key(b"cl\xc3\xa9", 7) == partition_for_key("clé", 7)


@pytest.mark.parametrize(
    ("available", "limit", "expected"),
    [
        ({"a": 6, "b": 1, "c": 3}, 4, {"a": 2, "b": 1, "c": 1}),
        ({"a": 10, "b": 2, "c": 0, "d": 100}, 20, {"a": 10, "b": 2, "c": 0, "d": 8}),
        ({"a": 1, "b": 1}, 5, {"a": 1, "b": 1}),
        ({"a": 5, "b": 5, "c": 5}, 3, {"a": 1, "b": 1, "c": 1}),
        ({"a": 0}, 3, {"a": 0}),
    ],
)
def test_the_trigger_limit_is_shared_fairly(available, limit, expected):
    shares = fair_shares(available, limit)
    assert shares == expected
    assert sum(shares.values()) == min(limit, sum(available.values()))


def test_plan_gives_one_input_partition_per_stream_partition_and_reads_new_ones_from_zero():
    assert plan({"s-0": 0, "s-1": 5}, {"s-0": 4, "s-1": 5, "s-2": 3}, 1) == [("s-0", 0, 4), ("s-2", 0, 3)]
    assert plan({"s-0": 0}, {"s-0": 5}, 2) == [("s-0", 0, 3), ("s-0", 3, 5)]


def test_offsets_are_a_readable_json_map():
    assert dump_offsets({"s-1": 3, "s-0": 7}) == {"s-0": 7, "s-1": 3}
    assert parse_offset_map('{"s-0": 10, "s-1": -2}', "startingOffsets") == {"s-0": 10, "s-1": -2}
    for bad in ('{"s-0": "x"}', "[1]", "{}", '{"s-0": -3}', "{nope"):
        with pytest.raises(ValueError, match="startingOffsets"):
            parse_offset_map(bad, "startingOffsets")


def test_data_loss_says_which_partition_which_offsets_and_how_to_go_on():
    text = DataLoss("inv-1", 10, 42).message("inv")
    assert text.startswith("data loss: partition inv-1 of super stream inv lost offsets 10 to 41 to retention")
    assert "set option failOnDataLoss=false" in text and "startingOffsets=earliest" in text
    assert "stream ev was deleted while the query read it (offset 3 was next)" in DataLoss("ev", 3, None).message(None)


def test_super_stream_read_options():
    opts = ReadOptions.parse({"superStream": "inv", "startingOffsets": '{"inv-0": 4}', "failOnDataLoss": "false"},
                             streaming=True)
    assert (opts.super_stream, opts.starting_map, opts.fail_on_data_loss) == ("inv", {"inv-0": 4}, False)
    assert ReadOptions.parse({"superStream": "inv"}).fail_on_data_loss is True
    assert ReadOptions.parse({"superStream": "inv", "partitions": "a, b"}).partitions == ("a", "b")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"superStream": "inv", "destination": "/amq/queue/x"}, "give option superStream or option destination"),
        ({"superStream": "a/b"}, "must be a super stream's name"),
        ({"destination": "/amq/queue/x", "partitions": "a"}, "option partitions needs option superStream"),
        ({"superStream": "inv", "mode": "drain", "maxMessages": "1"}, "mode must be stream"),
        ({"superStream": "inv", "startingOffsets": '{"inv-0": "x"}'}, "offset 'x' of 'inv-0'"),
        ({"superStream": "inv", "failOnDataLoss": "perhaps"}, "failOnDataLoss='perhaps' must be true or false"),
    ],
)
def test_super_stream_read_option_errors(options, message):
    with pytest.raises(OptionError, match=message):
        ReadOptions.parse(options)


def test_super_stream_write_options():
    opts = WriteOptions.parse({"superStream": "inv"}, columns=("partitionKey", "body"))
    assert (opts.super_stream, opts.routing, opts.destination) == ("inv", "partitionKey", None)
    assert WriteOptions.parse({"superStream": "inv"}, columns=("routingKey",)).routing == "routingKey"
    with pytest.raises(OptionError, match="exactly one of the columns partitionKey"):
        WriteOptions.parse({"superStream": "inv"}, columns=("body",))
    with pytest.raises(OptionError, match="drop the destination column"):
        WriteOptions.parse({"superStream": "inv"}, columns=("partitionKey", "destination"))


def test_a_gap_is_data_loss_only_below_the_first_offset_the_stream_still_stores():
    gap = DataLoss("ev", 5, 9)
    assert gap.against(0) is None  # offsets 5 to 8 hold no messages (tracking chunks)
    assert gap.against(5) is None
    assert gap.against(7) == DataLoss("ev", 5, 7)  # 5 and 6 removed, 7 and 8 never held messages
    assert gap.against(12) == DataLoss("ev", 5, 9)  # retention went on after the read began
    assert gap.against(None) == gap
    assert DataLoss("ev", 5, None).against(0) == DataLoss("ev", 5, None)  # deleted stays deleted
