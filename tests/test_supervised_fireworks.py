"""build_supervised_example against the Fireworks cookbook's own supervised examples
(``build_supervised_example(..., train_on_what=ALL_ASSISTANT_MESSAGES)`` of its hand-written
Qwen2.5 renderer, imported in place from ``$RLLM_ORACLES``, as tests/test_crosscheck_fireworks.py
does).

Generated conversations of system, user and assistant messages (the class on which the cookbook's
Qwen2.5 renderer and the corpus template give the same ids; with tools and tool calls they part, see
tests/test_crosscheck_fireworks.py) are built by both; where the ids are the same, the weights must
agree token for token, except for the one convention class the cookbook shares with TRL: it trains
the ``\\n`` the template writes after ``<|im_end|>`` (``after_close`` in
tests/test_supervised_references.py, checked the same way), and where one token begins in the
header and ends in the content (``\n\n\n`` for content ``\n\n``: ``straddle``), the cookbook trains
only tokens that begin in the content, we train that one too. At least 200 conversations must agree.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from compiler.conversations import ConversationFeatures, conversation_cases
from compiler.stability import without_local_constants
from tests.families import FAMILIES
from tests.test_supervised_references import AGREEMENTS, Enough, explain

ORACLES = os.environ.get("RLLM_ORACLES", str(os.path.join(os.path.dirname(__file__), "..", "..", "shared", "oracles")))
PLAIN = ConversationFeatures(roles=("system", "user", "assistant"), tools=False, tool_calls=False, reasoning=False)


def test_weights_agree_with_the_fireworks_qwen25_renderer():
    pytest.importorskip("tinker_cookbook", reason="the Fireworks renderers need tinker-cookbook (the tinker extra)")
    if not os.path.isdir(os.path.join(ORACLES, "fireworks-cookbook")):
        pytest.skip(f"Fireworks oracle not found under {ORACLES} (set RLLM_ORACLES)")
    from compiler.oracles.fireworks import FireworksOracle
    from tinker_cookbook.renderers import TrainOnWhat

    family = next(family for family in FAMILIES if family.module == "qwen2_5")
    tokenizer = family.load_tokenizer()
    renderer = family.renderer_class(tokenizer)
    oracle = FireworksOracle("qwen2_5", tokenizer)
    stats: Counter = Counter()

    @settings(
        max_examples=1500,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=conversation_cases(PLAIN))
    def check(case):
        if stats["agree"] >= AGREEMENTS:
            raise Enough  # (stops drawing)
        if not any(message["role"] == "assistant" for message in case.messages):
            stats["no assistant message"] += 1
            return
        try:
            example = renderer.build_supervised_example(case.messages, train_on="all_assistant")
        except ValueError:
            stats["refused by the template"] += 1
            return
        try:
            conversation = oracle.conversation(case.messages, None)
            model_input, weights = oracle.renderer({}).build_supervised_example(
                conversation, train_on_what=TrainOnWhat.ALL_ASSISTANT_MESSAGES
            )
        except Exception:
            stats["refused by the cookbook"] += 1
            return
        if list(model_input.to_ints()) != example.token_ids:
            stats["other ids"] += 1
            return
        try:
            classes = explain(renderer, example, [weight > 0 for weight in weights.tolist()], None)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{case.describe()}") from None
        stats.update({f"tokens {name}": count for name, count in classes.items()})
        stats["agree"] += 1

    with without_local_constants():
        try:
            check()
        except Enough:
            pass
    print(dict(stats))
    assert stats["agree"] >= AGREEMENTS, dict(stats)
    seen = {name for name in stats if name.startswith("tokens ")}
    assert {"tokens after_close"} <= seen <= {"tokens after_close", "tokens straddle"}, dict(stats)
