"""DeepSeek-V4: our template against DeepSeek's official encoder (the source of truth).

The encoder is imported in place from the oracles folder ($RLLM_ORACLES, default
../shared/oracles); the goldens and the tokenizer come from the corpus ($RLLM_CORPUS).
Tests that need either skip with the reason when it is absent. The wide run (500
generated conversations) is ``python -m compiler verify --all`` in CI.
"""

from __future__ import annotations

import json
import os

import pytest

from compiler.conversations import Case
from compiler.oracles import OracleUnavailable, load_oracle
from compiler.verify import verify
from compiler.analysis import compared_roles, knob_candidates, parse_template
from tests.families import FAMILIES, corpus_path

FAMILY = next(family for family in FAMILIES if family.module == "deepseek_v4")
CASES = int(os.environ.get("DIFFERENTIAL_CASES", "80"))


@pytest.fixture(scope="module")
def tokenizer():
    return FAMILY.load_tokenizer()


@pytest.fixture(scope="module")
def encoder(tokenizer):
    try:
        return load_oracle("deepseek-encoder:v4", tokenizer)
    except OracleUnavailable as exc:
        pytest.skip(f"DeepSeek-V4 encoder not available: {exc}")


def golden_lines() -> list[tuple[dict, dict]]:
    conversations = {}
    for line in corpus_path("golden", "conversations.jsonl").read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        conversations[case["id"]] = case
    lines = corpus_path("golden", "deepseek_v4.jsonl").read_text(encoding="utf-8").splitlines()
    return [(json.loads(line), conversations[json.loads(line)["case_id"]]) for line in lines]


def render_golden(renderer_class, tokenizer, golden: dict, case: dict) -> list[int]:
    renderer = renderer_class(tokenizer, **golden["template_kwargs"])
    return renderer.render_ids(
        case["messages"], tools=case["tools"], add_generation_prompt=case["add_generation_prompt"]
    )


def test_every_official_encoder_golden_line_matches_on_token_ids(tokenizer):
    encoder_lines = [(g, c) for g, c in golden_lines() if g["oracle"] == "deepseek-encoder:dsv4"]
    assert len(encoder_lines) == 72  # 24 cases x 3 variants in the shared split
    misses = []
    for golden, case in encoder_lines:
        ids = render_golden(FAMILY.renderer_class, tokenizer, golden, case)
        if ids != golden["token_ids"]:
            misses.append(f"{golden['case_id']} {golden['renderer_variant']}")
        assert tokenizer.decode(ids, skip_special_tokens=False) == golden["text"]
    assert misses == []


def test_the_case_kwargs_select_the_variant_the_goldens_say(tokenizer, encoder):
    """enable_thinking absent or true selects `thinking`, false selects `chat` (the variant table)."""
    selected = [
        (g, c) for g, c in golden_lines() if g["oracle"] == "deepseek-encoder:dsv4" and g["selected_for_case_kwargs"]
    ]
    assert len(selected) == 24 and any(c["kwargs"] == {"enable_thinking": False} for _, c in selected)
    for golden, case in selected:
        renderer = FAMILY.renderer_class(tokenizer, **case["kwargs"])
        arguments = dict(tools=case["tools"], add_generation_prompt=case["add_generation_prompt"])
        assert renderer.render_ids(case["messages"], **arguments) == golden["token_ids"], golden["case_id"]
        assert encoder.render_ids(case["messages"], knobs=case["kwargs"], **arguments) == golden["token_ids"]


def test_fireworks_golden_lines_match_where_they_agree_with_the_encoder(tokenizer):
    """The encoder wins: Fireworks lines that agree with it must match, the others must not."""
    fireworks = [(g, c) for g, c in golden_lines() if g["oracle"] == "fireworks:deepseek_v4"]
    agreed = differing = refused = 0
    for golden, case in fireworks:
        ids = render_golden(FAMILY.renderer_class, tokenizer, golden, case)
        if golden["error"] is not None:
            refused += 1  # the Fireworks renderer refuses the developer role; the encoder renders it
            continue
        if golden["agrees_with_encoder"]["token_ids"]:
            agreed += 1
            assert ids == golden["token_ids"], (golden["case_id"], golden["renderer_variant"])
        else:
            differing += 1  # a literal </think> in assistant content: Fireworks splits it, the encoder does not
            assert ids != golden["token_ids"], (golden["case_id"], golden["renderer_variant"])
    assert (agreed, differing, refused) == (66, 3, 3)


def test_the_encoder_oracle_reproduces_its_golden_lines(encoder):
    """The adapter feeds conversations as the goldens did (tools on the first system message...)."""
    for golden, case in golden_lines():
        if golden["oracle"] != "deepseek-encoder:dsv4":
            continue
        ids = encoder.render_ids(case["messages"], tools=case["tools"], knobs=golden["template_kwargs"])
        assert ids == golden["token_ids"], (golden["case_id"], golden["renderer_variant"])


