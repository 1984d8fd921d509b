"""rLLM's model gateway in front of a REAL vLLM server, with this project's renderer.

The gateway (``../shared/clients/rllm-model-gateway``) runs in cumulative token mode, built by its
own ``create_app`` from the toy model folder, with ``renderers.create_renderer`` switched to
``rllm_renderers.create_renderer`` (the one-line change an engine makes; ``renderer_family`` is
"auto", so the renderer is chosen by the served chat template). Turn 1 goes to vLLM's chat
endpoint, which renders the prompt itself; from turn 2 on the gateway bridges with ids only and
sends ``/v1/completions``; a None resets the session onto the chat path.

Each family's toy model (tests/engines/vllm_server.py) is served once, and long scripted
episodes (20+ assistant turns: plain answers, reasoning, one call, parallel calls) are played
with every sampled turn forced, text and ids. Each episode is sent in one of the request shapes
clients send and vLLM rewrites before its template sees them (SHAPES).

Every prompt vLLM receives (its ``prompt_token_ids``, read between gateway and server) is checked
against the reference, vLLM's own chat render of the whole conversation so far (a chat request
with ``max_tokens=1``), by ``count_turn`` of tests/test_gateway_client.py: bridged; reset, where
the template keeps the history or rewrites it; wrong (a bridged prompt other than the reference,
or any bridge where the reference does not extend the previous prompt + completion). Asserted:
0 wrong, 0 resets where the template keeps history, every forced turn sampled as forced.

``python -m tests.engines.test_vllm_gateway [family ...]`` prints the per-family table.
"""

import contextlib
import json
import logging
import os
import statistics
import sys
import time
import types
from collections import Counter
from dataclasses import dataclass, field

import pytest

from compiler.turn_sampling import reasoned_turn, sampled_turn
from tests.engines.vllm_server import VllmServer, family_named, forced_sampling, vllm_available, write_toy_model
from tests.test_gateway_client import GATEWAY_SOURCE, TOOLS, ReasonLog, Served, answer, call, count_turn

pytestmark = pytest.mark.engine

#: RLLM_VLLM_VERBOSE=1: a line per turn (endpoint, prompt length, time, the bridge's time and reason)
VERBOSE = os.environ.get("RLLM_VLLM_VERBOSE") == "1"

#: The families served: the flags vLLM needs for them (``tools`` in a chat request needs a tool
#: parser; parsers read completions only, never the prompt).
SERVED = {
    "qwen3": ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"],
    "qwen3_5": ["--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder"],
    "llama_3_1": ["--enable-auto-tool-choice", "--tool-call-parser", "llama3_json"],
    "deepseek_v3": ["--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v3"],
    # vLLM renders gpt-oss with OpenAI's harmony encoder, not the template; create_renderer gives
    # the renderer exact to harmony (SERVED_BY)
    "gpt_oss": ["--enable-auto-tool-choice", "--tool-call-parser", "openai"],
}

#: How the client writes the messages it sends back (vLLM's API takes arguments as strings only):
#: (name, reasoning on the sampled turns where the template has it).
SHAPES = (
    ("spaced arguments", True),  # json.dumps(arguments): what the template itself writes
    ("compact arguments, null content", False),  # (vLLM parses them and the template re-writes them)
    ("content parts", True),  # user and tool content as lists of text parts
)


# --- the episodes ---------------------------------------------------------------------------


