"""Cross-check a corpus chat template against a reference renderer of the same family.

The template is rendered by transformers (:class:`compiler.oracle.TemplateOracle`; no
generated class is needed) and the reference (e.g. ``fireworks:glm5``) on the same
generated conversations. Each case ends in one of: identical text, different text, or a
refusal on one or both sides; :class:`CrossCheck` tallies them overall and per conversation
*shape*, so a test can pin where the two agree ("every single-turn plain chat") and a report
can say where they part.

A template-side text comparison needs a tokenizer only for the special-token variables the
template reads; families without a real tokenizer use a synthetic one
(:func:`synthetic_tokenizer`: byte-level, no merges, the family's special strings as added
tokens), which is what the corpus's synthetic tokenizers are.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..analysis import compared_roles, parse_template
from ..conversations import Case, ConversationFeatures, drawn_cases, fixed_edge_cases
from ..oracle import OracleRejected, TemplateOracle


def synthetic_tokenizer(special_tokens: list[str], *, bos: str | None = None, eos: str | None = None) -> Any:
    """A byte-level tokenizer with no merges and ``special_tokens`` as special added tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    byte_symbols = pre_tokenizers.ByteLevel.alphabet()
    vocabulary = {symbol: rank for rank, symbol in enumerate(sorted(byte_symbols))}
    backend = Tokenizer(models.BPE(vocab=vocabulary, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken(token, normalized=False, special=True) for token in special_tokens])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=bos, eos_token=eos, clean_up_tokenization_spaces=False
    )


def shape(case: Case) -> str:
    """A coarse name for a conversation's structure (what the agreement table is keyed by)."""
    roles = [m.get("role") for m in case.messages]
    calls = any(m.get("tool_calls") for m in case.messages)
    reasoning = any(m.get("reasoning_content") is not None for m in case.messages)
    if "tool" in roles or calls:
        return "tool calls"
    if case.tools:
        return "tools declared, no calls"
    if reasoning:
        return "plain chat with reasoning"
    users = roles.count("user")
    if roles and roles[0] == "system":
        return "plain chat with system"
    return "single-turn plain chat" if users <= 1 and roles[0:1] == ["user"] else "multi-turn plain chat"


@dataclass
class CrossCheck:
    identical: Counter = field(default_factory=Counter)  # per shape
    different: Counter = field(default_factory=Counter)
    template_rejects: Counter = field(default_factory=Counter)
    reference_rejects: Counter = field(default_factory=Counter)
    both_reject: Counter = field(default_factory=Counter)
    outcomes: list[tuple[Case, str]] = field(default_factory=list)  # every case with its outcome

    def table(self) -> str:
        shapes = sorted(set().union(self.identical, self.different, self.template_rejects, self.reference_rejects, self.both_reject))
        rows = ["shape | identical | different | template refuses | reference refuses | both refuse"]
        for name in shapes:
            rows.append(
                f"{name} | {self.identical[name]} | {self.different[name]} | {self.template_rejects[name]} | "
                f"{self.reference_rejects[name]} | {self.both_reject[name]}"
            )
        return "\n".join(rows)


def cross_check(
    template_source: str,
    template_name: str,
    reference: Any,
    tokenizer: Any,
    *,
    cases: int,
    seed_value: int = 0,
    knobs: tuple[tuple[str, tuple], ...] = (),
) -> CrossCheck:
    """Render ``cases`` generated conversations with the template and with ``reference``."""
    template = TemplateOracle(template_source, tokenizer=tokenizer)
    roles = tuple(role for role in ("system", "user", "assistant", "tool") if role in compared_roles(parse_template(template_source, template_name)))
    features = ConversationFeatures(roles=tuple(dict.fromkeys(roles + ("user", "assistant"))), knobs=knobs)
    result = CrossCheck()

    def check(case: Case) -> None:
        kind = shape(case)
        arguments = dict(tools=case.tools, add_generation_prompt=case.add_generation_prompt, knobs=case.knobs)
        expected = actual = None
        try:
            expected = template.render_text(case.messages, **arguments)
        except OracleRejected:
            pass
        try:
            actual = reference.render_text(case.messages, **arguments)
        except OracleRejected:
            pass
        if expected is None and actual is None:
            outcome, tally = "both refuse", result.both_reject
        elif expected is None:
            outcome, tally = "template refuses", result.template_rejects
        elif actual is None:
            outcome, tally = "reference refuses", result.reference_rejects
        elif expected == actual:
            outcome, tally = "identical", result.identical
        else:
            outcome, tally = "different", result.different
        tally[kind] += 1
        result.outcomes.append((case, outcome))

    for case in fixed_edge_cases(features):  # deterministic cases first, so every shape is present
        check(case)

    for case in drawn_cases(features, cases, seed_value):
        check(case)
    return result

