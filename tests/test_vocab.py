"""Vocabularies: exact token bytes, EOS/special ids, encoders, bundled tokenizers, errors."""
from __future__ import annotations

import pytest

from structgate import Vocabulary, VocabularyError, load_vocabulary


def test_llama3_bundled_basics(llama3_vocab):
    v = llama3_vocab
    assert v.n_tokens == v.vocab_size == 128256
    assert set(v.eos_token_ids) == {128001, 128009}
    assert v.token_bytes[9906] == b"Hello" and v.token_bytes[1917] == b" world"
    assert all(v.token_bytes[i] == b"" for i in range(128000, 128256))
    assert v.special_token_ids == frozenset(range(128000, 128256))
    text = "Hello world <|eot_id|> 日本語 \n\t x"
    ids = v.encode(text)
    assert b"".join(v.token_bytes[i] for i in ids) == text.encode()
    assert load_vocabulary("llama3") is v
