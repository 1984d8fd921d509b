"""Turn syntax learned from text, tokenizer-free compiles, and the degrade path.

Small templates written here in the styles real ones use (a plain-text close, a
``[|endofturn|]`` marker, a turn that the next header ends, special tokens read from
the tokenizer) are compiled without a tokenizer, verified structurally, and their
learned facts drive parse_response and the bridge. The corpus-wide check is in
tests/test_corpus_coverage.py.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest

from compiler.markers import synthetic_tokenizer
from compiler.pipeline import compile_source, load_renderer_class, verify_compiled
from compiler.probes import Prober, ProbeError
from compiler.source import resolve_source

USER = {"role": "user", "content": "What is up?"}
NEXT_USER = {"role": "user", "content": "And then?"}

# Laguna / XML style: the turn ends in plain text, `\n</assistant>\n`.
PLAIN_TEXT_CLOSE = (
    "{% for m in messages %}<{{ m.role }}>\n{{ m.content }}\n</{{ m.role }}>\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>\n{% endif %}"
)
# EXAONE style: a bracketed marker that no tokenizer is given for, then a newline.
BRACKET_CLOSE = (
    "{% for m in messages %}[|{{ m.role }}|]{{ m.content }}[|endofturn|]\n{% endfor %}"
    "{% if add_generation_prompt %}[|assistant|]{% endif %}"
)
# GLM style: nothing closes a turn, the next message's header does.
HEADER_ENDS_TURN = (
    "[gMASK]<sop>{% for m in messages %}"
    "{% if m.role == 'user' %}<|user|>\n{{ m.content }}"
    "{% elif m.role == 'assistant' %}<|assistant|>\n{{ m.content }}"
    "{% elif m.role == 'tool' %}<|observation|>\n{{ m.content }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
# Llama-2 / Mistral style: reads bos_token and eos_token, closes a turn with eos_token.
SPECIAL_TOKEN_CLOSE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m.role == 'user' %}[INST]{{ m.content }}[/INST]"
    "{% elif m.role == 'assistant' %}{{ m.content }}{{ eos_token }}{% endif %}{% endfor %}"
)
# The assistant's content never reaches the text: no turn fact can be learned, the render is exact.
HIDES_ASSISTANT = (
    "{% for m in messages %}{% if m.role == 'user' %}<u>{{ m.content }}</u>\n"
    "{% elif m.role == 'assistant' %}<a>(redacted)</a>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<a>{% endif %}"
)


def compile_inline(tmp_path: Path, name: str, template: str):
    """Compile ``template`` with no tokenizer, verify it structurally, return (class, compiled)."""
    path = tmp_path / f"{name}.jinja"
    path.write_text(template, encoding="utf-8")
    compiled = compile_source(resolve_source(f"test/{name}", template=path, allow_hub=False))
    renderer_class = load_renderer_class(compiled.code, compiled.spec.module, compiled.spec.class_name)
    report = verify_compiled(renderer_class, compiled, cases=25, seed=0)
    assert report.ok, report.failure.report()
    assert compiled.parity in ("structural", "text") and report.tokens_checked == report.text_matched - report.rejected_alike
    return renderer_class, compiled


def structural_renderer(renderer_class, compiled):
    return renderer_class(compiled.check_tokenizer, special_tokens=compiled.placeholders)


def learned_calls(tmp_path: Path, name: str, template: str):
    """(class, structural renderer, call syntax) of ``template``, whose call syntax must be learned."""
    renderer_class, compiled = compile_inline(tmp_path, name, template)
    assert renderer_class.TOOL_CALLS is not None, renderer_class.UNLEARNED
    return renderer_class, structural_renderer(renderer_class, compiled), renderer_class.TOOL_CALLS


def sampled(renderer, history, assistant):
    """(prompt ids, completion ids through the first stop) as a model would sample them."""
    prompt = renderer.render_ids(history, add_generation_prompt=True)
    full = renderer.render_text(history + [assistant])
    text = full[len(renderer.render_text(history, add_generation_prompt=True)) :]
    stop_at = min(text.find(stop) + len(stop) for stop in renderer.get_stop_strings() if stop in text)
    return prompt, renderer.encoder.encode(text[:stop_at])


def tool_calling_turn(content: str, *calls: tuple[str, dict]) -> dict:
    """An assistant message with ``content`` and one tool call per (name, arguments)."""
    tool_calls = [{"type": "function", "function": {"name": name, "arguments": arguments}} for name, arguments in calls]
    return {"role": "assistant", "content": content, "tool_calls": tool_calls}


def calls_read_back(renderer, turn):
    """The tool-calling ``turn`` sampled after one user message and parsed back:
    (prompt, completion, parsed, [(name, arguments, status) per call])."""
    prompt, completion = sampled(renderer, [USER], turn)
    parsed = renderer.parse_response(completion, prompt_ids=prompt)
    return prompt, completion, parsed, [(call.name, call.arguments, call.status) for call in parsed.tool_calls]


def bridges_a_tool_result(renderer, turn, prompt, completion) -> bool:
    """Whether the bridge after ``turn`` with a tool result gives the full render's ids."""
    result = {"role": "tool", "content": "done"}
    bridged = renderer.bridge_to_next_turn(prompt, completion, [result])
    return bridged is not None and bridged.token_ids == renderer.render_ids([USER, turn, result], add_generation_prompt=True)


@pytest.mark.parametrize(
    ("template", "close", "after_close", "stops"),
    [
        (PLAIN_TEXT_CLOSE, "\n</assistant>", "\n", ("</assistant>",)),
        (BRACKET_CLOSE, "[|endofturn|]", "\n", ("[|endofturn|]",)),
    ],
    ids=["plain-text-close", "bracket-marker-close"],
)
def test_a_text_close_is_learned_parsed_and_bridged(tmp_path, template, close, after_close, stops):
    renderer_class, compiled = compile_inline(tmp_path, "textclose", template)
    assert renderer_class.TURN.close == close
    assert renderer_class.TURN.after_close == after_close
    assert renderer_class.TURN.stop_tokens == stops
    assert not renderer_class.UNLEARNED
    renderer = structural_renderer(renderer_class, compiled)
    assert renderer.get_stop_strings() == list(stops)
    answer = {"role": "assistant", "content": "Fine, thanks."}
    prompt, completion = sampled(renderer, [USER], answer)
    parsed = renderer.parse_response(completion + renderer.encoder.encode("junk after the stop"))
    assert (parsed.content, parsed.status) == ("Fine, thanks.", "ok")
    bridged = renderer.bridge_to_next_turn(prompt, completion, [NEXT_USER])
    assert bridged is not None
    assert bridged.token_ids == renderer.render_ids([USER, answer, NEXT_USER], add_generation_prompt=True)


