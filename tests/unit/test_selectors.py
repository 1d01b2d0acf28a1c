"""JMS selectors: parsing errors, three-valued logic, operators, and a fuzz property."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from stomp_bridge.protocol.selectors import SelectorError, compile_selector, tokenize

HEADERS = {
    "type": "car",
    "color": "blue",
    "weight": "3000",
    "price": "19.5",
    "name": "50% off_deal",
    "flag": "true",
    "priority": "7",
    "persistent": "true",
    "content-type": "text/plain",
}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("type = 'car' AND color = 'blue' AND weight > 2500", True),  # Apollo's manual
        ("type = 'car' AND weight < 2500", False),
        ("type <> 'bike'", True),
        ("weight >= 3000 AND weight <= 3000", True),
        ("weight = 3000.0", True),
        ("price > 19", True),
        ("price * 2 = 39", True),
        ("weight / 7 = 428", True),  # integer division truncates
        ("weight - 1000 + 1 = 2001", True),
        ("-weight < 0", True),
        ("+weight = 3000", True),
        ("weight BETWEEN 2000 AND 4000", True),
        ("weight NOT BETWEEN 2000 AND 4000", False),
        ("color IN ('red', 'blue')", True),
        ("color NOT IN ('red', 'green')", True),
        ("color IN ('red')", False),
        ("type LIKE 'c%'", True),
        ("type LIKE 'c_r'", True),
        ("type LIKE 'c_'", False),
        ("type NOT LIKE 'b%'", True),
        ("name LIKE '50!% off!_%' ESCAPE '!'", True),
        ("name LIKE '50!%x%' ESCAPE '!'", False),
        ("missing IS NULL", True),
        ("missing IS NOT NULL", False),
        ("color IS NOT NULL", True),
        ("flag = TRUE", True),
        ("flag = false", False),
        ("NOT (type = 'bike')", True),
        ("(type = 'bike' OR color = 'blue') AND NOT weight < 10", True),
        ("JMSPriority > 5", True),
        ("JMSDeliveryMode = 'PERSISTENT'", True),
        ('"content-type" = \'text/plain\'', True),
        ("weight = 0x0BB8", True),
        ("weight = 3000L", True),
        ("weight < 3.1e3", True),
        ("TRUE", True),
        ("FALSE OR TRUE", True),
    ],
)
def test_selector_matches(selector, expected):
    assert compile_selector(selector)(HEADERS) is expected


@pytest.mark.parametrize(
    "selector",
    [
        # Unknown (NULL) is never a match, and NOT unknown is still unknown.
        "missing = 'x'",
        "NOT missing = 'x'",
        "missing > 1",
        "missing BETWEEN 1 AND 2",
        "NOT missing BETWEEN 1 AND 2",
        "missing IN ('a')",
        "missing NOT IN ('a')",
        "missing LIKE '%'",
        "missing + 1 = 2",
        "color > 1",  # a string that is not a number compared with a number
        "color > 'a'",  # JMS: strings only support = and <>
        "weight / 0 = 1",
        "missing = 'x' OR missing = 'y'",
        "type = 'car' AND missing = 'x'",
    ],
)
def test_unknown_never_matches(selector):
    assert compile_selector(selector)(HEADERS) is False


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("missing = 'x' OR type = 'car'", True),  # unknown OR true = true
        ("missing = 'x' AND type = 'bike'", False),  # unknown AND false = false
        ("NOT (missing = 'x' AND type = 'bike')", True),  # NOT false = true
    ],
)
def test_three_valued_logic(selector, expected):
    assert compile_selector(selector)(HEADERS) is expected


@pytest.mark.parametrize(
    "selector",
    [
        "",
        "   ",
        "type =",
        "type = 'car' AND",
        "(type = 'car'",
        "type = 'car')",
        "type == 'car'",
        "type = 'unterminated",
        "color IN ()",
        "color IN (1, 2)",
        "type LIKE x",
        "type LIKE 'a' ESCAPE 'ab'",
        "type LIKE 'a!' ESCAPE '!'",
        "weight BETWEEN 1 2",
        "type IS 'car'",
        "type NOT = 'car'",
        "a # b",
        "(" * 200 + "a = 1" + ")" * 200,
        "NOT " * 200 + "a = 1",
        "- " * 200 + "1 = 1",
    ],
)
def test_malformed_selectors_raise_selector_error(selector):
    with pytest.raises(SelectorError) as info:
        compile_selector(selector)
    assert info.value.message == "Invalid selector"


def test_tokenizer_keywords_are_case_insensitive_and_strings_unescape_quotes():
    assert tokenize("a and 'it''s'") == [("id", "a"), ("kw", "AND"), ("str", "it's"), ("end", None)]


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="ab ()'=<>+-*/,.0123456789%_!\"NOTANDORLIKEINBETWEENISNULLESCAPE", max_size=40))
def test_arbitrary_text_either_compiles_or_raises_selector_error(text):
    try:
        match = compile_selector(text)
    except SelectorError:
        return
    assert match({"a": "1", "b": "x"}) in (True, False)


# Kleene logic reference: random trees of true / false / unknown atoms.
_ATOMS = {"a = 1": True, "a = 2": False, "nope = 1": None}


def _kleene_and(x, y):
    return False if False in (x, y) else None if None in (x, y) else True


def _kleene_or(x, y):
    return True if True in (x, y) else None if None in (x, y) else False


_trees = st.recursive(
    st.sampled_from(sorted(_ATOMS)).map(lambda atom: (atom, _ATOMS[atom])),
    lambda inner: st.one_of(
        inner.map(lambda t: (f"NOT ({t[0]})", None if t[1] is None else not t[1])),
        st.tuples(inner, inner).map(lambda p: (f"({p[0][0]}) AND ({p[1][0]})", _kleene_and(p[0][1], p[1][1]))),
        st.tuples(inner, inner).map(lambda p: (f"({p[0][0]}) OR ({p[1][0]})", _kleene_or(p[0][1], p[1][1]))),
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(_trees)
def test_logic_matches_the_three_valued_reference(tree):
    text, expected = tree
    assert compile_selector(text)({"a": "1"}) is (expected is True)
