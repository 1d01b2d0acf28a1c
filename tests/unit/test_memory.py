"""Memory given back once a load passed (stomp_bridge/memory.py): when a full collection and a
heap trim are due, and that the trim does hand glibc's free pages back."""

from __future__ import annotations

import gc
import os

import pytest

from stomp_bridge import memory
from stomp_bridge.memory import MIN_CLOSED, TRIM_FREE, Allocator, Release


class FakeAllocator:
    """glibc as memory.Allocator sees it: a trim returns the pages, the chunks stay free."""

    def __init__(self, free: int | None, can_trim: bool = True) -> None:
        self.free, self.can_trim, self.trimmed = free, can_trim, 0

    def free_bytes(self) -> int | None:
        return self.free

    def trim(self) -> bool:
        self.trimmed += 1
        return True


def test_a_full_collection_waits_for_as_many_closed_connections_as_open_ones():
    collected = []
    release = Release(FakeAllocator(0), collect=lambda: collected.append(1) or 0)
    for _ in range(MIN_CLOSED - 1):
        release.connection_closed()
    release.tick(open_connections=0)
    assert collected == [], "fewer than MIN_CLOSED closed: not worth a collection"
    release.connection_closed()
    release.tick(open_connections=5000)
    assert collected == [], "5,000 open connections: a collection would walk far more than it frees"
    for _ in range(5000 - MIN_CLOSED):
        release.connection_closed()
    release.tick(open_connections=5000)
    assert collected == [1] and release.closed == 0
    release.tick(open_connections=0)
    assert collected == [1], "nothing closed since"


@pytest.mark.parametrize(("free", "can_trim", "trims"), [
    (TRIM_FREE, True, 1), (TRIM_FREE - 1, True, 0), (None, True, 1), (10 * TRIM_FREE, False, 0),
], ids=["enough free", "too little", "no mallinfo2", "not glibc"])
def test_the_first_look_trims_when_enough_of_the_heap_is_free(free, can_trim, trims):
    allocator = FakeAllocator(free, can_trim)
    Release(allocator, collect=lambda: 0, resident=lambda: 50 << 20).tick(open_connections=0)
    assert allocator.trimmed == trims


def test_a_trim_comes_again_only_once_the_freed_pages_may_be_resident_again():
    """A trim keeps the chunks free (their pages go): the same free bytes call for no second trim;
    free bytes that fell (chunks taken, their pages back) and rose again do, and so does growth."""
    allocator, resident = FakeAllocator(20 << 20), [60 << 20]
    release = Release(allocator, collect=lambda: 0, resident=lambda: resident[0])
    release.tick(0)
    assert allocator.trimmed == 1
    resident[0] = 45 << 20
    for _ in range(3):
        release.tick(0)
    assert allocator.trimmed == 1, "nothing taken since: the pages are gone already"
    allocator.free = 5 << 20  # a load took them
    release.tick(0)
    allocator.free = 19 << 20  # and gave them back
    release.tick(0)
    assert allocator.trimmed == 2
    resident[0] = 45 << 20
    release.tick(0)
    resident[0] = 60 << 20  # grew between two looks, the free bytes the same
    release.tick(0)
    assert allocator.trimmed == 3


@pytest.mark.skipif(not Allocator().can_trim, reason="glibc's malloc_trim (Linux)")
def test_trimming_hands_glibcs_free_pages_back():
    """What held a bridge's memory after an attack: chunks glibc keeps free inside its heap,
    pinned by a few that live on. (Each block is over pymalloc's 512 bytes and under glibc's
    mmap threshold: from glibc's heap.)"""
    allocator = Allocator()
    gc.collect()
    allocator.trim()
    before = _rss()
    kept, freed = [], []
    for n in range(20_000):
        (kept if n % 64 == 0 else freed).append(os.urandom(4000))
    del freed
    assert allocator.free_bytes() >= 60 * 1024 * 1024
    held = _rss()
    assert held - before > 60 * 1024 * 1024, "glibc kept the freed chunks resident"
    Release(allocator, collect=gc.collect).tick(open_connections=0)
    assert _rss() - before < 20 * 1024 * 1024
    del kept


def _rss() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


def test_without_a_c_library_that_has_them_there_is_nothing_to_trim():
    allocator = Allocator("libdoes-not-exist.so")
    assert not allocator.can_trim and allocator.free_bytes() is None and allocator.trim() is False
    assert memory.Release(allocator, collect=lambda: 0).trim_due() is False
