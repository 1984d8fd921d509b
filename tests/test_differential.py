"""Differential suite: every checked-in renderer against transformers' apply_chat_template.

Seeded and bounded to fit CI; `python -m compiler verify --all --cases 500` (also run
by CI) goes wider. Text and token ids must match on every generated conversation,
and where the template raises the renderer must raise ValueError (with the same
message for raise_exception).
"""

from __future__ import annotations

import inspect
import os

import pytest

from compiler.analysis import compared_roles, knob_candidates, parse_template, template_sha256
from compiler.oracle import TemplateOracle
from compiler.verify import verify
from tests.families import FAMILIES, FAMILY_IDS

CASES = int(os.environ.get("DIFFERENTIAL_CASES", "80"))


@pytest.mark.parametrize("family", FAMILIES, ids=FAMILY_IDS)
def test_checked_in_renderer_matches_its_template(family):
    source = family.template_source()
    renderer_class = family.renderer_class
    assert renderer_class.TEMPLATE_SHA256 == template_sha256(source), "template drifted: regenerate"
    tokenizer = family.load_tokenizer()
    ast = parse_template(source, family.template_file)
    report = verify(
        renderer_class,
        TemplateOracle(source, tokenizer=tokenizer),
        tokenizer=tokenizer,
        cases=CASES,
        seed_value=1234,
        knob_candidates=knob_candidates(ast, renderer_class.KNOBS),
        template_roles=compared_roles(ast),
    )
    assert report.ok, report.failure.report()
    assert report.tokens_checked > 0 and report.tokens_matched == report.tokens_checked
    # the suite must exercise successful renders, not only shared rejections
    assert report.text_matched - report.rejected_alike >= CASES // 4, report.summary()
    # a resumable message loop must resume (each resumed render was compared with the full one)
    if "out.message_loop(" in inspect.getsource(renderer_class.render_template):
        assert report.resumed > 0, report.summary()


@pytest.mark.parametrize("family", FAMILIES, ids=FAMILY_IDS)
def test_knobs_are_the_variables_the_template_reads(family):
    renderer_class = family.renderer_class
    with pytest.raises(ValueError, match="unknown template knob"):
        renderer_class(None, not_a_knob_of_this_template=True)
    for knob in renderer_class.KNOBS:
        assert knob in family.template_source()


def test_a_knob_changes_the_render_as_the_template_does():
    family = FAMILIES[0]  # Qwen3: enable_thinking=False prefills an empty think block
    tokenizer = family.load_tokenizer()
    oracle = TemplateOracle(family.template_source(), tokenizer=tokenizer)
    messages = [{"role": "user", "content": "Hi"}]
    for value in (True, False):
        renderer = family.renderer_class(tokenizer, enable_thinking=value)
        expected = oracle.render_ids(messages, add_generation_prompt=True, knobs={"enable_thinking": value})
        assert renderer.render_ids(messages, add_generation_prompt=True) == expected


def test_template_errors_surface_as_value_error_with_the_template_message():
    family = next(f for f in FAMILIES if f.module == "gemma_3")
    renderer = family.renderer_class(family.load_tokenizer())
    with pytest.raises(ValueError, match="Conversation roles must alternate"):
        renderer.render_ids([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])


def test_bad_input_is_named():
    renderer = FAMILIES[2].renderer_class(None)  # Qwen3.5 parses JSON-string arguments
    with pytest.raises(ValueError, match="not valid JSON"):
        renderer.render_text(
            [
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{broken"}}],
                },
            ]
        )
    with pytest.raises(ValueError, match="no function name"):
        renderer.render_text([{"role": "assistant", "content": "", "tool_calls": [{"function": {}}]}])
    with pytest.raises(ValueError, match="empty conversation"):
        renderer.render_text([])
    # Qwen3's template silently drops a message of a role it does not know: the renderer refuses it
    qwen3 = FAMILIES[0].renderer_class(None)
    with pytest.raises(ValueError, match="unknown role 'developer'"):
        qwen3.render_text([{"role": "developer", "content": "x"}, {"role": "user", "content": "y"}])
    # Gemma-3's template renders any role, so the renderer does too
    gemma = next(f for f in FAMILIES if f.module == "gemma_3").renderer_class(None)
    assert "<start_of_turn>developer" in gemma.render_text([{"role": "user", "content": "x"}, {"role": "developer", "content": "y"}])


