"""Vocabulary loading for the benchmarks (:func:`structgate.load_vocabulary` plus an encoder check)."""
from __future__ import annotations

from structgate.errors import VocabularyError
from structgate.vocab import Vocabulary, load_vocabulary

__all__ = ["load_bench_vocabulary", "vocabulary_info"]


def load_bench_vocabulary(spec: str) -> Vocabulary:
    """The vocabulary ``spec`` names (``llama3``, a folder, ``tokenizer.json``, ``.gguf``, ``.tiktoken``).

    Raises
    ------
    VocabularyError
        Unknown spec, unreadable file, or no encoder (the benchmarks tokenise text).
    """
    vocab = load_vocabulary(spec)
    if vocab.encoder is None:
        raise VocabularyError(f"tokenizer {spec!r} has no encoder; benchmarks need one to tokenise instances")
    return vocab


def vocabulary_info(vocab: Vocabulary) -> dict:
    """JSON-able description of a vocabulary for benchmark metadata."""
    return {"name": vocab.name, "n_tokens": vocab.n_tokens, "vocab_size": vocab.vocab_size,
            "eos_token_ids": list(vocab.eos_token_ids), "n_special": len(vocab.special_token_ids),
            "fingerprint": vocab.fingerprint[:16]}
