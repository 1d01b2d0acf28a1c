"""Where the STOMP plugin's behaviour depends on the RabbitMQ version the bridge is connected to.

The bridge follows the newest plugin (4.3) wherever a client cannot tell which broker is
behind it: ERROR texts, which ERRORs close, header parsing. Where what the plugin does is
stored in RabbitMQ, or refused by it, it follows the plugin of the connected broker, so that
a client sees the queues and arguments it saw before the bridge. Each rule names the versions
it was checked on (the plugins of 3.10.8, 4.0.5 and 4.3.6, side by side) and where the change
comes from. One object per AMQP connection (from ``server_properties``), pure.
"""

from __future__ import annotations

from dataclasses import dataclass


def version_tuple(text: str) -> tuple[int, ...]:
    """``"4.3.6"`` -> ``(4, 3, 6)``; ``"4.3.0-rc.1+123"`` -> ``(4, 3, 0)``; junk -> ``()``."""
    parts: list[int] = []
    for piece in text.split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break
    return tuple(parts)


# Queue arguments the plugin takes from SEND/SUBSCRIBE headers (build_arguments/1):
# 3.10 knew only these; 3.11 added x-max-age and x-stream-max-segment-size-bytes, 3.13
# x-stream-filter-size-bytes (a 3.10 broker would refuse those on its classic queues).
QUEUE_ARGUMENTS_3_10 = frozenset(
    (
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
        "x-expires",
        "x-max-length",
        "x-max-length-bytes",
        "x-max-priority",
        "x-message-ttl",
        "x-queue-type",
        "x-overflow",  # in the plugin's docs, not its code: the bridge takes it on every version
    )
)


@dataclass(frozen=True, slots=True)
class Dialect:
    """The plugin rules of one broker version (``()``: unknown, taken as the newest)."""

    version: tuple[int, ...] = ()

    def _at_least(self, *version: int) -> bool:
        return not self.version or self.version >= version

    @property
    def topic_queues_exclusive(self) -> bool:
        """A non-durable ``/topic/`` subscription queue is exclusive from 4.2 on (rabbitmq-server
        #13016, for the transient non-exclusive queues 4.3 denies); 3.10 and 4.0 made it shared
        (verified), so two connections naming it with ``x-queue-name`` split its messages."""
        return self._at_least(4, 2)

    @property
    def exchange_queues_exclusive(self) -> bool:
        """``/exchange/`` subscription queues are exclusive as documented since 3.12 (issue
        #6955); 3.10's were not (verified on 3.10.8; exclusive on 4.0.5)."""
        return self._at_least(3, 12)

    @property
    def replicated_queues_durable(self) -> bool:
        """A quorum queue or stream is declared durable and non-exclusive whatever the headers
        say (4.x's routing util; 3.10 passed the headers on, and RabbitMQ refused)."""
        return self._at_least(4, 0)

    @property
    def stream_nack_refused(self) -> bool:
        """A stream refuses basic.nack and basic.reject with a connection error (540) before 4.0
        (verified on 3.10.8: the plugin's client gets ``AMQP channel died``); 4.0.5 and 4.3.6
        take the NACK (verified)."""
        return not self._at_least(4, 0)

    @property
    def stream_texts_before_4(self) -> bool:
        """RabbitMQ's words for a stream's refusals: ``... not supported by stream queues queue
        'q' in vhost '/'`` and ``consumer prefetch count is not set for 'queue 'q' in vhost
        '/''`` on 3.10.8; ``... by stream queue 'q' in vhost '/'`` and ``... set for stream
        queue 'q' in vhost '/'`` on 4.0.5 and 4.3.6 (verified)."""
        return not self._at_least(4, 0)

    @property
    def queue_argument_names(self) -> frozenset[str] | None:
        """The ``x-`` headers that become queue arguments; None: the newest list."""
        return None if self._at_least(3, 11) else QUEUE_ARGUMENTS_3_10


NEWEST = Dialect()
