"""The bridge differential: a class's bridge against the template, at every bridge point of a conversation.

Each conversation is played as an episode: the first prompt is ``render_ids(history,
add_generation_prompt=True)``; at every assistant turn followed by non-assistant messages the
completion is the turn as the template renders it (cut after its first stop; for a template that
cuts reasoning out of the content, a reasoning block and then that turn: see
:mod:`compiler.turn_sampling`), and the next prompt is the bridge's result, or a full re-render
when it returned None. Each point is tried with the completion as sampled, truncated before its
close and run past its stop, with the history given as ``messages=`` and recalled by the renderer,
and by a renderer that never rendered the prompt (it reads the history back from the ids).

Counted against the template (``full`` = its render of history + turn + new, with the generation
prompt): a **miss** is None where an exact extension existed (except at ambiguous points, whose
completion parses into a turn that renders otherwise); a **wrong** is a result other than the
template's. ``generate`` and ``verify`` run it on the verification conversations, both retention
modes (a wrong bridge fails them); ``tests/test_bridge_differential.py`` on every checked-in family.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from rllm_renderers.bridging.memory import PromptHistories

from .fact_proof import as_written
from .oracle import OracleRejected
from .probes import as_text_parts
from .turn_sampling import reasoned_turn, sampled_turn, template_suffix, turn_points

RETENTIONS = ("template", "verbatim")


def answers_depend_on_call_ids(renderer, completion, history, assistant, new, tools) -> bool:
    """Whether the new tool results render differently (text, or the messages it is read from) when
    the sampled calls, whose ids the completion does not carry, had other ids (theirs reversed, or
    the ones a bridge would make up): the tokens alone cannot tell."""
    calls = assistant.get("tool_calls") or []
    if not calls or any(call.id for call in renderer.parse_response(completion, tools=tools).tool_calls):
        return False
    expected = renderer._render_output(history + [assistant] + new, tools, False)
    for ids in ([call.get("id") for call in reversed(calls)], [f"call_{k}" for k in range(len(calls))]):
        other = {**assistant, "tool_calls": [{**call, "id": ids[k]} for k, call in enumerate(calls)]}
        try:
            output = renderer._render_output(history + [other] + new, tools, False)
        except ValueError:
            return True
        if output.text() != expected.text() or output.caller_ranges() != expected.caller_ranges():
            return True
    return False


class BridgeProof:
    """Drives conversations through one renderer class's bridge and counts the outcomes."""

    def __init__(
        self, renderer_class: type, tokenizer, oracle, retention: str, special_tokens: dict | None = None
    ) -> None:
        self.renderer_class = renderer_class
        self.tokenizer = tokenizer
        self.oracle = oracle
        self.retention = retention
        self.special_tokens = dict(special_tokens or {})
        self.renderers: dict[str, object] = {}
        self.counts: Counter = Counter()
        self.examples: list[str] = []
        self.wrong_examples: list[str] = []  # the first wrong answers, with their bridge point
        self.point: tuple = ()  # the bridge point being checked: (history, sampled turn, new messages, completion)

    def renderer(self, knobs: dict):
        key = repr(sorted(knobs.items()))
        if key not in self.renderers:
            renderer = self.renderer_class(
                self.tokenizer, thinking_retention=self.retention, special_tokens=self.special_tokens, **knobs
            )
            self.renderers[key] = self.counting_resumes(renderer)
        return self.renderers[key]

    def counting_resumes(self, renderer):
        """Count the template runs the bridge asks to resume from a checkpoint, and those that did: a
        bridge that never resumes would pass every exactness count above while costing a full run."""
        run = renderer._run_template

        def counted(*arguments, resume_from=None, **keywords):
            output = run(*arguments, resume_from=resume_from, **keywords)
            if resume_from is not None:
                self.counts["resumable runs"] += 1
                self.counts["resumed runs"] += output.resumed_at is not None
            return output

        renderer._run_template = counted
        return renderer

    # --- the oracle ---------------------------------------------------------------------

    def full_render(self, renderer, messages, tools, knobs):
        try:
            normalized = renderer.normalize_messages(messages)
            text = self.oracle.render_text(normalized, tools=tools, add_generation_prompt=True, knobs=knobs)
            ids = self.oracle.render_ids(normalized, tools=tools, add_generation_prompt=True, knobs=knobs)
        except (OracleRejected, ValueError):
            return None
        return text, ids

    # --- one episode --------------------------------------------------------------------

    def play(self, case, junk: list[int]) -> None:
        renderer = self.renderer(case.knobs)
        messages, tools = case.messages, case.tools
        prompt = None
        for history, message, new in turn_points(messages):
            if prompt is None:
                try:
                    prompt = renderer.render_ids(history, tools=tools, add_generation_prompt=True)
                except ValueError:
                    return
            sampled = None
            if new:
                sampled = sampled_turn(renderer, history, message, tools, new)
                sampled = sampled or reasoned_turn(renderer, history, message, tools)
            completion = sampled[1] if sampled else None
            if completion is None:
                return  # the episode cannot go on as the model would have played it
            prompt = self.bridge_point(renderer, prompt, completion, history, message, new, tools, case.knobs, junk)
            if prompt is None:
                return

    def ambiguous(self, renderer, completion, history, assistant, tools) -> bool:
        """Whether the completion parses into a turn that renders to other tokens than ``assistant``."""
        parsed = renderer.parse_response(completion, tools=tools)
        if any(call.arguments is None for call in parsed.tool_calls):
            return True  # a call whose arguments do not parse is not the turn (and no message to render)
        if any(call.status == "missing_name" for call in parsed.tool_calls):
            return True  # nor one whose name does not parse (Gemma-4's `call:{x{...}}`: the tool `{x`?), though
            # the bridge answers where the new messages read no call name (GLM's `<tool_call></tool_call>`)
        rebuilt = {"role": "assistant", "content": parsed.content}
        if renderer.TURN.content_parts:  # (as the bridge gives it back)
            rebuilt = as_text_parts({**rebuilt, "content": parsed.content or ""})
        if parsed.reasoning_content is not None:
            rebuilt["reasoning_content"] = parsed.reasoning_content
        originals = assistant.get("tool_calls") or []
        if parsed.tool_calls:
            rebuilt["tool_calls"] = [
                {
                    "id": (originals[k] if k < len(originals) else {}).get("id"),
                    "type": "function",
                    "function": {"name": call.name or "", "arguments": call.arguments},
                }
                for k, call in enumerate(parsed.tool_calls)
            ]
        try:
            return renderer.render_ids(history + [rebuilt], tools=tools) != renderer.render_ids(
                history + [assistant], tools=tools
            )
        except ValueError:
            return True

    def content_follows_new_messages(self, renderer, history, assistant, new, tools) -> bool:
        """Whether the template writes the new messages inside the sampled turn, before its content
        (Gemma-4 puts tool responses right after the calls and the turn's text after them): a model
        that wrote text before its stop sampled a turn the template cannot show, so no answer is right."""
        if not (isinstance(assistant.get("content"), str) and assistant["content"].strip()):
            return False
        try:
            spans = renderer._render_output(history + [assistant] + new, tools, True).message_spans()
        except ValueError:
            return False
        return not any(index == len(history) + 1 for _, index in spans)

    def bridge_point(self, renderer, prompt, completion, history, assistant, new, tools, knobs, junk):
        """Check every variant at one point; return the next prompt of the episode (None: stop)."""
        self.point = (history, assistant, new, renderer.decode(completion))
        full = self.full_render(renderer, history + [assistant] + new, tools, knobs)
        ambiguous = (
            self.ambiguous(renderer, completion, history, assistant, tools)
            or answers_depend_on_call_ids(renderer, completion, history, assistant, new, tools)
            or self.content_follows_new_messages(renderer, history, assistant, new, tools)
        )
        self.counts["ambiguous points"] += ambiguous
        kept = prompt + completion
        extends = full is not None and full[1][: len(kept)] == kept
        expected = None
        if full is not None and (extends or self.retention == "verbatim"):
            suffix = (
                full[1][len(kept) :]
                if extends
                else template_suffix(renderer, self.tokenizer, history, assistant, new, tools, full[0])
            )
            expected = None if suffix is None else kept + suffix
            self.counts["extends"] += extends
            self.counts["oracle suffix not found"] += suffix is None
        next_prompt = None
        junk = [
            token % renderer.vocab_size for token in junk
        ]  # sampled ids: of the vocabulary (a synthetic one is small)
        variants = [("sampled", completion), ("ran past the stop", completion + junk)]
        close = renderer.encoder.encode(renderer.TURN.close) if renderer.TURN.close else []
        if len(close) == 1 and completion[-1] == close[0]:  # (a close of several tokens is not restored)
            variants.append(("truncated", completion[:-1]))  # the bridge restores the close
        for label, given_completion in variants:
            with_history = renderer.bridge_to_next_turn(prompt, given_completion, new, tools=tools, messages=history)
            recalled = renderer.bridge_to_next_turn(prompt, given_completion, new, tools=tools)
            self.record(label, with_history, recalled, expected, full is not None and not ambiguous)
            if label == "sampled":
                self.record_foreign(
                    self.stranger(knobs).bridge_to_next_turn(prompt, given_completion, new, tools=tools),
                    expected,
                    full is not None and not ambiguous,
                )
                next_prompt = with_history.token_ids if with_history is not None else None
                if extends and not ambiguous and recalled is not None:
                    self.check_attribution(
                        renderer, recalled, len(kept), history + [assistant] + new, tools, len(history) + 1
                    )
        if next_prompt is None and full is not None:  # the caller re-renders
            next_prompt = renderer.render_ids(history + [assistant] + new, tools=tools, add_generation_prompt=True)
        return next_prompt

    def record(self, label, with_history, recalled, expected, must_bridge: bool) -> None:
        self.counts["points"] += 1
        for how, result in (("messages=", with_history), ("recalled", recalled)):
            ids = None if result is None else list(result.token_ids)
            self.counts["answers"] += 1
            self.counts["none"] += ids is None
            self.counts["exact"] += ids is not None and ids == expected
            if ids is None:
                if must_bridge and expected is not None:
                    self.counts["miss"] += 1
                    self.note(f"miss ({label}, {how})")
                continue
            self.counts["bridged"] += 1
            if ids != expected:
                self.counts["wrong"] += 1
                self.note(f"wrong ({label}, {how})")
            if len(result.message_indices) != len(ids) or len(result.sampled_mask) != len(ids):
                self.counts["wrong"] += 1
                self.note(f"attribution lengths ({label}, {how})")
        if (with_history is None) != (recalled is None) or (
            with_history is not None and list(with_history.token_ids) != list(recalled.token_ids)
        ):
            self.counts["disagree"] += 1
            self.note(f"messages= and recalled history disagree ({label})")

    def stranger(self, knobs: dict):
        """A renderer that never rendered any prompt (as behind rLLM's gateway, whose first prompt the
        inference server renders): it must read the history back from the prompt itself."""
        renderer = self.renderer_class(
            self.tokenizer, thinking_retention=self.retention, special_tokens=self.special_tokens, **knobs
        )
        renderer.prompt_histories = PromptHistories()
        return renderer

    def record_foreign(self, result, expected, must_bridge: bool) -> None:
        """The ids-only bridge on a prompt the renderer did not produce: never wrong; a None where the
        bridge with the history bridged is a miss of the recovery (counted apart, see the test)."""
        self.counts["foreign points"] += 1
        if result is None:
            self.counts["foreign miss"] += must_bridge and expected is not None
            return
        self.counts["foreign bridged"] += 1
        if list(result.token_ids) != expected:
            self.counts["wrong"] += 1
            self.note("wrong (a prompt the renderer did not render)")

    def check_attribution(self, renderer, result, kept: int, conversation, tools, first_new: int) -> None:
        """The bridge's attribution of the tokens it added is render()'s of the same tokens, with message
        indices counted in the new messages (-1 for the rest: scaffolding, the sampled turn's tail)."""
        rendered = renderer.render(conversation, tools=tools, add_generation_prompt=True)
        indices = [index - first_new if index >= first_new else -1 for index in rendered.message_indices[kept:]]
        self.counts["attributions checked"] += 1
        if result.message_indices[kept:] != indices or result.is_content[kept:] != rendered.is_content[kept:]:
            self.counts["wrong"] += 1
            self.note("attribution of the added tokens differs from render()'s")
        if set(result.message_indices[:kept]) - {-1} or any(result.is_content[:kept]) or any(result.sampled_mask):
            self.counts["wrong"] += 1
            self.note("attribution of the previous tokens is not uniform")

    def note(self, what: str) -> None:
        if len(self.examples) < 5:
            self.examples.append(what)
        if "miss" not in what and len(self.wrong_examples) < 3:  # with the point it happened at
            self.wrong_examples.append(f"{what} at {self.point!r}"[:600])

    def run_cases(self, cases, junk: tuple[int, ...] = (7, 3)) -> Counter:
        """Play each case (conversations the template rendered exactly); ``junk``: the ids a sample
        that ran past its stop goes on with."""
        for case in cases:
            self.play(case, list(junk))
        return self.counts


def bridge_counts(renderer_class: type, tokenizer, oracle, special_tokens: dict, cases) -> tuple[Counter, list[str]]:
    """The bridge differential on ``cases`` under both retention modes: summed counts, first problems."""
    counts: Counter = Counter()
    examples: list[str] = []
    if renderer_class.TURN is None:
        return counts, examples
    if renderer_class.TURN.content_parts:  # conversations whose content the template writes
        cases = [dataclasses.replace(case, messages=as_written(renderer_class, case.messages)) for case in cases]
    for retention in RETENTIONS:
        proof = BridgeProof(renderer_class, tokenizer, oracle, retention, special_tokens)
        counts += proof.run_cases(cases)
        examples += [f"{retention}: {example}" for example in proof.wrong_examples]
    return counts, examples[:5]
