"""A speculative-decoding proposer for the reasoning tests (``--speculative-config
'{"method": "custom_class", "model": "reasoning_drafts.EndMarkerProposer", ...}'``, with this folder
on ``PYTHONPATH``).

While a request's reasoning is open (the last ``<think>`` of its tokens is not followed by
``</think>``), every draft is ``</think>`` followed by the tokens that came after the first
``</think>`` of its context (an example answer in the prompt), up to ``num_speculative_tokens``.
Once the reasoning is closed it drafts nothing. So the end marker reaches the scheduler *inside* a
draft at every reasoning step: the draft positions after it must be grammar-masked and fed to the
grammar, the ones before it not. The target model (random weights) rejects the drafted marker
until vLLM's ``thinking_token_budget`` forces ``</think>`` at the chosen position; then the marker
is accepted inside the draft and the next position is sampled from the grammar's row.
"""
from __future__ import annotations

import numpy as np

from structgate.plugin.model import THINK_END_ID, THINK_START_ID


class EndMarkerProposer:
    """vLLM ``custom_class`` proposer (``propose`` returns one draft list per request)."""

    def __init__(self, vllm_config) -> None:
        self.k = vllm_config.speculative_config.num_speculative_tokens
        self.max_model_len = vllm_config.model_config.max_model_len

    def load_model(self, *args, **kwargs) -> None:  # no model
        pass

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None):
        drafts: list[list[int]] = []
        for i, sampled in enumerate(sampled_token_ids):
            n = int(num_tokens_no_spec[i])
            if not len(sampled) or n + self.k >= self.max_model_len:
                drafts.append([])
                continue
            toks = np.asarray(token_ids_cpu[i, :n])
            starts = np.flatnonzero(toks == THINK_START_ID)
            ends = np.flatnonzero(toks == THINK_END_ID)
            if not len(starts) or (len(ends) and ends[-1] > starts[-1]):
                drafts.append([])
                continue
            follow = toks[ends[0] + 1:ends[0] + self.k].tolist() if len(ends) else []
            drafts.append([THINK_END_ID] + [int(t) for t in follow])
        return drafts
