"""build_supervised_example against an independent reference: HF's ``return_assistant_tokens_mask``
on TRL's ``{% generation %}``-marked copies of the same templates (tests/data/generation_templates,
Apache-2.0, see its README).

For each family, generated conversations are rendered twice: by the renderer compiled from the
unmarked original (``train_on="all_assistant"``), and by ``apply_chat_template`` on the marked copy
with the real tokenizer of the corpus (the synthetic one where the corpus has none). Where the two
texts are the same, the ids must be the same and the masks agree token for token, except where
TRL's copies choose otherwise than our documented rule, which is checked class by class:

* ``after_close``: TRL puts the text the template writes after the close inside the marked block
  (``<|im_end|>\\n``: the ``\\n``; Phi-3.5 also the ``eos_token`` it appends at the end). We never
  train it (the model does not sample it). Those tokens must be exactly that text, right after a
  trained turn.
* ``header``: TRL's copies open the block inside what the generation prompt writes (gpt-oss
  ``<|start|>assistant``, Qwen2.5 the ``\\n`` after ``<|im_start|>assistant``, Qwen3 with thinking
  off and Qwen3.5 their prefilled think block, Nemotron-3 ``<think>``); the model does not sample
  the generation prompt. Those tokens must end the part of their message that is a beginning of
  the generation prompt, right before a trained turn.

* ``straddle`` (we train a token the reference does not): a single token that
  begins in the generation prompt's text and ends in the sampled text (Qwen2.5 encodes the
  header's ``\\n`` and a content of ``\\n\\n`` as one ``\\n\\n\\n``). It holds sampled text, so
  we train it. (Not seen with TRL's copies, which open the block before that ``\\n``; seen with the
  Fireworks cookbook, tests/test_supervised_fireworks.py.)

* ``tool_block_newline`` (we train, a reference does not): the ``\\n`` that opens the tool-call
  block (``TOOL_CALLS.block_start``, MiniMax-M2's ``\\n<minimax:tool_call>\\n``) right after the
  header, in a turn of only tool calls. The template writes it as part of the block, which the
  model samples, so we train it. (Seen with the Fireworks cookbook's MiniMax-M2 renderer, which
  moves it into the header, tests/test_supervised_fireworks.py.)

* ``reasoning_close_in_header`` (a reference trains, we do not): the reasoning close a template
  writes where its generation prompt opens the reasoning, in a turn that carries no reasoning
  (MiniMax-M3 with ``thinking_mode="enabled"`` writes ``]~b]ai\n</mm:think>`` where its prompt is
  ``]~b]ai\n<mm:think>``). It is the other mode's prefill (``thinking_mode="disabled"`` prompts
  ``]~b]ai\n</mm:think>``): in this mode the model never samples a token right after
  ``]~b]ai\n``, so we do not train it. (Not seen with TRL's copies; seen with the Fireworks
  cookbook's MiniMax-M3 renderer, tests/test_supervised_fireworks.py.)

Any other difference fails. Where a marked copy renders other text than the original (TRL's Qwen3
and Qwen3.5 copies write the think block in every assistant turn; the originals drop it before the
last user message), the test checks the difference is that one (the texts agree once every think
block is taken out) and counts those conversations apart. Every family must agree on at least
``SUPERVISED_REFERENCE_AGREEMENTS`` (200) conversations.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from compiler.analysis import compared_roles, knob_candidates, parse_template
from compiler.conversations import conversation_cases
from compiler.sampled_turns import true_runs
from compiler.stability import without_local_constants
from compiler.verify import features_for
from tests.families import ALL_FAMILIES

MARKED = Path(__file__).parent / "data" / "generation_templates"
AGREEMENTS = int(os.environ.get("SUPERVISED_REFERENCE_AGREEMENTS", "200"))
MAX_DRAWS = int(os.environ.get("SUPERVISED_REFERENCE_DRAWS", "2000"))


class Enough(Exception):
    """Raised from inside a hypothesis test once enough conversations agree: drawing stops there
    (only the generate phase runs, so nothing is shrunk or replayed)."""


def draw_until_agreed(features, visit, stats: Counter, max_draws: int = MAX_DRAWS) -> None:
    """Pass generated conversations (derandomized, nothing shrunk or replayed) to ``visit`` until
    ``stats["agree"]`` reaches ``AGREEMENTS`` or ``max_draws`` are drawn."""

    @settings(
        max_examples=max_draws,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=conversation_cases(features))
    def check(case):
        if stats["agree"] >= AGREEMENTS:
            raise Enough  # (stops drawing)
        visit(case)

    with without_local_constants():
        try:
            check()
        except Enough:
            pass


def without_think_blocks(text: str) -> str:
    """TRL's Qwen3 and Qwen3.5 copies write ``<think>\n...\n</think>\n\n`` in every assistant turn
    (Qwen3's with the content's leading newlines stripped); the originals only after the last user
    message. The texts must agree once every think block and those newlines are taken out."""
    text = re.sub(r"<think>\n.*?\n</think>\n\n", "", text, flags=re.DOTALL)
    return re.sub(r"(<\|im_start\|>assistant\n)\n+", r"\1", text)


#: renderer module -> (marked copy, what differs from the original in text, the mask classes TRL's copy adds)
REFERENCES = {
    "qwen2_5": ("qwen2_5_training.jinja", None, {"after_close", "header"}),
    "qwen3": ("qwen3_training.jinja", without_think_blocks, {"after_close", "header"}),
    "qwen3_5": ("qwen3_5_think_training.jinja", without_think_blocks, {"after_close", "header"}),
    "gemma_3": ("gemma3_training.jinja", None, {"after_close"}),
    "gpt_oss": ("gptoss_training.jinja", None, {"header"}),
    "phi_3_5_mini": ("phi3_5_training.jinja", None, {"after_close"}),
    "nvidia_nemotron_3_nano": ("nemotron_3_nano_training.jinja", None, {"after_close", "header"}),
}
FAMILIES = {family.module: family for family in ALL_FAMILIES if family.module in REFERENCES}


runs = true_runs  # half-open runs of True

#: not a convention of a reference: tokens after a stop the caller's text holds (checked by
#: _after_stop_in_message), seen only in conversations drawn with a stop in a message
AFTER_STOP = "after_stop"


def explain(renderer, example, theirs: list[bool], eos: str | None) -> Counter:
    """Classify the tokens where a reference mask and ours differ (see the module docstring); any
    other difference is an AssertionError naming it."""
    classes: Counter = Counter()
    stats_after_stop = [0]
    ids, ours = example.token_ids, example.trained_mask
    ours_runs = runs(ours)
    starts, ends = {start for start, _ in ours_runs}, {end for _, end in ours_runs}
    for start, end in runs([o and not t for o, t in zip(ours, theirs)]):
        # a token that begins in the turn's header and ends in its content (Qwen2.5's '\n\n\n' for
        # content '\n\n'): we train it (it holds sampled text), a reference may start after it
        if end - start == 1 and start in starts and _straddles_opening(renderer, example, start):
            classes["straddle"] += 1
        elif end - start == 1 and start in starts and _opens_tool_block_after_header(renderer, example, start):
            classes["tool_block_newline"] += 1
        else:
            text = renderer.decode(ids[start:end])
            raise AssertionError(f"we train tokens {start}..{end} ({text!r}), the reference does not")
    after = renderer.TURN.after_close
    for start, end in runs([t and not o for o, t in zip(ours, theirs)]):
        text = renderer.decode(ids[start:end])
        if start in ends and text in {after, after + (eos or ""), eos}:
            classes["after_close"] += end - start
        elif end in starts and _opens_turn(renderer, example, start, end):
            classes["header"] += end - start
        elif _closes_reasoning_in_header(renderer, example, start, text):
            classes["reasoning_close_in_header"] += end - start
        elif start in ends and _after_stop_in_message(renderer, example, start, end):
            stats_after_stop[0] += end - start
        else:
            raise AssertionError(f"unexplained mask difference at tokens {start}..{end}: {text!r}")
    if stats_after_stop[0]:
        classes[AFTER_STOP] = stats_after_stop[0]
    return classes


def _after_stop_in_message(renderer, example, start: int, end: int) -> bool:
    """Whether tokens ``start:end`` (a reference trains, we do not) follow, in the same message, a
    trained run that ends on a stop token: the caller's text holds the stop (Gemma-3's content
    ``<end_of_turn>Infinity`` encodes ``<end_of_turn>`` as the stop token). The model stops there
    and never samples what follows, so we do not train it; TRL's copy marks the whole content."""
    owner = example.rendered.message_indices
    return (
        start > 0
        and example.token_ids[start - 1] in set(renderer.get_stop_token_ids())
        and owner[start] >= 0
        and all(owner[k] == owner[start - 1] for k in range(start - 1, end))
    )