def long_episode(reasoning: bool, parallel: bool, turns: int = 20) -> list[dict]:
    """Rounds of a call, two calls (at once, or one per turn), a summary and a plain answer to a
    follow-up, until the episode has at least ``turns`` assistant turns."""
    think = (lambda text: text) if reasoning else (lambda text: None)
    places = [
        ("Paris", "Asia/Tokyo", "Europe/Rome"),
        ("Oslo", "America/Lima", "Africa/Cairo"),
        ("Quito", "Asia/Seoul", "Europe/Oslo"),
        ("Nairobi", "Asia/Dubai", "America/Denver"),
        ("Hanoi", "Europe/Paris", "Asia/Tokyo"),
    ]
    script: list[dict] = [{"role": "system", "content": "You are a concise assistant. Use the tools when they help."}]
    number = 0
    while sum(message["role"] == "assistant" for message in script) < turns:
        city, zone_a, zone_b = places[number % len(places)]
        ids = [f"call_{number}_{k}" for k in range(3)]
        script += [
            {"role": "user", "content": f"Weather in {city}, and the time in {zone_a} and {zone_b}?"},
            answer(None, think(f"Weather in {city} first."), [call(ids[0], "get_weather", city=city)]),
            {"role": "tool", "tool_call_id": ids[0], "content": f"Sunny, {10 + number} C"},
        ]
        times = [call(ids[1], "get_time", zone=zone_a), call(ids[2], "get_time", zone=zone_b)]
        results = [
            {"role": "tool", "tool_call_id": ids[1], "content": f"0{number}:15"},
            {"role": "tool", "tool_call_id": ids[2], "content": f"1{number}:45"},
        ]
        if parallel:
            script += [answer(None, think("Both times at once."), times), *results]
        else:
            script += [answer(None, think("The first time."), times[:1]), results[0]]
            script += [answer(None, think("The second time."), times[1:]), results[1]]
        script += [
            answer(f"{city}: sunny, {10 + number} C; {zone_a} 0{number}:15, {zone_b} 1{number}:45.", think("Sum up.")),
            {"role": "user", "content": f'Thanks! One fact about {city}, in "quotes"?'},
            answer(f'"{city} is a city."', think("A short fact.")),
        ]
        number += 1
    return script


def chat_episode(reasoning: bool, turns: int = 20) -> list[dict]:
    """A plain chat of ``turns`` questions and answers (for templates that cannot write the calls)."""
    think = (lambda text: text) if reasoning else (lambda text: None)
    script: list[dict] = [{"role": "system", "content": "You are a concise assistant."}]
    for number in range(turns):
        script += [
            {"role": "user", "content": f'Fact {number} about the number {number * 7}, in "quotes"?'},
            answer(f'"{number * 7} is {number * 7 % 2 and "odd" or "even"}."', think(f"Check {number * 7}.")),
        ]
    return script


def as_sent(script: list[dict], shape: str) -> list[dict]:
    """The messages as a client in ``shape`` sends them back."""
    separators = (",", ":") if shape.startswith("compact") else None
    sent = []
    for message in script:
        message = dict(message)
        if message.get("tool_calls"):
            message["tool_calls"] = [
                {
                    **c,
                    "function": {
                        **c["function"],
                        "arguments": json.dumps(c["function"]["arguments"], separators=separators),
                    },
                }
                for c in message["tool_calls"]
            ]
            if not message["content"]:
                message["content"] = None if shape.endswith("null content") else ""
        if shape == "content parts" and message["role"] in ("user", "tool"):
            message["content"] = [{"type": "text", "text": message["content"]}]
        sent.append(message)
    return sent


def sampled_completion(sampler, script, index, following, tools) -> list[int] | None:
    """The ids a model samples for the assistant turn ``script[index]`` (its stop last), read off
    the template; None where no model samples it so, or its calls would not parse back."""
    history, assistant = script[:index], script[index]
    sampled = sampled_turn(sampler, history, assistant, tools, script[index + 1 : following]) or reasoned_turn(
        sampler, history, assistant, tools
    )
    if sampled is None or len(sampler.parse_response(sampled[1], tools=tools).tool_calls) != len(
        assistant.get("tool_calls") or []
    ):
        return None
    return sampled[1]


def tool_episode(sampler, reasoning: bool) -> list[dict] | None:
    """The long tool episode as the template takes it: parallel calls in one turn, else one call
    per turn (Llama-3.x takes one; gpt-oss samples one turn per call); None when it writes no
    call turn as a model samples it."""
    for parallel in (True, False):
        script = with_call_content(sampler, long_episode(reasoning, parallel), TOOLS)
        if script is not None:
            return script
    return None


def with_call_content(sampler, script, tools) -> list[dict] | None:
    """The script with the content of its call turns as the template takes it: None where it
    renders their calls so, else "" (templates that read a missing content fail), else a short
    text (DeepSeek-V3 writes a call turn's calls only after some content). None when some assistant
    turn of the script is not read off the template as a model samples it."""
    turns = [index for index, message in enumerate(script) if message["role"] == "assistant"]
    bounds = list(zip(turns, [*turns[1:], len(script)]))
    for filler in (None, "", "Let me check."):
        candidate = [
            {**message, "content": filler} if message.get("tool_calls") and not message["content"] else message
            for message in script
        ]
        try:
            if all(sampled_completion(sampler, candidate, index, following, tools) for index, following in bounds):
                return candidate
        except ValueError:
            continue
    return None


