"""Public templates that compiled once and then failed (issues 38 and 40), each reduced to its construct.

Every template here is compiled as ``generate --template FILE`` compiles it (no tokenizer: the
synthetic one of :mod:`compiler.markers`), and must verify with every fact proven and no wrong bridge.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from compiler.attribution import attribution_mismatch
from compiler.markers import rendered_markers
from compiler.pipeline import generate
from compiler.source import resolve_source
from rllm_renderers.bridging.memory import PromptHistories
from tests.test_fact_proof import assert_proven

#: Mistral-7B-Instruct-v0.3's and Mistral-Large-Instruct-2407's call/result form: the call id written
#: after the arguments, ``]`` + eos closing the calls, ``[TOOL_RESULTS]`` with the ``call_id``.
MISTRAL_CALLS = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m.role == 'user' %}[INST] {{ m.content }}[/INST]"
    "{% elif m.tool_calls %}[TOOL_CALLS] [{% for c in m.tool_calls %}{% set out = c.function | tojson %}"
    "{{ out[:-1] }}, \"id\": \"{{ c.id }}\"}}{% if not loop.last %}, {% endif %}{% endfor %}]{{ eos_token }}"
    "{% elif m.role == 'assistant' %} {{ m.content | trim }}{{ eos_token }}"
    "{% elif m.role == 'tool' %}[TOOL_RESULTS] {\"content\": {{ m.content | string }}, "
    "\"call_id\": \"{{ m.tool_call_id }}\"}[/TOOL_RESULTS]{% endif %}{% endfor %}"
)
MISTRAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}  # (as a tokenizer_config gives them)


def generate_file(tmp_path: Path, name: str, template: str, *, cases: int = 12, special_tokens=None):
    path = tmp_path / f"{name}.jinja"
    path.write_text(template, encoding="utf-8")
    source = resolve_source(f"test/{name}", template=path, allow_hub=False)
    _, report, compiled = generate(source, tmp_path, cases=cases, seed=0, special_tokens=special_tokens)
    return report, compiled


def test_a_marker_found_in_a_render_never_holds_a_known_marker():
    """``"]" + eos_token`` before ``[TOOL_RESULTS]`` renders ``]</s>[``, which has the shape of a
    bracketed marker (``]~b]``): as a token of the synthetic tokenizer it swallowed the stop ``</s>``,
    so the template's render tokenized the turn's end otherwise than the sampled turn, and the bridge
    after a tool call counted wrong (issue 40) as did the ids-only bridge after ``[]</s>`` (38.8)."""
    text = '[INST] u[/INST][TOOL_CALLS] [{"id": "c"}]</s>[TOOL_RESULTS] r[/TOOL_RESULTS] x]~b] y'
    render = lambda messages, tools=None, add_generation_prompt=False: text  # noqa: E731
    assert "]</s>[" in rendered_markers(render)  # (the shape alone)
    found = rendered_markers(render, known={"</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[TOOL_RESULTS]"})
    assert "]</s>[" not in found and "]~b]" in found  # the shape still finds a marker of its own


def test_mistral_call_and_result_bridge_exactly_with_its_eos(tmp_path):
    report, compiled = generate_file(tmp_path, "mistral_calls", MISTRAL_CALLS, special_tokens=MISTRAL_TOKENS)
    assert_proven(report, compiled, bridged=True)
    special = [token for token in compiled.check_tokenizer.get_added_vocab() if "</s>" in token]
    assert special == ["</s>"], special
    # the point of the issue, with the history given, recalled, and read back from the ids alone
    renderer = compiled_renderer(compiled)
    history = [{"role": "user", "content": "What is the weather in Paris?"}]
    call = {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}
    turn = {"role": "assistant", "content": None, "tool_calls": [{"id": "call00001", "type": "function", "function": call}]}
    result = [{"role": "tool", "tool_call_id": "call00001", "content": '{"sky": "sunny"}'}]
    for text, new in (("Sunny []", [{"role": "user", "content": "<end_of_turn>"}]), (None, result)):
        sampled = turn if text is None else {"role": "assistant", "content": text}
        prompt = renderer.render_ids(history, add_generation_prompt=True)
        full = renderer.render_ids(history + [sampled] + new, add_generation_prompt=True)
        completion = full[len(prompt) : full.index(renderer.get_stop_token_ids()[0]) + 1]
        assert renderer.decode(completion).endswith("]</s>")
        stranger = compiled_renderer(compiled)
        stranger.prompt_histories = PromptHistories()
        for bridged in (
            renderer.bridge_to_next_turn(prompt, completion, new, messages=history),
            renderer.bridge_to_next_turn(prompt, completion, new),
            stranger.bridge_to_next_turn(prompt, completion, new),
        ):
            assert bridged is not None and list(bridged.token_ids) == full


def compiled_renderer(compiled):
    from compiler.pipeline import load_renderer_class

    renderer_class = load_renderer_class(compiled.code, compiled.spec.module, compiled.spec.class_name)
    return renderer_class(compiled.check_tokenizer, special_tokens=compiled.placeholders)


#: AI21-Jamba-Large-1.6: a knob read as text only when it is defined; the compiler's bool for it
#: makes the template call ``.strip()`` on a bool (Jinja raises there).
JAMBA_PREAMBLE = (
    "{% set is_generation_preamble_set = generation_preamble is defined %}{{ bos_token }}"
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|eom|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>"
    "{% if is_generation_preamble_set and generation_preamble.strip() != '' %}{{ generation_preamble }}{% endif %}"
    "{% endif %}"
)


def test_a_knob_value_the_template_cannot_take_is_a_refused_render(tmp_path):
    report, compiled = generate_file(tmp_path, "jamba_preamble", JAMBA_PREAMBLE)
    assert_proven(report, compiled)
    renderer_class = type(compiled_renderer(compiled))
    user = [{"role": "user", "content": "Hi"}]
    build = lambda **knobs: renderer_class(compiled.check_tokenizer, special_tokens=compiled.placeholders, **knobs)  # noqa: E731
    with pytest.raises(ValueError, match="'bool object' has no attribute 'strip'"):
        build(generation_preamble=True).render_text(user, add_generation_prompt=True)
    assert build(generation_preamble="Sure:").render_text(user, add_generation_prompt=True).endswith("<|assistant|>Sure:")

    # only the template's own call of a method on one of its plain values is Jinja's refusal:
    # the same error raised by anything else (a bug of the runtime) still surfaces as itself
    def broken(*arguments):
        raise AttributeError("'object' object has no attribute 'strip'", name="strip", obj=object())

    renderer = build()
    renderer.render_template = broken
    with pytest.raises(AttributeError):
        renderer.render_text(user, add_generation_prompt=True)


#: Command-A reasoning: a tool result is read as a list of results, so a string is written a
#: character at a time, each character a JSON string of its own.
RESULTS_PER_ITEM = (
    "{% for m in messages %}{% if m.role == 'tool' %}<|START_TOOL_RESULT|>{\n"
    '{% for r in m.content %}            "{{ loop.index0 }}": {{ r | tojson }}{% if not loop.last %},\n{% endif %}'
    "{% endfor %}\n}<|END_TOOL_RESULT|>"
    "{% elif m.role == 'assistant' %}<|CHATBOT|>{% if m.tool_calls %}<|START_ACTION|>"
    '{% for c in m.tool_calls %}{"tool_name": "{{ c.function.name }}", "parameters": {{ c.function.arguments | tojson }}}'
    "{% endfor %}<|END_ACTION|>{% else %}{{ m.content }}{% endif %}<|END_OF_TURN|>"
    "{% else %}<|USER|>{{ m.content }}<|END_OF_TURN|>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|CHATBOT|>{% endif %}"
)


def test_a_message_string_written_a_character_at_a_time_is_its_text(tmp_path):
    report, compiled = generate_file(tmp_path, "results_per_item", RESULTS_PER_ITEM, cases=8)
    assert_proven(report, compiled, bridge=False)
    assert report.attribution_checked > 0


def test_the_attribution_check_accepts_a_needle_only_when_its_pieces_spell_it():
    owners = {"Zq2x5Q": frozenset({2}), "Zq2x6Q": frozenset({2})}
    text = '{"0": "Z",\n"1": "q",\n"2": "2",\n"3": "x",\n"4": "5",\n"5": "Q"}'
    pieces = [(match.start(1), match.end(1), 2) for match in re.finditer(r': "(.)"', text)]  # the values
    assert "".join(text[low:high] for low, high, _ in pieces) == "Zq2x5Q"
    assert attribution_mismatch(text, pieces, owners) is None
    # the same characters marked as another message's, or a stray template character marked: wrong
    assert "marked as message 3's text but is not" in attribution_mismatch(text, [(l, h, 3) for l, h, _ in pieces], owners)
    stray = text.index("3")  # a key the template writes
    assert "is not" in attribution_mismatch(text, sorted(pieces + [(stray, stray + 1, 2)]), owners)
    # pieces that do not spell the needle in order
    shuffled = text.replace('"Z"', '"q"', 1).replace('"1": "q"', '"1": "Z"')
    assert "is not" in attribution_mismatch(shuffled, pieces, owners)


# --- scripts/heldout.py compares each run with the previous one -----------------------------


def test_the_heldout_run_fails_on_a_template_that_verified_before(tmp_path):
    from tests.test_heldout_script import load_script

    heldout = load_script()
    outcome = heldout.Outcome
    folder = tmp_path / "templates"
    results = heldout.results_path(folder)
    assert results == tmp_path / "templates.results.json"  # beside the folder, not in it
    assert heldout.load_results(results) == {}  # the first run sets the baseline
    before = [outcome("a", "verified", 1, "verified: ok"), outcome("b", "refused", 1, "error: x"), outcome("c", "verified", 1, "v")]
    heldout.save_results(results, before, cases=5)
    previous = heldout.load_results(results)
    assert previous["a"] == {"result": "verified", "detail": "verified: ok"}
    now = [outcome("a", "crash", 1, "AttributeError"), outcome("b", "verified", 1, "v"), outcome("d", "verified", 1, "v")]
    regressions, changes = heldout.compare(previous, now)
    assert regressions == ["REGRESSION: a verified before, crash now: AttributeError"]
    assert "changed: b refused -> verified" in changes and "new: d verified" in changes
    assert any(change.startswith("not run: c") for change in changes)
    assert heldout.compare(previous, before) == ([], [])
    results.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(SystemExit, match="not a held-out results file"):
        heldout.load_results(results)


def test_a_regression_keeps_the_previous_results_until_accepted(tmp_path, monkeypatch):
    from tests.test_heldout_script import load_script

    heldout = load_script()
    folder = tmp_path / "templates"
    folder.mkdir()
    (folder / "a.jinja").write_text("{{ messages }}", encoding="utf-8")
    results = heldout.results_path(folder)
    heldout.save_results(results, [heldout.Outcome("a", "verified", 1, "v")], cases=5)
    kept = results.read_text(encoding="utf-8")
    monkeypatch.setattr(heldout, "compile_one", lambda template, *rest: heldout.Outcome(template.stem, "refused", 1, "error: e"))
    assert heldout.main([str(folder), "--cases", "5"]) == 1
    assert results.read_text(encoding="utf-8") == kept
    assert heldout.main([str(folder), "--cases", "5", "--accept"]) == 0
    assert heldout.load_results(results)["a"]["result"] == "refused"
    assert heldout.main([str(folder), "--cases", "5"]) == 0  # (refused then and now: no regression)
