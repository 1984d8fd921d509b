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


def test_terminal_marks_sampled_and_trained_tokens(view):
    plain = view.terminal(colour=False)
    assert "[4] assistant:" in plain and "trained" in plain
    coloured = view.terminal()
    trained = next(record for record in view.records if record.trained)
    assert f"\x1b[38;5;" in coloured and ";4;1m" in coloured  # underlined (sampled) and bold (trained)
    by_id = view.terminal(ids=True, colour=False).splitlines()
    assert len(by_id) == len(view.records)
    assert re.search(rf"\b{trained.id}\b STT?", "\n".join(by_id)) or any(f" {trained.id} S" in line for line in by_id)
    assert "\u21b5" in "\n".join(by_id)  # newlines are visible


def test_html_is_self_contained(view):
    page = view.html()
    assert page.count('class="tok') == len(view.records)
    assert not re.search(r"""(src|href)\s*=|@import|url\(|https?://""", page.replace("http://www.w3.org", ""))


def test_command_line_writes_html_and_prints_ids(tmp_path, capsys):
    conversation = tmp_path / "conversation.json"
    conversation.write_text(json.dumps(CONVERSATION), encoding="utf-8")
    folder = corpus_path("tokenizers", QWEN3.tokenizer)
    assert main(["--model", QWEN3.model_id, "--tokenizer", str(folder), str(conversation), "--ids", "--no-colour"]) == 0
    out = capsys.readouterr().out
    assert "151644" in out and "assistant" in out
    page = tmp_path / "out.html"  # the tokenizer the corpus lists for the model
    assert main(["--model", QWEN3.model_id, str(conversation), "--html", str(page)]) == 0
    assert page.read_text(encoding="utf-8").count('class="tok') == out.count("\n")
    assert main(["--model", "no/such-model", str(conversation)]) == 2
    assert "does not list 'no/such-model'" in capsys.readouterr().err


def test_bridge_view_tells_prompt_completion_and_extension_apart():
    qwen25 = next(family for family in FAMILIES if family.module == "qwen2_5")
    renderer = qwen25.renderer_class(qwen25.load_tokenizer())
    history = CONVERSATION["messages"][:2]
    prompt = renderer.render_ids(history, add_generation_prompt=True)
    full = renderer.render_ids(history + [{"role": "assistant", "content": "Sunny."}])
    completion = full[len(prompt) : full.index(renderer.get_stop_token_ids()[0], len(prompt)) + 1]
    bridged = renderer.bridge_to_next_turn(prompt, completion, [{"role": "user", "content": "Thanks!"}])
    assert bridged is not None
    view = bridge_view(renderer, prompt, completion, bridged)
    segments = [record.segment for record in view.records]
    assert segments == ["prompt"] * len(prompt) + ["completion"] * len(completion) + ["extension"] * (
        len(bridged.token_ids) - len(prompt) - len(completion)
    )
    assert [record.sampled for record in view.records] == [segment == "completion" for segment in segments]
    assert "seg-extension" in view.html() and "seg-completion" in view.html()


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def test_page_in_headless_chromium(view, tmp_path):
    """One element per token with the right flags, hover details, and a screenshot."""
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