# --- between the gateway and vLLM -------------------------------------------------------------


class Recorder:
    """A pass-through in front of vLLM that keeps each POST's path and vLLM's answer."""

    def __init__(self, upstream: str) -> None:
        import httpx
        from fastapi import FastAPI, Request, Response

        self.answers: list[tuple[str, dict]] = []
        app = FastAPI()
        client = httpx.AsyncClient(base_url=upstream, timeout=900)

        @app.api_route("/{path:path}", methods=["GET", "POST"])
        async def forward(path: str, request: Request):
            answered = await client.request(
                request.method, f"/{path}", content=await request.body(), headers={"content-type": "application/json"}
            )
            if request.method == "POST" and answered.status_code == 200:
                self.answers.append((path, answered.json()))
            return Response(answered.content, status_code=answered.status_code, media_type="application/json")

        self.app = app

    def last(self) -> tuple[str, list[int], list[int]]:
        """(endpoint "chat" or "completions", the prompt ids vLLM took, the ids it sampled)."""
        path, body = self.answers[-1]
        choice = body["choices"][0]
        if path.endswith("chat/completions"):
            return "chat", body["prompt_token_ids"], choice["token_ids"]
        return "completions", choice["prompt_token_ids"], choice["token_ids"]


class TimedBridge:
    """Times every ``bridge_to_next_turn`` of the renderer the gateway built."""

    def __init__(self, renderer) -> None:
        self.seconds: list[float] = []
        bridge = renderer.bridge_to_next_turn

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return bridge(*args, **kwargs)
            finally:
                self.seconds.append(time.perf_counter() - started)

        renderer.bridge_to_next_turn = timed


@contextlib.contextmanager
def project_create_renderer():
    """``renderers.create_renderer`` is this project's while the gateway builds its app."""
    import rllm_renderers

    saved = sys.modules.get("renderers")
    shim = types.ModuleType("renderers")
    shim.create_renderer = rllm_renderers.create_renderer
    sys.modules["renderers"] = shim
    try:
        yield
    finally:
        if saved is None:
            sys.modules.pop("renderers", None)
        else:
            sys.modules["renderers"] = saved


def gateway_app(model_dir, worker_url: str):
    """rLLM's gateway as its ``create_app`` builds it in cumulative token mode."""
    if str(GATEWAY_SOURCE) not in sys.path:
        sys.path.insert(0, str(GATEWAY_SOURCE))
    from rllm_model_gateway import GatewayConfig, create_app

    config = GatewayConfig(
        model=str(model_dir),
        store_worker="memory",
        workers=[{"url": f"{worker_url}/v1", "worker_id": "vllm"}],
        health_check_interval=999,
        sync_traces=True,
        cumulative_token_mode=True,
        renderer_family="auto",
    )
    with project_create_renderer():
        return create_app(config)


def served_by(renderer_class) -> type:
    """The renderer class that renders as the servers do (gpt-oss: the harmony encoder's)."""
    from rllm_renderers.core.generated_index import SERVED_BY

    module = SERVED_BY.get(renderer_class.__module__.rsplit(".", 1)[-1])
    return family_named(module).renderer_class if module else renderer_class


# --- playing a family -------------------------------------------------------------------------


@dataclass
class Played:
    counts: Counter = field(default_factory=Counter)
    first_bridge: list[float] = field(default_factory=list)  # the bridge after a chat turn
    later_bridges: list[float] = field(default_factory=list)
    episodes: dict = field(default_factory=dict)  # shape -> its counts
    wrong_examples: list = field(default_factory=list)  # where each wrong prompt parts from vLLM's