def _message_start(owner: list[int], position: int) -> int:
    """The first token of the run of tokens of token ``position``'s message."""
    first = position
    while first > 0 and owner[first - 1] == owner[position]:
        first -= 1
    return first


def _straddles_opening(renderer, example, position: int) -> bool:
    """Whether token ``position`` begins inside the text the generation prompt writes and ends past it."""
    owner = example.rendered.message_indices
    first = _message_start(owner, position)
    before = renderer.decode(example.token_ids[first:position])
    through = renderer.decode(example.token_ids[first : position + 1])
    opening = renderer.turn_opening()
    return opening.startswith(before) and len(before) < len(opening) < len(through) and through.startswith(opening)


def _opens_tool_block_after_header(renderer, example, position: int) -> bool:
    """Whether token ``position`` is the ``\\n`` that opens the tool-call block (MiniMax-M2's
    ``\\n<minimax:tool_call>\\n``), written right after the part of its message that is a beginning
    of the generation prompt (a turn of only tool calls: ``]~b]ai\\n\\n<minimax:tool_call>``)."""
    calls, owner = renderer.TOOL_CALLS, example.rendered.message_indices
    if calls is None or not calls.block_start.startswith("\n") or owner[position] < 0:
        return False
    first, last = _message_start(owner, position), position
    while last < len(owner) and owner[last] == owner[position]:
        last += 1
    before = renderer.decode(example.token_ids[first:position])
    after = renderer.decode(example.token_ids[position:last])
    return (
        renderer.decode(example.token_ids[position : position + 1]) == "\n"
        and renderer.turn_opening().startswith(before)
        and after.startswith(calls.block_start)
    )


