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
