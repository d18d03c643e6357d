"""SentencePiece (Llama 2, Phi-3, Gemma) as ``tokenizer.json``: merges equivalent to a SentencePiece
BPE model and the Llama-2-style document with byte fallback. Piece bytes (``▁`` = space, ``<0xNN>``
= that byte) are :func:`structgate.tokenizers._common._spm_bytes`; slow ``transformers``
SentencePiece tokenizers are read by :mod:`.hf`."""
from __future__ import annotations

from typing import Mapping, Sequence


def _spm_merges(pieces: Mapping[str, int], scores: Mapping[str, float]) -> list[list[str]]:
    """BPE merges equivalent to a SentencePiece BPE model: every split ``piece = l + r`` with both
    halves in the vocabulary, ranked by the merged piece's score (highest first), ties by the
    halves' ids. Source: ``SentencePieceExtractor`` in ``transformers.convert_slow_tokenizer``."""
    merges = []
    for piece, score in scores.items():
        local = []
        for i in range(1, len(piece)):
            left, right = piece[:i], piece[i:]
            if left in pieces and right in pieces:
                local.append((pieces[left], pieces[right], left, right, score))
        local.sort()
        merges.extend(local)
    merges.sort(key=lambda m: -m[4])  # stable: keeps the per-piece order for equal scores
    return [[m[2], m[3]] for m in merges]


def _spm_tokenizer_json(pieces: Mapping[str, int], merges: Sequence[Sequence[str]], added: Sequence[dict],
                        *, add_space_prefix: bool = True, unk: str | None = "<unk>",
                        bos: tuple[str, int] | None = None) -> dict:
    """A ``tokenizer.json`` document for a SentencePiece BPE model with byte fallback (Llama 2 style:
    normalizer ``Prepend("▁")`` + ``Replace(" ", "▁")``, decoder ``Replace`` / ``ByteFallback`` /
    ``Fuse`` / ``Strip``), the layout ``transformers`` writes for ``LlamaTokenizerFast``."""
    norm: list[dict] = []
    if add_space_prefix:
        norm.append({"type": "Prepend", "prepend": "\u2581"})
    norm.append({"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"})
    dec = [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
           {"type": "ByteFallback"}, {"type": "Fuse"}]
    if add_space_prefix:
        dec.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    post = None
    if bos is not None:
        post = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": bos[0], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": bos[0], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": bos[0], "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {bos[0]: {"id": bos[0], "ids": [bos[1]], "tokens": [bos[0]]}}}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": list(added),
        "normalizer": {"type": "Sequence", "normalizers": norm},
        "pre_tokenizer": None,
        "post_processor": post,
        "decoder": {"type": "Sequence", "decoders": dec},
        "model": {"type": "BPE", "dropout": None, "unk_token": unk, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
                  "ignore_merges": False, "vocab": dict(pieces), "merges": [list(m) for m in merges]},
    }
