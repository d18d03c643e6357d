"""Vocabularies: exact token bytes, EOS/special ids, padding, encoders, bundled tokenizers, errors.

Oracles: llama.cpp's tokenizer test vectors (``tests/data/tokenizers/*.gguf.inp/out``: expected
ids per text), tiktoken's own BPE (cl100k ranks are base64 bytes, independent of the GPT-2 byte
table used for Llama 3), ``transformers.AutoTokenizer`` on the bundled folders.
"""
from __future__ import annotations

import gzip
import json
import pathlib
import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from structgate import Vocabulary, VocabularyError, load_vocabulary
from structgate import tokenizers as T
from structgate.vocab import bundled_tokenizers

DATA = pathlib.Path(__file__).parent / "data" / "tokenizers"
SEP = "\n__ggml_vocab_test__\n"

GGUF = {  # name -> (SentencePiece dummy prefix?, n_tokens, vocab_size, EOS ids)
    "llama-bpe": (False, 128256, 128256, {128001, 128009}),
    "qwen2": (False, 151646, 151936, {151643, 151645}),
    "llama-spm": (True, 32000, 32000, {2}),
    "phi-3": (True, 32011, 32064, {32000, 32007}),
    "gpt-2": (False, 50257, 50257, {50256}),
    "deepseek-coder": (False, 32022, 32256, {32014}),
}


def vectors(name: str) -> list[tuple[str, list[int]]]:
    """llama.cpp test-tokenizer-0 format: texts separated by SEP (one trailing), one id line each."""
    inp = (DATA / f"ggml-vocab-{name}.gguf.inp").read_text("utf-8").split(SEP)
    assert inp[-1] == ""
    inp = inp[:-1]
    lines = (DATA / f"ggml-vocab-{name}.gguf.out").read_text("utf-8").split("\n")
    out = [[int(x) for x in line.split()] for line in lines[: len(inp)]]
    assert len(inp) == len(out) == 46
    return list(zip(inp, out))


def expected_bytes(text: str, spm_prefix: bool) -> bytes:
    return ((" " + text) if spm_prefix and text else text).encode("utf-8")


@pytest.fixture(scope="module")
def gguf_vocab():
    cache: dict[str, Vocabulary] = {}

    def get(name: str) -> Vocabulary:
        if name not in cache:
            cache[name] = T.from_gguf(DATA / f"ggml-vocab-{name}.gguf.gz")
        return cache[name]

    return get


def joined(v: Vocabulary, ids) -> bytes:
    return b"".join(v.token_bytes[i] for i in ids)


# -- GGUF: bytes, sizes, EOS ---------------------------------------------------------------------


@pytest.mark.parametrize("name", list(GGUF))
def test_gguf_token_bytes_match_llamacpp_vectors(gguf_vocab, name):
    spm, n_tokens, vocab_size, eos = GGUF[name]
    v = gguf_vocab(name)
    assert (v.n_tokens, v.vocab_size) == (n_tokens, vocab_size)
    assert set(v.eos_token_ids) == eos
    for text, ids in vectors(name):
        assert joined(v, ids) == expected_bytes(text, spm), (name, text)
    for i in v.special_token_ids:
        assert v.token_bytes[i] == b""


@pytest.mark.parametrize("name", list(GGUF))
def test_gguf_encoder_reproduces_llamacpp_ids(gguf_vocab, name):
    spm = GGUF[name][0]
    v = gguf_vocab(name)
    for text, ids in vectors(name):
        got = v.encode(" " + text if spm and text else text)
        assert got == ids, (name, text)
        assert joined(v, v.encode(text)) == text.encode()  # encoders are exact: no dummy prefix


