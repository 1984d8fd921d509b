"""build_supervised_example against the Fireworks cookbook's own supervised examples
(``build_supervised_example(..., train_on_what=ALL_ASSISTANT_MESSAGES)`` of its hand-written
renderers, imported in place from ``$RLLM_ORACLES``, as tests/test_crosscheck_fireworks.py does),
for the families the cookbook and the corpus share: Qwen2.5 and DeepSeek-V4 with their real
tokenizers, MiniMax-M3, MiniMax-M2 and Gemma-4 with synthetic ones. (Its other renderers are of
other model versions than the corpus templates, GLM-5 and Kimi-K2.6, see
tests/test_crosscheck_fireworks.py.) MiniMax-M2's conversations start with a system message (the
cookbook writes its own default system prompt where the template writes "You are a helpful
assistant.") and have no tools list (the cookbook's renderer declares none; tool calls are drawn).

Generated conversations are built by both, cut after their last assistant message (DeepSeek-V4's
encoder opens an assistant turn after a trailing user message, the cookbook's example does not),
with the template knobs drawn and mapped to the cookbook's variant
(:data:`compiler.oracles.fireworks.VARIANTS`; a combination it has no variant for is counted).
Where the ids are the same, the weights must agree token for token, except for these convention
classes (checked exactly by ``explain`` in tests/test_supervised_references.py):

* ``after_close`` (Qwen2.5, MiniMax-M3): the cookbook trains the ``\\n`` the template writes after
  the close (``<|im_end|>``, ``[e~[``); the model does not sample it, we do not train it.
* ``header`` (Gemma-4 with thinking off, MiniMax-M2): the cookbook trains what the generation
  prompt writes: Gemma-4's empty thought channel ``<|channel>thought\n<channel|>``, MiniMax-M2's
  ``<think>\n`` (its prompt is ``]~b]ai\n<think>\n``); the model does not sample it.
* ``tool_block_newline`` (MiniMax-M2): in a turn of only tool calls (``]~b]ai\n\n<minimax:tool_call>``)
  the cookbook moves the ``\n`` that opens the tool-call block (the template writes
  ``\n<minimax:tool_call>\n`` whatever comes before it) into the header and does not train it
  (presumably so that its separately encoded header and body give the ids of a tokenizer that
  merges ``\n\n``). We train it: it is the block's own first character, which the model samples
  after its text in every other turn, and the first sampled character here just as a content's
  first character is (which both train) in a turn of only text.
* ``straddle`` (Qwen2.5): one token that begins in the header and ends in the content (``\\n\\n\\n``
  for content ``\\n\\n``); the cookbook trains only tokens that begin in the content, we train it.
* ``reasoning_close_in_header`` (MiniMax-M3, ``thinking_mode="enabled"``): a turn without reasoning
  is ``]~b]ai\\n</mm:think>...`` where the prompt is ``]~b]ai\\n<mm:think>``; the cookbook trains
  that ``</mm:think>``, we do not: in this mode the model never samples right after ``]~b]ai\\n``
  (the close is the disabled mode's prefill). The cookbook's own DeepSeek-V4 renderer does the
  same as we do for the same shape (``<｜Assistant｜></think>`` of a turn whose reasoning was
  dropped is its header), so DeepSeek-V4 has no class at all.

Where the ids differ, the conversation must be one of the family's known rendering differences
(:data:`OTHER_IDS`), each counted; any other one fails. Each family must agree on at least 200
conversations (``SUPERVISED_REFERENCE_AGREEMENTS``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections import Counter

import pytest
from compiler.conversations import ConversationFeatures
from tests.families import ALL_FAMILIES, load_corpus_tokenizer
from tests.test_supervised_references import AFTER_STOP, AGREEMENTS, draw_until_agreed, explain

ORACLES = os.environ.get("RLLM_ORACLES", str(os.path.join(os.path.dirname(__file__), "..", "..", "shared", "oracles")))
PLAIN = ConversationFeatures(roles=("system", "user", "assistant"), tools=False, tool_calls=False, reasoning=False)
WITH_TOOLS = dict(roles=("system", "user", "assistant", "tool"), max_messages=6, arguments_form="string")


def _assistant_not_right_after_a_user_turn(case) -> bool:
    """DeepSeek-V4's encoder writes the ``<｜Assistant｜>`` header only right after a user turn (a
    user or tool message); the cookbook's renderer writes ``<｜Assistant｜></think>`` before every
    assistant message (after a system message, or first, too)."""
    roles = [message["role"] for message in case.messages]
    return any(role == "assistant" and (k == 0 or roles[k - 1] not in ("user", "tool")) for k, role in enumerate(roles))


def _tools_with_a_later_system(case) -> bool:
    """With tools, DeepSeek-V4's encoder writes the tools section after the first system message
    wherever it is; the cookbook's folding takes only a leading system message."""
    roles = [message["role"] for message in case.messages]
    return bool(case.tools) and "system" in roles[1:] and roles[0] != "system"