def test_a_turn_the_next_header_ends_stops_on_the_headers(tmp_path):
    renderer_class, compiled = compile_inline(tmp_path, "glmlike", HEADER_ENDS_TURN)
    turn = renderer_class.TURN
    assert (turn.close, turn.after_close) == ("", "")
    assert turn.stop_tokens == ("<|user|>", "<|observation|>")
    renderer = structural_renderer(renderer_class, compiled)
    # the stops are special tokens of the (structural) tokenizer, so they stop by id too
    assert len(renderer.get_stop_token_ids()) == 2
    answer = {"role": "assistant", "content": "Fine."}
    prompt = renderer.render_ids([USER], add_generation_prompt=True)
    full = renderer.render_ids([USER, answer, NEXT_USER], add_generation_prompt=True)
    content_ids = renderer.encoder.encode("Fine.")
    # the model stopped on the next header: it is kept and not rendered twice
    with_header = content_ids + renderer.encoder.encode("<|user|>")
    assert renderer.parse_response(with_header).content == "Fine."
    bridged = renderer.bridge_to_next_turn(prompt, with_header, [NEXT_USER])
    assert bridged is not None and bridged.token_ids == full
    # a completion cut before any header needs no close
    bridged = renderer.bridge_to_next_turn(prompt, content_ids, [NEXT_USER])
    assert bridged is not None and bridged.token_ids == full
    # the model opened a tool result but a user message follows: not this render
    observation = content_ids + renderer.encoder.encode("<|observation|>")
    assert renderer.bridge_to_next_turn(prompt, observation, [NEXT_USER]) is None


