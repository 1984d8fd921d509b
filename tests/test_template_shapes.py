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


# probes in the shapes a template accepts: a system message first where the template needs one
NEEDS_SYSTEM = (
    "{% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] %}{% endif %}<|sys|>{{ sys.strip() }}\n"
    "{% for m in messages %}{% if m['role'] != 'system' %}<|im_start|>{{m['role']}}\n{{m['content']}}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# ... and a user message last where the template raises otherwise
LAST_USER = (
    "{% if messages[-1]['role'] != 'user' %}{{ raise_exception('The last message must be a user message') }}{% endif %}"
    "{% for m in messages %}<|im_start|>{{m['role']}}\n{{m['content']}}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# no tool support: an end-of-turn only on non-final assistant messages, no generation prompt
EOT_NOT_FINAL = (
    "{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
    "{% elif m['role'] == 'assistant' %}{{ m['content'] }}{% if not loop.last %}</s>{% endif %}{% endif %}{% endfor %}"
)
# no tool support: every message but the user's written raw (a tool result glued to the turn)
RAW_NOT_USER = (
    "{% for m in messages %}{% if m['role'] == 'user' %}<|user|>{{ m['content'] }}<|end|><|assistant|>"
    "{% else %}{{ m['content'] }}{% endif %}{% endfor %}"
)


def test_turns_are_learned_in_the_shape_the_template_accepts(tmp_path):
    for name, template, close in (("needs_system", NEEDS_SYSTEM, "<|im_end|>"), ("last_user", LAST_USER, "<|im_end|>")):
        renderer_class, compiled = compile_inline(tmp_path, name, template, cases=10)
        assert renderer_class.UNLEARNED == {} and renderer_class.UNPROVEN == {}, name
        assert renderer_class.TURN.close == close


def test_a_plain_turn_is_learned_where_the_template_writes_no_calls(tmp_path):
    for name, template, close in (("eot_not_final", EOT_NOT_FINAL, "</s>"), ("raw_not_user", RAW_NOT_USER, "")):
        renderer_class, compiled = compile_inline(tmp_path, name, template, cases=10)
        assert renderer_class.UNLEARNED == {} and renderer_class.UNPROVEN == {}, name
        assert renderer_class.TURN.close == close and renderer_class.TOOL_CALLS is None
        assert any("does not render tool calls" in line for line in renderer_class.__doc__.splitlines()), name


# no generation prompt, and history content cut at </think>: the header the turn writes stays its
# lead (it is no reasoning block), the reasoning is cut from the content
CUT_WITHOUT_PROMPT = (
    "{% for m in messages %}{% if m['role'] == 'assistant' %}{% set c = m['content'].split('</think>')[-1] %}"
    "<|im_start|>assistant\n{{ c }}<|im_end|>\n{% else %}<|im_start|>{{m['role']}}\n{{m['content']}}<|im_end|>\n"
    "{% endif %}{% endfor %}"
)


def test_a_header_lead_is_kept_beside_a_reasoning_cut(tmp_path):
    renderer_class, compiled = compile_inline(tmp_path, "cut_without_prompt", CUT_WITHOUT_PROMPT, cases=10)
    assert renderer_class.UNLEARNED == {} and renderer_class.UNPROVEN == {}
    assert renderer_class.TURN.content_lead == "<|im_start|>assistant\n"
    assert renderer_class.REASONING.in_content and renderer_class.REASONING.close == "</think>"