def test_gguf_specials_and_padding_details(gguf_vocab):
    qwen = gguf_vocab("qwen2")
    assert qwen.special_token_ids == frozenset({151643, 151644, 151645})
    assert qwen.vocab_size - qwen.n_tokens == 290  # [PAD151646] .. [PAD151935] are padding, not tokens
    phi = gguf_vocab("phi-3")
    assert phi.token_bytes[2] == b"</s>"  # USER_DEFINED, not special: keeps its text
    assert 2 not in phi.special_token_ids
    assert phi.token_bytes[29871] == b" " and phi.token_bytes[13] == b"\n"  # '▁' and <0x0A>
    assert {0, 1, 32000, 32007} <= phi.special_token_ids
    spm = gguf_vocab("llama-spm")
    assert spm.special_token_ids == frozenset({0, 1, 2})
    assert all(spm.token_bytes[3 + b] == bytes([b]) for b in range(256))  # <0x00>..<0xFF>
    gpt2 = gguf_vocab("gpt-2")
    assert gpt2.token_bytes[220] == b" " and gpt2.token_bytes[198] == b"\n"
    assert gpt2.token_bytes[50256] == b""


def test_llama3_gguf_equals_bundled_and_cl100k(gguf_vocab, llama3_vocab):
    g = gguf_vocab("llama-bpe")
    assert g.token_bytes == llama3_vocab.token_bytes
    assert g.eos_token_ids == llama3_vocab.eos_token_ids
    assert g.special_token_ids == llama3_vocab.special_token_ids
    # independent oracle: Llama 3's first 100,256 tokens are cl100k's (base64 bytes in tiktoken)
    cl = load_vocabulary("cl100k")
    assert llama3_vocab.token_bytes[:100256] == cl.token_bytes[:100256]


def test_gguf_plain_file_and_metadata(tmp_path):
    p = tmp_path / "v.gguf"
    p.write_bytes(gzip.decompress((DATA / "ggml-vocab-gpt-2.gguf.gz").read_bytes()))
    kv = T.read_gguf_metadata(p)
    assert kv["tokenizer.ggml.model"] == "gpt2" and kv["tokenizer.ggml.pre"] == "gpt-2"
    assert len(kv["tokenizer.ggml.tokens"]) == 50257 and len(kv["tokenizer.ggml.merges"]) == 50000
    assert int(kv["tokenizer.ggml.eos_token_id"]) == 50256
    v = load_vocabulary(str(p))
    assert v.token_bytes == T.from_gguf(DATA / "ggml-vocab-gpt-2.gguf.gz").token_bytes
    assert v.encode("Hello world") == [15496, 995]
    w = Vocabulary.from_gguf(p, vocab_size=50304, eos_token_ids=[198])  # extra EOS, padded width
    assert (w.eos_token_ids, w.vocab_size, w.token_bytes[198]) == ((198, 50256), 50304, b"")


# -- bundled tokenizers --------------------------------------------------------------------------


def test_bundled_names():
    assert set(bundled_tokenizers()) == {"llama3", "llama2", "cl100k"} == set(T.BUNDLED)


def test_llama3_bundled_basics(llama3_vocab):
    v = llama3_vocab
    assert v.n_tokens == v.vocab_size == 128256
    assert set(v.eos_token_ids) == {128001, 128009}
    assert v.token_bytes[9906] == b"Hello" and v.token_bytes[1917] == b" world"
    assert v.special_token_ids == frozenset(range(128000, 128256))
    assert all(v.token_bytes[i] == b"" for i in range(128000, 128256))
    assert v.token_names[128009] == "<|eot_id|>"
    assert load_vocabulary("llama3") is v


def test_llama3_bundled_encoder_reproduces_llama_bpe_vectors(llama3_vocab):
    for text, ids in vectors("llama-bpe"):
        assert llama3_vocab.encode(text) == ids, text


@pytest.fixture(scope="module")
def llama3_tiktoken_oracle(llama3_vocab):
    """Meta's own Llama 3 tokenizer is tiktoken over these 128,000 byte strings (rank = id) with
    this pat_str: an independent BPE implementation (whole-piece lookup first, merges by rank)."""
    import tiktoken

    ranks = {llama3_vocab.token_bytes[i]: i for i in range(128000)}
    return tiktoken.Encoding("llama3-oracle", pat_str=T._LLAMA3_PAT, mergeable_ranks=ranks, special_tokens={})