# Falcon style: plain-text headers, and the newline before the next header is written by the
# previous message's iteration (so the generation prompt starts with it and the turn does not)
NEWLINE_BEFORE_HEADER = (
    "{% for m in messages %}{% if m.role == 'user' %}User: {{ m.content }}"
    "{% elif m.role == 'assistant' %}Assistant: {{ m.content }}{% endif %}"
    "{% if not loop.last or add_generation_prompt %}{{ '\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)


def test_a_turn_whose_header_follows_the_previous_message_newline_is_learned(tmp_path):
    renderer_class, compiled = compile_inline(tmp_path, "falconlike", NEWLINE_BEFORE_HEADER)
    turn = renderer_class.TURN
    assert turn is not None and turn.stop_tokens == ("User:",) and turn.content_lead == " "
    renderer = structural_renderer(renderer_class, compiled)
    answer = {"role": "assistant", "content": "Fine."}
    prompt = renderer.render_ids([USER], add_generation_prompt=True)
    full = renderer.render_ids([USER, answer, NEXT_USER], add_generation_prompt=True)
    completion = renderer.encoder.encode(" Fine.\nUser:")
    assert renderer.parse_response(completion).content == "Fine."
    bridged = renderer.bridge_to_next_turn(prompt, completion, [NEXT_USER])
    assert bridged is not None and bridged.token_ids == full


def test_special_tokens_are_read_when_the_class_is_built(tmp_path):
    renderer_class, compiled = compile_inline(tmp_path, "llama2like", SPECIAL_TOKEN_CLOSE)
    assert renderer_class.SPECIAL_TOKENS == {"bos_token": None, "eos_token": None}
    messages = [USER, {"role": "assistant", "content": "Hi."}]
    # from special_tokens= ...
    given = renderer_class(special_tokens={"bos_token": "<s>", "eos_token": "</s>"})
    assert given.render_text(messages) == "<s>[INST]What is up?[/INST]Hi.</s>"
    assert given.TURN.close == "</s>" and given.get_stop_strings() == ["</s>"]
    # ... or from the tokenizer the class is built with
    tokenizer = synthetic_tokenizer(["[INST]", "[/INST]"], {"bos_token": "<s>", "eos_token": "</s>"})
    from_tokenizer = renderer_class(tokenizer)
    assert from_tokenizer.render_text(messages) == "<s>[INST]What is up?[/INST]Hi.</s>"
    assert from_tokenizer.get_stop_token_ids() == [tokenizer.convert_tokens_to_ids("</s>")]
    # ... and without either, as transformers renders a token the tokenizer lacks: empty
    assert renderer_class().render_text(messages) == "[INST]What is up?[/INST]Hi."
    with pytest.raises(ValueError, match="unknown special token 'pad_token'"):
        renderer_class(special_tokens={"pad_token": "<pad>"})
    with pytest.raises(ValueError, match="special_tokens= gives eos_token='<eos>' but the tokenizer has '</s>'"):
        renderer_class(tokenizer, special_tokens={"eos_token": "<eos>"})


def test_baked_special_tokens_are_checked(tmp_path):
    path = tmp_path / "baked.jinja"
    path.write_text(SPECIAL_TOKEN_CLOSE, encoding="utf-8")
    source = resolve_source("test/baked", template=path, allow_hub=False)
    compiled = compile_source(source, special_tokens={"bos_token": "<s>", "eos_token": "</s>"})
    renderer_class = load_renderer_class(compiled.code, compiled.spec.module, compiled.spec.class_name)
    assert renderer_class.SPECIAL_TOKENS == {"bos_token": "<s>", "eos_token": "</s>"}
    assert renderer_class.TURN.close == "</s>"
    other = synthetic_tokenizer([], {"bos_token": "<s>", "eos_token": "<|end|>"})
    with pytest.raises(ValueError, match="compiled with eos_token='</s>' but the tokenizer has '<|end|>'"):
        renderer_class(other)


def test_unlearnable_turn_facts_degrade_instead_of_refusing(tmp_path, caplog):
    renderer_class, compiled = compile_inline(tmp_path, "hides", HIDES_ASSISTANT)
    assert renderer_class.TURN is None
    assert set(renderer_class.UNLEARNED) == {"turn"}
    assert "does not render a plain assistant message" in renderer_class.UNLEARNED["turn"]
    assert "Not learned (turn)" in renderer_class.__doc__
    renderer = structural_renderer(renderer_class, compiled)
    parsed = renderer.parse_response(renderer.encoder.encode("Some answer"))
    assert (parsed.content, parsed.status) == ("Some answer", "unlearned")
    prompt = renderer.render_ids([USER], add_generation_prompt=True)
    completion = renderer.encoder.encode("Some answer")
    with caplog.at_level(logging.WARNING, logger="rllm_renderers.bridging.bridge"):
        assert renderer.bridge_to_next_turn(prompt, completion, [NEXT_USER]) is None
        assert renderer.bridge_to_next_turn(prompt, completion, [NEXT_USER]) is None
    logged = [record for record in caplog.records if "always returns None" in record.getMessage()]
    assert len(logged) == 1 and "does not render a plain assistant message" in logged[0].getMessage()


# More styles, each checked by the same generic round trip (no expectations written per style).
STYLES = {
    "alpaca-no-markers": (
        "{% for m in messages %}{% if m.role == 'user' %}### Instruction:\n{{ m.content }}\n\n"
        "{% elif m.role == 'assistant' %}### Response:\n{{ m.content }}\n\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}### Response:\n{% endif %}"
    ),
    "vicuna-eos": (
        "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}USER: {{ m.content }} "
        "{% elif m.role == 'assistant' %}ASSISTANT: {{ m.content }}{{ eos_token }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}ASSISTANT:{% endif %}"
    ),
    "sep-after-blank-line": (
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n\n<sep>{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    ),
    "zephyr-eos-in-expression": (
        "{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|user|>\n' + message['content'] + eos_token }}"
        "{% elif message['role'] == 'assistant' %}{{ '<|assistant|>\n' + message['content'] + eos_token }}{% endif %}"
        "{% if loop.last and add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}{% endfor %}"
    ),
    "llama2-space-before-eos": (
        "{% for message in messages %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + message['content'].strip() + ' [/INST]' }}"
        "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'].strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
    ),
    "plain-text-close": PLAIN_TEXT_CLOSE,
    "bracket-marker-close": BRACKET_CLOSE,
    "header-ends-turn": HEADER_ENDS_TURN,
}


@pytest.mark.parametrize("name", list(STYLES))
def test_every_style_parses_its_own_turn_back_and_bridges_without_a_miss(tmp_path, name):
    renderer_class, compiled = compile_inline(tmp_path, name.replace("-", "_"), STYLES[name])
    assert renderer_class.TURN is not None and not renderer_class.UNLEARNED
    renderer = structural_renderer(renderer_class, compiled)
    answer = {"role": "assistant", "content": "Fine, thanks."}
    prompt_text = renderer.render_text([USER], add_generation_prompt=True)
    sampled_text = renderer.render_text([USER, answer, NEXT_USER])[len(prompt_text) :]
    # (a generation prompt may stop short of the separator before the content: zephyr's "\n")
    assert sampled_text.lstrip().startswith(answer["content"])
    stops = [(sampled_text.find(stop), stop) for stop in renderer.get_stop_strings() if stop in sampled_text]
    assert stops, "the model must be able to stop: a stop string follows the content"
    at, stop = min(stops)
    completion = renderer.encoder.encode(sampled_text[: at + len(stop)])
    parsed = renderer.parse_response(completion)
    assert (parsed.content.lstrip(), parsed.status) == (answer["content"], "ok")
    prompt = renderer.render_ids([USER], add_generation_prompt=True)
    full = renderer.render_ids([USER, answer, NEXT_USER], add_generation_prompt=True)
    if full[: len(prompt) + len(completion)] == prompt + completion:  # an exact extension exists
        bridged = renderer.bridge_to_next_turn(prompt, completion, [NEXT_USER])
        assert bridged is not None and bridged.token_ids == full


# Gemma-4 style: with thinking off the generation prompt prefills an empty thought channel, and a
# turn keeps its reasoning only when it calls a tool (a final answer's thought is dropped).
PREFILLED_THOUGHT = (
    "{% for m in messages %}{% if m.role == 'user' %}<|turn>user\n{{ m.content }}<turn|>\n"
    "{% elif m.role == 'assistant' %}<|turn>model\n"
    "{% if m.reasoning_content and m.tool_calls %}<|channel>thought\n{{ m.reasoning_content }}\n<channel|>{% endif %}"
    "{% for call in m.tool_calls or [] %}<|tool_call>{{ call.function.name }}({{ call.function.arguments | tojson }})<tool_call|>{% endfor %}"
    "{{ m.content or '' }}<turn|>\n"
    "{% elif m.role == 'tool' %}<|turn>tool\n{{ m.content }}<turn|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|turn>model\n{% if not enable_thinking %}<|channel>thought\n<channel|>{% endif %}{% endif %}"
)


def test_reasoning_markers_are_learned_when_the_generation_prompt_prefills_them(tmp_path):
    """The open marker is in the generation prompt (an empty thought channel) and only a tool-calling
    turn shows the reasoning: the markers come from whole renders of that turn with and without it."""
    renderer_class, compiled = compile_inline(tmp_path, "prefilled", PREFILLED_THOUGHT)
    reasoning = renderer_class.REASONING
    assert reasoning is not None, renderer_class.__doc__
    assert (reasoning.open, reasoning.close, reasoning.after_open, reasoning.before_close) == (
        "<|channel>thought", "<channel|>", "\n", "\n"
    )
    renderer = renderer_class(compiled.check_tokenizer, special_tokens=compiled.placeholders, enable_thinking=True)
    turn = {
        "role": "assistant",
        "content": "",
        "reasoning_content": "Look it up first.",
        "tool_calls": [{"type": "function", "function": {"name": "lookup", "arguments": {"q": "x"}}}],
    }
    prompt, completion = sampled(renderer, [USER], turn)
    parsed = renderer.parse_response(completion, prompt_ids=prompt)
    assert parsed.reasoning_content == "Look it up first."
    assert [call.name for call in parsed.tool_calls] == ["lookup"] and parsed.tool_calls[0].arguments == {"q": "x"}


# Apertus style: the assistant turn stays open through its tool results, which open with a bare
# `[`; only a user message closes it (`<|a_end|>`, written as the user message starts).
BARE_BRACKET_TOOL_HEADER = (
    "{% set ns = namespace(open=false) %}{% for m in messages %}"
    "{% if m.role == 'user' %}{% if ns.open %}<|a_end|>{% set ns.open = false %}{% endif %}<|u|>{{ m.content }}<|u_end|>"
    "{% elif m.role == 'assistant' %}{% if not ns.open %}<|a|>{% set ns.open = true %}{% endif %}{{ m.content or '' }}"
    "{% if m.tool_calls %}<|calls|>[{% for c in m.tool_calls %}{{ '{\"' + c.function.name + '\": ' + c.function.arguments | tojson + '}' }}"
    "{% if not loop.last %}, {% endif %}{% endfor %}]<|calls_end|>{% endif %}"
    "{% elif m.role == 'tool' %}[{{ m.content }}]{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|a|>{% endif %}"
)


def test_a_bare_punctuation_header_is_no_stop_the_turn_ends_at_its_own_last_marker(tmp_path):
    renderer_class, compiled = compile_inline(tmp_path, "bare_bracket", BARE_BRACKET_TOOL_HEADER)
    assert renderer_class.TURN.close == ""
    # `[` starts ordinary text; a tool-calling turn ends where the model stops, after its calls
    assert renderer_class.TURN.stop_tokens == ("<|a_end|>", "<|calls_end|>")
    renderer = structural_renderer(renderer_class, compiled)
    answer = {"role": "assistant", "content": "See [1] and [2]."}
    completion = renderer.encoder.encode("See [1] and [2].<|a_end|>")
    assert renderer.parse_response(completion).content == answer["content"]
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": {"q": "x"}}}
    calling = renderer.parse_response(renderer.encoder.encode('<|calls|>[{"lookup": {"q": "x"}}]<|calls_end|>'))
    assert [(c.name, c.arguments) for c in calling.tool_calls] == [("lookup", {"q": "x"})]
    prompt = renderer.render_ids([USER], add_generation_prompt=True)
    turn = {"role": "assistant", "content": "", "tool_calls": [call]}
    result = {"role": "tool", "content": "found", "tool_call_id": "c1"}
    full = renderer.render_ids([USER, turn, result], add_generation_prompt=True)
    sampled_ids = full[len(prompt) : len(prompt) + len(renderer.encoder.encode('<|calls|>[{"lookup": {"q": "x"}}]<|calls_end|>'))]
    bridged = renderer.bridge_to_next_turn(prompt, sampled_ids, [result])
    assert bridged is not None and bridged.token_ids == full


# Granite Guardian style: the conversation is quoted inside one user turn for a classifier; no
# message is rendered as an assistant turn of its own, so no turn fact describes one.
QUOTES_CONVERSATION = (
    "{% set last = messages[-1] %}{% set prev = messages[-2] if messages|length > 1 else none %}"
    "<|start|>user<|sep|>Judge this.\n"
    "{% if last.role == 'assistant' %}User: {{ prev.content }}\nAssistant: {{ last.content }}\n"
    "{% else %}User: {{ last.content }}\n{% endif %}<end_of_turn><|end|>\n"
    "{% if add_generation_prompt %}<|start|>assistant<|sep|>{% endif %}"
)


def test_an_assistant_message_quoted_inside_another_turn_is_not_learned_as_a_turn(tmp_path):
    renderer_class, _ = compile_inline(tmp_path, "quotes", QUOTES_CONVERSATION)
    assert renderer_class.TURN is None
    assert "inside another message's text" in renderer_class.UNLEARNED["turn"]


# Hunyuan style: the markers are computed ('<think{}>'.format(tag)), and with thinking off the
# generation prompt closes an empty reasoning block (`<think:x></think:x>`).
COMPUTED_MARKERS = (
    "{%- set tag = ':x' %}{%- set eot = '<|eot{}|>'.format(tag) %}"
    "{%- set think, end_think = '<think{}>'.format(tag), '</think{}>'.format(tag) %}"
    "{% for m in messages %}{% if m.role == 'user' %}<|u|>{{ m.content }}{{ eot }}"
    "{% elif m.role == 'assistant' %}<|a|>{{ think + (m.reasoning_content or '') + end_think }}{{ m.content }}{{ eot }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|a|>{{ think if enable_thinking else think + end_think }}{% endif %}"
)


def test_computed_markers_are_markers_and_open_the_reasoning_block(tmp_path):
    renderer_class, compiled = compile_inline(tmp_path, "computed", COMPUTED_MARKERS)
    # found in the template's renders, not only among its literals (`<|eot{}|>`)
    assert {"<|eot:x|>", "<think:x>", "</think:x>"} <= set(compiled.check_tokenizer.get_added_vocab())
    assert renderer_class.TURN.close == "<|eot:x|>"
    reasoning = renderer_class.REASONING
    assert (reasoning.open, reasoning.close) == ("<think:x>", "</think:x>")
    renderer = renderer_class(compiled.check_tokenizer, special_tokens=compiled.placeholders, enable_thinking=True)
    prompt = renderer.render_ids([USER], add_generation_prompt=True)
    parsed = renderer.parse_response(renderer.encoder.encode("Hmm.</think:x>Four.<|eot:x|>"), prompt_ids=prompt)
    assert (parsed.reasoning_content, parsed.content) == ("Hmm.", "Four.")
    assert len(renderer.get_stop_token_ids()) == 1  # the close is a special token: it stops by id


# Apriel style: the template always ends a conversation that does not end with the assistant with
# a prompt asking for the reasoning in plain text (it ignores add_generation_prompt), and the
# reasoning ends at a marker before the answer; no marker opens it.
REASONING_WITHOUT_OPEN = (
    "{% for m in messages %}{% if m.role == 'user' %}<|user|>\n{{ m.content }}\n"
    "{% elif m.role == 'assistant' %}<|assistant|>\n{% if m.reasoning_content and loop.last %}"
    "{{ m.reasoning_content }}\n[FINAL]\n{% endif %}{{ m.content }}\n<|end|>\n{% endif %}"
    "{% if loop.last and m.role != 'assistant' %}<|assistant|>\nSteps:\n{% endif %}{% endfor %}"
)


def test_reasoning_without_an_open_marker_starts_the_turn(tmp_path):
    renderer_class, compiled = compile_inline(tmp_path, "noopen", REASONING_WITHOUT_OPEN)
    assert (renderer_class.REASONING.open, renderer_class.REASONING.close) == ("", "[FINAL]")
    renderer = structural_renderer(renderer_class, compiled)
    prompt = renderer.render_ids([USER], add_generation_prompt=True)
    parsed = renderer.parse_response(renderer.encoder.encode("Think.\n[FINAL]\nFour.\n<|end|>"), prompt_ids=prompt)
    assert (parsed.reasoning_content, parsed.content, parsed.reasoning_complete) == ("Think.", "Four.", True)
    unfinished = renderer.parse_response(renderer.encoder.encode("Still thinking"), prompt_ids=prompt)
    assert (unfinished.reasoning_content, unfinished.content, unfinished.reasoning_complete) == ("Still thinking", "", False)


def test_a_prompt_written_inside_the_last_message_opens_the_turn(tmp_path):
    """The template opens the assistant turn at the end of the last user message whatever
    add_generation_prompt says (Apriel 1.6): that text opens the turn, so the turn's
    header is not marked as sampled."""
    renderer_class, compiled = compile_inline(tmp_path, "noflag", REASONING_WITHOUT_OPEN)
    renderer = structural_renderer(renderer_class, compiled)
    assert renderer.turn_opening() == "<|assistant|>\nSteps:\n"
    out = renderer.render([USER, {"role": "assistant", "content": "Four.", "reasoning_content": "Think."}])
    sampled = renderer.decode([token for token, mask in zip(out.token_ids, out.sampled_mask) if mask])
    assert sampled == "Think.\n[FINAL]\nFour.\n<|end|>"


# LFM2.5 style: calls written as Python calls with keyword arguments, strings quoted and escaped,
# nested values as JSON, in one bracketed list after a marker.
PYTHON_CALLS = (
    "{%- macro value(v) -%}{%- if v is string -%}{{ \"'\" + (v | replace(\"\\\\\", \"\\\\\\\\\") | replace(\"'\", \"\\\\'\")) + \"'\" }}"
    "{%- elif v is mapping or (v is iterable and v is not string) -%}{{ v | tojson }}{%- else -%}{{ v | string }}{%- endif -%}{%- endmacro -%}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}"
    "{% if m.tool_calls %}<|tool_call_start|>[{% for c in m.tool_calls %}{{ c.function.name }}("
    "{% for k, v in c.function.arguments.items() %}{{ k }}={{ value(v) }}{% if not loop.last %}, {% endif %}{% endfor %})"
    "{% if not loop.last %}, {% endif %}{% endfor %}]<|tool_call_end|>{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_python_style_calls_are_learned_and_parsed(tmp_path):
    renderer_class, compiled = compile_inline(tmp_path, "python_calls", PYTHON_CALLS)
    syntax = renderer_class.TOOL_CALLS
    assert (syntax.style, syntax.call_start, syntax.name_end, syntax.call_end, syntax.string_quote) == (
        "python", "", "(", ")", "'"
    )
    assert syntax.block_start == "<|tool_call_start|>[" and not renderer_class.UNLEARNED
    renderer = structural_renderer(renderer_class, compiled)
    arguments = {"city": "it's (Paris)", "n": -3, "flag": True, "opts": {"a": [1, None]}}
    turn = {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [
            {"type": "function", "function": {"name": "lookup", "arguments": arguments}},
            {"type": "function", "function": {"name": "noop", "arguments": {}}},
        ],
    }
    prompt, completion = sampled(renderer, [USER], turn)
    parsed = renderer.parse_response(completion, prompt_ids=prompt)
    assert parsed.content == "Checking."
    assert [(call.name, call.arguments, call.status) for call in parsed.tool_calls] == [
        ("lookup", arguments, "ok"), ("noop", {}, "ok")
    ]
    # code is not a literal, and a call the completion leaves open is unclosed
    bad = renderer.parse_response(renderer.encoder.encode("<|tool_call_start|>[lookup(city=os.system('x'))]<|im_end|>"))
    assert [call.status for call in bad.tool_calls] == ["malformed_structure"]
    cut = renderer.parse_response(renderer.encoder.encode("<|tool_call_start|>[lookup(city='a)b'"))
    assert [call.status for call in cut.tool_calls] == ["unclosed_block"]


# MiniCPM3 style: one call per line in a ```python block, values as JSON, the content after the
# calls; OLMo-3's layout (one call per line between <function_calls> tags) with escaped strings.
# Each call's end (")\n") already ends its line: nothing more separates the calls.
PYTHON_CALLS_PER_LINE = {
    "code-block-content-after": (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n"
        "{% if m.tool_calls %}<|tool_call_start|>\n```python\n{% for c in m.tool_calls %}{{ c.function.name }}("
        "{% for k, v in c.function.arguments.items() %}{{ k }}={{ v | tojson }}{{ ',' if not loop.last }}{% endfor %})\n"
        "{% endfor %}```\n<|tool_call_end|>\n{% endif %}{{ m.content or '' }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    ),
    "function-calls-tags": (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}"
        "{% if m.tool_calls %}<function_calls>\n{% for c in m.tool_calls %}{{ c.function.name }}("
        "{% for k, v in c.function.arguments.items() %}{{ k }}={{ v | tojson }}{% if not loop.last %}, {% endif %}{% endfor %})"
        "{% if not loop.last %}{{ '\\n' }}{% endif %}{% endfor %}{{ '\\n' }}</function_calls>{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    ),
}


@pytest.mark.parametrize("name", list(PYTHON_CALLS_PER_LINE))
def test_python_calls_one_per_line_are_learned_and_parsed(tmp_path, name):
    renderer_class, compiled = compile_inline(tmp_path, name.replace("-", "_"), PYTHON_CALLS_PER_LINE[name])
    syntax = renderer_class.TOOL_CALLS
    assert (syntax.style, syntax.call_start, syntax.name_end, syntax.call_end, syntax.call_separator) == (
        "python", "", "(", ")\n", ""
    )
    renderer = structural_renderer(renderer_class, compiled)
    arguments = {"path": "C:\\new", "code": "print('hi')\n", "n": 2, "opts": {"a": [1, None]}}
    turn = tool_calling_turn("Checking.", ("run", arguments), ("noop", {}), ("run", {"n": 3}))
    prompt, completion, parsed, calls = calls_read_back(renderer, turn)
    assert parsed.content == "Checking."
    assert calls == [("run", arguments, "ok"), ("noop", {}, "ok"), ("run", {"n": 3}, "ok")]
    assert bridges_a_tool_result(renderer, turn, prompt, completion)


def test_a_call_syntax_that_misreads_the_probe_renders_is_not_learned(tmp_path):
    # the syntax learned before calls one per line were understood: a call's start ("\n") is also
    # the end of the call before it (")\n"), so the newline after the last call read as a call
    renderer_class, compiled = compile_inline(tmp_path, "per_line", PYTHON_CALLS_PER_LINE["function-calls-tags"])
    prober = Prober(structural_renderer(renderer_class, compiled), frozenset())
    prober.check_reads_back(renderer_class.TOOL_CALLS)
    wrong = dataclasses.replace(renderer_class.TOOL_CALLS, call_start="\n", block_start="<function_calls>")
    with pytest.raises(ProbeError, match=r"back as \[\('fnq7', \{'akq7': 'avq7', 'bkq7': 'bvq7'\}\), \(None, None\)\]"):
        prober.check_reads_back(wrong)


# Hermes (vLLM's tool_chat_template_hermes) style: each call is one JSON object whose arguments come
# before the name, `{ "arguments": {...}, "name": "NAME"}`, the name written as it is.
ARGUMENTS_BEFORE_NAME = (
    "{% for m in messages %}<|im_start|>{{ m.role }}{% if m.tool_calls %}{% for c in m.tool_calls %}"
    "{{ '\\n<tool_call>\\n{ \"arguments\": ' + c.function.arguments | tojson + ', \"name\": \"' + c.function.name + '\"}\\n</tool_call> ' }}"
    "{% endfor %}{% else %}{{ '\\n' + m.content }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_json_arguments_written_before_the_name_are_learned_and_parsed(tmp_path):
    renderer_class, compiled = compile_inline(tmp_path, "arguments_first", ARGUMENTS_BEFORE_NAME)
    syntax = renderer_class.TOOL_CALLS
    assert (syntax.style, syntax.call_start, syntax.arguments_end, syntax.name_end, syntax.call_end) == (
        "json", '<tool_call>\n{ "arguments": ', ', "name": "', "", '"}\n</tool_call> '
    )
    renderer = structural_renderer(renderer_class, compiled)
    arguments = {"path": "C:\\new", "code": "print('hi')", "n": 2, "opts": {"a": [1, None]}}
    turn = tool_calling_turn("", ("run", arguments), ("noop", {}))
    prompt, completion, _, calls = calls_read_back(renderer, turn)
    assert calls == [("run", arguments, "ok"), ("noop", {}, "ok")]
    assert bridges_a_tool_result(renderer, turn, prompt, completion)
    # arguments that are no JSON, a name the text leaves open, a list for arguments
    statuses = {
        '<tool_call>\n{ "arguments": {"n": 2,}, "name": "run"}\n</tool_call> ': "invalid_json",
        '<tool_call>\n{ "arguments": {"n": 2}, "name": "ru': "unclosed_block",
        '<tool_call>\n{ "arguments": [2], "name": "run"}\n</tool_call> ': "malformed_structure",
        '<tool_call>\n{ "arguments": {"n": 2}, "name": ""}\n</tool_call> ': "missing_name",
    }
    for text, status in statuses.items():
        assert [call.status for call in renderer.parse_response(renderer.encoder.encode(text)).tool_calls] == [status]


# Command-R style: the arguments' JSON is re-indented inside the call (`tojson(indent=4) | indent(8)`)
REINDENTED_JSON = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.tool_calls %}Action:\n["
    "{% for c in m.tool_calls %}{{ '\\n    {\\n        \"tool_name\": \"' + c.function.name + '\",\\n        \"parameters\": ' }}"
    "{{ c.function.arguments | tojson(indent=4) | indent(8) }}{{ '\\n    }' }}{% if not loop.last %},{% endif %}"
    "{% endfor %}{{ '\\n]' }}{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_json_arguments_spaced_another_way_are_learned_and_parsed(tmp_path):
    _, renderer, syntax = learned_calls(tmp_path, "reindented", REINDENTED_JSON)
    assert (syntax.style, syntax.name_end) == ("json", '",\n        "parameters": ')
    arguments = {"path": "a.py", "opts": {"depth": [1, 2], "quiet": True}}
    turn = tool_calling_turn("", ("read", arguments), ("noop", {}))
    prompt, completion, _, calls = calls_read_back(renderer, turn)
    assert calls == [("read", arguments, "ok"), ("noop", {}, "ok")]
    assert bridges_a_tool_result(renderer, turn, prompt, completion)


# GigaChat3 style: the call is a message of its own, after the answer's stop
CALL_AFTER_THE_STOP = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}<|im_end|>\n"
    "{% for c in m.tool_calls or [] %}<|im_start|>function call\n{\"name\": \"{{ c.function.name }}\", "
    "\"arguments\": {{ c.function.arguments | tojson }}}<|im_end|>\n{% endfor %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_calls_written_after_the_turns_stop_are_said_to_be_unreadable(tmp_path):
    renderer_class, _ = compile_inline(tmp_path, "call_after_stop", CALL_AFTER_THE_STOP)
    assert renderer_class.TURN.stop_tokens == ("<|im_end|>",)
    assert "writes tool calls after the turn's stop '<|im_end|>'" in renderer_class.__doc__


# Kimi-K3 style: every element is `<|open|>NAME ...<|sep|>` ... `<|close|>NAME<|sep|>`, so the marker
# after the content (`<|close|>`) also closes the think block before it; calls carry their position
TAGGED_ELEMENTS = (
    "{% for m in messages %}<|open|>message role=\"{{ m.role }}\"<|sep|>{% if m.role == 'assistant' %}"
    "<|open|>think<|sep|>{{ m.reasoning_content or '' }}<|close|>think<|sep|><|open|>response<|sep|>{{ m.content }}"
    "<|close|>response<|sep|>{% if m.tool_calls %}<|open|>tools<|sep|>{% for c in m.tool_calls %}"
    "<|open|>call tool=\"{{ c.function.name }}\" index=\"{{ loop.index }}\"<|sep|>"
    "{% for k, v in c.function.arguments.items() %}<|open|>argument key=\"{{ k }}\"<|sep|>{{ v }}<|close|>argument<|sep|>"
    "{% endfor %}<|close|>call<|sep|>{% endfor %}<|close|>tools<|sep|>{% endif %}{% else %}{{ m.content }}{% endif %}"
    "<|close|>message<|sep|><|end_of_msg|>{% endfor %}"
    "{% if add_generation_prompt %}<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>{% endif %}"
)


def test_a_turn_of_tagged_elements_ends_at_its_own_marker_and_its_calls_carry_positions(tmp_path):
    renderer_class, renderer, syntax = learned_calls(tmp_path, "tagged", TAGGED_ELEMENTS)
    assert renderer_class.TURN.stop_tokens == ("<|end_of_msg|>",)
    assert (syntax.call_start, syntax.call_index) == ('<|open|>call tool="', '" index="')
    answer = {"role": "assistant", "content": "Fine.", "reasoning_content": "Easy."}
    prompt, completion = sampled(renderer, [USER], answer)
    parsed = renderer.parse_response(completion, prompt_ids=prompt)
    assert (parsed.content, parsed.reasoning_content) == ("Fine.", "Easy.")
    turn = tool_calling_turn("", ("run", {"path": "a b", "n": "2"}), ("noop", {}))
    prompt, completion, _, calls = calls_read_back(renderer, turn)
    assert calls == [("run", {"path": "a b", "n": 2}, "ok"), ("noop", {}, "ok")]
    assert bridges_a_tool_result(renderer, turn, prompt, completion)


# Hunyuan-A13B style: tool calls are written only when the request declares tools (one JSON list in a block)
TOOLS_GATED_CALLS = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.tool_calls and tools %}<tool_calls>["
    "{% for c in m.tool_calls %}{\"name\": \"{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}}"
    "{% if not loop.last %}, {% endif %}{% endfor %}]</tool_calls>{% else %}{{ m.content }}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


# ... and Hunyuan-A13B's tool-use prompt asks for answers that start with a lead, which it writes itself
TOOLS_GATED_LEAD = TOOLS_GATED_CALLS.replace("{% else %}{{ m.content }}", "{% elif tools %}A: {{ m.content }}{% else %}{{ m.content }}")


def test_a_lead_a_template_writes_only_when_tools_are_declared_is_not_content(tmp_path):
    renderer_class, compiled = compile_inline(tmp_path, "tools_gated_lead", TOOLS_GATED_LEAD)
    assert (renderer_class.TURN.content_lead, renderer_class.TURN.content_lead_with_tools) == ("", "A: ")
    renderer = structural_renderer(renderer_class, compiled)
    tools = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]
    answer = {"role": "assistant", "content": "Fine."}
    prompt = renderer.render_ids([USER], tools=tools, add_generation_prompt=True)
    completion = renderer.encoder.encode("A: Fine.<|im_end|>")
    assert renderer.parse_response(completion, tools=tools).content == "Fine."
    assert renderer.parse_response(renderer.encoder.encode("Fine.<|im_end|>")).content == "Fine."  # no tools: no lead
    bridged = renderer.bridge_to_next_turn(prompt, completion, [NEXT_USER], tools=tools)
    assert bridged is not None
    assert bridged.token_ids == renderer.render_ids([USER, answer, NEXT_USER], tools=tools, add_generation_prompt=True)


def test_tool_calls_a_template_writes_only_when_tools_are_declared_are_learned(tmp_path):
    renderer_class, renderer, syntax = learned_calls(tmp_path, "tools_gated", TOOLS_GATED_CALLS)
    assert (syntax.style, syntax.block_start) == ("json", "<tool_calls>[")
    assert "writes tool calls only when the request declares tools" in renderer_class.__doc__
    tools = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}} for name in ("run", "noop")]
    arguments = {"path": "C:\\new", "n": 2}
    turn = tool_calling_turn("", ("run", arguments), ("noop", {}))
    prompt = renderer.render_ids([USER], tools=tools, add_generation_prompt=True)
    text = renderer.render_text([USER, turn], tools=tools)[len(renderer.render_text([USER], tools=tools, add_generation_prompt=True)) :]
    completion = renderer.encoder.encode(text[: text.index("<|im_end|>") + len("<|im_end|>")])
    parsed = renderer.parse_response(completion, tools=tools, prompt_ids=prompt)
    assert [(call.name, call.arguments, call.status) for call in parsed.tool_calls] == [("run", arguments, "ok"), ("noop", {}, "ok")]
    assert parsed.content in ("", None)