def _think_close_in_content(case) -> bool:
    """The cookbook's DeepSeek-V4 renderer reads an assistant content's text before ``</think>`` as
    reasoning (when there is no ``reasoning_content``); the encoder writes the content as it is."""
    return any(
        message["role"] == "assistant" and isinstance(message.get("content"), str) and "</think>" in message["content"]
        for message in case.messages
    )


def _visible_text(content) -> str:
    """A content's text as MiniMax-M2's template and the cookbook read it (text parts joined)."""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text")
    return content if isinstance(content, str) else ""


def _no_leading_system_text(case) -> bool:
    """Without a leading system message with text, MiniMax-M2's template writes its
    ``model_identity`` ("You are a helpful assistant."); the cookbook's renderer writes its own
    default system prompt ("You are MiniMax-M2, a helpful AI assistant built by MiniMax. ...")."""
    first = case.messages[0]
    return first["role"] != "system" or _visible_text(first.get("content")) == ""


def _later_system_message(case) -> bool:
    """MiniMax-M2's template renders only a leading system message (a later one is dropped); the
    cookbook's renderer writes every system message as a turn."""
    return any(message["role"] == "system" for message in case.messages[1:])


def _think_close_with_empty_reasoning(case) -> bool:
    """With ``reasoning_content: ""`` MiniMax-M2's template writes an assistant content whole (the
    key is a string, so it does not look for ``</think>``); the cookbook's renderer reads the
    content's text before ``</think>`` as reasoning."""
    return any(
        message["role"] == "assistant"
        and message.get("reasoning_content") == ""
        and "</think>" in _visible_text(message.get("content"))
        for message in case.messages
    )


def _consecutive_assistant_messages(case) -> bool:
    """Gemma-4's template writes an assistant message right after another outside any turn (the
    first closed with ``<turn|>\n``, the second with no ``<|turn>model\n``); the cookbook's
    renderer joins them into one model turn."""
    roles = [message["role"] for message in case.messages]
    return any(a == b == "assistant" for a, b in zip(roles, roles[1:]))


#: renderer module -> (the cookbook's renderer, conversations drawn, convention classes: required, allowed)
FAMILY_CASES = {
    "qwen2_5": ("qwen2_5", PLAIN, {"after_close"}, {"after_close", "straddle"}),
    "gemma_4": (
        "gemma4",
        dataclasses.replace(PLAIN, knobs=(("enable_thinking", (True, False)),)),
        {"after_close", "header"},
        {"after_close", "header"},
    ),
    "deepseek_v4": (
        "deepseek_v4",
        ConversationFeatures(
            knobs=(("thinking_mode", ("thinking", "chat")), ("drop_thinking", (False,))), **WITH_TOOLS
        ),
        set(),
        set(),
    ),
    "minimax_m3": (
        "minimax_m3",
        ConversationFeatures(knobs=(("thinking_mode", ("enabled", "disabled", "adaptive")),), **WITH_TOOLS),
        {"after_close", "reasoning_close_in_header"},
        {"after_close", "reasoning_close_in_header"},
    ),
    "minimax_m2": (
        "minimax_m2",
        # no tools list: the cookbook's MiniMax-M2 renderer declares no tools (the oracle drops them)
        ConversationFeatures(tools=False, lead_roles=("system",), **WITH_TOOLS),
        {"after_close", "header", "tool_block_newline"},
        {"after_close", "header", "tool_block_newline"},
    ),
}
#: renderer module -> the corpus tokenizer both sides use, where not the family's own (the cookbook's
#: Gemma-4 renderer needs its special tokens as single tokens, which the corpus's synthetic one has)
TOKENIZERS = {"gemma_4": "synthetic/gemma4"}
#: renderer module -> the known rendering differences, by name (a conversation may have several)
OTHER_IDS = {
    "gemma_4": {"consecutive assistant messages": _consecutive_assistant_messages},
    "minimax_m2": {
        "no leading system message with text": _no_leading_system_text,
        "a later system message": _later_system_message,
        "</think> in an assistant content with an empty reasoning_content": _think_close_with_empty_reasoning,
    },
    "deepseek_v4": {
        "an assistant message not right after a user turn": _assistant_not_right_after_a_user_turn,
        "tools with a later system message": _tools_with_a_later_system,
        "</think> in an assistant content": _think_close_in_content,
    },
}


