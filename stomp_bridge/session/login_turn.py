"""A login's turn with the login throttle: the one wait its rules (throttle.py, pure) ask for.

The session wraps the opening of its AMQP session in :func:`login_turn`; RabbitMQ's refusal
counts as a failed login, no answer (unreachable, cancelled) as none, anything else as a
success, which makes the password a known one for the user.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from stomp_bridge.protocol.errors import AccessRefused
from stomp_bridge.core import login

if TYPE_CHECKING:
    from stomp_bridge.metrics import Counters
    from stomp_bridge.session.throttle import LoginThrottle


@contextlib.asynccontextmanager
async def login_turn(
    throttle: LoginThrottle | None, peer: str | None, user: str, passcode: str, counters: Counters,
) -> AsyncIterator[None]:
    """Wait for this login's turn to be checked by RabbitMQ (at once unless its user is being
    guessed at from ``peer``), or raise the throttle's refusal; then record how it went."""
    if throttle is None:
        yield
        return
    admission = throttle.admit(peer, user, passcode)
    if admission.refused_for > 0:
        counters.logins_throttled += 1
        raise login.throttled(throttle, peer, user, admission.refused_for)
    try:
        if admission.wait > 0:
            counters.logins_delayed += 1
            await asyncio.sleep(admission.wait)  # its turn: a time, not an event
        yield
    except AccessRefused:
        throttle.failed(admission)
        raise
    except BaseException:
        throttle.abandon(admission)
        raise
    throttle.succeeded(admission)