def _closes_reasoning_in_header(renderer, example, start: int, text: str) -> bool:
    """Whether ``text`` (tokens from ``start``) is the reasoning close, written right after the part of
    the generation prompt that comes before the prompt's reasoning open (MiniMax-M3 with
    ``thinking_mode="enabled"``: ``]~b]ai\n</mm:think>`` where the prompt is ``]~b]ai\n<mm:think>``)."""
    reasoning, opening = renderer.REASONING, renderer.turn_opening()
    if reasoning is None or text != reasoning.close or example.rendered.message_indices[start] < 0:
        return False
    owner = example.rendered.message_indices
    first = _message_start(owner, start)
    before = renderer.decode(example.token_ids[first:start])
    cuts = range(1, len(opening) + 1)
    return any(before.endswith(opening[:cut]) and opening[cut:].startswith(reasoning.open) for cut in cuts)


def _opens_turn(renderer, example, start: int, end: int) -> bool:
    """Whether tokens ``start:end`` end the part of their message that the generation prompt writes:
    the message's text up to ``end`` is a beginning of the generation prompt."""
    owner = example.rendered.message_indices
    first = _message_start(owner, start)
    return owner[start] >= 0 and renderer.turn_opening().startswith(renderer.decode(example.token_ids[first:end]))


@pytest.mark.parametrize("module", sorted(REFERENCES))
def test_masks_agree_with_generation_marked_templates(module):
    pytest.importorskip("transformers")
    family = FAMILIES[module]
    marked_file, text_difference, expected_classes = REFERENCES[module]
    marked = (MARKED / marked_file).read_text(encoding="utf-8")
    tokenizer = family.load_tokenizer()
    ast = parse_template(family.template_source(), family.template_file)
    # at most 6 messages: multi-turn, tool rounds and rewritten history all occur, at a cost CI can pay
    features = dataclasses.replace(
        features_for(family.renderer_class, knob_candidates(ast, ()), compared_roles(ast)), max_messages=6
    )
    renderers: dict = {}
    eos = getattr(tokenizer, "eos_token", None)
    stats: Counter = Counter()

    def compare(messages: list, tools, knobs: dict, renderer) -> None:
        try:
            example = renderer.build_supervised_example(messages, tools=tools, train_on="all_assistant")
        except ValueError:
            stats["refused by the original"] += 1
            return
        arguments = dict(tools=tools, chat_template=marked, **knobs)
        normalized = renderer.normalize_messages(messages)
        try:
            reference = tokenizer.apply_chat_template(
                normalized, tokenize=True, return_dict=True, return_assistant_tokens_mask=True, **arguments
            )
        except Exception:  # the marked copy refuses what the original renders
            stats["refused by the marked copy"] += 1
            return
        described = json.dumps({"messages": messages, "tools": tools, "knobs": knobs}, ensure_ascii=False, indent=1)
        if list(reference["input_ids"]) != example.token_ids:
            text = renderer.render_text(messages, tools=tools)
            reference_text = tokenizer.apply_chat_template(normalized, tokenize=False, **arguments)
            assert text != reference_text, f"the same text, other ids:\n{described}"
            assert text_difference is not None, f"the marked copy renders other text:\n{described}"
            if "think>" in described:  # markers in the caller's text defeat the regex
                stats["text differs (think markers in the messages, not checked)"] += 1
                return
            assert text_difference(text) == text_difference(reference_text), described
            stats["text differs (the known difference)"] += 1
            first_turn = next(i for i, message in enumerate(messages) if message.get("role") == "assistant")
            if first_turn + 1 < len(messages):  # its prefix through the first assistant turn has no rewritten history
                compare(messages[: first_turn + 1], tools, knobs, renderer)
            return
        theirs = [bool(flag) for flag in reference["assistant_masks"]]
        try:
            classes = explain(renderer, example, theirs, eos)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{described}") from None
        for name, count in classes.items():
            stats[f"tokens {name}"] += count
        stats["agree"] += 1
        stats["trained tokens"] += example.num_trained

    def visit(case) -> None:
        key = tuple(sorted(case.knobs.items()))
        if key not in renderers:
            renderers[key] = family.renderer_class(tokenizer, **case.knobs)
        if not any(message.get("role") == "assistant" for message in case.messages):
            stats["no assistant message"] += 1
            return
        compare(case.messages, case.tools, case.knobs, renderers[key])

    draw_until_agreed(features, visit, stats)
    print(module, dict(stats))
    assert stats["agree"] >= AGREEMENTS, dict(stats)
    seen = {name.removeprefix("tokens ") for name in stats if name.startswith("tokens ")} - {AFTER_STOP}
    assert seen == expected_classes, f"convention classes seen {seen}, expected {expected_classes}: {dict(stats)}"
    if text_difference is not None:
        assert stats["text differs (the known difference)"] > 0
