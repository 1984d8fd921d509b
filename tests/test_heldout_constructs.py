"""Constructs found in real chat templates of families outside the corpus (the held-out check).

Each template here is a few lines reproducing one construct that made a real template fail
to compile or verify; it is compiled with no tokenizer (as ``generate --template FILE`` does)
and verified against transformers' own rendering.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler.analysis import compared_roles, knob_candidates
from compiler.pipeline import compile_source, load_renderer_class, verify_compiled
from compiler.source import resolve_source
from compiler.verify import features_for

USER = {"role": "user", "content": "What is up?"}
ASSISTANT = {"role": "assistant", "content": "Not much."}


def compile_inline(tmp_path: Path, name: str, template: str, cases: int = 30):
    """Compile ``template`` with no tokenizer and verify it; return (class, compiled)."""
    path = tmp_path / f"{name}.jinja"
    path.write_text(template, encoding="utf-8")
    compiled = compile_source(resolve_source(f"test/{name}", template=path, allow_hub=False))
    renderer_class = load_renderer_class(compiled.code, compiled.spec.module, compiled.spec.class_name)
    report = verify_compiled(renderer_class, compiled, cases=cases, seed=0)
    assert report.ok, report.failure.report()
    assert report.tokens_checked > 0
    return renderer_class, compiled


# Hermes-3 style: the system block iterates `tools` with no guard, so the template fails
# (as in transformers) whenever no tool list is given.
TOOLS_REQUIRED = (
    "<|im_start|>system\nTools:{% for tool in tools %} {{ tool.function.name }}{% endfor %}<|im_end|>\n"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_template_that_needs_a_tool_list(tmp_path):
    renderer_class, compiled = compile_inline(tmp_path, "tools_required", TOOLS_REQUIRED)
    renderer = renderer_class(compiled.check_tokenizer, special_tokens=compiled.placeholders)
    assert renderer.generation_prompt() == "<|im_start|>assistant\n"
    rendered = renderer.render([USER, ASSISTANT], tools=[])
    assert any(rendered.sampled_mask)


# StepFun-3.7 style: a filter transformers does not have (`fromjson`, from llama.cpp's minja),
# inside an inline if. Jinja compiles the template and fails only when that branch runs.
UNKNOWN_FILTER_IN_BRANCH = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}"
    "{% if m.tool_calls %}{% for call in m.tool_calls %}"
    "{% set arguments = call.function.arguments | fromjson if call.function.arguments is string"
    " else call.function.arguments %}<call>{{ arguments | tojson }}</call>{% endfor %}{% endif %}"
    "{% if m.role == 'tool' and m.content is frobnicated %}!{% endif %}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def test_unknown_filter_and_test_fail_only_where_they_run(tmp_path):
    renderer_class, compiled = compile_inline(tmp_path, "unknown_filter", UNKNOWN_FILTER_IN_BRANCH)
    assert "jinja.missing_filter_or_test" in compiled.code


# Phi-4-mini (llama.cpp's version) style: `tools is defined` holds for tools=None, so the
# template iterates None and fails unless a tool list is given; every role but system is
# rendered generically (`'<|' + role + '|>'`).
GENERIC_ROLES_NEED_TOOLS = (
    "{% if tools is defined %}<|system|>{% for tool in tools %}<|tool|>{{ tool.function.name }}<|/tool|>"
    "{% endfor %}<|end|>{% endif %}{% for m in messages %}{% if m['role'] != 'system' %}"
    "<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def test_roles_and_turns_are_learned_with_an_empty_tool_list(tmp_path):
    renderer_class, compiled = compile_inline(tmp_path, "generic_roles", GENERIC_ROLES_NEED_TOOLS)
    assert compiled.facts.roles == ()  # any role renders
    assert compiled.turn is not None and compiled.turn.warning() is None
    renderer = renderer_class(compiled.check_tokenizer, special_tokens=compiled.placeholders)
    assert renderer.render_text([USER, ASSISTANT], tools=[]) == (
        "<|system|><|end|><|user|>What is up?<|end|><|assistant|>Not much.<|end|>"
    )
    _, compiled_hermes = compile_inline(tmp_path, "tools_required", TOOLS_REQUIRED)
    assert compiled_hermes.turn.warning() is None


# functionary-v3.1 style: `"literal" | safe + value`. Jinja's optimizer, run by the analysis,
# used to fold the filter into a Markup constant in the shared AST, and the generated code then
# named an undefined `Markup`.
SAFE_LITERAL = (
    '{% for m in messages %}<|{{ m.role }}|>{{ "Say \'"|safe + m.content + "\'"|safe }}<|end|>\n{% endfor %}'
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def test_safe_literal_keeps_its_filter(tmp_path):
    renderer_class, compiled = compile_inline(tmp_path, "safe_literal", SAFE_LITERAL)
    assert "jinja.mark_safe" in compiled.code and "Markup(" not in compiled.code
    renderer = renderer_class(compiled.check_tokenizer, special_tokens=compiled.placeholders)
    text = renderer.render_text([{"role": "user", "content": "a & <b>"}])
    assert text == "<|user|>Say 'a &amp; &lt;b&gt;'<|end|>\n"  # Markup + str escapes, as in Jinja


# Llama-3.3-Nemotron-Super style: roles are compared with variables set from constants, and a
# message of any other role is dropped.
ROLES_FROM_VARIABLES = (
    '{% set user_token = "user" %}{% set assistant_token = "assistant" %}'
    "{% for m in messages %}{% if m.role == user_token %}<u>{{ m.content }}</u>"
    "{% elif m.role == assistant_token %}<a>{{ m.content }}</a>{% elif m.role == 'system' %}<s>{{ m.content }}</s>"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<a>{% endif %}"
)


def test_roles_compared_through_variables_are_accepted(tmp_path):
    _, compiled = compile_inline(tmp_path, "roles_from_variables", ROLES_FROM_VARIABLES)
    assert compiled.facts.roles == ("assistant", "system", "user")


# firefunction-v2 style: two knobs concatenated unguarded (the template renders nothing unless
# both are strings), and roles checked through a list held in a variable.
NEEDS_A_KNOB = (
    "{% set known_roles = ['system', 'user', 'assistant'] %}{% set suffix = '\\nFunctions: ' + functions + '\\nToday: ' + today %}"
    "{% for m in messages %}{% if m.role not in known_roles %}{{ raise_exception('bad role') }}{% endif %}"
    "{% if loop.first and m.role == 'system' %}<s>{{ m.content + suffix }}</s>"
    "{% else %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def test_roles_are_probed_with_knob_values_when_the_template_needs_them(tmp_path):
    _, compiled = compile_inline(tmp_path, "needs_a_knob", NEEDS_A_KNOB)
    assert compiled.facts.knobs == ("functions", "today")
    assert compiled.facts.roles == ("assistant", "system", "user")
    assert compiled.turn is not None and compiled.turn.warning() is None


# vLLM's Granite tool template style: only 'user' is compared, an assistant message (or a system one)
# is accepted and written as nothing, and the trailing space after the loop keeps the generation
# prompt from extending the render without it (so render() probes a user + assistant conversation).
USER_TURNS_ONLY = (
    "SYSTEM: be brief\n{% for m in messages %}{% if m['role'] == 'user' %}USER: {{ m['content'] }}\n{% endif %}"
    "{% if loop.last and add_generation_prompt %}ASSISTANT:\n{% endif %}{% endfor %} "
)


def test_the_roles_of_every_conversation_are_accepted_where_the_template_drops_them(tmp_path):
    renderer_class, compiled = compile_inline(tmp_path, "user_turns_only", USER_TURNS_ONLY)
    assert compiled.facts.roles == ("assistant", "user")  # not ('user',): the assistant turn is the point
    renderer = renderer_class(compiled.check_tokenizer, special_tokens=compiled.placeholders)
    assert renderer.render_text([USER, ASSISTANT, USER]) == "SYSTEM: be brief\nUSER: What is up?\nUSER: What is up?\n "
    assert renderer.render([USER, ASSISTANT]).message_roles == ["user", "assistant"]
    with pytest.raises(ValueError, match="unknown role 'system'"):  # another dropped role is still refused
        renderer.render_text([{"role": "system", "content": "x"}, USER])


def test_a_class_refusing_the_assistant_role_is_reported_not_raised(tmp_path):
    """A wrong role guess (a class that refuses the assistant role) is a mismatch naming the role;
    render() of a conversation the class accepts does not fail on its own assistant probe."""
    renderer_class, compiled = compile_inline(tmp_path, "user_turns_only", USER_TURNS_ONLY)

    class UserOnly(renderer_class):
        ROLES = ("user",)

    renderer = UserOnly(compiled.check_tokenizer, special_tokens=compiled.placeholders)
    assert renderer.render([USER]).message_roles == ["user"]
    report = verify_compiled(UserOnly, compiled, cases=10, seed=0)
    assert not report.ok
    assert "unknown role 'assistant'" in report.failure.reason


def test_a_renderer_failing_after_its_text_matched_is_reported_not_raised(tmp_path):
    """Token ids and attribution are checked after the text: a renderer raising there is a mismatch too."""
    renderer_class, compiled = compile_inline(tmp_path, "user_turns_only", USER_TURNS_ONLY)

    class FailingAttribution(renderer_class):
        def render(self, messages, **arguments):
            raise RuntimeError("no attribution")

    report = verify_compiled(FailingAttribution, compiled, cases=5, seed=0)
    assert not report.ok
    assert "the renderer raised RuntimeError: no attribution" in report.failure.reason


def test_a_template_that_renders_nothing_is_not_verified(tmp_path):
    """Agreeing that every conversation is refused proves nothing about rendering."""
    path = tmp_path / "refuses_all.jinja"
    path.write_text("{{ raise_exception('this template renders nothing') }}", encoding="utf-8")
    compiled = compile_source(resolve_source("test/refuses_all", template=path, allow_hub=False))
    renderer_class = load_renderer_class(compiled.code, compiled.spec.module, compiled.spec.class_name)
    report = verify_compiled(renderer_class, compiled, cases=10, seed=0)
    assert not report.ok
    assert "rendered none of the" in report.failure.reason


# Most real templates write `bos_token`; compiled without a tokenizer, the class reads it when it
# is built. The probes that choose knob values and the tool-call limit must build it with the
# placeholder values, or every probe fails and only the first candidate value is ever verified.
BOS_AND_KNOBS = (
    "{{ bos_token }}{% if style == 'terse' %}[terse]{% elif style == 'chatty' %}[chatty]{% endif %}"
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
    "{% for call in m.tool_calls or [] %}<call>{{ call.function.name }}</call>{% endfor %}</{{ m.role }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def test_knob_values_and_tool_call_limits_are_probed_with_special_token_values(tmp_path):
    renderer_class, compiled = compile_inline(tmp_path, "bos_and_knobs", BOS_AND_KNOBS)
    features = features_for(
        renderer_class,
        knob_candidates(compiled.facts.ast, compiled.facts.knobs),
        compared_roles(compiled.facts.ast),
        compiled.placeholders,
    )
    assert dict(features.knobs)["style"][:2] == ("terse", "chatty")
    assert features.max_tool_calls == 3


# Hermes-3 style: a macro called with template data (a tool's parameter schema) and with computed
# values (`spec | items`, a generator, and a dict literal); reading a missing field of those reads
# as Undefined in Jinja, so the parameter cannot be subscripted like wrapped template data.
MACRO_ON_COMPUTED_VALUES = (
    "{%- macro type_name(spec) -%}{%- if spec.type == 'array' -%}list[{{ type_name(spec | items) }}]"
    "{%- elif spec.type is string -%}{{ spec.type }}{%- elif spec.type is iterable -%}"
    "{%- for t in spec.type -%}{{ type_name({'type': t}) }}{% if spec.extra is defined %}+{% endif %}{%- endfor -%}"
    "{%- else -%}any{%- endif -%}{%- endmacro -%}"
    "{% for tool in tools or [] %}{% for name, field in tool.function.parameters.properties | items %}"
    "{{ name }}: {{ type_name(field) }}\n{% endfor %}{% endfor %}"
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"
)


def test_macro_parameters_given_computed_values(tmp_path):
    renderer_class, compiled = compile_inline(tmp_path, "macro_on_computed", MACRO_ON_COMPUTED_VALUES, cases=60)
    renderer = renderer_class(compiled.check_tokenizer, special_tokens=compiled.placeholders)
    array = {"type": "array", "items": {"type": "string"}}
    tool = {"type": "function", "function": {"name": "f", "parameters": {"properties": {"xs": array}}}}
    # `(spec | items).type` is Undefined, and Undefined is iterable (and empty): "list[]", as in Jinja
    assert renderer.render_text([USER], tools=[tool]).startswith("xs: list[]\n")


# Items of a computed sequence (a list literal, a dict's .items()) are plain Python objects: a
# missing field reads as Undefined in Jinja, not as a KeyError.
LOOP_OVER_COMPUTED = (
    "{% set markers = [{'role': 'user', 'open': '<u>'}, {'role': 'assistant'}] %}"
    "{% for m in messages %}{% for marker in markers %}{% if marker.role == m.role %}"
    "{{ marker.open if marker.open is defined else '<' + m.role + '>' }}{{ marker['close'] }}{% endif %}{% endfor %}"
    "{{ m.content }}\n{% endfor %}"
)


def test_items_of_a_computed_sequence_read_missing_fields_as_undefined(tmp_path):
    renderer_class, compiled = compile_inline(tmp_path, "loop_over_computed", LOOP_OVER_COMPUTED)
    renderer = renderer_class(compiled.check_tokenizer, special_tokens=compiled.placeholders)
    assert renderer.render_text([USER, ASSISTANT]) == "<u>What is up?\n<assistant>Not much.\n"


# firefunction-v1 style: the template needs a `functions` message right after the (optional)
# system message and refuses every conversation without one; roles are compared upper-cased.
FUNCTIONS_ROLE_REQUIRED = (
    "{%- set message_roles = ['SYSTEM', 'FUNCTIONS', 'USER', 'ASSISTANT', 'TOOL'] -%}"
    "{%- set ns = namespace(messages=messages, content='') -%}{{ bos_token }}"
    "{%- if not ns.messages -%}{{ raise_exception('No messages') }}{%- endif -%}"
    "{%- if ns.messages[0]['role'] | upper != 'SYSTEM' -%}"
    "{%- set ns.messages = [{'role': 'SYSTEM', 'content': 'You may call functions.'}] + ns.messages -%}{%- endif -%}"
    "{%- if ns.messages | length < 2 or ns.messages[1]['role'] | upper != 'FUNCTIONS' -%}"
    '{{ raise_exception(\'Expected either "functions" or ["system", "functions"] as the first messages\') }}'
    "{%- endif -%}"
    "{%- for message in ns.messages -%}{%- set role = message['role'] | upper -%}"
    "{%- if role not in message_roles -%}{{ raise_exception('Invalid role ' + message['role']) }}{%- endif -%}"
    "{%- set ns.content = message['content'] if message.get('content') else '' -%}"
    "{%- if role == 'ASSISTANT' -%}{%- set ns.content = '<plain>' + ns.content + eos_token -%}{%- endif -%}"
    "{{ role }}: {{ ns.content }}{{ '\\n\\n' }}{%- endfor -%}ASSISTANT:{{ ' ' }}"
)


def test_a_role_the_template_requires_is_learned_and_generated(tmp_path):
    renderer_class, compiled = compile_inline(tmp_path, "functions_role", FUNCTIONS_ROLE_REQUIRED, cases=30)
    assert "functions" in renderer_class.ROLES
    features = features_for(
        renderer_class,
        knob_candidates(compiled.facts.ast, compiled.facts.knobs),
        compared_roles(compiled.facts.ast),
        compiled.placeholders,
    )
    assert features.lead_roles == ("functions",)
    report = verify_compiled(renderer_class, compiled, cases=30, seed=0)
    assert report.text_checked - report.rejected_alike >= 20  # conversations that render, not only refusals
    renderer = renderer_class(compiled.check_tokenizer, special_tokens=compiled.placeholders)
    lead = {"role": "functions", "content": "[]"}
    assert renderer.render_text([lead, USER, ASSISTANT]).endswith(
        "FUNCTIONS: []\n\nUSER: What is up?\n\nASSISTANT: <plain>Not much.<{eos_token}>\n\nASSISTANT: "
    )


# vLLM's Mistral tool template writes the last 9 characters of a call id (`tool_call.id[-9:]`): a
# piece of the caller's id, which render() marks as that message's text.
SLICED_CALL_IDS = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content or '' }}"
    "{% for c in m.tool_calls or [] %}[{{ c.function.name }} {{ c.id[-9:] }}]{% endfor %}"
    "{% if m.tool_call_id is defined %}({{ m.tool_call_id[-9:] }}){% endif %}</{{ m.role }}>\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def test_sliced_call_ids_are_attributed_to_their_messages(tmp_path):
    _, compiled = compile_inline(tmp_path, "sliced_call_ids", SLICED_CALL_IDS, cases=40)


# Qwen-3.6 community templates cut long tool arguments (`value[:max_tool_arg_chars]`): the start
# of a caller's string, which render() marks as that message's text.
SLICED_ARGUMENTS = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content or '' }}"
    "{% for c in m.tool_calls or [] %}{% for k, v in c.function.arguments | items %}"
    "[{{ k }}={{ v[:limit | default(2)] if v is string else v }}]{% endfor %}{% endfor %}</{{ m.role }}>\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def test_the_start_of_a_cut_string_is_attributed_to_its_message(tmp_path):
    compile_inline(tmp_path, "sliced_arguments", SLICED_ARGUMENTS, cases=40)
