"""Build :class:`~structgate.vocab.Vocabulary` objects from real tokenizers, with exact token bytes.

Sources: Hugging Face tokenizers (``transformers`` fast tokenizers, ``tokenizers.Tokenizer``, a
folder or ``tokenizer.json``), vocab-only or full GGUF files (read directly, no ``gguf`` reader
needed), tiktoken ``.tiktoken`` rank files, and the tokenizers bundled with the package
(:data:`BUNDLED`: ``llama3``, ``llama2``, ``cl100k``).

Token bytes are derived from the tokenizer's byte mapping, never from ``decode([id])``:

* byte-level BPE (GPT-2, Llama 3, Qwen2, DeepSeek): every character of a token string maps back to
  one byte through GPT-2's ``bytes_to_unicode`` table (Radford et al., ``encoder.py`` of
  openai/gpt-2);
* SentencePiece (Llama 2, Phi-3, Gemma): ``▁`` (U+2581) is a space, ``<0xNN>`` byte-fallback pieces
  are the single byte ``0xNN``, other pieces are their UTF-8 encoding;
* tiktoken: the base64 field of each rank line is the token's bytes.

Special tokens (HF added tokens with ``special=True``; GGUF token types CONTROL (3), UNKNOWN (2) and
UNUSED (5), see ``gguf.TokenType``; tiktoken special tokens; every EOS id) get ``b""`` and are
listed in ``special_token_ids``; so are ids that no token occupies (cl100k 100256, 100261-100275).
Non-special added / USER_DEFINED tokens keep the UTF-8 bytes of their text (this is what llama.cpp
and HF emit for them). Trailing ``[PADnnnnn]`` filler slots that
converters append to reach the logits width (Qwen2, Phi-3, DeepSeek GGUFs and tokenizers converted
from them) are not tokens: they are dropped and count as padding ids ``n_tokens .. vocab_size-1``
(the default ``vocab_size`` keeps the full width).

EOS ids: the tokenizer's EOS (``eos_token_id``, ``tokenizer_config.json``,
``generation_config.json``, GGUF ``tokenizer.ggml.eos_token_id`` / ``eot_token_id`` /
``eom_token_id``) plus every GGUF / added token whose text is an end-of-generation marker
(:data:`EOG_TOKEN_NAMES`, the list llama.cpp uses for its EOG set: Llama 3's ``<|eot_id|>`` and
``<|end_of_text|>`` both end a chat turn, Qwen's ``<|im_end|>`` and ``<|endoftext|>``, ...); such
tokens are made special even if declared otherwise, as llama.cpp does. A bare tokenizer with no EOS
at all falls back to a special ``</s>`` / ``<eos>``.

Every vocabulary carries an ``encoder`` (text → ids, no BOS/EOS added, special-token text treated
as ordinary text) where the format allows; encoders are picklable and built lazily on first use.

Modules (one per format; every name below is importable from ``structgate.tokenizers``):

* :mod:`._common` — shared helpers (GPT-2 byte table, EOG texts, :class:`VocabParts`);
* :mod:`.hf` — Hugging Face ``tokenizer.json`` / ``tokenizers`` / ``transformers`` (byte-level BPE
  and the others), their encoders;
* :mod:`.spm` — SentencePiece merges and ``tokenizer.json`` layout;
* :mod:`.gguf` — the GGUF metadata reader and GGUF → ``tokenizer.json``;
* :mod:`.tiktoken_bpe` — tiktoken rank files;
* :mod:`.bundled` — the bundled tokenizers, their fast-load tables, the spec dispatch of :func:`load`.

The format modules return :class:`VocabParts` (the fields of a ``Vocabulary``) and never import
:mod:`structgate.vocab`; this package's public functions wrap them into ``Vocabulary`` objects,
and ``Vocabulary.from_hf`` / ``load_vocabulary`` use the format modules directly, so the two do not
import each other in a cycle (``tests/test_code_health.py`` checks the whole package).
"""
from __future__ import annotations

from typing import Mapping, Sequence

from ..vocab import Vocabulary, clear_vocabulary_cache as clear_cache, load_vocabulary as load
from ._common import EOG_TOKEN_NAMES, VocabParts, bytes_to_unicode
# the private names below are re-exported for tests and scripts that read them from here
from .bundled import BUNDLED, bundled_tokenizer_dir, read_spec, save_compact, spec_key  # noqa: F401
from .gguf import _GGUFJsonBuilder, _LLAMA3_PAT, _QWEN2_PAT, gguf_to_tokenizer_json, read_gguf, read_gguf_metadata  # noqa: F401
from .hf import read_hf
from .tiktoken_bpe import _R50K_PAT, CL100K_PAT, read_tiktoken  # noqa: F401

__all__ = [
    "BUNDLED",
    "EOG_TOKEN_NAMES",
    "VocabParts",
    "bundled_tokenizer_dir",
    "bytes_to_unicode",
    "from_gguf",
    "from_hf",
    "from_tiktoken",
    "load",
    "read_gguf_metadata",
    "gguf_to_tokenizer_json",
    "save_compact",
    "clear_cache",
]


