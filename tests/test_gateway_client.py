"""rLLM's model gateway, run as engines run it, with this project's renderers injected.

The gateway (``../shared/clients/rllm-model-gateway``, imported in place; ``RLLM_CLIENTS``
overrides the folder) runs in cumulative token mode: turn 1 goes to the worker's chat endpoint,
so the worker renders the first prompt; from turn 2 on the gateway calls
``renderer.bridge_to_next_turn(prev_prompt_ids, prev_completion_ids, new_messages, tools=tools)``
with ids only and sends the result to ``/v1/completions``; a None resets the session and the
turn goes through the chat path again.

The worker is a mock that behaves like vLLM with the real tokenizer: it renders chat requests
with the family's chat template through transformers (``apply_chat_template``), and answers
every request with the scripted assistant turn as the model samples it (the template's
rendering of that turn after the generation prompt, up to and including its stop token).

Per family (every checked-in renderer with a real tokenizer) and retention policy, episodes of
plain answers, reasoning, one tool call and parallel calls are played, and every turn from the
second on is counted: bridged, reset (with the reason the renderer logged), and **wrong** (a
bridged prompt other than the template's: under "template" the full render of the conversation,
under "verbatim" the previous prompt and completion followed by the template's text for the new
messages after the sampled turn's close). Asserted: 0 wrong, and no reset where the template keeps
the history (its full render extends the previous prompt + completion; under "verbatim" always).

``python -m tests.test_gateway_client`` prints the per-family table.
"""

import logging
import os
import socket
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.families import ALL_FAMILIES, REPO
from compiler.turn_sampling import reasoned_turn, sampled_turn, template_suffix

CLIENTS = Path(os.environ.get("RLLM_CLIENTS", REPO.parent / "shared" / "clients"))
GATEWAY_SOURCE = CLIENTS / "rllm-model-gateway" / "src"
RETENTIONS = ("template", "verbatim")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Local time in a time zone.",
            "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
        },
    },
]


def call(call_id: str, name: str, **arguments) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def answer(content: str | None, reasoning: str | None = None, calls: list | None = None) -> dict:
    """An assistant message as an OpenAI client sends it back (``content`` None: only tool calls)."""
    message = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
    return message


def episodes(reasoning: bool) -> list[tuple[list[dict], list | None]]:
    """Scripted conversations (messages, tools): each assistant message is a sampled turn."""
    think = (lambda text: text) if reasoning else (lambda text: None)
    chat = [
        {"role": "system", "content": "You are a concise assistant."},
        {"role": "user", "content": "Hi! Who are you?"},
        answer("I am an assistant.", think("The user greets me.")),
        {"role": "user", "content": "Tell me a fact about octopuses."},
        answer("Octopuses have three hearts.", think("A well-known fact.")),
        {"role": "user", "content": 'And one about the Moon, in "quotes"?'},
        answer('"The Moon drifts 3.8 cm away each year."', think("Quote it.")),
        {"role": "user", "content": "Thanks, bye."},
        answer("Goodbye!"),
    ]
    tool_use = [
        {"role": "user", "content": "What is the weather in Paris, and the time in Tokyo and Rome?"},
        answer(None, think("I need the weather first."), [call("call_a", "get_weather", city="Paris")]),
        {"role": "tool", "tool_call_id": "call_a", "content": "Sunny, 21 C"},
        answer(
            None,
            think("Now both times at once."),
            [call("call_b", "get_time", zone="Asia/Tokyo"), call("call_c", "get_time", zone="Europe/Rome")],
        ),
        {"role": "tool", "tool_call_id": "call_b", "content": "08:15"},
        {"role": "tool", "tool_call_id": "call_c", "content": "01:15"},
        answer("Paris is sunny (21 C); it is 08:15 in Tokyo and 01:15 in Rome.", think("Summarize.")),
        {"role": "user", "content": "And the weather in Rome?"},
        answer("Let me check.", think("Another call."), [call("call_d", "get_weather", city="Rome")]),
        {"role": "tool", "tool_call_id": "call_d", "content": "Cloudy, 17 C"},
        answer("Rome is cloudy at 17 C."),
    ]
    one_call_at_a_time = [  # (Llama-3.x takes one call per turn)
        {"role": "system", "content": "Use the tools when they help."},
        {"role": "user", "content": "Weather in Oslo?"},
        answer(None, think("One call."), [call("call_e", "get_weather", city="Oslo")]),
        {"role": "tool", "tool_call_id": "call_e", "content": "Snow, -3 C"},
        answer("Oslo has snow at -3 C.", think("Report it.")),
        {"role": "user", "content": "And the time there?"},
        answer(None, think("Another call."), [call("call_f", "get_time", zone="Europe/Oslo")]),
        {"role": "tool", "tool_call_id": "call_f", "content": "14:02"},
        answer("It is 14:02 in Oslo.", think("Done.")),
        {"role": "user", "content": "Thanks!"},
        answer("You're welcome."),
    ]
    return [(chat, None), (tool_use, TOOLS), (one_call_at_a_time, TOOLS)]


