"""The ``rllm`` tool and reasoning parser plugins inside the real vLLM server.

A toy model of the family is served with the two flags a user adds (``--tool-parser-plugin`` /
``--tool-call-parser rllm``, ``--reasoning-parser-plugin`` / ``--reasoning-parser rllm``); each scripted
turn (reasoning, content, one call, parallel calls, nested arguments, unicode and JSON-special
characters) is forced as the ids the template writes for it, and the chat completion, streamed and
not, must return exactly the scripted message. vLLM's built-in parsers on the same outputs are
tabled by tests/test_vllm_parsers.py (same turns, no server). One server per family (~75 s to start).
"""

from __future__ import annotations

import json
import os
import urllib.request

import pytest

vllm_server_module = pytest.importorskip("tests.engines.vllm_server")  # (the real-engine fixture)

from tests.engines.scripted_turns import HISTORY, SCRIPTS, TOOLS  # noqa: E402
from tests.families import ALL_FAMILIES  # noqa: E402
from tests.test_vllm_parsers import PLUGIN, REPO, scripted  # noqa: E402
from compiler.turn_sampling import sampled_turn  # noqa: E402

#: The families served with the plugin (CI time: one server start each).
SERVED_WITH_PLUGIN = ["qwen3"]

PLUGIN_ARGS = [
    "--enable-auto-tool-choice",
    "--tool-parser-plugin", str(PLUGIN), "--tool-call-parser", "rllm",
    "--reasoning-parser-plugin", str(PLUGIN), "--reasoning-parser", "rllm",
]


def _post(server, body: dict, stream: bool):
    request = urllib.request.Request(
        f"{server.base_url}/v1/chat/completions",
        data=json.dumps({**body, "stream": stream}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        if not stream:
            return json.loads(response.read())["choices"][0]["message"]
        message = {"content": "", "reasoning": "", "tool_calls": {}}
        for line in response:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[len("data: ") :]).get("choices") or []
            for choice in choices:
                delta = choice.get("delta") or {}
                message["content"] += delta.get("content") or ""
                message["reasoning"] += delta.get("reasoning") or delta.get("reasoning_content") or ""
                for call in delta.get("tool_calls") or []:
                    entry = message["tool_calls"].setdefault(call["index"], {"function": {"name": "", "arguments": ""}})
                    function = call.get("function") or {}
                    entry["function"]["name"] += function.get("name") or ""
                    entry["function"]["arguments"] += function.get("arguments") or ""
        message["tool_calls"] = [message["tool_calls"][index] for index in sorted(message["tool_calls"])]
        return message


def _as_script(message: dict) -> tuple:
    """(reasoning, content, [(name, arguments parsed)]) of a chat completion message."""
    calls = [
        (call["function"]["name"], json.loads(call["function"]["arguments"])) for call in message.get("tool_calls") or []
    ]
    reasoning = message.get("reasoning") or message.get("reasoning_content") or ""
    return reasoning, message.get("content") or "", calls


@pytest.mark.parametrize("module", SERVED_WITH_PLUGIN)
def test_scripted_turns_come_back_exactly_through_the_plugin(module, vllm_server):
    family = next(family for family in ALL_FAMILIES if family.module == module)
    renderer = family.renderer_class(family.load_tokenizer())
    env = {"PYTHONPATH": os.pathsep.join([str(vllm_server_module.SERVER_SIDE), str(REPO)]), "RLLM_VLLM_RENDERER": module}
    server = vllm_server(module, PLUGIN_ARGS, env)
    checked = []
    for name, message in SCRIPTS.items():
        pair = sampled_turn(renderer, HISTORY, message, TOOLS, [{"role": "user", "content": "Thanks."}])
        if pair is None:
            continue
        _, completion = pair
        body = {"model": server.model, "messages": HISTORY, "tools": TOOLS}
        body.update(vllm_server_module.forced_sampling(renderer._decode(completion[:-1]), completion[:-1], completion[-1]))
        content, calls = scripted(message)
        want = (message.get("reasoning_content") or "", content, [(n, a if isinstance(a, dict) else json.loads(a)) for n, a in calls])
        for stream in (False, True):
            got = _as_script(_post(server, body, stream))
            assert got == want, (module, name, "streamed" if stream else "whole", got)
        checked.append(name)
    assert len(checked) == len(SCRIPTS), checked
