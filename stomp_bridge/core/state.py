"""A connection's state machine, whole: its four states, what every client command does in
each, and every move between them. Everything that changes ``Context.state`` goes through
:func:`move`, and every frame's handler is looked up with :func:`action`, here only (as h11's
``_state.py``: a missing entry is the error).

* ``login``: until CONNECT succeeds;
* ``open``: logged in;
* ``failing``: RabbitMQ refused a publish; no frame is read any more and the ERROR waits for
  the confirms of what came before;
* ``closed``: after an ERROR that closes, a DISCONNECT, or the client's going.

An action names a handler (a function of ``commands.py``, ``send.py`` or ``subscribe.py``,
looked up in ``machine.HANDLERS``); None: the frame is dropped. A command not in a state's row
is not a STOMP command: before login "Illegal command" (or, with ``implicit_connect``, a login
first), after it "Bad command", as the plugin answers both.
"""

from __future__ import annotations

LOGIN = "login"
OPEN = "open"
FAILING = "failing"
CLOSED = "closed"
STATES = (LOGIN, OPEN, FAILING, CLOSED)

NOT_CONNECTED = "not_connected"  # "Illegal command", or log in first with implicit_connect
BAD_COMMAND = "bad_command"

_COMMANDS = ("SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK", "BEGIN", "COMMIT", "ABORT", "DISCONNECT")

# state -> command -> action
ACTIONS: dict[str, dict[str, str | None]] = {
    LOGIN: {"CONNECT": "connect", "STOMP": "connect", **{c: NOT_CONNECTED for c in _COMMANDS}},
    OPEN: {"CONNECT": "already_connected", "STOMP": "already_connected", **{c: c.lower() for c in _COMMANDS}},
    FAILING: {},
    CLOSED: {},
}
# what a command missing from a state's row does there
OTHERWISE: dict[str, str | None] = {LOGIN: NOT_CONNECTED, OPEN: BAD_COMMAND, FAILING: None, CLOSED: None}

# (state, event) -> the state it moves to; any other pair is a bug
MOVES: dict[tuple[str, str], str] = {
    (LOGIN, "logged_in"): OPEN,
    (OPEN, "refused"): FAILING,  # RabbitMQ returned or nacked a publish
    (FAILING, "refused"): FAILING,  # an earlier publish refused too
    (LOGIN, "closed"): CLOSED,
    (OPEN, "closed"): CLOSED,
    (FAILING, "closed"): CLOSED,
}


def action(state: str, command: str) -> str | None:
    """What ``command`` does in ``state``: a handler's name, or None (the frame is dropped)."""
    row = ACTIONS[state]
    return row[command] if command in row else OTHERWISE[state]


def move(state: str, event: str) -> str:
    """The state ``event`` leads to from ``state`` (a KeyError: a move the machine does not make)."""
    return MOVES[state, event]