def test_special_tokens_are_checked_against_the_tokenizer():
    llama = next(f for f in FAMILIES if f.module == "llama_3_1")
    qwen_tokenizer = FAMILIES[0].load_tokenizer()
    with pytest.raises(ValueError, match="bos_token"):
        llama.renderer_class(qwen_tokenizer)  # Qwen3's tokenizer has no bos_token


# --- verification is honest about how the renderer refuses ---------------------------------

# Jinja raises UndefinedError ("'dict object' has no attribute 'name'") for a tool message without a name.
NAME_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}"
    "{% if m['role'] == 'tool' %}{{ m['name'].upper() }}{% endif %}{% endfor %}"
)


def _name_renderer(lookup):
    from rllm_renderers.core.base import GeneratedRenderer
    from rllm_renderers.turns.formats import TurnFormat

    class NameRenderer(GeneratedRenderer):
        ROLES = ("system", "user", "assistant", "tool")
        TURN = TurnFormat(close="")

        def render_template(self, out, messages, tools, documents, add_generation_prompt):
            for m in messages:
                out.mark_message(m)
                out.append("<" + str(m["role"]) + ">" + str(m["content"]))
                if m["role"] == "tool":
                    out.append(lookup(m, "name").upper())

    return NameRenderer


def test_verification_fails_on_a_python_error_where_jinja_raised_undefined():
    oracle = TemplateOracle(NAME_TEMPLATE, special_tokens={})
    # the faithful translation: a missing key is Undefined, using it raises Jinja's message
    faithful = verify(_name_renderer(lambda m, key: m[key]), oracle, cases=60, seed_value=7)
    assert faithful.ok, faithful.failure.report()
    assert faithful.rejected_alike > 0, faithful.summary()
    # a translation that indexes a plain dict raises KeyError there: a bug, not "rejected alike"
    broken = verify(_name_renderer(lambda m, key: dict(m)[key]), oracle, cases=60, seed_value=7)
    assert not broken.ok
    assert "UndefinedError" in broken.failure.reason and "KeyError" in broken.failure.reason


def test_rejections_must_match_in_kind_and_message():
    from compiler.oracle import OracleRejected
    from compiler.verify import rejection_mismatch
    from rllm_renderers.jinja import runtime as jinja
    from rllm_renderers.core.base import TemplateTypeError

    raised = OracleRejected("Conversation roles must alternate", "TemplateError")
    assert rejection_mismatch(raised, jinja.TemplateError("Conversation roles must alternate")) is None
    assert rejection_mismatch(raised, jinja.TemplateError("something else")) is not None
    assert rejection_mismatch(raised, ValueError("Conversation roles must alternate")) is not None
    undefined = OracleRejected("'dict object' has no attribute 'name'", "UndefinedError")
    assert rejection_mismatch(undefined, jinja.TemplateError("'dict object' has no attribute 'name'")) is None
    assert rejection_mismatch(undefined, AttributeError("'dict' object has no attribute 'name'")) is not None
    typed = OracleRejected('can only concatenate str (not "int") to str', "TypeError")
    assert rejection_mismatch(typed, TemplateTypeError('can only concatenate str (not "int") to str')) is None
    assert rejection_mismatch(typed, jinja.TemplateError("x")) is not None


def test_render_errors_keep_their_kind():
    """A template's refusal is a ValueError; a Python TypeError stays a TypeError too; other errors are not
    disguised as refusals (they name the message being rendered)."""
    from rllm_renderers.core.base import TemplateTypeError

    messages = [{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}]
    with pytest.raises(KeyError) as caught:
        _name_renderer(lambda m, key: dict(m)[key])(None).render_text(messages)
    assert any("message 1" in note for note in getattr(caught.value, "__notes__", ["message 1"]))
    with pytest.raises(TemplateTypeError):
        _name_renderer(lambda m, key: 5 + "x")(None).render_text(messages)
    with pytest.raises(ValueError, match="has no attribute 'name'"):
        _name_renderer(lambda m, key: m[key])(None).render_text(messages)
