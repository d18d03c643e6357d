"""The engine side of a structgate vLLM server without a server, for the plugin's unit tests
(import the fixtures into a test module: ``from _vllm_engine import plugin, hf_tokenizer, model_config``)."""
from __future__ import annotations

import types

import pytest


@pytest.fixture(scope="module")
def plugin():
    """Register the plugin and import every patched vLLM module."""
    import structgate.plugin as p

    p.register()
    import vllm.config.structured_outputs  # noqa: F401
    import vllm.engine.arg_utils  # noqa: F401
    import vllm.sampling_params  # noqa: F401
    import vllm.v1.structured_output  # noqa: F401
    return p


@pytest.fixture(scope="module")
def hf_tokenizer():
    from transformers import AutoTokenizer

    from structgate.tokenizers import bundled_tokenizer_dir

    return AutoTokenizer.from_pretrained(str(bundled_tokenizer_dir("llama3")))


@pytest.fixture(scope="module")
def model_config():
    return types.SimpleNamespace(
        is_diffusion=False, get_vocab_size=lambda: 128256,
        try_get_generation_config=lambda: {"eos_token_id": [128001, 128008, 128009]},
        hf_config=types.SimpleNamespace(eos_token_id=[128001, 128008, 128009]))


def engine_backend(name, hf_tokenizer, model_config):
    """vLLM's structured-output backend object of a server whose backend is ``name``."""
    from structgate.plugin.bridge import StructgateVllmBackend

    cfg = types.SimpleNamespace(model_config=model_config, speculative_config=None,
                                structured_outputs_config=types.SimpleNamespace(disable_any_whitespace=False))
    return StructgateVllmBackend(cfg, tokenizer=hf_tokenizer, vocab_size=128256, backend_name=name)
