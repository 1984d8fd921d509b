"""Resumable message loops (compiler/translator/resumable.py, rllm_renderers/resume.py).

The compiler's verdict on small templates (resumable or not, and why), and the runtime's promise:
a render resumed from the checkpoint of a shorter conversation gives exactly the full render's text
from the resumed point on (checked against transformers' own rendering of the longer conversation),
and refuses to resume, rendering everything, whenever what it checks differs.
"""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from rllm_renderers.jinja import runtime as jinja
from tests.test_translate import FAST, SPECIAL, _oracle, code_of, renderer_class

# Qwen3's shape: a scan before the loop sets a namespace the loop reads; the loop reads one
# message ahead (loop.last, the next message's role) and behind (the previous role, guarded).
LOOKS_AROUND = (
    "{%- set ns = namespace(last_user=-1) %}"
    "{%- for m in messages %}{% if m.role == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}{% endfor %}"
    "{{ bos_token }}"
    "{%- for message in messages %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != message.role %}<{{ message.role }}>{% endif %}"
    "{%- if loop.index0 > ns.last_user %}*{% endif %}{{ message.content }}"
    "{%- if loop.last %}!{% elif messages[loop.index0 + 1].role != message.role %}</{{ message.role }}>{% endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<assistant>{% endif %}"
)

# gpt-oss' shape: an assistant turn looks for a later final answer in the rest of the conversation.
LOOKS_FOR_A_FINAL_ANSWER = (
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{%- set later = namespace(final=false) %}"
    "{%- for other in messages[loop.index0 + 1:] %}"
    "{%- if other.role == 'assistant' and other.content.startswith('final') %}{% set later.final = true %}{% endif %}"
    "{%- endfor %}"
    "[{% if not later.final %}{{ message.content }}{% endif %}]"
    "{%- else %}<{{ message.role }}>{{ message.content }}{% endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<assistant>{% endif %}"
)

# phi-4-mini's shape: the loop inside {% if messages %}, after a system prompt taken off the list.
INSIDE_AN_IF = (
    "{%- if messages and messages[0].role == 'system' %}{% set system = messages[0].content %}"
    "{% set messages = messages[1:] %}{% else %}{% set system = 'default' %}{% endif %}"
    "{%- if messages %}<system>{{ system }}"
    "{%- for message in messages %}<{{ message.role }}>{{ message.content }}{% if not loop.last %}|{% endif %}{% endfor %}"
    "{%- if add_generation_prompt %}<assistant>{% endif %}"
    "{%- else %}<empty>{% endif %}"
)

# EXAONE-4's shape: the loop walks the positions of the messages and reads its message first.
BY_POSITION = (
    "{%- for i in range(messages | length) %}{%- set msg = messages[i] %}"
    "{%- if i == 0 or messages[i - 1].role != msg.role %}<{{ msg.role }}>{% endif %}{{ msg.content }}"
    "{%- if loop.last or messages[i + 1].role != msg.role %}</{{ msg.role }}>{% endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<assistant>{% endif %}"
)

MESSAGES = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "assistant", "tool"]),
            "content": st.sampled_from(["a", "b", "final", "final answer", "<x>"]),
        }
    ),
    min_size=1,
    max_size=7,
)


def resumed_renders(source: str, messages: list[dict]) -> tuple[int, int]:
    """Render ``messages`` resumed after each shorter conversation, each checked against the
    template's own full render; (renders tried, renders that resumed)."""
    renderer = renderer_class(source)()
    converted, tools = renderer.template_inputs(messages, None)
    expected = _oracle(source, tuple(sorted(SPECIAL.items()))).render_text(messages, add_generation_prompt=True)
    tried = resumed = 0
    for length in range(1, len(messages)):
        shorter = renderer._run_template(jinja.TemplateList(converted[:length]), tools, True, record=True)
        if shorter.checkpoint is None:
            continue
        tried += 1
        output = renderer._run_template(converted, tools, True, resume_from=shorter.checkpoint)
        assert shorter.text()[: output.origin] == expected[: output.origin]
        assert output.text() == expected[output.origin :], f"resumed after {length} messages"
        resumed += output.resumed_at is not None
    return tried, resumed


def loop_header(source: str) -> str:
    """The generated message loop's header (its ``for`` line and arguments)."""
    code = code_of(source)
    start = code.index("in out.message_loop(")
    return code[start : code.index("):", start)]


# --- the compiler's verdict ---------------------------------------------------------------------


def test_a_loop_that_looks_one_message_around_is_resumed_with_its_namespace():
    header = loop_header(LOOKS_AROUND)
    assert "lookahead=1" in header and "state=(ns,)" in header
    assert "The bridge resumes the message loop" in code_of(LOOKS_AROUND)


def test_a_loop_inside_an_if_is_resumed():
    assert "lookahead=1" in loop_header(INSIDE_AN_IF)


def test_a_loop_over_the_positions_of_the_messages_is_the_message_loop():
    code = code_of(BY_POSITION)
    assert "out.mark_message(msg)" in code and "lookahead=1" in loop_header(BY_POSITION)
    assert "messages[msg_index - 1]" in code and "i = " not in code  # i is the loop's index, not a copy of it


def test_a_look_for_a_later_message_becomes_a_test_the_runtime_asks_of_appended_ones():
    header = loop_header(LOOKS_FOR_A_FINAL_ANSWER)
    assert "scans=" in header and "lambda other:" in header


