"""What the core tells an observer about the messages it handles, so the driver can record
what happened (OpenTelemetry spans, ``session/tracing.py``) without the core knowing how.

The core decides nothing from these calls and imports nothing for them: with no observer
(``Context.observer`` None, the default) each place that would call one costs an attribute
read. Calls come in the order things happen:

* one SEND: :meth:`~Observer.send` when the core starts on it (a transactional one at its
  COMMIT); :meth:`~Observer.published` for each publish it makes, before the publish leaves (the
  observer may add entries to ``properties["headers"]``, which the publish carries);
  :meth:`~Observer.handled` once it queued them all (the callable it returns runs when the SEND's
  RECEIPT is written, never if the connection ends first); then :meth:`~Observer.confirmed` or
  :meth:`~Observer.refused` as RabbitMQ answers each publish. A SEND the core answers with an
  ERROR: :meth:`~Observer.failed` (and no ``handled``).
* one delivery: :meth:`~Observer.delivered` before its MESSAGE is encoded (the observer may
  change the MESSAGE's headers); :meth:`~Observer.settled` when the client's ACK or NACK
  settles it (``ack:auto`` deliveries have none).

The driver tells the observer itself when the connection ends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from stomp_bridge.core.subscriptions import Subscription
from stomp_bridge.protocol.errors import StompError
from stomp_bridge.protocol.frames import Frame


class Observer(Protocol):
    def send(self, frame: Frame) -> None:
        """The core starts on a SEND."""

    def published(self, frame: Frame, seq: int, exchange: str, routing_key: str, properties: dict[str, Any]) -> None:
        """``frame`` made publish ``seq`` (RabbitMQ confirms it by that number)."""

    def handled(self, frame: Frame) -> Callable[[], None] | None:
        """Every publish of ``frame`` is queued; what to run when its RECEIPT is written."""

    def confirmed(self, tag: int, multiple: bool) -> None:
        """RabbitMQ confirmed publish ``tag`` (and every earlier one if ``multiple``)."""

    def refused(self, seq: int, error: StompError) -> None:
        """RabbitMQ returned (mandatory) or nacked publish ``seq``; ``error`` is the ERROR owed."""

    def failed(self, frame: Frame, error: StompError) -> None:
        """The core answered ``frame`` (any command) with ``error``."""

    def delivered(self, sub: Subscription, delivery_tag: int, headers: dict[str, str],
                  properties: dict[str, Any]) -> None:
        """basic.deliver ``delivery_tag`` for ``sub`` becomes a MESSAGE with ``headers``."""

    def settled(self, delivery_tag: int, multiple: bool, command: str) -> None:
        """The client's ``command`` (ACK or NACK) settles ``delivery_tag`` (and every earlier
        one if ``multiple``)."""
