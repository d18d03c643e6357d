"""The embedded default model: a tiny random-weight Llama with the real Llama 3 tokenizer.

``structgate demo`` and the vLLM tests need a model that ``vllm serve`` can load offline, in
seconds, on a CPU. Its outputs are nonsense, but the grammar forces their structure, so every
structured output must still be valid — which is exactly what the demo checks.

Architecture (``LlamaForCausalLM``, :data:`TINY_LLAMA3_CONFIG`): hidden 128, 2 layers, 4 attention
heads of dimension 32 (16 crashes vLLM's CPU attention), intermediate 256, vocabulary 128,256
(the Llama 3 tokenizer, EOS ``<|eot_id|>`` / ``<|end_of_text|>``, chat template), tied embeddings,
bfloat16 (vLLM's CPU dtype), about 16.6 M parameters (33 MB). Weights: ``transformers``' default initialisation
(normal, std 0.02, in float32) under ``torch.manual_seed(SEED)``, cast to bfloat16, saved as
safetensors.

The folder is generated on first use under ``$STRUCTGATE_CACHE_DIR`` (default
``~/.cache/structgate``; the system temp dir if that is not writable)``/models/tiny-llama3-<hash>/`` (the hash covers the config, the seed and
the tokenizer files), atomically (build in a temporary folder, then rename), with no hub access.

Reasoning variant (``embedded_model_dir(reasoning=True)``, folder ``tiny-llama3-think-<hash>``):
the same config and weights, with the Llama 3 tokenizer's two unused ids 128002 / 128003
(``<|reserved_special_token_0|>`` / ``_1|>``) renamed ``<think>`` / ``</think>`` — added tokens with
``special: false``, as in DeepSeek-R1's and Qwen3's tokenizers, so the markers stay in the decoded
text that vLLM's reasoning parsers split — and a chat template whose generation prompt opens the
reasoning (``<think>\n``), or closes it at once (``<think>\n\n</think>\n\n``) when the request sets
``chat_template_kwargs: {"enable_thinking": false}`` (Qwen3's convention). Serve it with
``--reasoning-parser deepseek_r1`` (see docs/vllm.md, "Reasoning models").
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import tempfile

__all__ = ["TINY_LLAMA3_CONFIG", "SEED", "THINK_START", "THINK_END", "THINK_START_ID", "THINK_END_ID",
           "embedded_model_dir", "cache_root"]

SEED = 1234

#: ``config.json`` of the embedded model (Llama 3 special-token ids)
TINY_LLAMA3_CONFIG: dict = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 32,
    "hidden_act": "silu",
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "vocab_size": 128256,
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "initializer_range": 0.02,
}

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")

#: reasoning markers of the reasoning variant and their ids (two unused Llama 3 reserved ids)
THINK_START, THINK_END = "<think>", "</think>"
THINK_START_ID, THINK_END_ID = 128002, 128003
_RESERVED = {THINK_START_ID: ("<|reserved_special_token_0|>", THINK_START),
             THINK_END_ID: ("<|reserved_special_token_1|>", THINK_END)}

#: the reasoning variant's chat template: Llama 3's, with the reasoning opened by the generation
#: prompt (DeepSeek-R1 style) unless ``enable_thinking`` is false (then opened and closed at once)
_THINK_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n<think>\n' }}"
    "{% if enable_thinking is defined and not enable_thinking %}{{ '\n</think>\n\n' }}{% endif %}"
    "{% endif %}")


def cache_root() -> pathlib.Path:
    """``$STRUCTGATE_CACHE_DIR`` or ``~/.cache/structgate``."""
    env = os.environ.get("STRUCTGATE_CACHE_DIR")
    return pathlib.Path(env) if env else pathlib.Path.home() / ".cache" / "structgate"


def _tokenizer_dir() -> pathlib.Path:
    env = os.environ.get("STRUCTGATE_TINY_TOKENIZER_DIR")  # development override
    if env:
        return pathlib.Path(env)
    from ..tokenizers import bundled_tokenizer_dir

    return pathlib.Path(bundled_tokenizer_dir("llama3"))


def _digest(tok_dir: pathlib.Path, reasoning: bool = False) -> str:
    h = hashlib.sha256(json.dumps(TINY_LLAMA3_CONFIG, sort_keys=True).encode())
    if reasoning:
        h.update(json.dumps([sorted(_RESERVED.items()), _THINK_CHAT_TEMPLATE]).encode())
    h.update(str(SEED).encode())
    for name in _TOKENIZER_FILES:
        p = tok_dir / name
        if p.is_file():
            h.update(name.encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:12]


def embedded_model_dir(cache_dir: str | os.PathLike | None = None, *, rebuild: bool = False,
                       reasoning: bool = False) -> pathlib.Path:
    """The folder of the embedded model (``config.json``, ``generation_config.json``,
    ``model.safetensors``, tokenizer files), built on first call (about 2 s).

    Parameters
    ----------
    cache_dir : path, optional
        Root folder; default :func:`cache_root`.
    rebuild : bool
        Rebuild even if the folder exists.
    reasoning : bool
        The reasoning variant: ``<think>`` / ``</think>`` as tokens :data:`THINK_START_ID` /
        :data:`THINK_END_ID` and a chat template that opens the reasoning (module docstring).

    Returns
    -------
    pathlib.Path
        Usable as ``vllm serve PATH`` / ``LLM(model=PATH)``.

    Raises
    ------
    VocabularyError
        The bundled Llama 3 tokenizer is missing.
    ImportError
        ``torch`` / ``transformers`` are not installed (``pip install 'structgate[hf,torch]'``).
    """
    tok_dir = _tokenizer_dir()
    name = f"tiny-llama3{'-think' if reasoning else ''}-{_digest(tok_dir, reasoning)}"
    roots = [pathlib.Path(cache_dir)] if cache_dir is not None else [
        cache_root(), pathlib.Path(tempfile.gettempdir()) / f"structgate-{os.getuid()}"]
    for root in roots:  # the cache, else the system temp dir if the cache is not writable
        dest = root / "models" / name
        if (dest / "model.safetensors").is_file() and not rebuild:
            return dest
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            if os.access(dest.parent, os.W_OK):
                break
        except OSError:
            continue
    else:
        raise OSError(f"no writable folder for the embedded model (tried {', '.join(map(str, roots))})")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    try:
        _build(tmp, tok_dir)
        if reasoning:
            _add_think_tokens(tmp)
        if rebuild and dest.exists():
            shutil.rmtree(dest, ignore_errors=True)
        try:
            os.replace(tmp, dest)
        except OSError:  # another process won the race: keep theirs
            if not (dest / "model.safetensors").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _build(out: pathlib.Path, tok_dir: pathlib.Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**{k: v for k, v in TINY_LLAMA3_CONFIG.items() if k not in ("architectures", "model_type")})
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    model.save_pretrained(out, safe_serialization=True)
    # config.json exactly as declared (transformers may add or rename fields between releases)
    conf = json.loads((out / "config.json").read_text())
    conf.update(TINY_LLAMA3_CONFIG)
    (out / "config.json").write_text(json.dumps(conf, indent=2, sort_keys=True))
    (out / "generation_config.json").write_text(json.dumps({
        "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "do_sample": True,
        "temperature": 1.0, "top_p": 1.0}, indent=2))
    for name in _TOKENIZER_FILES:
        if (tok_dir / name).is_file():
            shutil.copyfile(tok_dir / name, out / name)
    (out / "README.md").write_text(
        "Tiny random-weight LlamaForCausalLM generated by structgate (structgate/plugin/model.py) for\n"
        "demos and tests: its outputs are nonsense. Tokenizer: Llama 3 (see the structgate package's\n"
        "data/tokenizers/llama3/README.md and LICENSE).\n")


def _add_think_tokens(out: pathlib.Path) -> None:
    """Rename the two reserved ids to the reasoning markers (non-special added tokens) and install
    the reasoning chat template, in the copied ``tokenizer.json`` / ``tokenizer_config.json``."""
    tok_path, cfg_path = out / "tokenizer.json", out / "tokenizer_config.json"
    tok = json.loads(tok_path.read_text())
    seen = set()
    for entry in tok["added_tokens"]:
        if entry["id"] in _RESERVED:
            old, new = _RESERVED[entry["id"]]
            if entry["content"] != old:
                raise ValueError(f"tokenizer.json: id {entry['id']} is {entry['content']!r}, expected {old!r}")
            entry["content"], entry["special"] = new, False
            seen.add(entry["id"])
    if seen != set(_RESERVED):
        raise ValueError(f"tokenizer.json lacks the reserved ids {sorted(set(_RESERVED) - seen)}")
    tok_path.write_text(json.dumps(tok, ensure_ascii=False))
    cfg = json.loads(cfg_path.read_text())
    for tid, (old, new) in _RESERVED.items():
        entry = cfg["added_tokens_decoder"][str(tid)]
        if entry["content"] != old:
            raise ValueError(f"tokenizer_config.json: id {tid} is {entry['content']!r}, expected {old!r}")
        entry["content"], entry["special"] = new, False
    cfg["chat_template"] = _THINK_CHAT_TEMPLATE
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False))
    with open(out / "README.md", "a") as f:
        f.write("\nReasoning variant: ids 128002 / 128003 are `<think>` / `</think>` (non-special added tokens);\n"
                "the chat template opens the reasoning (`<think>\\n`), or closes it at once with\n"
                "chat_template_kwargs {\"enable_thinking\": false}. Serve with --reasoning-parser deepseek_r1.\n")