def play_family(module: str, server: VllmServer) -> Played:
    import httpx

    family = family_named(module)
    played = Played()
    recorder = Recorder(server.base_url)
    recorder_server = Served(recorder.app)
    app = gateway_app(server.model_dir, recorder_server.url)
    renderer = app.state.proxy.renderer
    served = served_by(family.renderer_class)
    assert type(renderer) is served, f"create_renderer gave {type(renderer).__name__}, not {served.__name__}"
    sampler = served(family.load_tokenizer())  # reads the scripted turns off the template
    timer = TimedBridge(renderer)
    gateway = Served(app)
    log = ReasonLog()
    logger = logging.getLogger("rllm_renderers")
    level, logger.level = logger.level, logging.DEBUG
    logger.addHandler(log)
    try:
        with httpx.Client(timeout=900) as client:
            for shape, reasoning in SHAPES:
                reasoning = reasoning and family.renderer_class.REASONING
                script, tools = tool_episode(sampler, reasoning), TOOLS
                if script is None and reasoning:  # (gpt-oss: history drops the reasoning of a summary)
                    script = tool_episode(sampler, False)
                    played.counts["tool episodes without reasoning: the template drops it"] += script is not None
                if script is None:  # (the template does not write the calls as a model samples them)
                    if shape.startswith("compact"):
                        continue  # (no calls: the shape is the spaced one's)
                    script, tools = chat_episode(reasoning), None
                    played.counts["episodes without tools: the template does not write the calls"] += 1
                before = Counter(played.counts)
                episode = Episode(client, gateway.url, server, recorder, timer, log, sampler, played)
                episode.play(f"{module}-{len(played.episodes)}", script, shape, tools)
                played.episodes[shape] = played.counts - before
    finally:
        logger.removeHandler(log)
        logger.setLevel(level)
        gateway.stop()
        recorder_server.stop()
    return played


@dataclass
class Episode:
    client: object
    gateway_url: str
    server: VllmServer
    recorder: Recorder
    timer: TimedBridge
    log: ReasonLog
    sampler: object
    played: Played

    def play(self, session: str, script: list[dict], shape: str, tools) -> None:
        sent = as_sent(script, shape)
        turns = [index for index, message in enumerate(script) if message["role"] == "assistant"]
        previous, endpoint = None, None
        for turn, index in enumerate(turns):
            following = turns[turn + 1] if turn + 1 < len(turns) else len(script)
            completion = sampled_completion(self.sampler, script, index, following, tools)
            assert completion is not None, f"{session}: the template does not render turn {turn} as a model samples it"
            body = {"model": self.server.model, "messages": sent[:index], **({"tools": tools} if tools else {})}
            body.update(forced_sampling(self.sampler._decode(completion[:-1]), completion[:-1], completion[-1]))
            bridges, reasons, after_chat = len(self.timer.seconds), len(self.log.reasons), endpoint == "chat"
            started = time.time()
            response = self.client.post(f"{self.gateway_url}/sessions/{session}/v1/chat/completions", json=body)
            assert response.status_code == 200, (
                f"{session} turn {turn}: the gateway answered {response.status_code}: {response.text[:800]}\n"
                f"vLLM's log:\n{self.server.log_tail()}"
            )
            (self.played.first_bridge if after_chat else self.played.later_bridges).extend(self.timer.seconds[bridges:])
            endpoint, prompt, sampled_ids = self.recorder.last()
            self.played.counts["forced turns sampled otherwise"] += sampled_ids != completion
            counted = Counter(self.played.counts)
            if turn > 0:
                count_turn(
                    self.sampler,
                    script,
                    index,
                    tools,
                    previous,
                    endpoint,
                    prompt,
                    "template",
                    self.played.counts,
                    self.log.reasons[reasons:],
                    full=(full := self.reference(sent[:index], tools)),
                )
                if self.played.counts["wrong"] > counted["wrong"]:
                    self.played.wrong_examples.append(self.parting(session, turn, previous, prompt, full))
            if VERBOSE:
                verdict = {key: value for key, value in (self.played.counts - counted).items() if key != "turns"}
                print(
                    f"  {session} turn {turn}: {endpoint}, {len(prompt)} ids, {time.time() - started:.1f} s,"
                    f" bridge {[round(t, 3) for t in self.timer.seconds[bridges:]]} s: {verdict}",
                    flush=True,
                )
            previous = (prompt, sampled_ids, index)

    def parting(self, session: str, turn: int, previous, prompt: list[int], full: list[int]) -> str:
        """Where a wrong bridged prompt and vLLM's own render of the conversation part."""
        kept = len(previous[0]) + len(previous[1])
        at = next((k for k, (a, b) in enumerate(zip(prompt, full)) if a != b), min(len(prompt), len(full)))
        decode = self.sampler._decode
        return (
            f"{session} turn {turn}: previous prompt + completion {kept} ids, bridged {len(prompt)}, vLLM {len(full)};"
            f" first difference at {at}: bridged {decode(prompt[at - 8 : at + 12])!r},"
            f" vLLM {decode(full[at - 8 : at + 12])!r}"
        )

    def reference(self, messages: list[dict], tools) -> list[int]:
        """vLLM's own chat render of ``messages`` with the generation prompt."""
        body = {"model": self.server.model, "messages": messages, "max_tokens": 1, "return_token_ids": True}
        if tools:
            body["tools"] = tools
        answered = self.client.post(f"{self.server.base_url}/v1/chat/completions", json=body)
        assert answered.status_code == 200, answered.text[:800]
        return answered.json()["prompt_token_ids"]


