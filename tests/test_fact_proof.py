"""Every learned fact is proven before a class is written (compiler.fact_proof, compiler.bridge_proof).

The stops and the parse are used as an engine uses them on the template's own renders of sampled
turns, and the bridge is run on the verified conversations; a fact that fails is shipped as
UNLEARNED (with a warning), never as learned. The two cases measured by hand are here: a
whitespace edit of Qwen3's generation prompt, and a revision of the gpt-oss template.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from compiler.cli import main
from compiler.pipeline import (
    compile_source,
    generate,
    load_generated_file,
    load_renderer_class,
    prove_class_facts,
    with_facts,
)
from compiler.source import resolve_source
from tests.families import corpus_path


def compile_file(tmp_path: Path, name: str, template: str):
    """Compile ``template`` with no tokenizer (as ``generate --template FILE`` does): (class, compiled)."""
    path = tmp_path / f"{name}.jinja"
    path.write_text(template, encoding="utf-8")
    compiled = compile_source(resolve_source(f"test/{name}", template=path, allow_hub=False))
    renderer_class = load_renderer_class(compiled.code, compiled.spec.module, compiled.spec.class_name)
    return renderer_class, compiled


def generate_file(tmp_path: Path, name: str, template: str, cases: int = 30):
    """``generate`` ``template`` with no tokenizer into ``tmp_path``: (report, compiled)."""
    path = tmp_path / f"{name}.jinja"
    path.write_text(template, encoding="utf-8")
    _, report, compiled = generate(
        resolve_source(f"test/{name}", template=path, allow_hub=False), tmp_path, cases=cases, seed=0
    )
    return report, compiled


def renderer_of(renderer_class, compiled):
    return renderer_class(compiled.check_tokenizer, special_tokens=compiled.placeholders)


# --- (a) Qwen3 with `{{-` changed to `{{` on the generation-prompt line -------------------------


def qwen3_spaced_prompt() -> str:
    source = corpus_path("templates", "Qwen__Qwen3-8B.jinja").read_text(encoding="utf-8")
    edited = source.replace("    {{- '<|im_start|>assistant\\n' }}", "    {{ '<|im_start|>assistant\\n' }}")
    assert edited != source
    return edited


def test_a_spaced_generation_prompt_learns_the_think_tag(tmp_path):
    renderer_class, compiled = compile_file(tmp_path, "qwen3_spaced", qwen3_spaced_prompt())
    assert compiled.turn.generation_prompt.startswith("    <|im_start|>assistant")  # the edit shows in the prompt
    assert renderer_class.REASONING.open == "<think>", renderer_class.REASONING
    assert not renderer_class.UNLEARNED and compiled.turn.warning() is None
    renderer = renderer_of(renderer_class, compiled)
    parsed = renderer.parse_response(renderer.encoder.encode("<think>\nabc\n</think>\n\nhello<|im_end|>"))
    assert (parsed.status, parsed.reasoning_content, parsed.content) == ("ok", "abc", "hello")


def test_the_proof_refuses_the_header_as_the_reasoning_open(tmp_path):
    """The fact measured wrong (``'<|im_start|>assistant\\n<think>'``) does not survive its proof."""
    renderer_class, compiled = compile_file(tmp_path, "qwen3_spaced", qwen3_spaced_prompt())
    wrong = dataclasses.replace(renderer_class.REASONING, open="<|im_start|>assistant\n<think>")
    turn = dataclasses.replace(compiled.turn, reasoning=wrong)
    proof = prove_class_facts(with_facts(renderer_class, turn), compiled)
    assert "reasoning" in proof.failed, proof.summary()
    assert proof.exact < proof.checked


# --- (b) gpt-oss revised: assistant turns end with <|end|>, history turns keep their analysis ------


def gpt_oss_revision() -> str:
    source = corpus_path("templates", "openai__gpt-oss-20b.jinja").read_text(encoding="utf-8")
    start = source.index("        {%- elif loop.last and not add_generation_prompt %}")
    end = source.index("    {%- elif message.role == 'tool' -%}")
    every_turn = (
        "        {%- else %}\n"
        '            {%- if "thinking" in message %}\n'
        '                {{- "<|start|>assistant<|channel|>analysis<|message|>" + message.thinking + "<|end|>" }}\n'
        "            {%- endif %}\n"
        '            {{- "<|start|>assistant<|channel|>final<|message|>" + message.content + "<|end|>" }}\n'
        "            {%- set last_tool_call.name = none %}\n"
        "        {%- endif %}\n"
    )
    return source[:start] + every_turn + source[end:]


def test_gpt_oss_revision_does_not_stop_after_the_analysis(tmp_path):
    renderer_class, compiled = compile_file(tmp_path, "gpt_oss_end", gpt_oss_revision())
    renderer = renderer_of(renderer_class, compiled)
    completion = "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>hi<|end|>"
    parsed = renderer.parse_response(renderer.encoder.encode(completion))
    if renderer_class.UNLEARNED:  # the turn is marked unlearned, with a warning saying why
        assert "turn" in renderer_class.UNLEARNED and "<|end|>" in renderer_class.UNLEARNED["turn"]
        assert "could not learn turn" in compiled.turn.warning()
        assert parsed.status == "unlearned"
    else:  # or its stops let the turn run past its analysis message
        assert (parsed.status, parsed.content, parsed.reasoning_content) == ("ok", "hi", "think")


def test_generate_warns_about_a_fact_it_could_not_prove(tmp_path, capsys):
    path = tmp_path / "gpt_oss_end.jinja"
    path.write_text(gpt_oss_revision(), encoding="utf-8")
    out = tmp_path / "out"
    code = main(["generate", "--model", "test/gpt_oss_end", "--template", str(path), "--out", str(out), "--cases", "5"])
    assert code == 0
    captured = capsys.readouterr()
    assert "warning:" in captured.err and "proof failed" in captured.err
    assert "turn" in load_generated_file(out / "gpt_oss_end.py").UNLEARNED


# --- stops ------------------------------------------------------------------------------------

#: Llama-3.1 style: with a knob set, a tool-calling turn ends with another token.
KNOB_CLOSE = (
    "{% for m in messages %}<|start|>{{ m.role }}\n"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}<call>{{ c.function | tojson }}</call>{% endfor %}"
    "{% if builtin_tools is defined %}<|eom|>{% else %}<|eot|>{% endif %}"
    "{% else %}{{ m.content }}<|eot|>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant\n{% endif %}"
)


def test_a_knob_that_closes_tool_calls_otherwise_adds_its_stop(tmp_path):
    renderer_class, compiled = compile_file(tmp_path, "knob_close", KNOB_CLOSE)
    assert "<|eom|>" in renderer_class.TURN.stop_tokens, renderer_class.TURN
    assert not renderer_class.UNLEARNED


#: ChatGLM style: nothing closes a turn, and the next header carries a round counter.
ROUND_HEADER = (
    "{% for m in messages %}{% if m.role == 'user' %}[Round {{ loop.index0 // 2 + 1 }}]\n问：{{ m.content }}\n\n"
    "{% elif m.role == 'assistant' %}答：{{ m.content }}\n\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}答：{% endif %}"
)


def test_a_header_with_a_counter_stops_on_its_steady_part(tmp_path):
    renderer_class, compiled = compile_file(tmp_path, "round_header", ROUND_HEADER)
    assert renderer_class.TURN.stop_tokens == ("[Round",), renderer_class.TURN
    assert not renderer_class.UNLEARNED
    renderer = renderer_of(renderer_class, compiled)
    parsed = renderer.parse_response(renderer.encoder.encode("Fine.\n\n[Round 2]\n问：next"))
    assert (parsed.status, parsed.content) == ("ok", "Fine.")


def test_a_stop_taken_from_a_variable_is_unlearned(tmp_path):
    """A stop that holds the counter (what the probes learned before the header was cut to its
    steady part) is refused by the proof: at the next round the template writes another text."""
    renderer_class, compiled = compile_file(tmp_path, "round_header", ROUND_HEADER)
    counted = dataclasses.replace(compiled.turn.turn, stop_tokens=("[Round 2]\n问：",))
    proof = prove_class_facts(with_facts(renderer_class, dataclasses.replace(compiled.turn, turn=counted)), compiled)
    assert "turn" in proof.failed and "a round later" in proof.failed["turn"], proof.summary()


#: Vicuna style: nothing closes a turn; the next `USER:` header is a stop of several tokens.
USER_HEADER = (
    "{% for m in messages %}{% if m.role == 'user' %}USER: {{ m.content }}\n"
    "{% elif m.role == 'assistant' %}ASSISTANT: {{ m.content }}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)


def test_turns_ended_by_a_text_header_bridge(tmp_path):
    """The bridge proof samples a turn up to the token that completes a stop string (no stop id)."""
    report, compiled = generate_file(tmp_path, "user_header", USER_HEADER, cases=20)
    assert compiled.turn.turn.stop_tokens == ("USER:",)
    assert report.facts.checked > 0 and not report.facts.failed, report.summary()
    assert report.bridge["points"] > 0 and report.bridge["exact"] > 0, report.summary()
    assert report.bridge["wrong"] == 0 and report.bridge["miss"] == 0, report.bridge_examples


def test_verify_reports_read_back_and_bridge_counts(capsys):
    code = main(["verify", "--model", "zai-org/GLM-4.6", "--corpus", str(corpus_path()), "--cases", "5"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "read-back: " in out and "bridge: " in out and " 0 wrong" in out


# --- a bridge that needs what the parse cannot give -------------------------------------------

#: Gemma-4 style: a tool result names its tool by finding, through its tool_call_id, the call it
#: answers; the calls themselves are written without their ids.
NAME_BY_CALL_ID = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'user' -%}<|turn>user\n{{ m.content }}<turn|>\n"
    "{% elif m.role == 'assistant' -%}<|turn>model\n{% if m.tool_calls %}{% for c in m.tool_calls %}"
    "<|tool_call>call:{{ c.function.name }}{{ c.function.arguments | tojson }}<tool_call|>{% endfor %}"
    "{% else %}{{ m.content }}{% endif %}<turn|>\n"
    "{% elif m.role == 'tool' -%}{%- set ns = namespace(name='unknown') -%}"
    "{%- for prev in messages -%}{%- for c in prev.tool_calls or [] -%}{%- if c.id == m.tool_call_id -%}"
    "{%- set ns.name = c.function.name -%}{%- endif -%}{%- endfor -%}{%- endfor -%}"
    "<|turn>tool\n<|tool_response>response:{{ ns.name }}{{ m.content | tojson }}<tool_response|><turn|>\n"
    "{% endif -%}{%- endfor -%}{%- if add_generation_prompt %}<|turn>model\n{% endif -%}"
)


def test_a_bridge_that_needs_the_call_ids_returns_none(tmp_path):
    renderer_class, compiled = compile_file(tmp_path, "name_by_call_id", NAME_BY_CALL_ID)
    renderer = renderer_of(renderer_class, compiled)
    history = [{"role": "user", "content": "Weather?"}]
    call = {"id": "call00001x", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    turn = {"role": "assistant", "content": "", "tool_calls": [call]}
    result = [{"role": "tool", "tool_call_id": "call00001x", "content": "sunny"}]
    prompt = renderer.render_ids(history, add_generation_prompt=True)
    full = renderer.render_ids(history + [turn] + result, add_generation_prompt=True)
    completion = full[len(prompt) : len(prompt) + full[len(prompt) :].index(renderer.get_stop_token_ids()[0]) + 1]
    assert "response:get_weather" in renderer.decode(full)
    assert renderer.bridge_to_next_turn(prompt, completion, result, messages=history) is None  # never response:unknown


def test_only_a_template_that_names_call_ids_pays_the_second_render(tmp_path):
    """The bridge renders again with other call ids only where the template can read one."""
    from rllm_renderers.bridging.bridge import template_reads_call_ids

    reads, _ = compile_file(tmp_path, "name_by_call_id", NAME_BY_CALL_ID)
    ignores, _ = compile_file(tmp_path, "name_by_position", NAME_BY_CALL_ID.replace("c.id == m.tool_call_id", "loop.first"))
    assert template_reads_call_ids(reads) and not template_reads_call_ids(ignores)


def test_generate_proves_the_bridge_of_a_template_that_finds_names_by_call_id(tmp_path):
    report, _ = generate_file(tmp_path, "name_by_call_id", NAME_BY_CALL_ID, cases=30)
    assert report.bridge["points"] > 0 and report.bridge["exact"] > 0, report.summary()
    assert report.bridge["wrong"] == 0 and report.bridge["miss"] == 0, report.bridge_examples


# --- stops that open the next message, and closes followed by a role header --------------------

#: Community Gemma-4 style: a tool-calling turn has no close; the model's stop is the tool reply's
#: opener, which the template writes as the start of the tool message.
STOP_OPENS_TOOL_REPLY = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'user' -%}<start_of_turn>user\n{{ m.content }}<end_of_turn>\n"
    "{% elif m.role == 'assistant' -%}<start_of_turn>model\n{% if m.tool_calls %}{% for c in m.tool_calls %}"
    "<|tool_call>call:{{ c.function.name }}{{ c.function.arguments | tojson }}<tool_call|>{% endfor %}"
    "{% else %}{{ m.content }}<end_of_turn>\n{% endif %}"
    "{%- elif m.role == 'tool' -%}<|tool_response>response:{{ m.content | tojson }}<tool_response|>"
    "{%- endif -%}{%- endfor -%}{%- if add_generation_prompt %}<start_of_turn>model\n{% endif -%}"
)


def test_a_stop_that_opens_the_tool_reply(tmp_path):
    """Not `<tool_call|>`, which ends every call of a parallel turn, but the reply's opener; and the
    bridge goes on after it without writing it twice."""
    report, compiled = generate_file(tmp_path, "stop_opens_reply", STOP_OPENS_TOOL_REPLY, cases=30)
    assert compiled.turn.turn.stop_tokens == ("<end_of_turn>", "<|tool_response>"), compiled.turn.turn
    assert not compiled.turn.unlearned, compiled.turn.unlearned
    assert report.facts.checked > 0 and not report.facts.failed, report.summary()
    assert report.bridge["exact"] > 0 and report.bridge["miss"] == 0 and report.bridge["wrong"] == 0, report.summary()


#: Ling-3.0 style: every turn, tool-calling ones too, ends with `<|role_end|>`, and a tool result
#: follows under its own role header.
ROLE_END_THEN_OBSERVATION = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'user' -%}<role>HUMAN</role>{{ m.content }}<|role_end|>"
    "{%- elif m.role == 'assistant' -%}<role>ASSISTANT</role>{% if m.tool_calls %}{% for c in m.tool_calls %}"
    '<tool_call>{{ {"name": c.function.name, "arguments": c.function.arguments} | tojson }}</tool_call>'
    "{% endfor %}{% else %}{{ m.content }}{% endif %}<|role_end|>"
    "{%- elif m.role == 'tool' -%}<role>OBSERVATION</role>{{ m.content }}<|role_end|>"
    "{%- endif -%}{%- endfor -%}{%- if add_generation_prompt %}<role>ASSISTANT</role>{% endif -%}"
)


def test_tool_turns_closed_by_role_end_then_an_observation(tmp_path):
    report, compiled = generate_file(tmp_path, "role_end", ROLE_END_THEN_OBSERVATION, cases=30)
    assert compiled.turn.turn.stop_tokens == ("<|role_end|>",) and not compiled.turn.unlearned
    assert report.facts.checked > 0 and not report.facts.failed, report.summary()
    assert report.bridge["exact"] > 0 and report.bridge["miss"] == 0 and report.bridge["wrong"] == 0, report.summary()


def assert_proven(report, compiled, *, bridged: bool = False, bridge: bool = True) -> None:
    """Every fact learned and proven; the bridge never wrong (``bridged``: and exact somewhere, no miss)."""
    assert not compiled.turn.unlearned, compiled.turn.unlearned
    assert report.facts.checked > 0 and not report.facts.failed, report.summary()
    if bridge:
        assert report.bridge["wrong"] == 0, report.bridge_examples
    if bridged:
        assert report.bridge["exact"] > 0 and report.bridge["miss"] == 0, report.summary()


# --- a template that writes content only from OpenAI content parts ---------------------------

#: Idefics style: every message's content is read as a list of parts; a string's is not written.
PARTS_ONLY = (
    "{% for m in messages %}{{ m.role.capitalize() }}:{% for part in m.content %}"
    "{% if part.type == 'text' %} {{ part.text }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)


def parts(text: str) -> list[dict]:
    return [{"type": "text", "text": text}]


def test_the_bridge_rebuilds_a_parts_only_turn_as_content_parts(tmp_path):
    """The parsed answer goes back to the template as one text part: as a string it would write
    nothing of it, and the bridge could only return None."""
    renderer_class, compiled = compile_file(tmp_path, "parts_only", PARTS_ONLY)
    assert renderer_class.CONTENT_FORMAT == "parts" and renderer_class.TURN.content_parts
    assert not renderer_class.UNLEARNED, renderer_class.UNLEARNED
    for retention in ("template", "verbatim"):
        renderer = renderer_class(compiled.check_tokenizer, special_tokens=compiled.placeholders, thinking_retention=retention)
        history = [{"role": "user", "content": parts("What is up?")}]
        turn, new = {"role": "assistant", "content": parts("Fine, thanks.")}, [{"role": "user", "content": parts("ok")}]
        prompt = renderer.render_ids(history, add_generation_prompt=True)
        full = renderer.render_ids(history + [turn] + new, add_generation_prompt=True)
        stop = renderer.get_stop_token_ids()[0]
        completion = full[len(prompt) : full.index(stop, len(prompt)) + 1]
        assert renderer.parse_response(completion).content == "Fine, thanks."
        bridged = renderer.bridge_to_next_turn(prompt, completion, new, messages=history)
        assert bridged is not None and list(bridged.token_ids) == full, retention
        recalled = renderer.bridge_to_next_turn(prompt, completion, new)
        assert recalled is not None and list(recalled.token_ids) == full, retention


def test_a_template_that_also_writes_string_content_keeps_strings(tmp_path):
    """Qwen2-VL style (a string, or a loop over parts): the parse is given back as a string."""
    either = PARTS_ONLY.replace(
        "{% for part in m.content %}", "{% if m.content is string %} {{ m.content }}{% else %}{% for part in m.content %}"
    ).replace("{% endfor %}<end_of_utterance>", "{% endfor %}{% endif %}<end_of_utterance>")
    renderer_class, _ = compile_file(tmp_path, "parts_or_string", either)
    assert renderer_class.CONTENT_FORMAT == "parts" and not renderer_class.TURN.content_parts


# --- a turn that writes the next message's header ---------------------------------------------

#: GLM-4-MoE training-variant style: the header of the message after an assistant turn
#: (`<|user|>` or `<|observation|>`) is written inside the turn, not by that message; the text is
#: the one of a template whose next header ends the turn.
NEXT_HEADER_IN_TURN = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'user' -%}{{ '<|user|>' if loop.first or messages[loop.index0 - 1].role != 'assistant' }}"
    "\n{{ m.content }}"
    "{%- elif m.role == 'assistant' -%}<|assistant|>\n{{ m.content }}{% for c in m.tool_calls or [] %}"
    "<tool_call>{{ c.function.name }}{{ c.function.arguments | tojson }}</tool_call>{% endfor %}"
    "{%- if not loop.last %}{{ '<|user|>' if messages[loop.index0 + 1].role == 'user' else '<|observation|>' }}"
    "{%- endif -%}"
    "{%- elif m.role == 'tool' -%}{{ '<|observation|>' if messages[loop.index0 - 1].role != 'assistant' }}"
    "\n{{ m.content }}"
    "{%- endif -%}{%- endfor -%}{%- if add_generation_prompt %}<|assistant|>{% endif -%}"
)


def test_a_next_header_written_inside_the_turn_is_a_stop_not_a_close(tmp_path):
    """What the turn writes only when a message follows, and otherwise for a tool result than for a
    user message, is that message's header: nothing closes the turn, the headers are its stops."""
    report, compiled = generate_file(tmp_path, "next_header_in_turn", NEXT_HEADER_IN_TURN, cases=30)
    assert compiled.turn.turn.close == "" and compiled.turn.turn.stop_tokens == ("<|user|>", "<|observation|>")
    assert_proven(report, compiled, bridged=True)


