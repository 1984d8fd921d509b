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
    assert "turn" in proof.failed and "variable" in proof.failed["turn"], proof.summary()


#: Vicuna style: nothing closes a turn; the next `USER:` header is a stop of several tokens.
USER_HEADER = (
    "{% for m in messages %}{% if m.role == 'user' %}USER: {{ m.content }}\n"
    "{% elif m.role == 'assistant' %}ASSISTANT: {{ m.content }}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)


def test_turns_ended_by_a_text_header_bridge(tmp_path):
    """The bridge proof samples a turn up to the token that completes a stop string (no stop id)."""
    path = tmp_path / "user_header.jinja"
    path.write_text(USER_HEADER, encoding="utf-8")
    _, report, compiled = generate(resolve_source("test/user_header", template=path, allow_hub=False), tmp_path, cases=20, seed=0)
    assert compiled.turn.turn.stop_tokens == ("USER:",)
    assert report.facts.checked > 0 and not report.facts.failed, report.summary()
    assert report.bridge["points"] > 0 and report.bridge["exact"] > 0, report.summary()
    assert report.bridge["wrong"] == 0 and report.bridge["miss"] == 0, report.bridge_examples


def test_verify_reports_read_back_and_bridge_counts(capsys):
    code = main(["verify", "--model", "zai-org/GLM-4.6", "--corpus", str(corpus_path()), "--cases", "5"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "read-back: " in out and "bridge: " in out and " 0 wrong" in out
