"""Failed logins, counted per client address and user, to stop password guessing (no I/O).

RabbitMQ answers every login itself (the bridge asks it at each CONNECT), so a guesser
could try passwords as fast as RabbitMQ answers. After ``limit`` failed logins of one user
from one client address within ``window`` seconds, further logins of that user from that
address are refused by the bridge, without asking RabbitMQ, until the oldest failure leaves
the window. Once one login has failed, logins still waiting for RabbitMQ's answer count as
failures until it comes, so concurrent guesses cannot slip past the limit (at most ``limit``
of them reach RabbitMQ per window, plus those already in flight at the first failure); a burst
of logins with no failure (10,000 clients of one user reconnecting) is never held back. Other users from the same address, and the same user from elsewhere, are not
affected: a guesser behind a shared address (a load balancer without the PROXY protocol)
cannot lock everyone out, only the account it guesses at, and only from there. A login that
succeeds clears its count.

The state is bounded: at most ``max_keys`` (address, user) pairs, the least recently failed
forgotten first, so a flood of invented user names costs a fixed amount of memory.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from time import monotonic


class LoginThrottle:
    def __init__(
        self, limit: int, window: float = 60.0, *, max_keys: int = 100_000,
        clock: Callable[[], float] = monotonic,
    ) -> None:
        self.limit = limit
        self.window = window
        self.max_keys = max_keys
        self._clock = clock
        self._failures: OrderedDict[tuple[str, str], deque[float]] = OrderedDict()
        self._pending: dict[tuple[str, str], int] = {}  # logins waiting for RabbitMQ's answer

    def __len__(self) -> int:
        """(address, user) pairs remembered."""
        return len(self._failures)

    def retry_after(self, address: str | None, login: str) -> float:
        """Seconds until ``login`` from ``address`` may try again (0: now)."""
        if self.limit <= 0 or address is None:
            return 0.0
        key = (address, login)
        times = self._failures.get(key)
        if times is None:
            return 0.0
        now = self._clock()
        while times and now - times[0] >= self.window:
            times.popleft()
        if not times or len(times) + self._pending.get(key, 0) < self.limit:
            return 0.0
        return self.window - (now - times[0])

    def begin(self, address: str | None, login: str) -> None:
        """A login goes to RabbitMQ: it counts against the limit until failed() or succeeded()."""
        if self.limit > 0 and address is not None:
            key = (address, login)
            self._pending[key] = self._pending.get(key, 0) + 1

    def abandon(self, address: str | None, login: str) -> None:
        """The login got no answer from RabbitMQ (unreachable, cancelled): it counts no more."""
        if address is not None:
            self._end((address, login))

    def _end(self, key: tuple[str, str]) -> None:
        left = self._pending.get(key, 0) - 1
        if left > 0:
            self._pending[key] = left
        else:
            self._pending.pop(key, None)

    def failed(self, address: str | None, login: str) -> None:
        if self.limit <= 0 or address is None:
            return
        key = (address, login)
        self._end(key)
        times = self._failures.pop(key, None)
        if times is None:
            times = deque(maxlen=self.limit)
            if len(self._failures) >= self.max_keys:
                self._failures.popitem(last=False)
        times.append(self._clock())
        self._failures[key] = times  # most recently failed last

    def succeeded(self, address: str | None, login: str) -> None:
        if address is not None:
            self._end((address, login))
            self._failures.pop((address, login), None)