# --- servers ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Served:
    """An ASGI app served by uvicorn on a loopback port, in a daemon thread."""

    def __init__(self, app) -> None:
        import uvicorn

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 10
        while not self.server.started:
            if time.time() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


class MockWorker:
    """vLLM as the gateway sees it: chat requests rendered by the chat template, completion
    requests taken as token ids; every answer is the current scripted turn's completion ids."""

    def __init__(self, tokenizer, template: str, normalize) -> None:
        from fastapi import FastAPI, Request

        self.tokenizer = tokenizer
        self.template = template
        # tool-call arguments in the form the template reads (what the renderer converts them to)
        self.normalize = normalize
        self.completion: list[int] = []
        self.requests: list[tuple[str, list[int]]] = []  # (endpoint, prompt ids)
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            body = await request.json()
            return self.respond("chat", self.template_prompt(body["messages"], body.get("tools")), chat=True)

        @app.post("/v1/completions")
        async def completions(request: Request):
            body = await request.json()
            return self.respond("completions", list(body["prompt"]), chat=False)

        self.app = app

    def template_prompt(self, messages: list[dict], tools) -> list[int]:
        """The chat template's prompt ids for ``messages`` (what the chat endpoint renders)."""
        return list(
            self.tokenizer.apply_chat_template(
                self.normalize(messages),
                tools=tools,
                chat_template=self.template,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
            )
        )

    def verbatim_suffix(self, sampler, messages: list[dict], tools) -> list[int] | None:
        """The template's ids for the messages after the last assistant turn, as it writes them
        after that turn's close (None where it cannot be read off the render)."""
        history = self.normalize(messages)
        last = max(i for i, message in enumerate(history) if message["role"] == "assistant")
        full_text = self.tokenizer.apply_chat_template(
            history, tools=tools, chat_template=self.template, add_generation_prompt=True, tokenize=False
        )
        return template_suffix(
            sampler, self.tokenizer, history[:last], history[last], history[last + 1 :], tools, full_text
        )

    def respond(self, endpoint: str, prompt: list[int], chat: bool) -> dict:
        self.requests.append((endpoint, prompt))
        text = self.tokenizer.decode(self.completion)
        choice = {"index": 0, "finish_reason": "stop", "token_ids": list(self.completion)}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
            return {"id": "mock", "object": "chat.completion", "prompt_token_ids": prompt, "choices": [choice]}
        choice.update(text=text, prompt_token_ids=prompt)
        return {"id": "mock", "object": "text_completion", "choices": [choice]}


class ReasonLog(logging.Handler):
    """The reasons the renderer logs for a None (recovery and bridge)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.reasons: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "no bridge" in record.getMessage() or "returns None" in record.getMessage():
            self.reasons.append(record.getMessage())


# --- one family ------------------------------------------------------------------------------


def gateway_for(worker_url: str, renderer):
    if str(GATEWAY_SOURCE) not in sys.path:
        sys.path.insert(0, str(GATEWAY_SOURCE))
    from rllm_model_gateway import GatewayConfig, create_app

    config = GatewayConfig(
        store_worker="memory",
        workers=[{"url": f"{worker_url}/v1", "worker_id": "w0"}],
        health_check_interval=999,
        sync_traces=True,
        cumulative_token_mode=False,  # (it would build PrimeIntellect's renderer)
    )
    app = create_app(config)
    app.state.proxy.renderer = renderer
    app.state.proxy.cumulative_token_mode = True
    return app


def play_family(family, retention: str) -> Counter:
    """Play every episode through the gateway; count the turns' outcomes."""
    import httpx

    tokenizer = family.load_tokenizer()
    template = family.template_source()
    renderer = family.renderer_class(tokenizer, thinking_retention=retention)
    sampler = family.renderer_class(tokenizer)  # reads the scripted turns off the template
    counts: Counter = Counter()
    worker = MockWorker(tokenizer, template, sampler.normalize_messages)
    worker_server = Served(worker.app)
    gateway_server = Served(gateway_for(worker_server.url, renderer))
    log = ReasonLog()
    logger = logging.getLogger("rllm_renderers")
    level, logger.level = logger.level, logging.DEBUG
    logger.addHandler(log)
    try:
        with httpx.Client(timeout=60) as client:
            for number, (script, tools) in enumerate(
                [*episodes(reasoning=False), *episodes(reasoning=True)]
                if family.renderer_class.REASONING
                else episodes(False)
            ):
                play_episode(
                    client,
                    gateway_server.url,
                    f"{family.module}-{retention}-{number}",
                    worker,
                    sampler,
                    script,
                    tools,
                    retention,
                    counts,
                    log,
                )
    finally:
        logger.removeHandler(log)
        logger.setLevel(level)
        gateway_server.stop()
        worker_server.stop()
    return counts