#: Cohere2 style: the answer's close marker, then the turn's own end marker, both in the turn.
CLOSE_THEN_TURN_END = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'user' -%}<|START_TURN|><|USER|>{{ m.content }}<|END_TURN|>"
    "{%- elif m.role == 'assistant' -%}<|START_TURN|><|BOT|><|START_TEXT|>{{ m.content }}<|END_TEXT|><|END_TURN|>"
    "{%- endif -%}{%- endfor -%}{%- if add_generation_prompt %}<|START_TURN|><|BOT|>{% endif -%}"
)


def test_a_stop_followed_by_what_the_template_writes_after_the_close(tmp_path):
    """The stop at the close is proven: what follows it in the turn is the learned after_close,
    which the bridge writes itself."""
    report, compiled = generate_file(tmp_path, "close_then_turn_end", CLOSE_THEN_TURN_END, cases=20)
    assert (compiled.turn.turn.close, compiled.turn.turn.after_close) == ("<|END_TEXT|>", "<|END_TURN|>")
    assert_proven(report, compiled, bridged=True)


#: llama.cpp's QwQ style: the template cuts reasoning out of history turns; with thinking off the
#: generation prompt opens and closes an empty block, so the model samples no reasoning.
CUT_REASONING_PROMPT_CLOSES_IT = (
    "{%- for m in messages %}{% if m.role == 'user' %}<|im_start|>user\n{{ m.content }}<|im_end|>\n"
    "{% elif m.role == 'assistant' %}{% set content = m.content.split('</think>')[-1].lstrip('\\n') %}"
    "<|im_start|>assistant\n{{ content }}{% for c in m.tool_calls or [] %}<tool_call>\n{{ c.function | tojson }}\n</tool_call>"
    "{% endfor %}<|im_end|>\n{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n"
    "</tool_response><|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% if not enable_thinking %}</think>{% endif %}{% endif %}"
)


