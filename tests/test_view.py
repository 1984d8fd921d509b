"""The token viewer: terminal output, the self-contained HTML page, and that page in a real browser.

The browser test drives the system's headless Chromium (Debian's ``chromium`` package, which
scripts/setup.sh installs) with Playwright; it skips only when no Chromium is installed.
"""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from rllm_renderers.view import bridge_view, main, token_view
from tests.families import FAMILIES, corpus_path

QWEN3 = next(family for family in FAMILIES if family.module == "qwen3")
CONVERSATION = {
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "Use the tool.",
            "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "content": "sunny, 21 C"},
        {"role": "assistant", "content": "Sunny,\t21 °C.", "reasoning_content": "The tool says sunny."},
    ],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ],
}


@pytest.fixture(scope="module")
def renderer():
    return QWEN3.renderer_class(QWEN3.load_tokenizer())


@pytest.fixture(scope="module")
def view(renderer):
    return token_view(renderer, CONVERSATION["messages"], tools=CONVERSATION["tools"], train_on="all_assistant")


def test_records_follow_the_render_and_the_example(renderer, view):
    example = renderer.build_supervised_example(
        CONVERSATION["messages"], tools=CONVERSATION["tools"], train_on="all_assistant"
    )
    assert [record.id for record in view.records] == example.token_ids
    assert [record.trained for record in view.records] == example.trained_mask
    assert [record.sampled for record in view.records] == example.rendered.sampled_mask
    assert "".join(record.text for record in view.records) == renderer.render_text(
        CONVERSATION["messages"], tools=CONVERSATION["tools"]
    )
    counts = {index: tokens for index, _, tokens, _, _ in view.message_counts()}
    assert counts == {i: n for i, n in enumerate(example.rendered.tokens_per_message())} | {-1: counts[-1]}


def sgr_codes(text: str) -> list[str]:
    return re.findall(r"\x1b\[([0-9;]*)m", text)


def test_terminal_marks_sampled_and_trained_tokens_in_colours_that_tell_messages_apart(view):
    plain = view.terminal(colour=False)
    assert "[4] assistant:" in plain and "trained" in plain and "\x1b[" not in plain
    for truecolour, prefix in ((True, "38;2;"), (False, "38;5;")):
        coloured = view.terminal(truecolour=truecolour)
        codes = sgr_codes(coloured)
        assert codes and all(code == "0" or code.startswith(prefix) for code in codes), codes[:5]
        assert any(code.endswith(";4;1") for code in codes)  # underlined (sampled) and bold (trained)
    from rllm_renderers.view import TokenRecord, _paint

    for truecolour in (True, False):  # scaffolding, system, user, assistant, tool, ... one colour each
        painted = {
            message: _paint("x", TokenRecord(0, "x", message, "", False, False, False, "render"), truecolour)
            for message in range(-1, 5)
        }
        assert len(set(painted.values())) == len(painted), painted


def test_ids_view_has_a_legend_line_and_one_line_per_token(view):
    trained = next(record for record in view.records if record.trained)
    legend, *by_id = view.terminal(ids=True, colour=False).splitlines()
    assert "S sampled" in legend and "C content" in legend and "T trained" in legend
    assert len(by_id) == len(view.records)
    assert any(f" {trained.id} S" in line and "T" in line.split()[2] for line in by_id)
    assert "\u21b5" in "\n".join(by_id)  # newlines are visible


def test_the_default_policy_is_the_library_default_and_help_shows_defaults(capsys):
    import inspect

    from rllm_renderers.supervised import build_supervised_example

    library = inspect.signature(build_supervised_example).parameters["train_on"].default
    assert inspect.signature(token_view).parameters["train_on"].default == library == "last_assistant"
    with pytest.raises(SystemExit):
        main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "(default: last_assistant)" in shown and "(default: auto)" in shown and "always,auto,never" in shown


def test_harmony_messages_are_broken_onto_their_own_lines():
    gpt_oss = next(family for family in FAMILIES if family.module == "gpt_oss")
    renderer = gpt_oss.renderer_class(gpt_oss.load_tokenizer())
    messages = CONVERSATION["messages"][1:2] + [{"role": "assistant", "content": "Sunny."}, {"role": "user", "content": "Thanks"}]
    view = token_view(renderer, messages)
    text = view.terminal(colour=False).split("\n\n[")[0]
    assert "".join(record.text for record in view.records) == renderer.render_text(messages)
    assert "<|end|><|start|>" in renderer.render_text(messages)  # harmony writes no break itself
    assert "<|end|><|start|>" not in text and "<|end|>\n<|start|>" in text


