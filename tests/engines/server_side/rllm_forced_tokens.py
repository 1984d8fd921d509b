"""Runs inside vLLM's process (``--logits-processors rllm_forced_tokens:ForcedTokens``; this folder
on its PYTHONPATH): a request whose ``vllm_xargs`` hold ``forced_token_ids`` samples exactly
those ids, one per step, whatever the weights say.

Structured outputs alone do not force ids: a regular expression fixes the text, and allowed ids
keep the tokens to the text's encoding, but where that encoding has a token that is a prefix of
another (" " and " in" in Qwen's "and 01:15 in") the model may take the short one and find no
allowed token after it; vLLM then ends the request with "grammar rejected tokens" (HTTP 500).
"""

from __future__ import annotations

import torch
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor


class ForcedTokens(AdapterLogitsProcessor):
    """Step ``n`` of a request with ``forced_token_ids`` can only sample its ``n``-th id."""

    def is_argmax_invariant(self) -> bool:
        return False  # (it changes which token wins)

    def new_req_logits_processor(self, params):
        forced = (params.extra_args or {}).get("forced_token_ids")
        if not forced:
            return None
        forced = [int(token) for token in forced]

        def force(output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
            step = len(output_ids)
            if step >= len(forced):
                return logits  # (max_tokens ends the request first)
            only = torch.full_like(logits, float("-inf"))
            only[forced[step]] = 0.0
            return only

        return force