def test_a_prompt_that_closes_the_reasoning_block_samples_none(tmp_path):
    """With thinking off no reasoning block is sampled: the proof does not make one up (it read a
    call back cut inside its start marker, the prompt's `<t` taken for the turn's)."""
    report, compiled = generate_file(tmp_path, "cut_reasoning_closed", CUT_REASONING_PROMPT_CLOSES_IT, cases=20)
    assert compiled.turn.reasoning is not None and compiled.turn.reasoning.in_content
    assert_proven(report, compiled)


#: DeepSeek-V3.1 style: a turn in history is written `</think>` + content (the reasoning cut out of
#: it); with thinking on the generation prompt opens `<think>`, so the model samples reasoning and
#: then the turn, whose own `</think>` closes the block.
TURN_WRITES_THE_CLOSE = (
    "{%- for m in messages %}{% if m.role == 'user' %}<|User|>{{ m.content }}"
    "{% elif m.role == 'assistant' %}{% set c = m.content %}{% if '</think>' in c %}{% set c = c.split('</think>', 1)[1] %}"
    "{% endif %}<|Assistant|></think>{{ c }}<|eos|>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|Assistant|>{% if thinking %}<think>{% else %}</think>{% endif %}{% endif %}"
)


def test_a_reasoned_sample_whose_turn_writes_the_close_itself(tmp_path):
    report, compiled = generate_file(tmp_path, "turn_writes_close", TURN_WRITES_THE_CLOSE, cases=20)
    assert compiled.turn.reasoning is not None and compiled.turn.reasoning.in_content
    assert_proven(report, compiled)