def from_hf(tokenizer, *, vocab_size: int | None = None, name: str | None = None,
            eos_token_ids: Sequence[int] = ()) -> Vocabulary:
    """Vocabulary of a Hugging Face tokenizer.

    Parameters
    ----------
    tokenizer : transformers tokenizer | tokenizers.Tokenizer | str | os.PathLike
        A fast ``transformers`` tokenizer (its ``backend_tokenizer`` is read), a
        ``tokenizers.Tokenizer``, a folder holding ``tokenizer.json`` (and optionally
        ``tokenizer_config.json`` / ``generation_config.json`` for EOS ids), or a ``tokenizer.json``
        path. A slow ``transformers`` tokenizer works only if it has a SentencePiece ``sp_model``.
    vocab_size : int, optional
        Logits width (``>= n_tokens``); default: the tokenizer's length (max id + 1).
    name : str, optional
        Display name; default: the path or ``name_or_path``.
    eos_token_ids : Sequence[int]
        Extra EOS ids (added to the tokenizer's own EOS / end-of-generation tokens).

    Returns
    -------
    Vocabulary
        With an encoder (``encode(text, add_special_tokens=False)``, special-token text encoded as
        plain text).

    Raises
    ------
    VocabularyError
        Missing / unreadable file, WordPiece model, no EOS token, ``vocab_size`` too small.
    """
    return Vocabulary(*read_hf(tokenizer, vocab_size=vocab_size, name=name, eos_token_ids=eos_token_ids))


def from_gguf(path, *, vocab_size: int | None = None, eos_token_ids: Sequence[int] = ()) -> Vocabulary:
    """Vocabulary of a GGUF file's tokenizer (``tokenizer.ggml.*`` metadata).

    Supported ``tokenizer.ggml.model``: ``gpt2`` (byte-level BPE: Llama 3, Qwen2, GPT-2, DeepSeek,
    ...) and ``llama`` / ``gemma4`` (SentencePiece pieces with ``▁`` and ``<0xNN>``: Llama 2,
    Phi-3, Gemma). Token types follow ``gguf.TokenType``: NORMAL pieces are decoded, BYTE pieces
    are their byte, CONTROL / UNKNOWN / UNUSED are special (``b""``), USER_DEFINED keep their text.
    Trailing ``[PADn]`` filler slots are dropped (they become padding: ``n_tokens < vocab_size``).

    Parameters
    ----------
    path : str | os.PathLike
        A ``.gguf`` file (vocab-only or full model; only the metadata is parsed).
    vocab_size : int, optional
        Logits width; default the number of GGUF token slots (e.g. Qwen2: 151,936).
    eos_token_ids : Sequence[int]
        Extra EOS ids.

    Returns
    -------
    Vocabulary
        Its encoder (built lazily as a ``tokenizers.Tokenizer`` on first use, ~1 s for 150k
        tokens) exists for SentencePiece files and for byte-level files whose
        ``tokenizer.ggml.pre`` is one of ``llama-bpe``, ``qwen2``, ``deepseek-coder``, ``gpt-2``,
        ``default``, ``smaug-bpe``; otherwise ``encoder`` is None. Encoders are exact (ids' bytes
        == the text's bytes): unlike llama.cpp they add no SentencePiece dummy-prefix space, so
        llama.cpp's ids for ``text`` are ``encode(" " + text)`` when
        ``tokenizer.ggml.add_space_prefix`` is true (the default for ``llama``).

    Raises
    ------
    VocabularyError
        Missing / corrupt file, unsupported tokenizer model, no EOS id, ``vocab_size`` too small.
    """
    return Vocabulary(*read_gguf(path, vocab_size=vocab_size, eos_token_ids=eos_token_ids))


def from_tiktoken(path, *, vocab_size: int | None = None, special_tokens: Mapping[str, int] | None = None,
                  pat_str: str | None = None, eos_token: str = "<|endoftext|>") -> Vocabulary:
    """Vocabulary of a tiktoken BPE ranks file (``<base64 bytes> <rank>`` per line; ``.gz`` ok).

    Parameters
    ----------
    path : str | os.PathLike
        The ``.tiktoken`` file. For a file named like ``cl100k_base`` the cl100k special tokens
        (``<|endoftext|>`` 100257, ``<|fim_prefix|>`` 100258, ``<|fim_middle|>`` 100259,
        ``<|fim_suffix|>`` 100260, ``<|endofprompt|>`` 100276) and ``pat_str`` are used; likewise
        for ``o200k`` (endoftext 199999, endofprompt 200018) and ``r50k`` / ``p50k`` / ``gpt2``
        (their regex); for others ``<|endoftext|>`` = max rank + 1 and the cl100k ``pat_str``,
        unless given.
    vocab_size : int, optional
        Logits width (default: max id + 1; cl100k: 100,277).
    special_tokens : Mapping[str, int], optional
        Special token texts → ids (they get ``b""``).
    pat_str : str, optional
        Pre-tokenizer regex for the encoder.
    eos_token : str
        Which special token is EOS.

    Returns
    -------
    Vocabulary
        Ids without a rank or special token (cl100k 100256, 100261-100275) are special (never
        allowed). Encoder: ``tiktoken.Encoding.encode_ordinary``, built offline from the file.

    Raises
    ------
    VocabularyError
        Missing / malformed file, ``eos_token`` not among the specials.
    """
    return Vocabulary(*read_tiktoken(path, vocab_size=vocab_size, special_tokens=special_tokens, pat_str=pat_str,
                                       eos_token=eos_token))