@pytest.mark.parametrize(
    "body, reason",
    [
        ("{{ loop.length }}", "beyond a fixed distance"),
        ("{{ messages | length }}", "beyond a fixed distance"),
        ("{{ messages[-1].content }}", "beyond a fixed distance"),
        ("{% for later in messages[loop.index0:] %}{{ later.content }}{% endfor %}", "beyond a fixed distance"),
        ("{{ messages[loop.index0 - 1].role }}", "wrap round"),
        ("{{ strftime_now('%Y') }}", "clock"),
        ("{{ loop.changed(message.role) }}", "carries"),
    ],
)
def test_a_loop_is_left_alone_where_resuming_it_could_differ(body, reason):
    source = "{% for message in messages %}" + body + "{{ message.content }}{% endfor %}"
    code = code_of(source)
    assert "out.message_loop(" not in code
    assert "The bridge re-runs the whole template:" in code and reason in code.replace("\n    ", " ")


def test_a_loop_inside_another_loop_is_left_alone():
    source = "{% for turn in [1] %}{% for message in messages %}{{ message.content }}{% endfor %}{% endfor %}"
    assert "its message loop is inside another loop or a macro" in code_of(source)


def test_a_fixed_message_read_in_the_loop_needs_that_message():
    source = "{% for message in messages %}{{ messages[0].content }}{{ message.content }}{% endfor %}"
    assert "leading=1" in loop_header(source)


def test_a_macro_the_loop_calls_brings_what_it_reads_into_the_state():
    source = (
        "{% set sep = '|' %}{% macro show(m) %}{{ sep }}{{ m.content }}{% endmacro %}"
        "{% for message in messages %}{{ show(message) }}{% endfor %}"
    )
    header = loop_header(source)
    assert "state=(sep,)" in header


# --- the runtime: exact, or not resumed ---------------------------------------------------------


@given(messages=MESSAGES)
@FAST
def test_resumed_renders_are_the_full_render(messages):
    resumed_renders(LOOKS_AROUND, messages)
    resumed_renders(LOOKS_FOR_A_FINAL_ANSWER, messages)
    resumed_renders(INSIDE_AN_IF, [{"role": "system", "content": "s"}, *messages])
    resumed_renders(BY_POSITION, messages)


def test_resuming_happens():
    """The property above cannot tell a loop that never resumes; here it must."""
    conversation = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "tool", "content": "c"},
        {"role": "assistant", "content": "b"},
        {"role": "tool", "content": "c"},
    ]
    assert resumed_renders(LOOKS_AROUND, conversation) == (4, 4)
    assert resumed_renders(LOOKS_FOR_A_FINAL_ANSWER, conversation) == (4, 4)
    assert resumed_renders(BY_POSITION, conversation) == (4, 4)
    assert resumed_renders(INSIDE_AN_IF, [{"role": "system", "content": "s"}, *conversation]) == (4, 4)  # (no loop for the system message alone)


def run(source: str, shorter: list[dict], longer: list[dict]):
    renderer = renderer_class(source)()
    converted, tools = renderer.template_inputs(longer, None)
    checkpoint = renderer._run_template(jinja.TemplateList(converted[: len(shorter)]), tools, True, record=True).checkpoint
    if [dict(m) for m in converted[: len(shorter)]] != shorter:  # an edited history: its own conversion
        checkpoint = renderer._run_template(renderer.template_inputs(shorter, None)[0], tools, True, record=True).checkpoint
    return renderer._run_template(converted, tools, True, resume_from=checkpoint)


def test_a_state_that_differs_at_the_loop_start_is_not_resumed():
    shorter = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    output = run(LOOKS_AROUND, shorter, shorter + [{"role": "user", "content": "c"}])
    assert output.resumed_at is None and output.resume_refused == "the loop's state at its start differs"


def test_an_edited_history_is_not_resumed():
    shorter = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    edited = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "B"}, {"role": "tool", "content": "c"}]
    output = run(LOOKS_AROUND, shorter, edited)
    assert output.resumed_at is None and output.resume_refused == "the messages do not extend the checkpoint's"


def test_other_text_before_the_loop_is_not_resumed():
    source = "{{ messages[0].content }}|{% for message in messages[1:] %}{{ message.content }}{% endfor %}"
    shorter = [{"role": "system", "content": "s"}, {"role": "user", "content": "a"}]
    renderer = renderer_class(source)()
    converted, tools = renderer.template_inputs(shorter, None)
    checkpoint = renderer._run_template(converted, tools, True, record=True).checkpoint
    other, _ = renderer.template_inputs([{"role": "system", "content": "S"}, *shorter[1:], shorter[1]], None)
    output = renderer._run_template(other, tools, True, resume_from=checkpoint)
    assert output.resume_refused == "the text before the message loop differs"
    assert output.text() == "S|aa"


def test_an_appended_message_the_loop_looks_ahead_for_is_not_resumed():
    shorter = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "tool", "content": "c"}]
    output = run(LOOKS_FOR_A_FINAL_ANSWER, shorter, shorter + [{"role": "assistant", "content": "final"}])
    assert output.resume_refused == "an appended message is one the loop looks ahead for"
    assert output.text().startswith("<user>a[]")  # the earlier turn changed: only a full render shows it


def test_a_joiner_in_the_loop_state_records_no_checkpoint():
    source = "{% set comma = joiner(',') %}{% for message in messages %}{{ comma() }}{{ message.content }}{% endfor %}"
    assert "state=(comma,)" in loop_header(source)
    renderer = renderer_class(source)()
    converted, tools = renderer.template_inputs([{"role": "user", "content": "a"}] * 3, None)
    assert renderer._run_template(converted, tools, True, record=True).checkpoint is None
