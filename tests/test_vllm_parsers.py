"""The ``rllm`` vLLM tool and reasoning parser plugins, inside vLLM's own serving composition.

vLLM's Python (``RLLM_VLLM_PYTHON``, by default ``.venv-vllm``) loads the plugin file as
``--tool-parser-plugin`` / ``--reasoning-parser-plugin`` do, composes the parsers as its serving layer
does (``ParserManager.get_parser``) and reads each scripted turn whole (``parse``) and streamed
(``parse_delta`` over random chunks): both must give exactly the scripted message, which is what
``parse_response`` reads from the same ids. vLLM's built-in parser for the family runs on the same
turns beside it; the README tables where it differs (this test prints that table). No server, no
model: one subprocess for every family.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.turn_sampling import sampled_turn
from rllm_renderers.turns.streaming import arguments_text
from tests.engines.scripted_turns import HISTORY, SCRIPTS, TOOLS
from tests.families import FAMILIES, corpus_path
from tests.test_streaming import message_of

REPO = Path(__file__).resolve().parent.parent
PLUGIN = REPO / "rllm_renderers" / "adapters" / "vllm_parsers.py"

#: family -> vLLM's built-in (tool parser, reasoning parser) for it, run on the same turns
BUILT_IN = {
    "qwen3": ("hermes", "qwen3"),
    "qwen3_coder": ("qwen3_coder", None),
    "llama_3_1": ("llama3_json", None),
    "deepseek_v4": ("deepseek_v4", "deepseek_v4"),
}
# (qwen3_5, run once for the README's table, writes one of the turns after its prompt: left out for CI
# time. Not deepseek_v3: its corpus tokenizer decodes without spaces under vLLM's transformers, so
# vLLM's text is not the model's. Not gpt-oss: vLLM serves it through its harmony parser.)


def vllm_python() -> Path:
    return Path(os.environ.get("RLLM_VLLM_PYTHON", REPO / ".venv-vllm" / "bin" / "python"))


def scripted_cases(renderer) -> dict[str, dict]:
    """name -> the scripted turn as the template writes it after the generation prompt (the ids a
    model forced to write it samples), with random chunk cuts; turns the template cannot write so
    (no reasoning field, no calls) are left out."""
    cases = {}
    for name, message in SCRIPTS.items():
        pair = sampled_turn(renderer, HISTORY, message, TOOLS, [{"role": "user", "content": "Thanks."}])
        if pair is None:
            continue
        prompt, completion = pair
        parsed = renderer.parse_response(completion, tools=TOOLS, prompt_ids=prompt)
        if len(parsed.tool_calls) != len(message.get("tool_calls") or []):
            continue  # the template does not write these calls
        rng = random.Random(name)
        cuts = sorted(rng.sample(range(1, len(completion)), min(len(completion) - 1, 8)))
        cases[name] = {
            "ids": completion,
            "prompt_ids": prompt,
            "stop_ids": renderer.get_stop_token_ids(),
            "tools": TOOLS,
            "chunks": cuts,
            "expected": message_of(parsed),
        }
    return cases


def scripted(message: dict) -> tuple:
    """The scripted message as (content, [(name, arguments)]) with arguments parsed."""
    calls = [(call["function"]["name"], call["function"]["arguments"]) for call in message.get("tool_calls") or []]
    return message.get("content") or "", calls


@pytest.fixture(scope="module")
def plugin_results():
    python = vllm_python()
    if not python.exists():
        pytest.skip(f"no vLLM virtual environment at {python} (set RLLM_VLLM_PYTHON)")
    families, expected = {}, {}
    for family in FAMILIES:
        if family.module not in BUILT_IN:
            continue
        renderer = family.renderer_class(family.load_tokenizer())
        cases = scripted_cases(renderer)
        expected[family.module] = {name: case.pop("expected") for name, case in cases.items()}
        families[family.module] = {
            "tokenizer": str(corpus_path("tokenizers", family.tokenizer)),
            "renderer": family.module,
            "parsers": [["rllm", "rllm"], list(BUILT_IN[family.module])],
            "cases": list(cases.values()),
            "names": list(cases),
        }
    spec = Path(os.environ.get("TMPDIR", "/tmp")) / f"rllm-vllm-parsers-{os.getpid()}.json"
    spec.write_text(json.dumps({"plugin": str(PLUGIN), "families": families}), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1")
    done = subprocess.run(
        [str(python), str(REPO / "tests" / "engines" / "vllm_parser_run.py"), str(spec)],
        capture_output=True, text=True, timeout=900, env=env,
    )
    spec.unlink()
    assert done.returncode == 0, done.stderr[-3000:]
    return families, expected, json.loads(done.stdout.strip().splitlines()[-1])


def as_message(result: dict) -> tuple:
    return result["reasoning"], result["content"], [tuple(call) for call in result["tool_calls"]]


def test_rllm_parsers_return_exactly_the_scripted_turn(plugin_results):
    families, expected, results = plugin_results
    checked = 0
    for module, family in families.items():
        ours = results[module]["rllm/rllm"]
        assert not isinstance(ours, dict), ours
        for name, result in zip(family["names"], ours):
            assert "error" not in result, (module, name, result)
            want = expected[module][name]
            assert as_message(result["whole"]) == want, (module, name)
            assert as_message(result["streamed"]) == want, (module, name)
            content, calls = scripted(SCRIPTS[name])  # and that is the script
            assert want[1] == content and [(n, json.loads(a)) for n, a in want[2]] == [
                (n, json.loads(a) if isinstance(a, str) else a) for n, a in calls
            ], (module, name)
            checked += 1
    assert checked >= 18, checked
    print(built_in_table(families, expected, results))


def built_in_table(families, expected, results) -> str:
    """Markdown: per family and scripted turn, whether vLLM's built-in parser returns the script."""
    lines = ["| family | vLLM parsers | " + " | ".join(SCRIPTS) + " |", "|---|---|" + "---|" * len(SCRIPTS)]
    for module, family in families.items():
        key = "/".join(map(str, BUILT_IN[module]))
        theirs = results[module][key]
        cells = []
        by_name = dict(zip(family["names"], theirs)) if not isinstance(theirs, dict) else {}
        for name in SCRIPTS:
            result = by_name.get(name)
            if result is None:
                cells.append("-" if not isinstance(theirs, dict) else "error")
            elif "error" in result:
                cells.append("raises")
            else:
                cells.append(_difference(expected[module][name], result))
        lines.append(f"| {module} | {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _difference(want: tuple, result: dict) -> str:
    notes = []
    for mode in ("whole", "streamed"):
        got = as_message(result[mode])
        wrong = [field for field, a, b in zip(("reasoning", "content", "calls"), got, want) if a != b]
        if wrong and got[2] != want[2] and [n for n, _ in got[2]] == [n for n, _ in want[2]]:
            if [json.loads(a) for _, a in got[2]] == [json.loads(a) for _, a in want[2]]:
                wrong = [field for field in wrong if field != "calls"] + ["call JSON spacing"]
        if wrong:
            notes.append(f"{mode}: {', '.join(wrong)}")
    return "ok" if not notes else "; ".join(notes)
