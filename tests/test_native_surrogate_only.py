"""A constraint whose every string needs a surrogate code point (U+D800..U+DFFF, which has no UTF-8
encoding, so no model output holds one) matches nothing: the typed empty-language error
``InvalidConstraintError``, as for any other empty constraint (found by a helper: it was
``IncompatibleVocabularyError``, blaming the vocabulary). Where another alternative remains, it
compiles to that alternative alone. Oracle: Python's ``re`` on the UTF-8 texts tried."""
from __future__ import annotations

import re

import pytest

from structgate import Constraint, get_backend
from structgate.errors import IncompatibleVocabularyError, InvalidConstraintError

EMPTY = [Constraint.regex("\ud800"), Constraint.regex("[\ud800-\udfff]+"), Constraint.regex("a\\ud800"),
         Constraint.regex("x(?:\udc00|\ud800)y"), Constraint.choice(["\ud800", "\udfff"]),
         Constraint.grammar('root ::= "\ud800"')]


@pytest.mark.parametrize("c", EMPTY, ids=[repr(c.value) for c in EMPTY])
def test_surrogate_only_constraint_is_empty(llama3_vocab, c):
    with pytest.raises(InvalidConstraintError) as e:
        get_backend("native", llama3_vocab).compile(c)
    assert not isinstance(e.value, IncompatibleVocabularyError) and "matches nothing" in str(e.value)


@pytest.mark.parametrize("pattern", ["a|\ud800", "[\ud800-\ue000]", "b(?:\ud800)?"])
def test_other_alternatives_remain(llama3_vocab, pattern):
    g = get_backend("native", llama3_vocab).compile(Constraint.regex(pattern))
    for text in ("a", "b", "\ue000", "\ud7ff", ""):
        m = g.matcher()
        ok = m.advance(llama3_vocab.encode(text)) and m.is_accepting() if text else m.is_accepting()
        assert ok == (re.fullmatch(pattern, text) is not None), (pattern, text)
