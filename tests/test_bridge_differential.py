"""The bridge against transformers' apply_chat_template, driven through generated conversations.

Every checked-in family, both retention policies. Each generated conversation is played as an
episode: the first prompt is ``render_ids(history, add_generation_prompt=True)``; at every
assistant turn followed by non-assistant messages the completion is the turn as the template
renders it (cut after its close; for a template that cuts reasoning out of the content, QwQ and
DeepSeek-R1, a reasoning block and then that turn: ``tests.turn_sampling.reasoned_turn``), and the
next prompt is the bridge's result, or a full re-render when it returned None. Each bridge
point is tried with the completion as sampled, truncated before its close, and run past its
stop, and with the history given as ``messages=`` and recalled by the renderer from its own
earlier result (both must agree).

Counted against the oracle (``full`` = apply_chat_template of history + turn + new, with the
generation prompt):

* **miss**: None where ``full`` starts with prompt + completion (an exact extension existed),
  or, under "verbatim", None where the template renders the new messages at all; except where
  the completion is ambiguous (its tokens parse into a turn that renders differently, e.g. a tool
  name containing ``</tool_call>``): no one can tell from the tokens which turn was meant, so
  None is right there, and such points are counted apart;
* **wrong**: a result other than ``full`` where ``full`` extends prompt + completion; under
  "template" any result where it does not; under "verbatim" a result whose tokens after
  prompt + completion are not the template's rendering of the new messages after that history
  (``full``'s text after the sampled turn's close, encoded).

Both counts must be 0, and the bridge must answer at most points.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, seed, settings, strategies as st

from compiler.bridge_proof import BridgeProof
from compiler.analysis import compared_roles, knob_candidates, parse_template
from compiler.conversations import conversation_cases
from compiler.oracle import TemplateOracle
from compiler.stability import without_local_constants
from compiler.verify import features_for
from tests.families import ALL_FAMILIES, assert_turns_checked, with_gaps

CASES = int(os.environ.get("BRIDGE_CASES", "40"))


class BridgeAudit(BridgeProof):
    """The bridge proof of one checked-in family (its real tokenizer), on conversations drawn here."""

    def __init__(self, family, retention: str) -> None:
        self.family = family
        tokenizer = family.load_tokenizer()
        super().__init__(family.renderer_class, tokenizer, TemplateOracle(family.template_source(), tokenizer=tokenizer), retention)

    def run(self, cases: int = CASES, seed_value: int = 4321):
        ast = parse_template(self.family.template_source(), self.family.template_file)
        features = features_for(
            self.family.renderer_class, knob_candidates(ast, self.family.renderer_class.KNOBS), compared_roles(ast)
        )

        @settings(max_examples=cases, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @seed(seed_value)
        @given(case=conversation_cases(features), junk=st.lists(st.integers(0, 1000), min_size=1, max_size=5))
        def drive(case, junk):
            self.play(case, junk)

        with without_local_constants():  # the same draws whatever modules the test run has loaded
            drive()
        return self.counts


#: Known gaps (module -> why), each a strict xfail: none at present.
KNOWN_GAPS: dict[str, str] = {}


@pytest.mark.parametrize("retention", ["template", "verbatim"])
@pytest.mark.parametrize("family", with_gaps(KNOWN_GAPS))
def test_bridge_misses_nothing_and_is_never_wrong(family, retention):
    audit = BridgeAudit(family, retention)
    counts = audit.run()
    summary = f"{family.module}/{retention}: {dict(counts)}; first problems: {audit.examples}"
    assert_turns_checked(family, counts["points"], none_expected={})  # (reasoned_turn samples QwQ's and R1's turns)
    assert counts["miss"] == 0, summary
    assert counts["wrong"] == 0, summary
    assert counts["disagree"] == 0, summary
    assert counts["oracle suffix not found"] == 0, summary  # else a verbatim None could hide
    # (under "template" a family whose template rewrites every sampled turn bridges nowhere, rightly)
    assert counts["bridged"] > 0 or (retention == "template" and counts["extends"] == 0), summary
    # the ids-only bridge on prompts the renderer did not render (rLLM's gateway): never wrong (above),
    # and it bridges; its misses (a message whose text holds one of the template's markers, content
    # the template transforms) are counted in the table ``python -m tests.test_bridge_differential`` prints
    if counts["bridged"]:
        assert counts["foreign bridged"] > 0, summary
    if counts["bridged"] and counts["extends"]:  # the attribution of added tokens was compared with render()'s
        assert counts["attributions checked"] > 0, summary



if __name__ == "__main__":  # the per-family table for reports: python -m tests.test_bridge_differential
    for family in ALL_FAMILIES:
        for retention in ("template", "verbatim"):
            audit = BridgeAudit(family, retention)
            counts = audit.run()
            print(f"{family.module:12} {retention:9} {dict(counts)} {audit.examples[:2]}", flush=True)
