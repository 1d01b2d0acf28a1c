"""The one parser for integers in header values.

The plugin reads its integer headers three ways, and the bridge's extensions a
fourth; the differences are observable (which blanks a client may send, whether
a sign is allowed), so they are keywords here instead of four parsers:

- ``blanks=SPACES``: Erlang ``list_to_integer(string:strip(V))``, which strips
  spaces only (``prefetch-count``, ``priority``, ``x-`` queue arguments);
- ``blanks=NONE``: ``binary_to_integer/1``, no blanks at all (``x-stream-offset``'s
  ``offset=N``, the delivery tag of an ACK id);
- ``blanks=ANY, signed=False``: any whitespace around plain digits (Apollo ``ttl``);
- ``lenient=True``: Python's ``int()`` syntax, which the bridge's own headers have
  always accepted (``heart-beat``, Apollo ``credit``, Artemis ``consumer-window-size``):
  any whitespace around, ``_`` between digits, any Unicode decimal digits.

Pure: the caller turns ``None`` into its own error, whose text the plugin fixes.
"""

from __future__ import annotations

import re
from typing import Literal

Blanks = Literal["none", "spaces", "any"]
NONE: Blanks = "none"
SPACES: Blanks = "spaces"
ANY: Blanks = "any"

_SIGNED = re.compile(r"[+-]?[0-9]+").fullmatch
_UNSIGNED = re.compile(r"[0-9]+").fullmatch


def parse_int(text: str, *, blanks: Blanks = NONE, signed: bool = True, lenient: bool = False) -> int | None:
    """``text`` as an int, or None when it is not one under these rules.

    Strict (the default): ASCII digits, an optional ``+``/``-`` when ``signed``,
    and around them only the ``blanks`` allowed. ``lenient``: whatever ``int()``
    takes (``blanks`` and ``signed`` are then ``int()``'s own: any whitespace, a sign).
    """
    if lenient:
        try:
            return int(text)
        except ValueError:
            return None
    if blanks == SPACES:
        text = text.strip(" ")
    elif blanks == ANY:
        text = text.strip()
    if (_SIGNED if signed else _UNSIGNED)(text) is None:
        return None
    return int(text)
