"""STOMP transactions as a state machine: which frames wait for which COMMIT.

The plugin's rules (``rabbit_stomp_processor``): BEGIN of an open transaction
starts it again, empty; SEND, ACK and NACK with a ``transaction`` header are held
until COMMIT, which runs them in order, or ABORT, which drops them; a transaction
id that is not open is an ERROR. The bridge adds two limits (``max_transactions``,
``max_transaction_actions``) so that a client cannot hold unbounded memory.

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


class Transactions:
    """The open transactions of one connection, each with its held frames in order."""

    __slots__ = ("open", "max_transactions", "max_actions")

    def __init__(self, max_transactions: int, max_actions: int) -> None:
        self.open: dict[str, list[Frame]] = {}
        self.max_transactions = max_transactions
        self.max_actions = max_actions

    def __len__(self) -> int:
        return len(self.open)

    def begin(self, tx: str) -> None:
        # The plugin's BEGIN of an open transaction starts it again, empty.
        if tx not in self.open and len(self.open) >= self.max_transactions:
            raise FrameRejected(
                "Transaction limit exceeded",
                f"Too many concurrent transactions (limit {self.max_transactions})",
            )
        self.open[tx] = []

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
        actions.append(frame)
        return True

    def commit(self, tx: str) -> list[Frame]:
        """Close ``tx``; its held frames, in the order they came, for the caller to run."""
        actions = self._actions(tx)
        del self.open[tx]
        return actions

    def abort(self, tx: str) -> None:
        self._actions(tx)
        del self.open[tx]

    def clear(self) -> None:
        self.open.clear()

    def _actions(self, tx: str) -> list[Frame]:
        actions = self.open.get(tx)
        if actions is None:
            raise FrameRejected("Bad transaction", f"Invalid transaction identifier: {tp(tx)}\n")
        return actions
