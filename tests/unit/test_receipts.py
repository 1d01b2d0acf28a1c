"""Receipts wait for confirms and leave in frame order (no broker needed)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from stomp_bridge.core.receipts import ReceiptLedger


def ledger():
    out: list[bytes] = []
    latencies: list[float] = []
    return ReceiptLedger(out.append, latencies.append), out, latencies


def test_a_receipt_with_nothing_unconfirmed_goes_at_once():
    book, out, _ = ledger()
    book.receipt("r0", b"R0", last_seq=0)
    assert out == [b"R0"] and book.held == 0


def test_a_receipt_waits_for_every_earlier_publish():
    book, out, latencies = ledger()
    book.published(1)
    book.published(2)
    book.receipt("r2", b"R2", last_seq=2)
    book.confirmed(2, multiple=False)
    assert out == []  # 1 is still unconfirmed
    book.confirmed(1, multiple=False)
    assert out == [b"R2"] and len(latencies) == 2


def test_receipts_leave_in_frame_order_even_for_frames_without_publishes():
    book, out, _ = ledger()
    book.published(1)
    book.receipt("send", b"SEND", last_seq=1)
    book.receipt("subscribe", b"SUB", last_seq=1)  # a later frame waits behind the SEND's receipt
    assert out == []
    book.confirmed(1, multiple=True)
    assert out == [b"SEND", b"SUB"]


def test_a_multiple_confirm_settles_everything_up_to_its_tag():
    book, out, latencies = ledger()
    for seq in (1, 2, 3, 4):
        book.published(seq)
        book.receipt(f"r{seq}", f"R{seq}".encode(), last_seq=seq)
    book.confirmed(3, multiple=True)
    assert out == [b"R1", b"R2", b"R3"] and book.held == 1 and len(latencies) == 3


def test_the_refused_publish_is_named_by_the_first_receipt_covering_it():
    book, _, _ = ledger()
    book.published(1)
    book.receipt("r1", b"R1", last_seq=1)
    book.published(2)
    book.published(3)
    book.receipt("r3", b"R3", last_seq=3)
    assert book.receipt_covering(1) == "r1"
    assert book.receipt_covering(2) == "r3"
    assert book.receipt_covering(4) is None


def test_waiters_run_when_the_last_receipt_leaves_or_when_released():
    book, _, _ = ledger()
    calls: list[str] = []
    book.when_empty(lambda: calls.append("now"))
    assert calls == ["now"]
    book.published(1)
    book.receipt("r1", b"R1", last_seq=1)
    book.when_empty(lambda: calls.append("later"))
    assert calls == ["now"]
    book.confirmed(1, multiple=False)
    assert calls == ["now", "later"]
    book.published(2)
    book.receipt("r2", b"R2", last_seq=2)
    book.when_empty(lambda: calls.append("released"))
    book.release_waiters()
    assert calls == ["now", "later", "released"]


@settings(max_examples=200, deadline=None)
@given(
    frames=st.lists(st.booleans(), min_size=1, max_size=30),  # True: a SEND (publishes) with a receipt
    confirm_order=st.randoms(use_true_random=False),
    multiple=st.booleans(),
)
def test_any_confirm_order_releases_receipts_only_in_frame_order_and_only_when_covered(
    frames, confirm_order, multiple
):
    book, out, _ = ledger()
    seq = 0
    covers = {}
    for index, publishes in enumerate(frames):
        if publishes:
            seq += 1
            book.published(seq)
        book.receipt(str(index), str(index).encode(), last_seq=seq)
        covers[str(index).encode()] = seq
    tags = list(range(1, seq + 1))
    confirm_order.shuffle(tags)
    confirmed: set[int] = set()
    for tag in tags:
        if multiple:
            confirmed |= set(range(1, tag + 1))
        else:
            confirmed.add(tag)
        book.confirmed(tag, multiple)
        assert out == sorted(out, key=lambda f: int(f))  # frame order
        for frame in out:
            assert all(s in confirmed for s in range(1, covers[frame] + 1))
    assert len(out) == len(frames) and book.held == 0
