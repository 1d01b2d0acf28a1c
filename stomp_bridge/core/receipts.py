"""Publishes waiting for RabbitMQ's confirm, and the RECEIPTs that wait on them.

The contract: a RECEIPT leaves only once every publish made before its frame
is confirmed, and RECEIPTs leave in frame order, so one RECEIPT confirms
everything the client sent before it. Confirms are tracked by sequence number
(they only grow) with ``_low``, below which none is unconfirmed, moving up: a
``multiple`` confirm pops from there and ``_low`` is the lowest unconfirmed
number. (Not ``next(iter(dict))``: CPython walks the deleted slots at the front
of a dict one by one, which made a backlog of 100,000 publishes cost seconds.)
No future, task or sort per message. No I/O here: frames go out through ``write``.

A publish RabbitMQ refused (returned or nacked) stops the ledger there (``stop_at``):
RECEIPTs for frames before it still leave as their publishes are confirmed, none that
covers it ever does, and ``confirmed_below`` says when every earlier publish is in.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from time import monotonic


NOTHING_HELD: tuple[()] = ()  # reads as an empty deque (len, truth, iteration) until one is needed

class ReceiptLedger:
    __slots__ = ("_write", "_observe", "_unconfirmed", "_low", "last", "_stop", "_held", "_on_empty")

    def __init__(self, write: Callable[[bytes], None], observe: Callable[[float], None]) -> None:
        self._write = write
        self._observe = observe  # seconds from publish to confirm
        self._unconfirmed: dict[int, float] = {}  # sequence number -> when published
        self._low = 1  # no number below this is unconfirmed
        self.last = 0  # the number of the last publish (0: none yet); read, never written, outside
        self._stop = 1 << 62  # a refused publish: no RECEIPT covering it or later leaves
        # (last publish it covers, id, frame, what to run once the frame is written)
        # Created with the first held RECEIPT: an empty deque costs ~600 bytes, on each of
        # thousands of idle connections.
        self._held: deque[tuple[int, str, bytes, Callable[[], None] | None]] = NOTHING_HELD  # type: ignore[assignment]
        self._on_empty: list[Callable[[], None]] = []

    @property
    def held(self) -> int:
        """RECEIPTs waiting for confirms."""
        return len(self._held)

    def published(self, seq: int) -> None:
        self._unconfirmed[seq] = monotonic()
        self.last = seq

    def receipt(
        self, receipt_id: str, frame: bytes, last_seq: int, then: Callable[[], None] | None = None
    ) -> None:
        """Send ``frame`` now if nothing is unconfirmed, else once ``last_seq`` and all before are.

        ``then`` runs right after the frame is written (a SUBSCRIBE's first MESSAGEs follow its
        RECEIPT); never if the session ends first.
        """
        if not self._unconfirmed and not self._held and last_seq < self._stop:
            self._write(frame)
            if then is not None:
                then()
        else:
            if self._held is NOTHING_HELD:
                self._held = deque()
            self._held.append((last_seq, receipt_id, frame, then))

    def confirmed(self, tag: int, multiple: bool) -> None:
        unconfirmed, observe = self._unconfirmed, self._observe
        now = monotonic()
        low, high = self._low, self.last
        if multiple:
            while low <= tag and low <= high:
                sent = unconfirmed.pop(low, None)
                if sent is not None:
                    observe(now - sent)
                low += 1
        else:
            sent = unconfirmed.pop(tag, None)
            if sent is not None:
                observe(now - sent)
        while low <= high and low not in unconfirmed:
            low += 1
        self._low = low
        lowest = low if unconfirmed else None
        held = self._held
        stop = self._stop
        while held and (lowest is None or held[0][0] < lowest) and held[0][0] < stop:
            _, _, frame, then = held.popleft()
            self._write(frame)
            if then is not None:
                then()
        if not held:
            self.release_waiters()

    def is_unconfirmed(self, seq: int) -> bool:
        return seq in self._unconfirmed

    def lowest_unconfirmed(self) -> int | None:
        return self._low if self._unconfirmed else None

    def confirmed_below(self, seq: int) -> bool:
        """Every publish before ``seq`` is confirmed."""
        return not self._unconfirmed or self._low >= seq

    def stop_at(self, seq: int) -> None:
        """Publish ``seq`` was refused: hold every RECEIPT that covers it, for good."""
        self._stop = min(self._stop, seq)

    def receipt_covering(self, tag: int) -> str | None:
        """The id of the first held RECEIPT that waits on publish ``tag`` (to name it in an ERROR)."""
        return next((rid for seq, rid, _, _ in self._held if seq >= tag), None)

    def when_empty(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once no RECEIPT is held (at once if none is)."""
        if self._held:
            self._on_empty.append(callback)
        else:
            callback()

    def release_waiters(self) -> None:
        """Run the ``when_empty`` callbacks now: the session ended, or nothing is held."""
        callbacks, self._on_empty = self._on_empty, []
        for callback in callbacks:
            callback()
