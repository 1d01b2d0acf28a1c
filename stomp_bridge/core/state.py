"""What every client command does in every state of a connection: one table.

A connection is ``login`` until CONNECT succeeds, then ``open``; ``failing`` once RabbitMQ
refused a publish (no frame is read any more: the ERROR waits for the confirms of what came
before), and ``closed`` after its ERROR or DISCONNECT. Frames in the last two are dropped.

Each entry names the handler (a function of ``commands.py``, ``send.py`` or ``subscribe.py``,
looked up in ``machine.HANDLERS``) or the refusal. A command missing from the table is not a
STOMP command: ``Bad command`` once logged in, as the plugin answers it.
"""

from __future__ import annotations

from stomp_bridge.core.context import LOGIN, OPEN

NOT_CONNECTED = "not_connected"  # "Illegal command", or log in first with implicit_connect
BAD_COMMAND = "bad_command"

#                    in "login"          in "open"
TRANSITIONS: dict[str, tuple[str, str]] = {
    "CONNECT":      ("connect",          "already_connected"),
    "STOMP":        ("connect",          "already_connected"),
    "SEND":         (NOT_CONNECTED,      "send"),
    "SUBSCRIBE":    (NOT_CONNECTED,      "subscribe"),
    "UNSUBSCRIBE":  (NOT_CONNECTED,      "unsubscribe"),
    "ACK":          (NOT_CONNECTED,      "ack"),
    "NACK":         (NOT_CONNECTED,      "nack"),
    "BEGIN":        (NOT_CONNECTED,      "begin"),
    "COMMIT":       (NOT_CONNECTED,      "commit"),
    "ABORT":        (NOT_CONNECTED,      "abort"),
    "DISCONNECT":   (NOT_CONNECTED,      "disconnect"),
}
UNKNOWN = (NOT_CONNECTED, BAD_COMMAND)


def action(state: str, command: str) -> str | None:
    """The handler for ``command`` in ``state``; None: the frame is dropped."""
    if state is LOGIN:
        return TRANSITIONS.get(command, UNKNOWN)[0]
    if state is OPEN:
        return TRANSITIONS.get(command, UNKNOWN)[1]
    return None