def test_html_is_self_contained(view):
    page = view.html()
    assert page.count('class="tok') == len(view.records)
    assert not re.search(r"""(src|href)\s*=|@import|url\(|https?://""", page.replace("http://www.w3.org", ""))


def test_command_line_writes_html_prints_ids_and_forces_colour(tmp_path, capsys):
    conversation = tmp_path / "conversation.json"
    conversation.write_text(json.dumps(CONVERSATION), encoding="utf-8")
    folder = corpus_path("tokenizers", QWEN3.tokenizer)
    arguments = ["--model", QWEN3.model_id, "--tokenizer", str(folder), str(conversation)]
    assert main([*arguments, "--ids", "--colour", "never"]) == 0
    out = capsys.readouterr().out
    assert "151644" in out and "assistant" in out and "\x1b[" not in out
    assert main([*arguments, "--colour", "always"]) == 0  # captured output is no terminal: forced
    assert "\x1b[38;" in capsys.readouterr().out
    assert main([*arguments]) == 0  # auto: no colour when not a terminal
    assert "\x1b[" not in capsys.readouterr().out
    page = tmp_path / "out.html"  # the tokenizer the corpus lists for the model
    assert main(["--model", QWEN3.model_id, str(conversation), "--html", str(page)]) == 0
    assert page.read_text(encoding="utf-8").count('class="tok') == out.count("\n") - 1  # (the legend line)
    assert main(["--model", "no/such-model", str(conversation)]) == 2
    assert "does not list 'no/such-model'" in capsys.readouterr().err


def qwen25_bridge():
    qwen25 = next(family for family in FAMILIES if family.module == "qwen2_5")
    renderer = qwen25.renderer_class(qwen25.load_tokenizer())
    history = CONVERSATION["messages"][:2]
    prompt = renderer.render_ids(history, add_generation_prompt=True)
    full = renderer.render_ids(history + [{"role": "assistant", "content": "Sunny."}])
    completion = full[len(prompt) : full.index(renderer.get_stop_token_ids()[0], len(prompt)) + 1]
    bridged = renderer.bridge_to_next_turn(prompt, completion, [{"role": "user", "content": "Thanks!"}])
    assert bridged is not None
    return renderer, history, prompt, completion, bridged


@pytest.fixture(scope="module")
def bridge():
    renderer, history, prompt, completion, bridged = qwen25_bridge()
    return prompt, completion, bridged, bridge_view(renderer, prompt, completion, bridged, prompt_messages=len(history))


def test_bridge_view_names_prompt_completion_and_extension_and_numbers_new_messages_after_the_prompt(bridge):
    prompt, completion, bridged, view = bridge
    segments = [record.segment for record in view.records]
    assert segments == ["prompt"] * len(prompt) + ["completion"] * len(completion) + ["extension"] * (
        len(bridged.token_ids) - len(prompt) - len(completion)
    )
    assert [record.sampled for record in view.records] == [segment == "completion" for segment in segments]
    assert not any(record.trained for record in view.records)
    completion_messages = {record.message for record in view.records if record.segment == "completion"}
    new_messages = {record.message for record in view.records if record.segment == "extension"} - {-1}
    assert completion_messages == {2} and new_messages == {3}  # the prompt has messages 0 and 1
    plain = view.terminal(colour=False)
    assert "[2 sampled completion]" in plain and "[3 user (extension)]" in plain and "[prompt and scaffolding]" in plain
    assert "trained" not in plain and "scaffolding)" not in plain
    coloured = view.terminal(truecolour=False)
    assert "bold" not in coloured and any(code.endswith(";4") for code in sgr_codes(coloured))  # sampled: underlined
    legend = view.terminal(ids=True, colour=False).splitlines()[0]
    assert "S sampled" in legend and "trained" not in legend
    page = view.html()
    assert "seg-extension" in page and "sampled completion" in page
    assert "trained" not in page.split("</style>")[1].split("<script>")[0]  # no training marks to explain


