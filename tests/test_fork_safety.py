"""``os.fork()`` while threads render and bridge: the child renders and bridges with the parent's ids.

A child has only the thread that forked; a lock another thread held at that moment stays held in
the child, and an engine's Rust state may be mid-call.  So the locks of the runtime's caches and
the engines are rebuilt in the child (:mod:`rllm_renderers.forksafe`).  The test makes the worst
case certain: besides threads that render and bridge in a loop, one thread holds every cache lock
at the moment of the fork.  The child must finish within a timeout (a hang fails, it does not block).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from rllm_renderers.encoding import detokenize
from rllm_renderers.encoding import fast_encoder
from rllm_renderers.jinja import frozen_inputs
from tests.families import FAMILIES

QWEN3 = next(family for family in FAMILIES if family.module == "qwen3")
TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file.",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]  # fmt: skip
MESSAGES = [
    {"role": "system", "content": "You are a careful assistant that reads files before answering. " * 8},
    {"role": "user", "content": "What does the file setup.py hold? Please answer briefly, in one sentence."},
]
NEXT = [{"role": "user", "content": "And what does README.md hold? Again in one sentence, please."}]
CHILD_TIMEOUT = 120.0


def _episode(renderer, tokenizer) -> tuple[list[int], list[int] | None]:
    """A prompt, and the bridge from it past a sampled reply to the next user message."""
    prompt = renderer.render_ids(MESSAGES, tools=TOOLS, add_generation_prompt=True)
    reply = tokenizer.encode("It holds the package's build settings.", add_special_tokens=False)
    completion = reply + renderer.get_stop_token_ids()[:1]
    bridged = renderer.bridge_to_next_turn(prompt, completion, NEXT, tools=TOOLS)
    return prompt, None if bridged is None else list(bridged.token_ids)


def _wait(pid: int) -> int | None:
    """The child's exit code, or None when it did not finish within CHILD_TIMEOUT (then it is killed)."""
    deadline = time.monotonic() + CHILD_TIMEOUT
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
@pytest.mark.parametrize("backend", ["hf", "tiktoken", "fastokens"])
def test_a_child_forked_while_threads_render_renders_the_same_ids(backend, monkeypatch):
    monkeypatch.setenv("RLLM_RENDERERS_ENCODER", backend)
    tokenizer = QWEN3.load_tokenizer()
    renderer = QWEN3.renderer_class(tokenizer)
    assert renderer.encoder.backend == backend, renderer.encoder.backend_reason
    expected = _episode(renderer, tokenizer)
    assert expected[1] is not None  # the bridge is exercised, not skipped

    stop, holding = threading.Event(), threading.Event()
    failures: list[str] = []

    def render_and_bridge() -> None:
        while not stop.is_set():
            if _episode(renderer, tokenizer) != expected:
                failures.append("a thread of the parent rendered other ids")

    locks = [renderer.encoder._cache._lock, renderer.encoder._copies_lock, renderer.prompt_histories._lock,
             frozen_inputs._lock, fast_encoder._PLANS_LOCK, detokenize._lock]  # fmt: skip

    def hold_every_lock() -> None:
        for lock in locks:
            lock.acquire()
        holding.set()
        stop.wait()
        for lock in locks:
            lock.release()

    threads = [threading.Thread(target=render_and_bridge) for _ in range(2)] + [threading.Thread(target=hold_every_lock)]
    for thread in threads:
        thread.start()
    try:
        assert holding.wait(30)
        time.sleep(0.05)  # the rendering threads are inside renders (waiting for the held locks)
        pid = os.fork()
        if pid == 0:  # the child: only this thread exists
            code = 3
            try:
                code = 0 if _episode(renderer, tokenizer) == expected else 1
            finally:
                os._exit(code)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert _wait(pid) == 0, f"the child forked with the {backend} backend hung or rendered other ids"
    assert failures == []