# OLMo-3 / Llama-4 (pythonic) style: Python calls, but a string argument is written between quotes
# as it is ("'" + value + "'", or '"%s"' | format(value)): `C:\\new` would read back as a newline and
# a value holding the quote (`print('hi')`) cannot be told from its end, so no parse is exact.
UNESCAPED_STRINGS = {
    "single-quoted": "{{ \"'\" + v + \"'\" }}",
    "format-double-quoted": "{{ '\"' + ('%s' | format(v)) + '\"' }}",
}


@pytest.mark.parametrize("name", list(UNESCAPED_STRINGS))
def test_python_calls_with_unescaped_strings_leave_the_call_syntax_unlearned(tmp_path, name):
    value = UNESCAPED_STRINGS[name]
    template = PYTHON_CALLS.replace("{{ value(v) }}", f"{{% if v is string %}}{value}{{% else %}}{{{{ v | tojson }}}}{{% endif %}}")
    renderer_class, _ = compile_inline(tmp_path, name.replace("-", "_"), template)
    assert renderer_class.TOOL_CALLS is None and renderer_class.TURN is not None
    assert "quotes without escaping them" in renderer_class.UNLEARNED["tool_calls"]


# Two ways of writing keyword arguments with no exact parse, so the call syntax stays unlearned:
# Llama-3.2's pythonic template writes bare values ('%s' | format(v): `q=a, b=c` is also q='a, b=c',
# and n=3 is n='3'); Gemma-3's sets `first = false` inside the loop, which Jinja forgets at each
# iteration, so no comma is ever written (`n=1e5x=2` is n=1e5, x=2 and n=1, e5x=2).
PYTHON_ARGUMENTS = "{% for k, v in c.function.arguments.items() %}{{ k }}={{ value(v) }}{% if not loop.last %}, {% endif %}{% endfor %}"
NO_EXACT_PARSE = {
    "bare-values": (PYTHON_ARGUMENTS.replace("{{ value(v) }}", "{{ '%s' | format(v) }}"), "with bare values"),
    "nothing-between-arguments": (
        "{% set first = true %}{% for k, v in c.function.arguments.items() %}{% if not first %}, {% endif %}"
        "{{ k }}={{ v | tojson }}{% set first = false %}{% endfor %}",
        "with nothing between them",
    ),
}