def test_bridge_from_the_command_line(tmp_path, capsys):
    bridge_file = tmp_path / "bridge.json"
    bridge_file.write_text(
        json.dumps(
            {
                "messages": CONVERSATION["messages"][:2],
                "completion": {"role": "assistant", "content": "Sunny."},
                "next": [{"role": "user", "content": "Thanks!"}],
            }
        ),
        encoding="utf-8",
    )
    qwen25 = next(family for family in FAMILIES if family.module == "qwen2_5")
    folder = corpus_path("tokenizers", qwen25.tokenizer)
    arguments = ["bridge", "--model", qwen25.model_id, "--tokenizer", str(folder), str(bridge_file)]
    assert main([*arguments, "--colour", "never"]) == 0
    out = capsys.readouterr().out
    assert "Sunny." in out and "[2 sampled completion]" in out and "[3 user (extension)]" in out
    assert main([*arguments, "--html", str(tmp_path / "bridge.html")]) == 0
    assert "sampled completion" in (tmp_path / "bridge.html").read_text(encoding="utf-8")
    bridge_file.write_text(json.dumps({"messages": []}), encoding="utf-8")
    assert main(arguments) == 2 and "'completion'" in capsys.readouterr().err


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def test_page_in_headless_chromium(view, bridge, tmp_path):
    """One element per token with the right flags, hover details, and a screenshot; the bridge page
    names its segments and numbers the new messages after the prompt's."""
    executable = chromium_path()
    if executable is None:
        pytest.skip("no Chromium installed (scripts/setup.sh installs Debian's chromium package)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="the 'view' extra (playwright) is not installed")
    page_file = view.save_html(tmp_path / "tokens.html")
    screenshot = tmp_path / "viewer.png"
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 760})
            requests = []
            page.on("request", lambda request: requests.append(request.url))
            page.goto(page_file.as_uri())
            tokens = page.eval_on_selector_all(".tok", "nodes => nodes.map(n => Object.assign({}, n.dataset))")
            assert len(tokens) == len(view.records)
            for shown, record in zip(tokens, view.records):
                assert int(shown["id"]) == record.id and int(shown["message"]) == record.message
                assert shown["sampled"] == str(record.sampled).lower()
                assert shown["trained"] == str(record.trained).lower()
                assert shown["content"] == str(record.content).lower()
            position = next(
                k
                for k, record in enumerate(view.records)
                if record.trained and "\n" in record.text or record.trained and record.text.startswith(" ")
            )
            record = view.records[position]
            page.hover(f'.tok[data-pos="{position}"]')
            details = page.inner_text("#details")
            assert f"id {record.id}" in details
            assert f"message {record.message} ({record.role})" in details
            assert "trained=true" in details and "sampled=true" in details
            assert "\u21b5" in details or "\u2423" in details  # whitespace is visible
            page.screenshot(path=str(screenshot))
            assert requests == [page_file.as_uri()], "the page fetched something"
            *_, bridged_view = bridge
            bridge_file = bridged_view.save_html(tmp_path / "bridge.html")
            page.goto(bridge_file.as_uri())
            shown = page.eval_on_selector_all(".tok", "nodes => nodes.map(n => n.dataset.segment)")
            assert shown == [record.segment for record in bridged_view.records]
            legend = page.inner_text("ul.legend")
            assert "2 sampled completion" in legend and "3 user (extension)" in legend and "trained" not in legend
            assert page.inner_text(".segments").split() == ["prompt", "sampled", "completion", "extension"]
            position = next(k for k, record in enumerate(bridged_view.records) if record.segment == "completion")
            page.hover(f'.tok[data-pos="{position}"]')
            details = page.inner_text("#details")
            assert "message 2 (sampled completion)" in details and "segment=completion" in details
        finally:
            browser.close()
    assert screenshot.stat().st_size > 1000
    if os.environ.get("RLLM_VIEWER_SCREENSHOT"):  # refresh the README's screenshot
        shutil.copy(screenshot, os.environ["RLLM_VIEWER_SCREENSHOT"])


def test_the_viewer_and_the_supervised_module_import_no_heavy_library():
    from tests.isolation import fresh_python

    code = (
        "import sys, rllm_renderers.view, rllm_renderers.supervised\n"
        "heavy = ('jinja2', 'transformers', 'torch', 'playwright')\n"
        "assert not [m for m in heavy if m in sys.modules], [m for m in heavy if m in sys.modules]\n"
    )
    result = fresh_python(code)
    assert result.returncode == 0, result.stderr
