"""Publishing rows as SENDs with receipts and a bounded window of unconfirmed ones.

The bridge sends a RECEIPT only after RabbitMQ confirmed the publish, and
receipts leave in frame order, so counting receipts is enough to know how
many SENDs are still unconfirmed. ``window`` bounds that number: at most that
many messages are in flight, so a task's memory and the broker's backlog stay
bounded however many rows the task has. An ERROR ends the task with the
broker's reason.
"""

from __future__ import annotations

from stomp_bridge.spark.client import StompClient, StompClientError, check, describe


class Publisher:
    def __init__(self, client: StompClient, window: int, transaction: str | None = None) -> None:
        self.client = client
        self.window = window
        self.transaction = transaction
        self.sent = 0
        self.confirmed = 0
        if transaction is not None:
            client.send("BEGIN", {"transaction": transaction})

    def publish(self, destination: str, body: bytes, headers: dict[str, str]) -> None:
        frame_headers = {"destination": destination, **headers}
        if self.transaction is not None:
            frame_headers["transaction"] = self.transaction
        else:
            self.sent += 1
            frame_headers["receipt"] = str(self.sent)
        self.client.send("SEND", frame_headers, body)
        if self.transaction is None:
            while self.sent - self.confirmed >= self.window:
                self._receipt(self.client.expect())
            while (frame := self.client.poll(0)) is not None:
                self._receipt(frame)
        else:
            self.sent += 1
            frame = self.client.poll(0)
            if frame is not None:  # nothing but ERROR comes before COMMIT's receipt
                check(frame)

    def _receipt(self, frame) -> None:
        check(frame)
        if frame.command != "RECEIPT":
            raise StompClientError(f"expected RECEIPT, got {describe(frame)}")
        self.confirmed += 1

    def finish(self) -> int:
        """Wait for every receipt (or COMMIT's); returns how many messages were confirmed."""
        if self.transaction is not None:
            self.client.send("COMMIT", {"transaction": self.transaction, "receipt": "commit"})
            frame = check(self.client.expect())
            if frame.command != "RECEIPT":
                raise StompClientError(f"expected RECEIPT for COMMIT, got {describe(frame)}")
            self.confirmed = self.sent
            return self.sent
        while self.confirmed < self.sent:
            self._receipt(self.client.expect())
        return self.confirmed
