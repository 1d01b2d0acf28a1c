"""The one integer parser: each caller's variant accepts exactly what it accepted before.

The variants are the plugin's (``list_to_integer(string:strip(V))`` strips spaces only,
``binary_to_integer`` strips nothing) and the bridge's own (Apollo ``ttl``: any whitespace,
no sign; ``lenient``: Python's ``int()``), and a client can tell them apart.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stomp_bridge.protocol.integers import ANY, NONE, SPACES, parse_int


@pytest.mark.parametrize(
    ("text", "blanks", "signed", "expected"),
    [
        ("42", NONE, True, 42),
        ("-7", NONE, True, -7),
        ("+7", NONE, True, 7),
        ("007", NONE, True, 7),
        (" 42", NONE, True, None),  # binary_to_integer: no blanks
        ("42 ", NONE, True, None),
        (" 42 ", SPACES, True, 42),  # string:strip/1: spaces ...
        ("\t42", SPACES, True, None),  # ... only
        ("42\n", SPACES, True, None),
        (" -3 ", SPACES, True, -3),
        ("\t42\n", ANY, False, 42),
        ("-1", ANY, False, None),  # ttl/expires: plain digits
        ("+1", ANY, False, None),
        ("", NONE, True, None),
        ("-", NONE, True, None),
        ("1_000", SPACES, True, None),  # strict: no underscores ...
        ("\u0661\u0662", NONE, True, None),  # ... and ASCII digits only
        ("4 2", SPACES, True, None),
        ("0x10", NONE, True, None),
    ],
)
def test_strict_variants(text, blanks, signed, expected):
    assert parse_int(text, blanks=blanks, signed=signed) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (" 10\t", 10),
        ("-1", -1),
        ("1_000", 1000),  # what int() took for credit, consumer-window-size, heart-beat
        ("\u0661\u0662", 12),
        ("1__0", None),
        ("", None),
        ("1.0", None),
        ("ten", None),
    ],
)
def test_lenient_is_what_int_accepts(text, expected):
    assert parse_int(text, lenient=True) == expected


@given(st.text(max_size=8))
def test_lenient_agrees_with_int(text):
    try:
        expected = int(text)
    except ValueError:
        expected = None
    assert parse_int(text, lenient=True) == expected


@given(st.integers())
def test_strict_round_trip(number):
    assert parse_int(str(number)) == number
    assert parse_int(f"  {number} ", blanks=SPACES) == number
