"""Template constructs of the third held-out set (issue 38), each reduced to a few lines.

Each is compiled with no tokenizer (as ``generate --template FILE`` does), verified against
transformers' own rendering, and must have every turn fact learned and proven (read back).
"""

from __future__ import annotations

from tests.test_heldout_constructs import compile_inline

USER = {"role": "user", "content": "What is up?"}
ASSISTANT = {"role": "assistant", "content": "Not much."}

# `self` is Jinja's reference to the template itself (its blocks), never an input: no knob
SELF_REFERENCE = (
    "{{ self.X }}{% for m in messages %}<|im_start|>{{m['role']}}\n{{m['content']}}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_self_is_jinja_s_own_name_not_a_knob(tmp_path):
    renderer_class, compiled = compile_inline(tmp_path, "self_reference", SELF_REFERENCE)
    assert renderer_class.KNOBS == ()
    assert "jinja.TemplateReference()" in compiled.code
    assert renderer_class.UNLEARNED == {}


# the generation prompt says `Assistant`, history `assistant`: no sampled turn is ever written by
# history, so nothing reads a turn back and no bridge point exists; the facts are used, but unproven
LETTER_CASE = (
    "{% for m in messages %}<|im_start|>{{m['role']}}\n{{m['content']}}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>Assistant\n{% endif %}"
)


def test_facts_nothing_proved_are_reported_unproven(tmp_path):
    from compiler.coverage import turn_summary
    from compiler.pipeline import verify_compiled

    renderer_class, compiled = compile_inline(tmp_path, "letter_case", LETTER_CASE)
    assert renderer_class.UNLEARNED == {}
    assert set(renderer_class.UNPROVEN) == {"turn"}
    assert "0 sample turns read back" in renderer_class.UNPROVEN["turn"]
    assert turn_summary(renderer_class).endswith("(unproven)")
    report = verify_compiled(renderer_class, compiled, cases=5, seed=0)
    warnings = report.unproven_warnings()
    assert any(line.startswith("unproven: turn:") for line in warnings), warnings
    assert any(line.startswith("unproven: bridge:") for line in warnings), warnings


def test_a_proven_class_has_nothing_unproven(tmp_path):
    from compiler.pipeline import verify_compiled

    renderer_class, compiled = compile_inline(tmp_path, "self_reference", SELF_REFERENCE)
    assert renderer_class.UNPROVEN == {}
    assert verify_compiled(renderer_class, compiled, cases=5, seed=0).unproven_warnings() == []