# --- the table --------------------------------------------------------------------------------

COLUMNS = ("turns", "bridged", "keeps: resets", "rewrites: resets", "wrong", "forced missed")


def row(module: str, played: Played, start_seconds: float) -> str:
    counts = played.counts
    keeps = counts["resets where the template keeps history"]

    def ms(values):
        return f"{1000 * statistics.median(values):.1f}/{1000 * max(values):.0f}" if values else "-"

    return (
        f"{module:12} {start_seconds:7.0f} {counts['turns']:5} {counts['bridged']:7} {keeps:13} "
        f"{counts['resets'] - keeps:16} {counts['wrong']:5} {counts['forced turns sampled otherwise']:13} "
        f"{ms(played.first_bridge):>14} {ms(played.later_bridges):>14}"
    )


HEADER = (
    f"{'family':12} {'start s':>7} {'turns':>5} {'bridged':>7} {'keeps: resets':>13} {'rewrites: resets':>16} "
    f"{'wrong':>5} {'forced missed':>13} {'first ms med/max':>16} {'bridge ms med/max':>17}"
)


def reset_reasons(played: Played) -> dict:
    return {key[7:]: value for key, value in played.counts.items() if key.startswith("reset: ")}


# --- the test ---------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def gateway_available():
    if not GATEWAY_SOURCE.exists():
        pytest.skip(f"rLLM's gateway not found at {GATEWAY_SOURCE} (set RLLM_CLIENTS)")
    pytest.importorskip("fastapi", reason="the gateway's dependencies (pip install -e '.[gateway]')")


#: Families where the real server showed wrong bridges that are not fixed yet, with what it showed.
#: strict: the day they pass, the mark must go.
KNOWN_WRONG = {
    "gpt_oss": (
        "vLLM's chat path writes a history call's header as '<|channel|>commentary json<|message|>'"
        " where the harmony encoder (and so gpt_oss_harmony, and the sampled turn) writes"
        " 'commentary <|constrain|>json': vLLM's render of the conversation does not extend the"
        " previous prompt + completion after a call turn, yet the bridge extends it (9 of 57 turns,"
        " 2026-12-07); the renderer needs vLLM's harmony history form as a served_by profile"
    ),
}


@pytest.mark.parametrize(
    "module",
    [
        pytest.param(module, marks=pytest.mark.xfail(reason=KNOWN_WRONG[module], strict=True))
        if module in KNOWN_WRONG
        else module
        for module in SERVED
    ],
)
def test_gateway_bridges_every_turn_vllm_keeps(module, vllm_server):
    server = vllm_server(module, SERVED[module])
    played = play_family(module, server)
    print(f"\n{HEADER}\n{row(module, played, server.start_seconds)}\n  resets: {reset_reasons(played)}")
    for shape, counts in played.episodes.items():
        print(f"  {shape}: {dict(counts)}")
    summary = f"{module}: {dict(played.counts)}"
    assert len(played.episodes) >= 2, summary
    assert all(counts["turns"] >= 19 for counts in played.episodes.values()), summary  # (20 assistant turns)
    assert played.counts["forced turns sampled otherwise"] == 0, summary
    assert played.counts["wrong"] == 0, "\n".join([str(summary), *played.wrong_examples[:3]])
    assert played.counts["resets where the template keeps history"] == 0, summary


if __name__ == "__main__":  # the per-family table for the closing note
    import tempfile
    from pathlib import Path

    reason = vllm_available()
    if reason:
        sys.exit(reason)
    print(HEADER, flush=True)
    with tempfile.TemporaryDirectory() as folder:
        for module in sys.argv[1:] or list(SERVED):
            with VllmServer(write_toy_model(module, Path(folder) / module), extra_args=SERVED[module]) as server:
                played = play_family(module, server)
            print(row(module, played, server.start_seconds), flush=True)
            print(f"  resets: {reset_reasons(played)}", flush=True)
