"""Failed logins per client address and user: guessing kept slow, the rightful user let in (no I/O).

RabbitMQ answers every login (the bridge asks it at each CONNECT), so a guesser could try
passwords as fast as RabbitMQ answers, over as many connections as it likes. The rules:

- Up to ``limit`` failures of one user from one address within ``window`` seconds change
  nothing. Logins still waiting for RabbitMQ's answer count as failures until it comes, one
  per distinct password, so concurrent guesses cannot slip past the limit, while a burst of
  logins with one password (10,000 clients of one user reconnecting) counts once. OAuth 2
  tokens (a JWT as the passcode) do not count while in flight: every client's token differs,
  a reconnecting crowd of them is no guessing, and no password looks like one.
- Past the limit the pair is *hot*: its logins reach RabbitMQ one at a time, each turn at least
  ``spacing`` after the last turn or failure. The spacing starts at ``window / limit`` (the
  limit's own average rate) and doubles with every further failure up to ``window``, so a
  guesser gets ``limit`` guesses, then one after 6, 12, 24 and 48 s, then one a minute (at
  the default 10 per minute), however many connections it opens: turns are per pair. A
  login waits for its turn when it comes within ``max_wait``, else it is refused at once,
  told when to try again. The pair cools down a ``window`` after its next turn passed with no
  failure.
- A password RabbitMQ accepted for that user (from any address) in the last
  ``known_good_seconds`` takes no turn: RabbitMQ checks it at once, so someone guessing a
  user's password from its address (NAT, a balancer without the PROXY protocol) cannot keep
  it out. Passwords are kept as HMACs under a key of this process, as the AMQP pool keeps
  them. A password the bridge has not seen accepted (the first login after the bridge
  started, or after a password change) shares the turns with the guesses.
- A success does not wipe a pair's failures (a guesser would get ``limit`` free guesses each
  time the rightful user logs in); it makes the password known instead.

Other users from the same address, and the same user from elsewhere, are not affected. The
state is bounded: at most ``max_keys`` pairs (the least recently failed forgotten first) and
``max_users`` users' known passwords (``KNOWN_PER_USER`` each, least recently accepted
forgotten first), each under a key of at most ``LOGIN_KEPT`` characters (a longer login is kept
as its HMAC: a flood of invented 60 kB user names held 9 kB a pair, 870 MB at 100,000 pairs),
so a flood of invented user names costs a fixed amount of memory; and :meth:`LoginThrottle.sweep`
forgets the pairs that have cooled down, so it is given back once the flood is over.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from time import monotonic

from stomp_bridge.protocol.features import token_claims

KNOWN_PER_USER = 4  # a password rotation, clients on the old and new one, with room
LOGIN_KEPT = 128  # characters of a login kept as it is; a longer one is kept as its HMAC


@dataclass(frozen=True, slots=True)
class Admission:
    """The throttle's answer to one login; hand it back with failed(), succeeded() or abandon()."""

    address: str | None
    login: str
    digest: bytes
    wait: float = 0.0  # seconds until RabbitMQ may check it (its turn)
    refused_for: float = 0.0  # > 0: refused now; its turn would come in this many seconds
    counted: bool = False  # in flight, counted against the limit until its answer


class _Pair:
    __slots__ = ("failures", "strikes", "last_failure", "next_turn")

    def __init__(self, limit: int) -> None:
        self.failures: deque[float] = deque(maxlen=limit)  # the last ``limit`` failure times
        self.strikes = -1  # failures since the pair turned hot (-1: cool)
        self.last_failure = 0.0
        self.next_turn = 0.0


