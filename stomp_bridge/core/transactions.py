"""STOMP transactions as a state machine: which frames wait for which COMMIT.

The plugin's rules (``rabbit_stomp_processor``): BEGIN of an open transaction
starts it again, empty; SEND, ACK and NACK with a ``transaction`` header are held
until COMMIT, which runs them in order, or ABORT, which drops them; a transaction
id that is not open is an ERROR. The bridge adds limits so that a client cannot hold
unbounded memory: open transactions (``max_transactions``), frames per transaction
(``max_transaction_actions``) and bytes held by all of a connection's open transactions
together (``max_transaction_bytes``: bodies and header text). Counting frames alone let
1024 actions of 4 MiB in each of 16 transactions, 64 GiB, wait for a COMMIT.

No I/O: the session runs what :meth:`Transactions.commit` returns.
"""

from __future__ import annotations

from collections.abc import Mapping

from stomp_bridge.protocol.errors import FrameRejected, tp
from stomp_bridge.protocol.frames import Frame


def transaction_id(headers: Mapping[str, str], command: str) -> str:
    """BEGIN/COMMIT/ABORT's ``transaction`` header, which they must carry."""
    tx = headers.get("transaction")
    if tx is None:
        raise FrameRejected("Missing transaction", f"\"{command}\" must include a 'transaction' header\n")
    return tx


def held_size(frame: Frame) -> int:
    """What a held frame is counted as: its body and its header lines (name, colon, value, EOL),
    in characters, which are bytes for the ASCII that headers are as a rule."""
    return len(frame.body) + sum(len(name) + len(value) + 2 for name, value in frame.headers.items())


class Transactions:
    """The open transactions of one connection, each with its held frames in order, and the
    bytes they hold: per transaction (``bytes``) and all together (``held_bytes``)."""

    __slots__ = ("open", "bytes", "held_bytes", "max_transactions", "max_actions", "max_bytes")

    def __init__(self, max_transactions: int, max_actions: int, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.open: dict[str, list[Frame]] = {}
        self.bytes: dict[str, int] = {}  # by transaction id
        self.held_bytes = 0
        self.max_transactions = max_transactions
        self.max_actions = max_actions
        self.max_bytes = max_bytes

    def __len__(self) -> int:
        return len(self.open)

    def begin(self, tx: str) -> None:
        # The plugin's BEGIN of an open transaction starts it again, empty.
        if tx not in self.open and len(self.open) >= self.max_transactions:
            raise FrameRejected(
                "Transaction limit exceeded",
                f"Too many concurrent transactions (limit {self.max_transactions})",
            )
        self._drop(tx)
        self.open[tx] = []
        self.bytes[tx] = 0

    def hold(self, frame: Frame) -> bool:
        """Keep a SEND/ACK/NACK for its transaction's COMMIT; False when it names none."""
        tx = frame.headers.get("transaction")
        if tx is None:
            return False
        actions = self._actions(tx)
        if len(actions) >= self.max_actions:
            raise FrameRejected(
                "Transaction too large", f"Too many actions in transaction (limit {self.max_actions})"
            )
        size = held_size(frame)
        if self.held_bytes + size > self.max_bytes:
            raise FrameRejected(
                "Transaction too large",
                f"Open transactions would hold {self.held_bytes + size} bytes with this "
                f"{frame.command} of {size} (limit {self.max_bytes} bytes for all of a connection's "
                "open transactions, the bridge's max_transaction_bytes): COMMIT or ABORT, then go on "
                "in a new transaction",
            )
        actions.append(frame)
        self.bytes[tx] += size
        self.held_bytes += size
        return True

    def commit(self, tx: str) -> list[Frame]:
        """Close ``tx``; its held frames, in the order they came, for the caller to run."""
        actions = self._actions(tx)
        self._drop(tx)
        return actions

    def abort(self, tx: str) -> None:
        self._actions(tx)
        self._drop(tx)

    def clear(self) -> None:
        self.open.clear()
        self.bytes.clear()
        self.held_bytes = 0

    def _drop(self, tx: str) -> None:
        if self.open.pop(tx, None) is not None:
            self.held_bytes -= self.bytes.pop(tx)

    def _actions(self, tx: str) -> list[Frame]:
        actions = self.open.get(tx)
        if actions is None:
            raise FrameRejected("Bad transaction", f"Invalid transaction identifier: {tp(tx)}\n")
        return actions