def test_llama3_encoder_matches_tiktoken_oracle(llama3_vocab, llama3_tiktoken_oracle):
    # words that are one token only because Llama 3 looks whole pieces up first
    # (tokenizer.json "ignore_merges": true; without it " việc" -> [3355, 26298, 66])
    words = [" việc", " hợp", " nhiều", " điều", " jeho"]
    for w in words:
        assert len(llama3_vocab.encode(w)) == 1
    for text in words + ROUND_TRIP + [t for t, _ in vectors("llama-bpe")]:
        assert llama3_vocab.encode(text) == llama3_tiktoken_oracle.encode_ordinary(text), text


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet=st.characters(codec="utf-8"), max_size=60))
def test_llama3_encoder_matches_tiktoken_oracle_random(llama3_vocab, llama3_tiktoken_oracle, text):
    assert llama3_vocab.encode(text) == llama3_tiktoken_oracle.encode_ordinary(text)


def test_llama2_bundled(gguf_vocab):
    v = load_vocabulary("llama2")
    assert (v.n_tokens, v.vocab_size, v.eos_token_ids) == (32000, 32000, (2,))
    assert v.special_token_ids == frozenset({0, 1, 2})
    assert v.token_bytes == gguf_vocab("llama-spm").token_bytes
    for text, ids in vectors("llama-spm"):
        assert v.encode(" " + text if text else text) == ids, text


def test_tiktoken_regexes_are_tiktokens():
    import inspect

    import tiktoken_ext.openai_public as openai_public

    src = inspect.getsource(openai_public)
    assert T.CL100K_PAT in src and T._R50K_PAT in src
    assert openai_public.ENDOFTEXT == "<|endoftext|>"


def test_cl100k_bundled():
    v = load_vocabulary("cl100k")
    assert v.encode("hello world") == [15339, 1917]
    assert (v.n_tokens, v.vocab_size, v.eos_token_ids) == (100277, 100277, (100257,))
    named = {100257, 100258, 100259, 100260, 100276}
    holes = {100256, *range(100261, 100276)}  # ids with no rank and no special token
    assert v.special_token_ids == frozenset(named | holes)
    assert v.token_names[100276] == "<|endofprompt|>"
    assert v.token_names[1917] == "\u0120world"  # byte-level display name, as in HF files
    assert v.token_names[:100256] == load_vocabulary("llama3").token_names[:100256]
    assert v.token_bytes[0] == b"!" and v.token_bytes[100255] != b""


ROUND_TRIP = ["Hello world", "", " ", "\n\n\t  x", "日本語のテキスト", "emoji 🦙🔥 e\u0301", "<|endoftext|>",
              "<|eot_id|></s><s>", '{"a": [1, 2.5e-3, null]}', "\x00\x01\x7f", "  leading", "trailing  "]


@pytest.mark.parametrize("name", ["llama3", "llama2", "cl100k"])
def test_bundled_encoders_round_trip(name):
    v = load_vocabulary(name)
    for text in ROUND_TRIP:
        ids = v.encode(text)
        assert joined(v, ids) == text.encode(), text
        assert not set(ids) & v.special_token_ids  # special-token text is encoded as text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=40))
def test_encoders_round_trip_random_text(text):
    for name in ("llama3", "llama2", "cl100k"):
        v = load_vocabulary(name)
        assert joined(v, v.encode(text)) == text.encode()


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """A fresh STRUCTGATE_CACHE_DIR for this module (bundled folders unpack there)."""
    import os

    d = tmp_path_factory.mktemp("sgcache")
    old = os.environ.get("STRUCTGATE_CACHE_DIR")
    os.environ["STRUCTGATE_CACHE_DIR"] = str(d)
    yield d
    if old is None:
        del os.environ["STRUCTGATE_CACHE_DIR"]
    else:
        os.environ["STRUCTGATE_CACHE_DIR"] = old