class LoginThrottle:
    def __init__(
        self, limit: int, window: float = 60.0, *, max_wait: float = 10.0, max_keys: int = 100_000,
        known_good_seconds: float = 24 * 3600.0, max_users: int = 100_000,
        clock: Callable[[], float] = monotonic,
    ) -> None:
        self.limit = limit
        self.window = window
        self.max_wait = max_wait
        self.max_keys = max_keys
        self.known_good_seconds = known_good_seconds
        self.max_users = max_users
        self._clock = clock
        self._key = os.urandom(32)
        self._pairs: OrderedDict[tuple[str, str], _Pair] = OrderedDict()  # least recently failed first
        # Logins waiting for RabbitMQ's answer, per pair and password: as many entries as logins
        # in flight at most, each gone with its answer.
        self._pending: dict[tuple[str, str], dict[bytes, int]] = {}
        self._known: OrderedDict[str, OrderedDict[bytes, float]] = OrderedDict()  # user -> digest -> accepted

    def __len__(self) -> int:
        """(address, user) pairs remembered."""
        return len(self._pairs)

    def _digest(self, passcode: str) -> bytes:
        return hmac.new(self._key, passcode.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()

    def _user(self, login: str) -> str:
        """The key a login is remembered under: itself, or past LOGIN_KEPT characters its HMAC
        (after a NUL, which no STOMP header holds, so it never equals a login)."""
        return login if len(login) <= LOGIN_KEPT else "\0" + self._digest(login).hex()

    def sweep(self) -> int:
        """Forget the pairs that have cooled down (no failure within the window, not hot, none in
        flight): such a pair counts as none. Walks the least recently failed first, up to the
        first failure within the window. The number forgotten."""
        now = self._clock()
        stale = []
        for key, pair in self._pairs.items():
            if now - pair.last_failure < self.window:
                break
            self._cool_down(key, pair, now)
            if pair.strikes < 0 and not pair.failures and key not in self._pending:
                stale.append(key)
        for key in stale:
            del self._pairs[key]
        return len(stale)

    def spacing(self, strikes: int) -> float:
        """Seconds between the turns of a hot pair after ``strikes`` failures past the limit."""
        return min(self.window, self.window / self.limit * 2 ** min(strikes, 32))

    def known(self, login: str, digest: bytes) -> bool:
        accepted = self._known.get(self._user(login), {}).get(digest)
        return accepted is not None and self._clock() - accepted < self.known_good_seconds

    def _cool_down(self, key: tuple[str, str], pair: _Pair, now: float) -> None:
        """Forget failures older than the window; a hot pair cools a window after its next turn."""
        failures = pair.failures
        while failures and now - failures[0] >= self.window:
            failures.popleft()
        if pair.strikes >= 0 and key not in self._pending and now >= max(pair.next_turn, pair.last_failure) + self.window:
            pair.strikes = -1
            failures.clear()

    def _pair(self, key: tuple[str, str]) -> _Pair:
        pair = self._pairs.get(key)
        if pair is None:
            if len(self._pairs) >= self.max_keys:
                self._pairs.popitem(last=False)
            pair = self._pairs[key] = _Pair(self.limit)
        else:
            self._pairs.move_to_end(key)  # most recently failed last
        return pair

    def _used(self, key: tuple[str, str], pair: _Pair | None, digest: bytes | None = None) -> int:
        """Failures in the window and distinct passwords in flight (with ``digest``): many clients
        of one user reconnecting with one password count once."""
        in_flight = self._pending.get(key, {})
        distinct = len(in_flight) + (digest is not None and digest not in in_flight)
        return (len(pair.failures) if pair is not None else 0) + distinct

    def admit(self, address: str | None, login: str, passcode: str) -> Admission:
        """May RabbitMQ check this login now, after a wait, or not (refused at once)?"""
        digest = self._digest(passcode)
        if self.limit <= 0 or address is None or self.known(login, digest):
            return Admission(address, login, digest)
        key = (address, self._user(login))
        now = self._clock()
        pair = self._pairs.get(key)
        if pair is not None:
            self._cool_down(key, pair, now)
        if pair is None or pair.strikes < 0:
            if token_claims(passcode) is not None:
                return Admission(address, login, digest)
            if self._used(key, pair, digest) <= self.limit:
                return self._counted(Admission(address, login, digest, counted=True))
            pair = self._pair(key)  # hot from here: this login takes the first turn
            pair.strikes = 0
            pair.next_turn = max(pair.next_turn, (pair.last_failure if pair.failures else now) + self.spacing(0))
        turn = max(now, pair.next_turn)
        if turn - now > self.max_wait:
            return Admission(address, login, digest, refused_for=turn - now)
        pair.next_turn = turn + self.spacing(pair.strikes)
        return self._counted(Admission(address, login, digest, wait=turn - now, counted=True))

    def _counted(self, admission: Admission) -> Admission:
        assert admission.address is not None
        in_flight = self._pending.setdefault((admission.address, self._user(admission.login)), {})
        in_flight[admission.digest] = in_flight.get(admission.digest, 0) + 1
        return admission

    def _end(self, admission: Admission) -> None:
        if not admission.counted or admission.address is None:
            return
        key = (admission.address, self._user(admission.login))
        in_flight = self._pending.get(key)
        if in_flight is None:
            return
        left = in_flight.get(admission.digest, 0) - 1
        if left > 0:
            in_flight[admission.digest] = left
            return
        in_flight.pop(admission.digest, None)
        if not in_flight:
            del self._pending[key]

    def abandon(self, admission: Admission) -> None:
        """No answer from RabbitMQ (unreachable, cancelled): the login counts no more."""
        self._end(admission)

    def failed(self, admission: Admission) -> None:
        self._end(admission)
        known = self._known.get(self._user(admission.login))
        if known is not None:
            known.pop(admission.digest, None)  # changed in RabbitMQ since: no longer a known password
        if self.limit <= 0 or admission.address is None:
            return
        now = self._clock()
        key = (admission.address, self._user(admission.login))
        pair = self._pair(key)
        self._cool_down(key, pair, now)
        if pair.strikes >= 0:
            pair.strikes += 1
        pair.failures.append(now)
        pair.last_failure = now
        if pair.strikes < 0 and self._used(key, pair) >= self.limit:
            pair.strikes = 0
        if pair.strikes >= 0:
            pair.next_turn = max(pair.next_turn, now + self.spacing(pair.strikes))

    def succeeded(self, admission: Admission) -> None:
        """RabbitMQ accepted it: the password is known for this user (the pair's failures stay)."""
        self._end(admission)
        if self.limit <= 0:
            return
        user = self._user(admission.login)
        known = self._known.pop(user, None)
        if known is None:
            known = OrderedDict()
            if len(self._known) >= self.max_users:
                self._known.popitem(last=False)
        known.pop(admission.digest, None)
        known[admission.digest] = self._clock()  # most recently accepted last
        while len(known) > KNOWN_PER_USER:
            known.popitem(last=False)
        self._known[user] = known