def test_generated_conversations_agree_with_the_encoder(tokenizer, encoder):
    renderer_class = FAMILY.renderer_class
    ast = parse_template(FAMILY.template_source(), FAMILY.template_file)
    report = verify(
        renderer_class,
        encoder,
        tokenizer=tokenizer,
        cases=CASES,
        seed_value=4321,
        knob_candidates=knob_candidates(ast, renderer_class.KNOBS),
        template_roles=compared_roles(ast),
        keep_going=True,
    )
    assert report.ok, report.disagreement_report()
    assert report.tokens_checked > 0 and report.tokens_matched == report.tokens_checked
    assert report.text_matched - report.rejected_alike >= CASES // 2, report.summary()
    # the conversations exercised what makes DeepSeek-V4 different
    for feature in (
        "role developer",
        "role tool",
        "tools given",
        "parallel tool calls",
        "tool results out of call order",
        "reasoning before the last user",
        'knob thinking_mode="chat"',
        "knob drop_thinking=false",
    ):
        assert report.feature_counts[feature] > 0, (feature, sorted(report.feature_counts))


# --- behaviours the goldens name, each checked against the encoder on a conversation that shows it --


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}},
    },
}


def call(call_id: str, name: str, arguments: dict) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def agree(encoder, tokenizer, case: Case) -> str:
    renderer = FAMILY.renderer_class(tokenizer, **case.knobs)
    expected = encoder.render_ids(case.messages, tools=case.tools, knobs=case.knobs)
    assert renderer.render_ids(case.messages, tools=case.tools, add_generation_prompt=True) == expected
    return renderer.render_text(case.messages, tools=case.tools, add_generation_prompt=True)


def test_tool_results_are_merged_into_one_user_turn_in_call_order(encoder, tokenizer):
    messages = [
        {"role": "user", "content": "Paris and Rome?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                call("a", "get_weather", {"city": "Paris"}),
                call("b", "get_weather", {"city": "Rome", "days": 2}),
            ],
        },
        {"role": "tool", "tool_call_id": "b", "content": "rome: rain"},
        {"role": "tool", "tool_call_id": "a", "content": "paris: sun"},
    ]
    text = agree(encoder, tokenizer, Case(messages, tools=[WEATHER]))
    assert "<｜User｜><tool_result>paris: sun</tool_result>\n\n<tool_result>rome: rain</tool_result>" in text
    assert '<｜DSML｜parameter name="city" string="true">Rome</｜DSML｜parameter>' in text
    assert '<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>' in text


def test_tools_switch_drop_thinking_off(encoder, tokenizer):
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello", "reasoning_content": "greet back"},
        {"role": "user", "content": "Weather?"},
    ]
    without_tools = agree(encoder, tokenizer, Case(messages))
    with_tools = agree(encoder, tokenizer, Case(messages, tools=[WEATHER]))
    assert "greet back" not in without_tools and "greet back</think>Hello" in with_tools