def test_bundled_dir_loads_with_transformers(cache_dir, llama3_vocab):
    transformers = pytest.importorskip("transformers")
    d = T.bundled_tokenizer_dir("llama3")
    assert d.is_relative_to(cache_dir) and (d / "tokenizer.json").is_file()
    assert {p.name for p in d.iterdir()} >= {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "LICENSE"}
    assert T.bundled_tokenizer_dir("llama3") == d  # second call reuses the unpacked folder
    tok = transformers.AutoTokenizer.from_pretrained(d)
    assert len(tok) == 128256
    assert (tok.bos_token_id, tok.eos_token_id) == (128000, 128009)
    assert tok("Hello world").input_ids == [128000, 9906, 1917]
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat == ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n")
    v = Vocabulary.from_hf(tok)
    assert v.token_bytes == llama3_vocab.token_bytes and v.eos_token_ids == (128001, 128009)
    ids = v.encode("a<|eot_id|>")
    assert joined(v, ids) == b"a<|eot_id|>" and 128009 not in ids
    assert ids == llama3_vocab.encode("a<|eot_id|>")

    d2 = T.bundled_tokenizer_dir("llama2")
    tok2 = transformers.AutoTokenizer.from_pretrained(d2)
    assert (len(tok2), tok2.bos_token_id, tok2.eos_token_id) == (32000, 1, 2)
    assert tok2("Hello world").input_ids == [1, 15043, 3186]


@pytest.mark.parametrize("name", ["llama3", "llama2"])
def test_bundled_fast_table_matches_tokenizer_json(cache_dir, name):
    """load() reads the precomputed vocab.npz; it must equal what from_hf derives from the folder."""
    fast = load_vocabulary(name)
    slow = T.from_hf(T.bundled_tokenizer_dir(name))
    assert fast.token_bytes == slow.token_bytes
    assert fast.token_names == slow.token_names
    assert (fast.eos_token_ids, fast.special_token_ids, fast.vocab_size) == \
        (slow.eos_token_ids, slow.special_token_ids, slow.vocab_size)
    assert fast.fingerprint == slow.fingerprint


def test_from_hf_folder_json_and_tokenizer_object(cache_dir, llama3_vocab):
    from tokenizers import Tokenizer

    d = T.bundled_tokenizer_dir("llama3")
    by_folder = T.from_hf(d)
    by_json = load_vocabulary(str(d / "tokenizer.json"))
    assert by_folder.token_bytes == by_json.token_bytes == llama3_vocab.token_bytes
    assert by_folder.eos_token_ids == (128001, 128009)
    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    v = T.from_hf(tok, name="mine", vocab_size=128512)
    assert (v.name, v.vocab_size, v.n_tokens) == ("mine", 128512, 128256)
    assert v.encode("<|eot_id|>") == [27, 91, 68, 354, 851, 91, 29]
    assert tok.encode_special_tokens is False  # the caller's tokenizer is not modified
    assert tok.encode("<|eot_id|>", add_special_tokens=False).ids == [128009]


