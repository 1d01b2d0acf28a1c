"""The committed fuzzing corpus (reliability/corpus/parser/, what atheris kept), replayed: every
input keeps the parser property the fuzzer checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from reliability.fuzz_parser import check

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "parser"


@pytest.mark.parametrize("path", sorted(CORPUS.iterdir()), ids=lambda p: p.name)
def test_corpus_input_keeps_the_parser_property(path):
    check(path.read_bytes())
