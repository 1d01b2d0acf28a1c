"""Memory given back once a load has passed (an attack, a reconnect storm, a burst of large bodies).

Measured in the hostile mode (``python -m reliability --only siege``: junk, ERROR floods,
unread RECEIPTs and MESSAGEs, 1 MiB transaction floods and a login flood beside a good
workload), a bridge that started at 45 MB peaked at 73 MB and stayed at 66-70 MB once every
attacker had gone (with this: 46.8 MB): what it had freed was still resident. Two things held it:

- **the C allocator's free memory**: glibc's malloc keeps freed chunks for reuse and returns to
  the system only the top of its heap, which a few long-lived objects pin; after the attacks it
  held 19 MB free (``mallinfo2().fordblks``). ``malloc_trim(0)`` hands back every free page
  (66 -> 48 MB in 10 ms there);
- **the garbage of closed connections**: a connection's objects refer to each other, so only a
  full collection frees them, and :func:`~stomp_bridge.processes.tune_gc` makes those rare (and
  an idle bridge allocates too little to start one): 9,000 objects of some 200 connections
  were still there.

:class:`Release` decides, and :meth:`Release.tick` does it, every :data:`TICK` seconds
(``BridgeServer`` runs it): a full collection once at least as many connections closed since
the last one as are open (and :data:`MIN_CLOSED`), so its cost, which grows with what is
alive, stays in proportion to the garbage it frees; then, where the allocator is glibc's, a
trim when at least :data:`TRIM_FREE` bytes of its heap are free and, since the last trim, that
much was taken and given back (the free bytes rose by it from their lowest) or the process grew
by it. (A trim leaves the chunks in malloc's free lists, only their pages go: the free bytes
alone would call for a trim every time, each a system call per free chunk for nothing.)
Elsewhere (musl, macOS) only the collection.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
from collections.abc import Callable

log = logging.getLogger(__name__)

TICK = 10.0  # seconds between looks
MIN_CLOSED = 64  # connections closed before a full collection is worth it at all
TRIM_FREE = 8 * 1024 * 1024  # free bytes in the C heap worth handing back


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


class Allocator:
    """glibc's malloc_trim and mallinfo2 where the C library has them; else nothing to do.
    (ctypes costs the process some 240 kB; what it gives back is tens of MB.)"""

    def __init__(self, library: str | None = None) -> None:
        self._trim: Callable[[int], int] | None = None
        self._info: Callable[[], _Mallinfo2] | None = None
        try:
            libc = ctypes.CDLL(library)  # None: the symbols this process has loaded, the C library's among them
        except OSError:
            return
        trim = getattr(libc, "malloc_trim", None)
        if trim is not None:
            trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
            self._trim = trim
        info = getattr(libc, "mallinfo2", None)  # glibc 2.33+; mallinfo's ints overflow at 2 GiB
        if info is not None:
            info.argtypes, info.restype = [], _Mallinfo2
            self._info = info

    @property
    def can_trim(self) -> bool:
        return self._trim is not None

    def free_bytes(self) -> int | None:
        """Free bytes in the C heap (chunks malloc keeps for reuse), None if it cannot say."""
        return None if self._info is None else int(self._info().fordblks)

    def trim(self) -> bool:
        """Hand the heap's free pages back to the system; True if some were."""
        return bool(self._trim(0)) if self._trim is not None else False


def resident_bytes() -> int | None:
    """This process's resident memory (/proc/self/statm), None where there is none."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class Release:
    """When to collect and trim (pure but for :meth:`tick`'s calls)."""

    def __init__(self, allocator: Allocator | None = None, collect: Callable[[], int] = gc.collect,
                 resident: Callable[[], int | None] = resident_bytes) -> None:
        self.allocator = allocator if allocator is not None else Allocator()
        self.collect = collect
        self.resident = resident
        self.closed = 0  # connections closed since the last full collection
        self.collections = 0
        self.trims = 0
        self._lowest_free: int | None = None  # the heap's free bytes at their lowest since the last trim
        self._resident_after_trim: int | None = None

    def connection_closed(self) -> None:
        self.closed += 1

    def collect_due(self, open_connections: int) -> bool:
        """A full collection frees what closed connections left in cycles; it walks every live
        object, so it waits until the closed ones are at least as many as the open ones."""
        return self.closed >= max(MIN_CLOSED, open_connections)

    def trim_due(self) -> bool:
        """Enough of the heap free, and resident: taken and given back since the last trim (the
        free bytes rose from their lowest), or the process grew. No mallinfo2: always."""
        if not self.allocator.can_trim:
            return False
        free = self.allocator.free_bytes()
        if free is None:
            return True
        lowest = self._lowest_free = free if self._lowest_free is None else min(self._lowest_free, free)
        if free < TRIM_FREE:
            return False
        resident, after = self.resident(), self._resident_after_trim
        grew = resident is not None and (after is None or resident - after >= TRIM_FREE)
        return free - lowest >= TRIM_FREE or grew

    def _trimmed(self) -> None:
        self._lowest_free = self.allocator.free_bytes()
        self._resident_after_trim = self.resident()

    def tick(self, open_connections: int) -> None:
        if self.collect_due(open_connections):
            found = self.collect()
            self.closed = 0
            self.collections += 1
            log.debug("memory: full collection", extra={"objects": found, "open_connections": open_connections})
        if self.trim_due():
            self.allocator.trim()
            self._trimmed()
            self.trims += 1
            log.debug("memory: heap trimmed")