@pytest.mark.parametrize("name", list(NO_EXACT_PARSE))
def test_keyword_arguments_without_an_exact_parse_leave_the_call_syntax_unlearned(tmp_path, name):
    arguments, reason = NO_EXACT_PARSE[name]
    template = PYTHON_CALLS.replace(PYTHON_ARGUMENTS, arguments)
    assert template != PYTHON_CALLS
    renderer_class, _ = compile_inline(tmp_path, name.replace("-", "_"), template)
    assert renderer_class.TOOL_CALLS is None and renderer_class.TURN is not None
    assert reason in renderer_class.UNLEARNED["tool_calls"] and "where a value ends is not in the text" in renderer_class.UNLEARNED["tool_calls"]


# Muse Glimmer style: the call's name is written twice, as the channel's recipient and in the
# invoke element, so no fixed text separates the name from the arguments.
NAME_TWICE = (
    "{% for m in messages %}{% if m.role == 'assistant' and m.tool_calls %}"
    "{% for c in m.tool_calls %}<|start|>assistant to={{ c.function.name }}<|message|><invoke name=\"{{ c.function.name }}\">"
    "{% for k, v in c.function.arguments.items() %}<p name=\"{{ k }}\">{{ v }}</p>{% endfor %}</invoke><|eot|>{% endfor %}"
    "{% else %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|eot|>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)


def test_a_name_written_twice_leaves_the_call_syntax_unlearned(tmp_path):
    renderer_class, _ = compile_inline(tmp_path, "name_twice", NAME_TWICE)
    assert renderer_class.TOOL_CALLS is None and renderer_class.TURN is not None
    assert "writes a call's name where a delimiter should be" in renderer_class.UNLEARNED["tool_calls"]


# Llama Guard style: the template loops over the messages, but transcribes them ("Agent: ...")
# inside one user turn that asks for a verdict; the generation prompt opens that verdict, which is
# unlike any assistant message's text.
TRANSCRIBES_CONVERSATION = (
    "<|start|>user<|sep|>Check this conversation.\n\n{% for m in messages %}"
    "{{ ('User: ' if m.role == 'user' else 'Agent: ') + m.content }}\n\n{% endfor %}"
    "Is the last message safe?<|eot|><|start|>assistant<|sep|>"
)


def test_an_assistant_message_transcribed_into_a_user_turn_is_not_learned_as_a_turn(tmp_path):
    renderer_class, _ = compile_inline(tmp_path, "transcribes", TRANSCRIBES_CONVERSATION)
    assert renderer_class.TURN is None
    assert "unlike the turn its generation prompt opens" in renderer_class.UNLEARNED["turn"]


# QwQ style: the template has no reasoning field; the generation prompt opens `<think>` and the
# template cuts a history turn's content up to `</think>` (the last turn is written as given).
REASONING_CUT_FROM_CONTENT = (
    "{% for m in messages %}{% if m.role == 'user' %}<|u|>{{ m.content }}<|end|>\n"
    "{% elif m.role == 'assistant' %}{% set content = m.content %}"
    "{% if not loop.last %}{% set content = m.content.split('</think>')[-1].lstrip('\\n') %}{% endif %}"
    "<|a|>{{ content }}<|end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|a|><think>\n{% endif %}"
)
# Nemotron-Nano style: the same cut, but the template writes the prefilled `<think>\n` before every
# answer, so it reads what follows the tag as content, not as reasoning.
PREFILLED_TAG_BEFORE_EVERY_ANSWER = (
    "{% for m in messages %}{% if m.role == 'user' %}<|u|>{{ m.content }}<|end|>\n"
    "{% elif m.role == 'assistant' %}<|a|><think>\n{{ m.content.split('</think>')[-1] }}<|end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|a|><think>\n{% endif %}"
)


def test_reasoning_the_template_cuts_out_of_the_content_is_parsed_and_kept_by_the_bridge(tmp_path):
    renderer_class, compiled = compile_inline(tmp_path, "cut", REASONING_CUT_FROM_CONTENT)
    reasoning = renderer_class.REASONING
    assert reasoning is not None, renderer_class.__doc__
    assert (reasoning.open, reasoning.close, reasoning.after_open, reasoning.after_close, reasoning.in_content) == (
        "<think>", "</think>", "\n", "\n\n", True
    )
    verbatim = renderer_class(compiled.check_tokenizer, special_tokens=compiled.placeholders, thinking_retention="verbatim")
    prompt = verbatim.render_ids([USER], add_generation_prompt=True)
    completion = verbatim.encoder.encode("Add them.\n</think>\n\nFour.<|end|>")
    parsed = verbatim.parse_response(completion, prompt_ids=prompt)
    assert (parsed.reasoning_content, parsed.content, parsed.reasoning_complete) == ("Add them.\n", "Four.", True)
    unfinished = verbatim.parse_response(verbatim.encoder.encode("Still adding"), prompt_ids=prompt)
    assert (unfinished.reasoning_content, unfinished.content, unfinished.reasoning_complete) == ("Still adding", "", False)
    unopened = verbatim.render_ids([USER])  # a prompt that does not open the block: the model may skip `<think>`
    parsed = verbatim.parse_response(completion, prompt_ids=unopened)
    assert (parsed.reasoning_content, parsed.content) == ("Add them.\n", "Four.")
    plain = verbatim.parse_response(verbatim.encoder.encode("Four.<|end|>"), prompt_ids=unopened)
    assert (plain.reasoning_content, plain.content, plain.reasoning_complete) == (None, "Four.", True)

    # the template rewrites the sampled turn in history: "verbatim" keeps it and renders what follows
    full = verbatim.render_text([USER, {"role": "assistant", "content": "Four."}, NEXT_USER], add_generation_prompt=True)
    after_turn = full[full.index("Four.<|end|>") + len("Four.<|end|>") :]
    bridged = verbatim.bridge_to_next_turn(prompt, completion, [NEXT_USER])
    assert bridged is not None and bridged.token_ids == prompt + completion + verbatim.encoder.encode(after_turn)
    truncated = verbatim.encoder.encode("Still adding")  # the close is restored, the text kept as sampled
    bridged = verbatim.bridge_to_next_turn(prompt, truncated, [NEXT_USER])
    assert bridged is not None and bridged.token_ids == prompt + verbatim.encoder.encode("Still adding<|end|>" + after_turn)
    template = structural_renderer(renderer_class, compiled)
    assert template.bridge_to_next_turn(prompt, completion, [NEXT_USER]) is None  # the template rewrites history


def test_a_prefilled_tag_the_template_writes_before_every_answer_is_no_reasoning_block(tmp_path):
    renderer_class, _ = compile_inline(tmp_path, "tag_before_answers", PREFILLED_TAG_BEFORE_EVERY_ANSWER)
    assert renderer_class.REASONING is None, renderer_class.__doc__


# Functionary-v3.2 style: the generation prompt ends with the call start `>>>`; the model writes
# `all\n` and its answer, or a function's name, a newline and the JSON arguments (more calls each
# after another `>>>`). A turn that does not start with the answer's lead starts inside a call.
CALL_START_IN_PROMPT = (
    "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
    "{% if m.role == 'assistant' %}{% if m.content %}{{ '>>>all\\n' + m.content }}{% endif %}"
    "{% for c in m.tool_calls or [] %}{{ '>>>' + c.function.name + '\\n' + c.function.arguments }}{% endfor %}"
    "{% else %}{{ m.content }}{% endif %}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n>>>{% endif %}"
)


def test_a_call_start_the_generation_prompt_ends_with_is_learned_and_parsed(tmp_path):
    renderer_class, renderer, syntax = learned_calls(tmp_path, "call_start_in_prompt", CALL_START_IN_PROMPT)
    assert (syntax.call_start, syntax.name_end, syntax.prefilled_start) == (">>>", "\n", True)
    arguments = {"city": "Paris >>>all", "n": 3}
    for turn in (
        tool_calling_turn("", ("get_weather", arguments)),
        tool_calling_turn("Let me look.", ("get_weather", arguments), ("noop", {})),
        tool_calling_turn("", ("get_weather", arguments), ("noop", {})),
    ):
        turn["tool_calls"] = [
            {**call, "function": {**call["function"], "arguments": json.dumps(call["function"]["arguments"])}}
            for call in turn["tool_calls"]
        ]
        _, _, parsed, calls = calls_read_back(renderer, turn)
        assert [(name, arguments, status) for name, arguments, status in calls] == [
            (call["function"]["name"], json.loads(call["function"]["arguments"]), "ok") for call in turn["tool_calls"]
        ]
        assert (parsed.content or "") == turn["content"]
    prompt, completion = sampled(renderer, [USER], {"role": "assistant", "content": "Hi there"})
    parsed = renderer.parse_response(completion, prompt_ids=prompt)
    assert (parsed.content, parsed.tool_calls) == ("Hi there", [])


# A Mistral-v0.3 variant: each call's id comes first in its JSON object, inside the call start.
CALL_ID_IN_CALL_START = (
    "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}[INST] {{ m.content }}[/INST]"
    "{% elif m.role == 'assistant' and m.tool_calls %}[TOOL_CALLS] ["
    '{% for c in m.tool_calls %}{{ \'{"id": "\' + c.id + \'", "name": "\' + c.function.name + \'", "arguments": \' }}'
    "{{ c.function.arguments | tojson }}}{% if not loop.last %}, {% else %}]{{ eos_token }}{% endif %}{% endfor %}"
    "{% elif m.role == 'assistant' %} {{ m.content }}{{ eos_token }}"
    "{% elif m.role == 'tool' %}[TOOL_RESULTS] {{ m.content }} {{ m.tool_call_id }}[/TOOL_RESULTS]{% endif %}{% endfor %}"
)


def test_a_call_id_written_inside_the_call_start_is_learned_and_parsed(tmp_path):
    _, renderer, syntax = learned_calls(tmp_path, "call_id_in_start", CALL_ID_IN_CALL_START)
    assert (syntax.call_start, syntax.call_id_after, syntax.call_id_end, syntax.name_end) == (
        '{"id": "',
        "call_start",
        '", "name": "',
        '", "arguments": ',
    )
    arguments = {"city": 'Paris "x", "id": "y"', "n": 3}
    turn = tool_calling_turn("", ("get_weather", arguments), ("noop", {}))
    for number, call in enumerate(turn["tool_calls"]):
        call["id"] = f"abcdefgh{number}"
    prompt, completion, parsed, calls = calls_read_back(renderer, turn)
    assert calls == [("get_weather", arguments, "ok"), ("noop", {}, "ok")]
    assert [call.id for call in parsed.tool_calls] == ["abcdefgh0", "abcdefgh1"]


# Idefics style: content is read only as OpenAI content parts (`for line in message['content']`).
CONTENT_PARTS_ONLY = (
    "{% for m in messages %}{{ m.role.capitalize() }}:{% for line in m.content %}{% if line.type == 'text' %}"
    " {{ line.text }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)


def test_a_template_that_reads_content_parts_only_is_probed_with_parts(tmp_path):
    renderer_class, compiled = compile_inline(tmp_path, "content_parts_only", CONTENT_PARTS_ONLY)
    assert renderer_class.CONTENT_FORMAT == "parts" and not renderer_class.UNLEARNED, renderer_class.UNLEARNED
    assert renderer_class.TURN.close == "<end_of_utterance>"
    renderer = structural_renderer(renderer_class, compiled)
    answer = {"role": "assistant", "content": [{"type": "text", "text": "Fine."}]}
    prompt, completion = sampled(renderer, [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}], answer)
    assert renderer.parse_response(completion, prompt_ids=prompt).content.strip() == "Fine."


# Reka-Edge style: the whole text is built in a variable and written once, so no message has a
# part of its own; the assistant message still continues the generation prompt, as a turn.
BUILT_IN_A_VARIABLE = (
    "{% set ns = namespace(out='') %}{% for m in messages %}"
    "{% if m.role == 'user' %}{% set ns.out = ns.out ~ 'human: ' ~ m.content ~ '<sep>' %}"
    "{% elif m.role == 'assistant' %}{% set ns.out = ns.out ~ 'assistant: ' ~ m.content ~ '\\n\\n<sep>' %}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{% set ns.out = ns.out ~ 'assistant:' %}{% endif %}{{ ns.out }}"
)


def test_a_text_built_in_a_variable_still_learns_its_turn(tmp_path):
    renderer_class, compiled = compile_inline(tmp_path, "built_in_a_variable", BUILT_IN_A_VARIABLE)
    assert not renderer_class.UNLEARNED, renderer_class.UNLEARNED
    assert renderer_class.TURN.close == "\n\n<sep>" and renderer_class.TURN.stop_tokens[0] == "<sep>"
    renderer = renderer_class(compiled.check_tokenizer, special_tokens=compiled.placeholders)
    history, new = [{"role": "user", "content": "Hi"}], [{"role": "user", "content": "ok"}]
    prompt = renderer.render_ids(history, add_generation_prompt=True)
    full = renderer.render_ids(history + [{"role": "assistant", "content": "Fine."}] + new, add_generation_prompt=True)
    completion = full[len(prompt) : full.index(renderer.get_stop_token_ids()[0], len(prompt)) + 1]
    assert renderer.parse_response(completion).content == "Fine."
    bridged = renderer.bridge_to_next_turn(prompt, completion, new)
    assert bridged is not None and list(bridged.token_ids) == full


# Gemma-4 community style: with thinking off the generation prompt closes an empty thought channel
# (`<|channel>thought\n<channel|>`); a reasoned turn opens the channel with a marker and a word.
CLOSED_EMPTY_THOUGHT_CHANNEL = (
    "{% for m in messages %}{% if m.role == 'user' %}<|turn>user\n{{ m.content }}<turn|>\n"
    "{% elif m.role == 'assistant' %}<|turn>model\n{% if m.reasoning_content %}"
    "<|channel>thought\n{{ m.reasoning_content }}\n<channel|>{% endif %}{{ m.content }}<turn|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|turn>model\n{% if not enable_thinking %}<|channel>thought\n<channel|>{% endif %}{% endif %}"
)


def test_a_prompt_closing_an_empty_channel_learns_the_channel_open_with_its_word(tmp_path):
    renderer_class, _ = compile_inline(tmp_path, "closed_empty_channel", CLOSED_EMPTY_THOUGHT_CHANNEL)
    assert (renderer_class.REASONING.open, renderer_class.REASONING.after_open) == ("<|channel>thought", "\n")
    assert renderer_class.REASONING.close == "<channel|>" and not renderer_class.UNLEARNED, renderer_class.UNLEARNED
