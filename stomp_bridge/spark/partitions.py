"""Super streams as the connector sees them: partitions, per-partition offsets, key routing.

Pure functions (standard library only): the readers and writers in ``source`` call them on the
driver and in tasks, the unit tests call them directly.

A super stream (RabbitMQ 3.11+) named ``invoices`` with three partitions is a direct exchange
``invoices`` (argument ``x-super-stream: true``) and the stream queues ``invoices-0``,
``invoices-1``, ``invoices-2``, bound with the routing keys ``0``, ``1``, ``2`` (and the binding
argument ``x-stream-partition-order``): RabbitMQ's own naming, which ``rabbitmq-streams
add_super_stream`` and the stream clients create.

Offsets of a read are a map from partition (the stream queue's name) to the next stream offset
to read, e.g. ``{"invoices-0": 120, "invoices-1": 97}``: that map is what Spark writes to the
checkpoint, readable as Kafka's is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping

# The seed RabbitMQ's stream clients give Murmur3 in their hash routing strategy
# (Java: HashRoutingMurmurStrategy; Go, .NET and Python clients copy it).
MURMUR3_SEED = 104729


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86 32-bit of ``data`` (unsigned), as in Austin Appleby's reference code."""
    c1, c2, mask = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF
    h = seed & mask
    length = len(data)
    blocks = length - length % 4
    for i in range(0, blocks, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
        h = ((h << 13) | (h >> 19)) & mask
        h = (h * 5 + 0xE6546B64) & mask
    tail = data[blocks:]
    if tail:
        k = int.from_bytes(tail, "little")
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
    h ^= length
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & mask
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & mask
    h ^= h >> 16
    return h


KEY_HASHES = ("murmur3", "rstream")


def partition_for_key(key: str | bytes, partitions: int, hash: str = "murmur3") -> int:
    """The index of the partition a stream client's hash routing sends ``key`` to.

    ``murmur3`` (the default): the Java, Go and .NET clients' ``HashRoutingMurmurStrategy``,
    Murmur3 x86 32-bit of the key's UTF-8 bytes with seed 104729, unsigned, modulo the number of
    partitions. ``rstream``: rstream's (the Python client's) own, which differs: MurmurHash3 x64
    128-bit (``mmh3.hash_bytes``) of ``bytes(key, "UTF-16")`` (a byte-order mark, then UTF-16 in
    the machine's order) with the same seed, its 16 bytes read as a little-endian unsigned integer."""
    if hash == "rstream":
        import mmh3  # rstream's own dependency

        text = key if isinstance(key, str) else bytes(key).decode("utf-8")
        digest = mmh3.hash_bytes(bytes(text, "UTF-16"), MURMUR3_SEED)
        return int.from_bytes(digest, "little", signed=False) % partitions
    data = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    return murmur3_32(data, MURMUR3_SEED) % partitions


def partition_name(super_stream: str, index: int) -> str:
    """RabbitMQ's name for partition ``index`` of ``super_stream``."""
    return f"{super_stream}-{index}"


def fair_shares(available: Mapping[str, int], limit: int) -> dict[str, int]:
    """How many of ``limit`` messages each partition gets this trigger: equal shares, and what a
    partition cannot use (it has fewer available) goes to the others. Never more than available;
    the sum is ``min(limit, sum(available))``. Deterministic: leftovers go in name order."""
    shares = {p: 0 for p in available}
    open_ = sorted(p for p, n in available.items() if n > 0)
    left = limit
    while open_ and left > 0:
        each, extra = divmod(left, len(open_))
        for i, p in enumerate(open_):
            give = min(each + (1 if i < extra else 0), available[p] - shares[p])
            shares[p] += give
            left -= give
        open_ = [p for p in open_ if shares[p] < available[p]]
    return shares


def split(lo: int, hi: int, parts: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` in up to ``parts`` contiguous, nearly equal ranges."""
    count = hi - lo
    if count <= 0:
        return []
    parts = min(parts, count)
    step, extra = divmod(count, parts)
    out, start = [], lo
    for i in range(parts):
        end = start + step + (1 if i < extra else 0)
        out.append((start, end))
        start = end
    return out


def plan(start: Mapping[str, int], end: Mapping[str, int], num_partitions: int) -> list[tuple[str, int, int]]:
    """Spark input partitions for moving every partition from ``start`` to ``end``: one per stream
    partition with something to read, each split in up to ``num_partitions`` slices. A partition
    in ``end`` but not in ``start`` (added while the query ran) is read from offset 0."""
    out = []
    for name in sorted(end):
        for lo, hi in split(start.get(name, 0), end[name], num_partitions):
            out.append((name, lo, hi))
    return out


@dataclass(frozen=True)
class DataLoss:
    """Offsets a read needed that are gone: removed by retention, or the stream was deleted."""

    partition: str
    wanted: int  # the next offset the query had to read
    first: int | None  # the first offset still stored; None: the stream is gone

    def message(self, super_stream: str | None) -> str:
        where = f"partition {self.partition} of super stream {super_stream}" if super_stream else f"stream {self.partition}"
        if self.first is None:
            what = (f"{where} was deleted while the query read it (offset {self.wanted} was next): "
                    "its messages from there on are lost.")
        else:
            what = (f"{where} lost offsets {self.wanted} to {self.first - 1} to retention before the query "
                    f"read them (offset {self.wanted} was next, the first still stored is {self.first}).")
        return (f"data loss: {what} To skip what is lost and go on, set option failOnDataLoss=false "
                "(the query logs each skip); to start again from what is stored, use a new checkpoint with "
                "startingOffsets=earliest; to keep messages longer, raise the stream's retention "
                "(x-max-length-bytes, x-max-age).")

    def against(self, stored: int | None) -> DataLoss | None:
        """This gap as loss, given the first offset the stream still stores (``stored``; None:
        empty or gone). Only offsets below ``stored`` were removed: a gap above it holds no
        messages, as RabbitMQ delivers no tracking chunks (a stored consumer offset, a segment's
        producer snapshot) and each takes an offset."""
        if self.first is None or stored is None:
            return self
        if self.wanted >= stored:
            return None
        return DataLoss(self.partition, self.wanted, min(self.first, stored))


def dump_offsets(offsets: Mapping[str, int]) -> dict:
    """The checkpoint form: a JSON object, partitions in name order."""
    return {name: int(offsets[name]) for name in sorted(offsets)}


def parse_offset_map(text: str, option: str) -> dict[str, int]:
    """``startingOffsets`` given as JSON: ``{"invoices-0": 10, "invoices-1": -2}`` where -2 means
    earliest and -1 latest (Kafka's convention). Raises ValueError with what is wrong."""
    try:
        value = json.loads(text)
    except ValueError:
        raise ValueError(f"option {option}={text!r} is not JSON") from None
    if not isinstance(value, dict) or not value:
        raise ValueError(f"option {option}={text!r} must be a JSON object of partition to offset, "
                         'e.g. {"invoices-0": 10, "invoices-1": -2} (-2: earliest, -1: latest)')
    out = {}
    for name, offset in value.items():
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < -2:
            raise ValueError(f"option {option}: offset {offset!r} of {name!r} must be an integer >= 0, "
                             "-2 (earliest) or -1 (latest)")
        out[str(name)] = offset
    return out
