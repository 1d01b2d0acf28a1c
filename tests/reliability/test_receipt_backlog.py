"""A backlog of unconfirmed publishes must cost linear time to confirm (found by the receipt flood).

The hostile-client run showed a client flooding receipted SENDs stall every
other client of the bridge for seconds, where the same flood through RabbitMQ's
own plugin did not: the ledger found the lowest unconfirmed publish with
``next(iter(dict))`` after each pop, and CPython walks a dict's deleted front
slots one at a time, so confirming a backlog was quadratic (100,000 publishes:
2.4 s of CPU). No timing is asserted: the test pins the cause, a dict scan
per confirm, and the receipts' order.
"""

from __future__ import annotations

from stomp_bridge.core.receipts import ReceiptLedger


class _ScanCounting(dict):
    scans = 0

    def __iter__(self):
        type(self).scans += 1
        return super().__iter__()


def test_confirming_a_backlog_never_scans_the_unconfirmed_publishes():
    written: list[bytes] = []
    ledger = ReceiptLedger(written.append, lambda seconds: None)
    ledger._unconfirmed = _ScanCounting()
    for seq in range(1, 20_001):
        ledger.published(seq)
        if seq % 1000 == 0:
            ledger.receipt(f"r{seq}", f"R{seq}".encode(), seq)
    for tag in range(10, 20_001, 10):
        ledger.confirmed(tag, multiple=True)
    assert _ScanCounting.scans == 0
    assert written == [f"R{seq}".encode() for seq in range(1000, 20_001, 1000)]
    assert ledger.held == 0


def test_single_confirms_out_of_order_release_receipts_only_when_all_before_are_confirmed():
    written: list[bytes] = []
    ledger = ReceiptLedger(written.append, lambda seconds: None)
    for seq in (1, 2, 3):
        ledger.published(seq)
    ledger.receipt("a", b"A", 2)
    ledger.receipt("b", b"B", 3)
    ledger.confirmed(2, multiple=False)
    assert written == []
    ledger.confirmed(1, multiple=False)
    assert written == [b"A"]
    ledger.confirmed(3, multiple=False)
    assert written == [b"A", b"B"]