def play_episode(client, url, session, worker, sampler, script, tools, retention, counts, log) -> None:
    script = playable(worker, script, tools)
    if script is None:  # (Gemma-3 has no tool role: such an episode is not one its users play)
        counts["episode skipped: the template refuses it"] += 1
        return
    turns = [index for index, message in enumerate(script) if message["role"] == "assistant"]
    previous = None  # (prompt ids, completion ids) of the last turn
    for turn, index in enumerate(turns):
        history, assistant = script[:index], script[index]
        following = turns[turn + 1] if turn + 1 < len(turns) else len(script)
        # (QwQ and DeepSeek-R1 cut reasoning out of the content: their model samples a reasoning block first)
        sampled = sampled_turn(sampler, history, assistant, tools, script[index + 1 : following]) or reasoned_turn(
            sampler, history, assistant, tools
        )
        if sampled is None or len(sampler.parse_response(sampled[1], tools=tools).tool_calls) != len(
            assistant.get("tool_calls") or []
        ):  # (DeepSeek-V3 drops the calls of a turn with content "", which transformers 5 needs)
            counts["episode cut: the template does not render the scripted turn as sampled"] += 1
            return
        worker.completion = sampled[1]
        seen, reasons = len(worker.requests), len(log.reasons)
        body = {"model": "m", "messages": history}
        if tools:
            body["tools"] = tools
        response = client.post(f"{url}/sessions/{session}/v1/chat/completions", json=body)
        if response.status_code != 200:
            raise AssertionError(f"gateway answered {response.status_code}: {response.text[:500]}")
        endpoint, prompt = worker.requests[seen]
        if turn > 0:
            count_turn(
                sampler,
                script,
                index,
                tools,
                previous,
                endpoint,
                prompt,
                retention,
                counts,
                log.reasons[reasons:],
                full=worker.template_prompt(script[:index], tools),
                verbatim_suffix=lambda: worker.verbatim_suffix(sampler, script[:index], tools),
            )
        previous = (prompt, sampled[1], index)


def playable(worker, script, tools) -> list | None:
    """The script as the template takes it: tool-call turns with ``content`` None, else "" (after
    transformers drops a None, several templates read the missing content and fail); None when the
    template refuses it either way."""
    for filler in (None, ""):
        candidate = [
            {**message, "content": filler} if message["role"] == "assistant" and message["content"] is None else message
            for message in script
        ]
        try:
            worker.tokenizer.apply_chat_template(
                worker.normalize(candidate), tools=tools, chat_template=worker.template, tokenize=False
            )
        except Exception:  # noqa: BLE001 - whatever the template raises: it refuses the episode
            continue
        return candidate
    return None


def count_turn(
    sampler, script, index, tools, previous, endpoint, prompt, retention, counts, reasons, *, full, verbatim_suffix=None
) -> None:
    """Classify a turn from the second on: bridged (right or wrong) or reset (and whether it may be).

    ``full``: the reference prompt of the conversation so far (the server's own render of
    ``script[:index]`` with the generation prompt); ``verbatim_suffix()``: under "verbatim", the
    template's ids for the new messages after the sampled turn, asked for only where ``full`` does
    not extend the previous prompt and completion."""
    counts["turns"] += 1
    kept = previous[0] + previous[1]
    keeps_history = retention == "verbatim" or full[: len(kept)] == kept
    if endpoint == "chat":
        counts["resets"] += 1
        if not keeps_history:
            reason = "the template rewrites the history"
        elif answers_depend_on_call_ids(sampler, script, previous, index, tools):
            keeps_history = False  # (the bridge must not guess which result answers which call)
            reason = "the results' order depends on call ids the completion does not carry"
        elif retention == "template" and hidden_reasoning_matters(sampler, script, previous, index, tools):
            keeps_history = False  # (the prompt cannot say whether the history held it)
            reason = "reasoning the prompt does not show would be written by the next render"
        else:
            reason = reasons[-1] if reasons else "no reason logged"
        counts[f"reset: {reason}"] += 1
        counts["resets where the template keeps history"] += keeps_history
        return
    counts["bridged"] += 1
    if full[: len(kept)] == kept:
        expected = list(full)
    elif retention == "verbatim":
        suffix = verbatim_suffix()
        expected = None if suffix is None else kept + suffix
    else:
        expected = None  # the template rewrites the history: no bridge is right
    counts["wrong"] += prompt != expected


