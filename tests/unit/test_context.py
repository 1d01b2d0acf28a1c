"""core/context.py's own fast paths, each held to the reference it stands for."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from stomp_bridge.core.context import VECTORED_BODY
from testkit.core import Harness

_h = Harness()
_h.connect()
CORE = _h.core
CORE.wakeup = None  # no loop runs here: nothing to wake

header_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@settings(max_examples=300)
@given(
    st.dictionaries(header_text.filter(bool), header_text, max_size=5),
    st.sampled_from([b"", b"body", b"\0nul", b"x" * VECTORED_BODY]),
    st.sampled_from(["1.0", "1.1", "1.2"]),
    st.booleans(),
)
def test_a_delivered_message_is_what_encode_makes_of_it(headers, body, version, trailing_lf):
    """deliver encodes without encode's call (one per delivery): byte for byte encode's frame,
    for every version (1.0 escaped as 1.2, a raw CR in 1.1 as 1.2) and frame end."""
    core = CORE
    core.version, core.eol = version, (b"\0\n" if trailing_lf else b"\0")
    core.out.clear()
    core.deliver(dict(headers), body)
    (got,) = core.data_to_send()
    want = core.encode("MESSAGE", dict(headers), body, len(body) >= VECTORED_BODY)
    assert got == want