#: CohereForAI command-r7b style: the template writes the next model turn's header after every
#: conversation (no generation flag), and a call turn ends `<|END_ACTION|><|EOT|>` where an answer
#: ends `<|END_RESPONSE|><|EOT|>`: the call turn's stop is its end token, not the header's.
HEADER_AFTER_EVERY_TURN = (
    "{%- for m in messages %}{% if m.role == 'user' %}<|SOT|><|USER|>{{ m.content }}<|EOT|>"
    "{% elif m.role == 'assistant' %}<|SOT|><|BOT|>{% if m.tool_calls %}<|START_ACTION|>["
    "{% for c in m.tool_calls %}{{ c.function | tojson }}{% if not loop.last %}, {% endif %}{% endfor %}]"
    "<|END_ACTION|><|EOT|>{% else %}<|START_RESPONSE|>{{ m.content }}<|END_RESPONSE|><|EOT|>{% endif %}"
    "{% elif m.role == 'tool' %}<|SOT|><|SYSTEM|>{{ m.content }}<|EOT|>{% endif %}{% endfor %}<|SOT|><|BOT|>"
)


def test_a_call_turns_close_is_not_the_header_written_after_every_turn(tmp_path):
    report, compiled = generate_file(tmp_path, "header_after_every_turn", HEADER_AFTER_EVERY_TURN, cases=20)
    assert compiled.turn.turn.stop_tokens[:2] == ("<|END_RESPONSE|>", "<|EOT|>"), compiled.turn.turn  # (not <|BOT|>)
    assert_proven(report, compiled, bridge=False)


#: DeepSeek-V3.2 style: reasoning is written only with thinking on; with the base knobs (thinking
#: off) the prompt closes an empty block and no turn shows reasoning.
REASONING_ONLY_WITH_THINKING = (
    "{%- for m in messages %}{% if m.role == 'user' %}<|User|>{{ m.content }}"
    "{% elif m.role == 'assistant' %}<|Assistant|>{% if thinking and loop.last %}<think>{{ m.reasoning_content or '' }}"
    "</think>{% else %}</think>{% endif %}{{ m.content }}<|eos|>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|Assistant|>{% if thinking %}<think>{% else %}<think></think>{% endif %}{% endif %}"
)


def test_reasoning_written_only_under_a_knob_is_learned_there(tmp_path):
    report, compiled = generate_file(tmp_path, "reasoning_with_thinking", REASONING_ONLY_WITH_THINKING, cases=20)
    reasoning = compiled.turn.reasoning
    assert reasoning is not None and (reasoning.open, reasoning.close) == ("<think>", "</think>"), reasoning
    assert_proven(report, compiled)