def answers_depend_on_call_ids(sampler, script, previous, index, tools) -> bool:
    """Whether the new tool results render otherwise when the previous turn's calls (whose ids its
    completion does not carry) had their ids in another order (DeepSeek-V4 sorts results by call id)."""
    turn = previous[2]
    assistant, calls = script[turn], script[turn].get("tool_calls") or []
    if len(calls) < 2 or any(call.id for call in sampler.parse_response(previous[1], tools=tools).tool_calls):
        return False
    swapped = {**assistant, "tool_calls": [{**call, "id": calls[-1 - k]["id"]} for k, call in enumerate(calls)]}
    conversation = script[:index]
    try:
        return sampler.render_ids([*conversation[:turn], swapped, *conversation[turn + 1 :]], tools=tools) != (
            sampler.render_ids(conversation, tools=tools)
        )
    except ValueError:
        return True


def hidden_reasoning_matters(sampler, script, previous, index, tools) -> bool:
    """Whether reasoning on the earlier assistant turns, which the previous prompt does not show,
    would be written by the render of the conversation that follows it (the gpt-oss harmony template
    shows a tool-calling turn's analysis again once a tool result ends the conversation): then the
    ids alone cannot tell whether the history held it, and no bridge is the right answer."""
    turn = previous[2]

    def reasoned(messages):
        return [
            (
                {**m, "reasoning_content": "A thought."}
                if m["role"] == "assistant" and not m.get("reasoning_content")
                else m
            )
            for m in messages
        ]

    try:
        prompt_alike = sampler.render_text(reasoned(script[:turn]), tools=tools, add_generation_prompt=True) == (
            sampler.render_text(script[:turn], tools=tools, add_generation_prompt=True)
        )
        conversation = script[:index]
        return prompt_alike and sampler.render_text(
            [*reasoned(conversation[:turn]), *conversation[turn:]], tools=tools, add_generation_prompt=True
        ) != sampler.render_text(conversation, tools=tools, add_generation_prompt=True)
    except ValueError:
        return False


def real_tokenizer_families() -> list:
    chosen = os.environ.get("GATEWAY_FAMILIES")
    return [
        family
        for family in ALL_FAMILIES
        if not family.synthetic
        and not family.tokenizer.startswith("synthetic/")
        and (not chosen or family.module in chosen.split(","))
    ]


@pytest.fixture(scope="module", autouse=True)
def gateway_available():
    if not GATEWAY_SOURCE.exists():
        pytest.skip(f"rLLM's gateway not found at {GATEWAY_SOURCE} (set RLLM_CLIENTS)")
    pytest.importorskip("fastapi", reason="the gateway's dependencies (pip install -e '.[gateway]')")
    pytest.importorskip("uvicorn", reason="the gateway's dependencies (pip install -e '.[gateway]')")


@pytest.mark.parametrize("retention", RETENTIONS)
@pytest.mark.parametrize("family", real_tokenizer_families(), ids=lambda family: family.module)
def test_gateway_bridges_every_turn_the_template_keeps(family, retention):
    counts = play_family(family, retention)
    summary = f"{family.module}/{retention}: {dict(counts)}"
    assert counts["turns"] > 0, summary
    assert counts["wrong"] == 0, summary
    assert counts["resets where the template keeps history"] == 0, summary
    if retention == "verbatim":  # every turn bridges, but where the completion lacks what the template needs
        allowed = counts["reset: the results' order depends on call ids the completion does not carry"]
        assert counts["bridged"] + allowed == counts["turns"], summary


def test_every_real_tokenizer_family_is_played():
    """The gateway test covers every checked-in renderer that has a real corpus tokenizer."""
    assert len(real_tokenizer_families()) >= 13, [family.module for family in real_tokenizer_families()]


if __name__ == "__main__":  # the per-family table for the closing note
    print(f"{'family':26} {'retention':9} {'turns':>5} {'bridged':>7} {'resets':>6} {'wrong':>5}  reset reasons")
    for family in real_tokenizer_families():
        for retention in RETENTIONS:
            counts = play_family(family, retention)
            reasons = {key[7:]: value for key, value in counts.items() if key.startswith("reset: ")}
            print(
                f"{family.module:26} {retention:9} {counts['turns']:5} {counts['bridged']:7} {counts['resets']:6} "
                f"{counts['wrong']:5}  {reasons or ''}",
                flush=True,
            )
            if os.environ.get("GATEWAY_VERBOSE"):
                print("   ", dict(counts))