@pytest.mark.parametrize("module", sorted(FAMILY_CASES))
def test_weights_agree_with_the_fireworks_renderer(module):
    pytest.importorskip("tinker_cookbook", reason="the Fireworks renderers need tinker-cookbook (the tinker extra)")
    if not os.path.isdir(os.path.join(ORACLES, "fireworks-cookbook")):
        pytest.skip(f"Fireworks oracle not found under {ORACLES} (set RLLM_ORACLES)")
    from compiler.oracles.fireworks import FireworksOracle
    from tinker_cookbook.renderers import TrainOnWhat

    name, features, required, allowed = FAMILY_CASES[module]
    family = next(family for family in ALL_FAMILIES if family.module == module)
    tokenizer = load_corpus_tokenizer(TOKENIZERS[module]) if module in TOKENIZERS else family.load_tokenizer()
    oracle = FireworksOracle(name, tokenizer)
    renderers: dict = {}
    stats: Counter = Counter()

    def compare(case) -> None:
        key = tuple(sorted(case.knobs.items()))
        if key not in renderers:
            renderers[key] = family.renderer_class(tokenizer, **case.knobs)
        renderer = renderers[key]
        try:
            theirs_renderer = oracle.renderer(case.knobs)
        except ValueError:
            stats["knobs the cookbook has no variant for"] += 1
            return
        try:
            example = renderer.build_supervised_example(case.messages, tools=case.tools, train_on="all_assistant")
        except ValueError:
            stats["refused by the template"] += 1
            return
        try:
            conversation = oracle.conversation(case.messages, case.tools, case.knobs)
            model_input, weights = theirs_renderer.build_supervised_example(
                conversation, train_on_what=TrainOnWhat.ALL_ASSISTANT_MESSAGES
            )
        except Exception:
            stats["refused by the cookbook"] += 1
            return
        if list(model_input.to_ints()) != example.token_ids:
            known = [label for label, applies in OTHER_IDS.get(module, {}).items() if applies(case)]
            assert known, f"other ids, not a known rendering difference:\n{case.describe()}"
            stats[f"other ids: {' + '.join(known)}"] += 1
            return
        try:
            classes = explain(renderer, example, [weight > 0 for weight in weights.tolist()], None)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{case.describe()}") from None
        stats.update({f"tokens {label}": count for label, count in classes.items()})
        stats.update({f"conversations {label}": 1 for label in classes})
        stats["agree"] += 1
        stats[f"agree with knobs {dict(case.knobs)}"] += 1

    def visit(case) -> None:
        roles = [message["role"] for message in case.messages]
        if "assistant" not in roles:
            stats["no assistant message"] += 1
            return
        last = len(roles) - 1 - roles[::-1].index("assistant")
        compare(dataclasses.replace(case, messages=case.messages[: last + 1]))

    # the cookbook warns on every ALL_ASSISTANT_MESSAGES example of a renderer that rewrites history
    logging.disable(logging.WARNING)
    try:
        draw_until_agreed(features, visit, stats, max_draws=1500)
    finally:
        logging.disable(logging.NOTSET)
    print(module, dict(stats))
    assert stats["agree"] >= AGREEMENTS, dict(stats)
    seen = {name.removeprefix("tokens ") for name in stats if name.startswith("tokens ")} - {AFTER_STOP}
    assert required <= seen <= allowed, f"convention classes seen {seen}, expected {required}..{allowed}: {dict(stats)}"
