"""Inputs the fuzzers found, kept as regression tests, and the committed fuzzing corpus."""

from __future__ import annotations

from pathlib import Path

import pytest

from reliability.fuzz_parser import check
from stomp_bridge.protocol.parser import FrameParser, Limits

CORPUS = Path(__file__).parent / "corpus" / "parser"


def test_a_partial_header_line_is_measured_from_its_own_start_not_the_chunks():
    # Found by atheris: the line-length check for a header line still in flight
    # counted from where the read began, so earlier complete lines in the same
    # chunk made a legal line "too long" (whole input refused, same bytes fed
    # one at a time accepted).
    limits = Limits(max_header_length=48)
    head = b"SEND\n" + b"a:" + b"x" * 40 + b"\n" + b"b:" + b"y" * 46
    whole = FrameParser(limits)
    whole.feed(head)
    assert whole.next_frame() is None
    whole.feed(b"\n\n\0")
    assert whole.next_frame() is not None


@pytest.mark.parametrize("path", sorted(CORPUS.iterdir()), ids=lambda p: p.name)
def test_corpus_input_keeps_the_parser_property(path):
    check(path.read_bytes())