def test_from_hf_unigram_metaspace_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers

    pieces = [("<unk>", 0.0), ("</s>", 0.0), ("\u2581", -1.0), ("\u2581a", -2.0), ("b", -3.0), ("a", -4.0), ("c", -5.0)]
    tok = Tokenizer(models.Unigram(pieces, unk_id=0, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.add_special_tokens(["</s>"])
    v = T.from_hf(tok)
    assert v.token_bytes == (b"", b"", b" ", b" a", b"b", b"a", b"c")
    assert v.eos_token_ids == (1,)  # a bare tokenizer: the conventional "</s>"
    assert v.special_token_ids == frozenset({0, 1})
    assert v.encode("ab a") == [5, 4, 3]  # no dummy prefix: "a" not "▁a"
    assert joined(v, v.encode("ab a")) == b"ab a"


def test_bytelevel_add_prefix_space_is_not_in_encoder(gguf_vocab):
    """A RoBERTa-style ByteLevel(add_prefix_space=True) would encode "a" as "Ġa" (" a")."""
    from tokenizers import Tokenizer, pre_tokenizers

    tok = Tokenizer.from_str(T._GGUFJsonBuilder(str(DATA / "ggml-vocab-gpt-2.gguf.gz"))())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    assert tok.encode("Hello", add_special_tokens=False).ids == [18435]  # " Hello"
    v = T.from_hf(tok)
    assert v.token_bytes == gguf_vocab("gpt-2").token_bytes
    assert v.encode("Hello world") == [15496, 995]


def test_encoder_pickles(llama3_vocab, gguf_vocab):
    for v in (llama3_vocab, load_vocabulary("cl100k"), load_vocabulary("llama2"), gguf_vocab("gpt-2")):
        v2 = pickle.loads(pickle.dumps(v))
        assert v2.encode("Hello, world!") == v.encode("Hello, world!")
        assert v2.token_bytes == v.token_bytes


# -- padding, caching, timing --------------------------------------------------------------------


def test_padding_widens(llama3_vocab):
    w = llama3_vocab.with_vocab_size(128320)
    assert (w.vocab_size, w.n_tokens) == (128320, 128256)
    assert w.token_bytes is llama3_vocab.token_bytes or w.token_bytes == llama3_vocab.token_bytes
    assert w.fingerprint != llama3_vocab.fingerprint
    v = load_vocabulary("llama3", vocab_size=128320)
    assert v.vocab_size == 128320 and load_vocabulary("llama3", vocab_size=128320) is v
    assert load_vocabulary("llama3") is llama3_vocab  # widening does not replace the cached base
    with pytest.raises(VocabularyError, match="smaller"):
        load_vocabulary("llama3", vocab_size=128000)
    with pytest.raises(VocabularyError, match="smaller"):
        llama3_vocab.with_vocab_size(100)


def test_cached_load_reads_nothing(llama3_vocab, monkeypatch):
    """A second load of a spec is the cached object: no tokenizer file is read again."""
    import structgate.tokenizers.bundled as B

    first = {name: load_vocabulary(name) for name in ("llama3", "llama2", "cl100k")}
    assert first["llama3"] is llama3_vocab

    def no_read(*a, **k):
        raise AssertionError("a cached vocabulary was read again")

    monkeypatch.setattr(B, "read_spec", no_read)
    for _ in range(3):
        for name, v in first.items():
            assert load_vocabulary(name) is v


# -- errors --------------------------------------------------------------------------------------


def test_unknown_spec_lists_bundled():
    with pytest.raises(VocabularyError, match="llama3.*no such file") as e:
        load_vocabulary("no-such-tokenizer")
    assert "cl100k" in str(e.value) and "llama2" in str(e.value)
    with pytest.raises(VocabularyError, match="name or a path"):
        load_vocabulary(42)  # type: ignore[arg-type]


def test_missing_and_bad_files(tmp_path):
    with pytest.raises(VocabularyError, match="does not exist"):
        T.from_gguf(tmp_path / "missing.gguf")
    with pytest.raises(VocabularyError, match="does not exist"):
        T.from_tiktoken(tmp_path / "missing.tiktoken")
    with pytest.raises(VocabularyError, match="does not exist"):
        T.from_hf(tmp_path / "missing")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOPE" + bytes(40))
    with pytest.raises(VocabularyError, match="not a GGUF file"):
        load_vocabulary(str(bad))
    trunc = tmp_path / "trunc.gguf"
    trunc.write_bytes(gzip.decompress((DATA / "ggml-vocab-gpt-2.gguf.gz").read_bytes())[:5000])
    with pytest.raises(VocabularyError, match="truncated or corrupt"):
        T.from_gguf(trunc)
    tt = tmp_path / "x.tiktoken"
    tt.write_text("IQ== 0\nnot-base64-at-all\n")
    with pytest.raises(VocabularyError, match=r"x.tiktoken:2"):
        load_vocabulary(str(tt))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(VocabularyError, match="no tokenizer.json"):
        load_vocabulary(str(empty))
    other = tmp_path / "vocab.bin"
    other.write_bytes(b"\x00" * 10)
    with pytest.raises(VocabularyError, match="cannot tell the tokenizer format"):
        load_vocabulary(str(other))
    badjson = tmp_path / "tokenizer.json"
    badjson.write_text("{not json")
    with pytest.raises(VocabularyError, match="cannot read tokenizer file"):
        load_vocabulary(str(badjson))


def test_bundled_dir_errors():
    with pytest.raises(VocabularyError, match="bundled: cl100k, llama2, llama3"):
        T.bundled_tokenizer_dir("gpt5")
    with pytest.raises(VocabularyError, match="not a Hugging Face folder"):
        T.bundled_tokenizer_dir("cl100k")


def test_wordpiece_rejected():
    from tokenizers import Tokenizer, models

    tok = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"))
    with pytest.raises(VocabularyError, match="WordPiece"):
        T.from_hf(tok)


def test_no_eos_is_an_error():
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.BPE({"a": 0, "b": 1, "ab": 2}, [("a", "b")]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel()
    with pytest.raises(VocabularyError, match="no EOS token"):
        T.from_hf(tok)
    v = T.from_hf(tok, eos_token_ids=[2])
    assert v.eos_token_ids == (2,) and v.token_bytes == (b"a", b"b", b"")


def test_tiktoken_custom_specials(tmp_path):
    import base64

    p = tmp_path / "tiny.tiktoken"
    toks = [bytes([b]) for b in range(256)] + [b"ab", b"abc"]
    p.write_text("".join(f"{base64.b64encode(t).decode()} {i}\n" for i, t in enumerate(toks)))
    v = T.from_tiktoken(p)
    assert (v.n_tokens, v.eos_token_ids) == (259, (258,))
    assert v.token_bytes[257] == b"abc" and v.token_bytes[258] == b""
    assert v.encode("abc ab") == [257, 32, 256]
    with pytest.raises(VocabularyError, match="EOS token"):
        T.from_tiktoken(p, special_tokens={"<|x|>": 300})


@pytest.mark.slow
@pytest.mark.parametrize("name", ["phi-3", "gpt-2"])
def test_from_hf_of_transformers_gguf_conversion_agrees(tmp_path, gguf_vocab, name):
    """Oracle: transformers' own GGUF → tokenizer conversion, read through from_hf (~10 s each)."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    f = tmp_path / f"ggml-vocab-{name}.gguf"
    f.write_bytes(gzip.decompress((DATA / f"{f.name}.gz").read_bytes()))
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file=f.name)
    a, b = T.from_hf(tok), gguf_vocab(name)
    assert a.token_bytes == b.token_bytes
    assert (a.n_tokens, a.vocab_size) == (b.n_tokens, b.vocab_size)  # [PADn] fillers are padding
    assert a.eos_token_ids == b.eos_token_ids
    for text, _ in vectors(name):
        assert a.encode(text) == b.encode(text), text


def test_added_tokens_beyond_model_vocab_and_wider_logits(gguf_vocab):
    """Field case outlines-logits-wider-than-vocab: GPT-NeoX has len(tokenizer)=50277 > the BPE
    model's 50254 and logits 50432 wide. n_tokens must be max id + 1, the width the logits'."""
    from tokenizers import AddedToken, Tokenizer

    base = json.loads(T._GGUFJsonBuilder(str(DATA / "ggml-vocab-gpt-2.gguf.gz"))())
    tok = Tokenizer.from_str(json.dumps(base))
    tok.add_tokens([AddedToken(f"  extra{i}", special=False, normalized=False) for i in range(10)])
    tok.add_special_tokens([AddedToken(f"<|ctrl{i}|>", special=True) for i in range(10)])
    v = T.from_hf(tok, vocab_size=50432)
    assert (v.n_tokens, v.vocab_size) == (50277, 50432)
    assert v.token_bytes[50257] == b"  extra0" and 50257 not in v.special_token_ids
    assert v.token_bytes[50276] == b"" and 50276 in v.special_token_ids
    assert v.token_bytes[:50257] == gguf_vocab("gpt-2").token_bytes
    assert v.eos_token_ids == (50256,)
    assert v.describe(50300) == "50300:<padding>"
    assert v.encode("a  extra3b") == [64, 50260, 65]  # non-special added tokens match in text


class _FakeSP:
    """The parts of ``sentencepiece.SentencePieceProcessor`` that a slow HF tokenizer exposes."""

    pieces = ["<unk>", "<s>", "</s>", "<0x0A>", "<0xE2>", "\u2581", "\u2581a", "b", "\u2581\u2581"]

    def get_piece_size(self):
        return len(self.pieces)

    def id_to_piece(self, i):
        return self.pieces[i]

    def is_control(self, i):
        return i in (1, 2)

    def is_unknown(self, i):
        return i == 0

    def is_unused(self, i):
        return False

    def is_byte(self, i):
        return i in (3, 4)


class _FakeSlowTokenizer:
    sp_model = _FakeSP()
    eos_token_id = 2
    name_or_path = "fake-slow"
    added_tokens_decoder: dict = {}

    def __len__(self):
        return 9

    def convert_ids_to_tokens(self, ids):  # pragma: no cover - presence only
        return [self.sp_model.pieces[i] for i in ids]

    def encode(self, text, add_special_tokens=False):
        return [6, 7] if text == " ab" else []


def test_slow_sentencepiece_tokenizer():
    v = T.from_hf(_FakeSlowTokenizer())
    assert v.token_bytes == (b"", b"", b"", b"\n", b"\xe2", b" ", b" a", b"b", b"  ")
    assert v.eos_token_ids == (2,) and v.special_token_ids == frozenset({0, 1, 2})
    assert v.encode(" ab") == [6, 7]
    with pytest.raises(VocabularyError, match="cannot read a vocabulary from int"):
        T.from_hf(3)


@pytest.mark.parametrize("backend", ["native", "structgate-xgrammar", "structgate-llguidance"])
def test_special_ids_given_bytes_are_never_allowed(backend):
    """A hand-built vocabulary that gives a special id bytes (``<s>``): the id is never allowed,
    on every engine alike (native allowed and advanced it; the adapters did not), and EOS keeps
    its bytes and its own rule. Oracle: the documented contract of ``special_token_ids``."""
    import numpy as np

    from structgate import Constraint, get_backend
    from structgate.vocab import Vocabulary

    toks = [bytes([i]) for i in range(256)] + [b"<s>", b"</s>"]
    v = Vocabulary(toks, eos_token_ids=[257], special_token_ids=[256], vocab_size=288, name="tiny")
    assert v.token_bytes[256] == b"" and v.token_bytes[257] == b"</s>"
    try:
        g = get_backend(backend, v).compile(Constraint.regex("(<s>|x)*"))
    except ImportError as e:  # an adapter's engine not installed
        pytest.skip(str(e))
    m = g.matcher()
    row = np.zeros((1, (v.vocab_size + 31) // 32), dtype=np.int32)
    m.fill_bitmask(row, 0)
    assert not (int(row[0, 256 >> 5]) >> (256 & 31)) & 1
    assert (int(row[0, ord("x") >> 5]) >> (ord("x") & 31)) & 1
    assert not m.advance(256)
    assert m.advance([ord(c) for c in "<s>x"]) and m.advance(257) and m.is_terminated()
