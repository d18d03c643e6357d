"""One helper the matcher tests share (import as ``from _matching import accepts``)."""
from __future__ import annotations


def accepts(grammar, vocab, text: str) -> bool:
    """Whether a fresh matcher of ``grammar`` takes the tokens of ``text`` (``vocab.encode``) and
    may end there (EOS allowed)."""
    m = grammar.matcher()
    return m.advance(vocab.encode(text)) and m.is_accepting()
