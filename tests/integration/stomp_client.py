"""stomp.py 9 wrapped for tests: every received frame lands on a queue.Queue.

Tests synchronise on frames with ``next_message(timeout=...)`` and
``send_with_receipt`` instead of sleeping.
"""

from __future__ import annotations

import itertools
import queue
from dataclasses import dataclass

import stomp

TIMEOUT = 5.0


@dataclass
class Received:
    kind: str  # "MESSAGE", "RECEIPT" or "ERROR"
    headers: dict[str, str]
    body: bytes | str


class _Listener(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.messages: queue.Queue[Received] = queue.Queue()
        self.receipts: queue.Queue[Received] = queue.Queue()
        self.errors: queue.Queue[Received] = queue.Queue()

    def on_message(self, frame) -> None:
        self.messages.put(Received("MESSAGE", dict(frame.headers), frame.body))

    def on_receipt(self, frame) -> None:
        self.receipts.put(Received("RECEIPT", dict(frame.headers), frame.body))

    def on_error(self, frame) -> None:
        self.errors.put(Received("ERROR", dict(frame.headers), frame.body))


class Client:
    """A connected stomp.py client (STOMP 1.2 unless ``version`` says otherwise)."""

    _ids = itertools.count(1)

    def __init__(self, target, version: str = "1.2", login: str = "guest", passcode: str = "guest",
                 vhost: str = "/") -> None:
        cls = {"1.0": stomp.Connection10, "1.1": stomp.Connection11, "1.2": stomp.Connection12}[version]
        kwargs = {} if version == "1.0" else {"heartbeats": (0, 0), "vhost": vhost}
        self.conn = cls([target.address], auto_decode=False, **kwargs)
        self.listener = _Listener()
        self.conn.set_listener("t", self.listener)
        self.conn.connect(login, passcode, wait=True)

    def send(self, destination: str, body: bytes | str = b"", headers: dict[str, str] | None = None) -> None:
        self.conn.send(destination, body, headers=headers or {})

    def send_with_receipt(self, destination: str, body: bytes | str = b"",
                          headers: dict[str, str] | None = None) -> Received:
        rid = f"r-{next(self._ids)}"
        self.conn.send(destination, body, headers={**(headers or {}), "receipt": rid})
        return self.wait_receipt(rid)

    def wait_receipt(self, rid: str, timeout: float = TIMEOUT) -> Received:
        got = self.listener.receipts.get(timeout=timeout)
        assert got.headers["receipt-id"] == rid, got
        return got

    def subscribe(self, destination: str, sub_id: str = "1", ack: str = "auto",
                  headers: dict[str, str] | None = None) -> None:
        """SUBSCRIBE and wait for the receipt, so the subscription exists afterwards."""
        rid = f"sub-{next(self._ids)}"
        self.conn.subscribe(destination, sub_id, ack=ack, headers={**(headers or {}), "receipt": rid})
        self.wait_receipt(rid)

    def next_message(self, timeout: float = TIMEOUT) -> Received:
        try:
            return self.listener.messages.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no MESSAGE within {timeout}s") from None

    def no_message(self, timeout: float = 0.5) -> None:
        try:
            got = self.listener.messages.get(timeout=timeout)
        except queue.Empty:
            return
        raise AssertionError(f"unexpected MESSAGE {got}")

    def disconnect(self) -> None:
        if self.conn.is_connected():
            self.conn.disconnect(receipt=f"bye-{next(self._ids)}")

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.disconnect()