def test_developer_messages_before_the_last_user_are_dropped_in_thinking_mode(encoder, tokenizer):
    messages = [
        {"role": "developer", "content": "Answer in French."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Bonjour"},
        {"role": "user", "content": "Thanks"},
    ]
    thinking = agree(encoder, tokenizer, Case(messages))
    chat = agree(encoder, tokenizer, Case(messages, knobs={"thinking_mode": "chat"}))
    assert "Answer in French." not in thinking and "<｜User｜>Answer in French.<｜User｜>Hi" in chat


def test_an_empty_developer_message_is_refused_like_the_encoder_does(encoder, tokenizer):
    messages = [{"role": "developer", "content": ""}, {"role": "user", "content": "Hi"}]
    with pytest.raises(Exception):
        encoder.render_text(messages, knobs={"thinking_mode": "chat"})
    with pytest.raises(ValueError, match="developer message needs content"):
        FAMILY.renderer_class(tokenizer, thinking_mode="chat").render_text(messages)


def test_unknown_thinking_mode_is_refused(tokenizer):
    with pytest.raises(ValueError, match="thinking_mode"):
        FAMILY.renderer_class(tokenizer, thinking_mode="fast").render_text([{"role": "user", "content": "Hi"}])


def test_dsml_tool_calls_parse_back_with_string_and_json_values(tokenizer):
    renderer = FAMILY.renderer_class(tokenizer)
    prompt = renderer.render_ids([{"role": "user", "content": "Go"}], tools=[WEATHER], add_generation_prompt=True)
    completion = renderer.encoder.encode(
        "Let me check.</think>Checking."
        "\n\n<｜DSML｜tool_calls>\n"
        '<｜DSML｜invoke name="get_weather">\n'
        '<｜DSML｜parameter name="city" string="true">Paris, "FR"</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="when" string="false">{"from": [1, null]}</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n"
        '<｜DSML｜invoke name="get_weather">\n\n</｜DSML｜invoke>\n'
        "</｜DSML｜tool_calls><｜end▁of▁sentence｜>"
    )
    parsed = renderer.parse_response(completion, tools=[WEATHER], prompt_ids=prompt)
    assert parsed.reasoning_content == "Let me check."
    assert parsed.content == "Checking."
    assert [(c.name, c.arguments, c.status) for c in parsed.tool_calls] == [
        ("get_weather", {"city": 'Paris, "FR"', "days": 3, "when": {"from": [1, None]}}, "ok"),
        ("get_weather", {}, "ok"),
    ]
    # a string that looks like JSON stays a string: the template marked it string="true"
    looks_like_json = renderer.encoder.encode(
        '</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n'
        '<｜DSML｜parameter name="city" string="true">42</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>'
    )
    chat_prompt = FAMILY.renderer_class(tokenizer, thinking_mode="chat").render_ids([{"role": "user", "content": "Go"}])
    assert renderer.parse_response(looks_like_json, prompt_ids=chat_prompt).tool_calls[0].arguments == {"city": "42"}


def test_resolve_picks_the_generated_renderer_for_both_model_ids(tokenizer):
    from rllm_renderers import resolve

    for model in ("deepseek-ai/DeepSeek-V4-Flash", "deepseek-ai/DeepSeek-V4-Pro"):
        resolution = resolve(model, tokenizer, chat_template_kwargs={"thinking_mode": "chat"})
        assert (resolution.source, type(resolution.renderer)) == ("generated", FAMILY.renderer_class)


# --- the CLI: --oracle, the override's own oracle, clear errors ---------------------------------


def test_verify_checks_an_override_against_its_own_oracle_by_either_model_id(encoder, capsys):
    from compiler.cli import main

    corpus = str(corpus_path())
    assert main(["verify", "--model", "deepseek-ai/DeepSeek-V4-Pro", "--corpus", corpus, "--cases", "5"]) == 0
    printed = capsys.readouterr().out
    assert "deepseek_v4.py (deepseek-ai/DeepSeek-V4-Pro): text: " in printed
    assert "deepseek_v4.py against deepseek-encoder:v4: text: " in printed


def test_verify_against_a_disagreeing_oracle_lists_the_features_of_the_differences(encoder, capsys):
    from compiler.cli import main

    corpus = str(corpus_path())
    code = main(
        [
            "verify",
            "--model",
            "deepseek-ai/DeepSeek-V3",
            "--corpus",
            corpus,
            "--cases",
            "5",
            "--oracle",
            "deepseek-encoder:v4",
        ]
    )
    printed = capsys.readouterr().out
    assert code == 1
    assert "deepseek_v3.py against deepseek-encoder:v4: text: 0/" in printed
    assert "differing cases: " in printed and "features of the differing cases:" in printed
    assert "smallest failing conversation:" in printed


def test_verify_fails_clearly_when_the_oracle_code_is_missing(monkeypatch, tmp_path, capsys):
    from compiler.cli import main

    monkeypatch.setenv("RLLM_ORACLES", str(tmp_path))
    code = main(["verify", "--model", "deepseek-ai/DeepSeek-V4-Flash", "--corpus", str(corpus_path()), "--cases", "0"])
    assert code == 1
    assert "cannot check against deepseek-encoder:v4: oracle code not found" in capsys.readouterr().out


def test_the_bridge_follows_the_history_thinking_rules(tokenizer):
    """Tool results are user turns: without tools, thinking mode drops the sampled reasoning once
    one arrives, so the bridge refuses; tools (or chat mode) keep history as sampled."""
    user = {"role": "user", "content": "Weather in Paris?"}
    sampled = {
        "role": "assistant",
        "content": "",
        "reasoning_content": "I should look it up.",
        "tool_calls": [call("c1", "get_weather", {"city": "Paris"})],
    }
    result = {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
    outcomes = {}
    for label, knobs, tools in [
        ("thinking", {}, None),
        ("thinking, tools", {}, [WEATHER]),
        ("chat", {"thinking_mode": "chat"}, None),
    ]:
        renderer = FAMILY.renderer_class(tokenizer, **knobs)
        prompt = renderer.render_ids([user], tools=tools, add_generation_prompt=True)
        full = renderer.render_ids([user, sampled], tools=tools)
        completion = full[len(prompt) :]
        bridged = renderer.bridge_to_next_turn(prompt, completion, [result], tools=tools)
        expected = renderer.render_ids([user, sampled, result], tools=tools, add_generation_prompt=True)
        outcomes[label] = None if bridged is None else bridged.token_ids == expected
        if bridged is None:
            verbatim = FAMILY.renderer_class(tokenizer, thinking_retention="verbatim", **knobs)
            kept = verbatim.bridge_to_next_turn(prompt, completion, [result], tools=tools)
            assert kept is not None and kept.token_ids[: len(full)] == full
            assert expected[: len(full)] != full  # the encoder rewrites the turn (even its <think> prefix)
    assert outcomes == {"thinking": None, "thinking, tools": True, "chat": True}
