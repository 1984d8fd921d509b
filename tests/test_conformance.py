"""One renderer contract, run against every backend ``resolve`` can return.

Backends: generated renderers (Qwen3, Llama-3.1, DeepSeek-V3, gpt-oss), PrimeIntellect's
``renderers`` (the ``prime`` extra), tinker-cookbook's built-ins behind our adapter (the
``tinker`` extra) and the chat-template adapter. The contract:

- ``render(...).token_ids == render_ids(...)``, with per-token lists of matching length;
- ``get_stop_token_ids()`` is a non-empty list of ints inside the vocabulary;
- ``parse_response`` never raises on a list of ids of the vocabulary, random ones included
  (hypothesis); an id outside it is a ValueError naming its position, in ``bridge_to_next_turn`` too;
- ``bridge_to_next_turn`` returns None or ids that start with the previous prompt + completion
  (cut after its first stop token) byte for byte; never with an assistant among the new messages.

Tokenizers come from the shared corpus (``RLLM_CORPUS``); without it these tests skip.
"""

from __future__ import annotations

import copy
import functools
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import rllm_renderers  # noqa: E402
from rllm_renderers.core.registry import resolve  # noqa: E402

CORPUS = Path(os.environ.get("RLLM_CORPUS", REPO.parent / "shared" / "corpus"))
HYPOTHESIS = settings(
    max_examples=20,
    deadline=None,
    derandomize=bool(os.environ.get("CI")),
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@functools.lru_cache(maxsize=None)
def corpus_tokenizer(folder: str):
    path = CORPUS / "tokenizers" / folder
    if not (path / "tokenizer.json").exists():
        pytest.skip(f"test corpus not found: {path} (set RLLM_CORPUS to the shared corpus folder)")
    from rllm_renderers.encoding.loading import load_tokenizer

    return load_tokenizer(path)


def with_template(folder: str, template_file: str):
    """A copy of a corpus tokenizer that ships ``template_file`` as its chat template."""
    tokenizer = copy.copy(corpus_tokenizer(folder))
    tokenizer.chat_template = (CORPUS / "templates" / template_file).read_text(encoding="utf-8")
    return tokenizer


@pytest.fixture(scope="session")
def harmony_vocab_dir(tmp_path_factory):
    """openai_harmony's o200k vocabulary, derived offline from the gpt-oss tokenizer."""
    pytest.importorskip("renderers", reason="the prime extra (renderers) is not installed")
    from rllm_renderers.adapters import prime

    if not os.environ.get("TIKTOKEN_ENCODINGS_BASE"):
        cache = tmp_path_factory.mktemp("xdg")
        old = os.environ.get("XDG_CACHE_HOME")
        os.environ["XDG_CACHE_HOME"] = str(cache)
        try:
            prime.ensure_harmony_vocab(corpus_tokenizer("gptoss"))
        finally:
            os.environ.pop("XDG_CACHE_HOME") if old is None else os.environ.__setitem__("XDG_CACHE_HOME", old)
    return os.environ["TIKTOKEN_ENCODINGS_BASE"]


# --- the backends under test: (id, source, builder) -------------------------------------


def _generated(model: str, folder: str):
    resolution = resolve(model, corpus_tokenizer(folder))
    assert resolution.source == "generated", resolution
    return resolution.renderer, corpus_tokenizer(folder)


def _prime(family: str, folder: str, request):
    pytest.importorskip("renderers", reason="the prime extra (renderers) is not installed")
    if family == "gpt-oss":
        request.getfixturevalue("harmony_vocab_dir")
    resolution = resolve("any/model", corpus_tokenizer(folder), renderer=f"prime:{family}")
    assert resolution.source == "prime", resolution
    return resolution.renderer, corpus_tokenizer(folder)


def _tinker(name: str, folder: str):
    pytest.importorskip("tinker_cookbook", reason="the tinker extra (tinker-cookbook) is not installed")
    resolution = resolve("any/model", corpus_tokenizer(folder), renderer=f"tinker:{name}")
    assert resolution.source == "tinker", resolution
    return resolution.renderer, corpus_tokenizer(folder)


def _chat_template(folder: str, template: str):
    pytest.importorskip("jinja2", reason="the chat-template adapter needs transformers + jinja2")
    tokenizer = with_template(folder, template)
    resolution = resolve("any/model", tokenizer, renderer="chat_template")
    assert resolution.source == "chat_template", resolution
    return resolution.renderer, tokenizer


BACKENDS = {
    "generated-qwen3": lambda request: _generated("Qwen/Qwen3-8B", "qwen3"),
    "generated-llama3.1": lambda request: _generated("meta-llama/Llama-3.1-8B-Instruct", "llama31"),
    "generated-deepseek-v3": lambda request: _generated("deepseek-ai/DeepSeek-V3", "dsv3"),
    "generated-gpt-oss": lambda request: _generated("openai/gpt-oss-20b", "gptoss"),
    "prime-qwen3": lambda request: _prime("qwen3", "qwen3", request),
    "prime-deepseek-v3": lambda request: _prime("deepseek-v3", "dsv3", request),
    "prime-llama-3": lambda request: _prime("llama-3", "llama31", request),
    "prime-gpt-oss": lambda request: _prime("gpt-oss", "gptoss", request),
    "tinker-qwen3": lambda request: _tinker("qwen3", "qwen3"),
    "tinker-deepseekv3": lambda request: _tinker("deepseekv3", "dsv3"),
    "tinker-llama3": lambda request: _tinker("llama3", "llama31"),
    "tinker-gpt-oss": lambda request: _tinker("gpt_oss_no_sysprompt", "gptoss"),
    "chat_template-qwen3": lambda request: _chat_template("qwen3", "Qwen__Qwen3-8B.jinja"),
    "chat_template-llama3.1": lambda request: _chat_template("llama31", "meta-llama__Llama-3.1-8B-Instruct.jinja"),
}

_built: dict[str, tuple] = {}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request):
    """(renderer, tokenizer) for one backend, built once per session."""
    if request.param not in _built:
        _built[request.param] = BACKENDS[request.param](request)
    return _built[request.param]


CONVERSATIONS = [
    [{"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there!"}],
    [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another one, in French."},
    ],
    [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris."},
    ],
]


# --- the contract ---------------------------------------------------------------------------


def test_satisfies_the_protocol(backend):
    renderer, _ = backend
    assert isinstance(renderer, rllm_renderers.Renderer)
    assert isinstance(renderer.is_prefix_stable, bool)


def test_satisfies_prime_protocol_when_installed(backend):
    renderers = pytest.importorskip("renderers", reason="the prime extra (renderers) is not installed")
    assert isinstance(backend[0], renderers.Renderer)


@pytest.mark.parametrize("conversation", range(len(CONVERSATIONS)))
@pytest.mark.parametrize("generation_prompt", [False, True])
def test_render_and_render_ids_agree(backend, conversation, generation_prompt):
    renderer, _ = backend
    messages = CONVERSATIONS[conversation]
    if generation_prompt and messages[-1]["role"] == "assistant":
        messages = messages + [{"role": "user", "content": "Thanks."}]
    ids = renderer.render_ids(messages, add_generation_prompt=generation_prompt)
    rendered = renderer.render(messages, add_generation_prompt=generation_prompt)
    assert list(rendered.token_ids) == ids and ids and all(isinstance(t, int) for t in ids)
    assert len(rendered.message_indices) == len(ids)
    assert all(-1 <= index < len(messages) for index in rendered.message_indices)
    assert len(rendered.sampled_mask) in (0, len(ids))
    assert len(rendered.is_content) in (0, len(ids))
    assert list(rendered.message_roles) == [m["role"] for m in messages]


def test_stop_token_ids(backend):
    renderer, tokenizer = backend
    stops = renderer.get_stop_token_ids()
    assert isinstance(stops, list) and stops
    assert all(isinstance(t, int) and 0 <= t < len(tokenizer) for t in stops)


def _token_lists(tokenizer, stops):
    vocab = len(tokenizer)
    special = sorted(set(getattr(tokenizer, "all_special_ids", [])) | set(stops))
    token = st.one_of(st.integers(min_value=0, max_value=vocab - 1), st.sampled_from(special))
    return st.lists(token, max_size=40)


def test_parse_response_never_raises(backend):
    renderer, tokenizer = backend
    stops = renderer.get_stop_token_ids()

    @HYPOTHESIS
    @given(ids=_token_lists(tokenizer, stops))
    def check(ids):
        parsed = renderer.parse_response(ids)
        assert isinstance(parsed.content, str)
        assert isinstance(parsed.tool_calls, list)

    check()


@pytest.mark.parametrize("outside", ["negative", "vocabulary size"])
def test_ids_outside_the_vocabulary_are_named(backend, outside):
    """Every backend refuses them alike: a ValueError naming the argument and the position."""
    renderer, tokenizer = backend
    value = -1 if outside == "negative" else len(tokenizer)
    ids = tokenizer.encode("Hi.", add_special_tokens=False)
    with pytest.raises(ValueError, match=rf"token_ids\[1\] is {value}, outside the tokenizer's vocabulary"):
        renderer.parse_response(ids[:1] + [value] + ids[1:])
    prompt = renderer.render_ids(CONVERSATIONS[0], add_generation_prompt=True)
    with pytest.raises(ValueError, match=rf"previous_completion_ids\[0\] is {value}"):
        renderer.bridge_to_next_turn(prompt, [value, *renderer.get_stop_token_ids()[:1]], NEW_MESSAGES["user"])


def test_parse_response_reads_plain_text(backend):
    renderer, tokenizer = backend
    ids = tokenizer.encode("Plain words here.", add_special_tokens=False) + renderer.get_stop_token_ids()[:1]
    parsed = renderer.parse_response(ids)
    assert "Plain words here." in (parsed.content or "") + (parsed.reasoning_content or "")


def _assert_bridge_extends(bridge, prompt, completion, stops):
    if bridge is None:
        return
    cut = next((completion[: i + 1] for i, t in enumerate(completion) if t in set(stops)), completion)
    expected = prompt + cut
    ids = list(bridge.token_ids)
    assert ids[: len(expected)] == expected, "a bridge must extend the previous prompt + completion byte for byte"
    assert len(ids) > len(expected)
    assert len(bridge.message_indices) == len(ids)


NEW_MESSAGES = {
    "user": [{"role": "user", "content": "And 3+3?"}],
    "tool": [{"role": "tool", "content": "6", "name": "add", "tool_call_id": "call_1"}],
}


@pytest.mark.parametrize("new", sorted(NEW_MESSAGES))
@pytest.mark.parametrize("shape", ["closed", "truncated", "past_stop"])
def test_bridge_is_none_or_extends(backend, shape, new):
    renderer, tokenizer = backend
    prompt = renderer.render_ids(CONVERSATIONS[0], add_generation_prompt=True)
    stops = renderer.get_stop_token_ids()
    text = tokenizer.encode("The answer is 4.", add_special_tokens=False)
    completion = {
        "closed": text + stops[:1],
        "truncated": text,
        "past_stop": text + stops[:1] + tokenizer.encode(" junk", add_special_tokens=False),
    }[shape]
    bridge = renderer.bridge_to_next_turn(prompt, completion, NEW_MESSAGES[new])
    _assert_bridge_extends(bridge, prompt, completion, stops)


def test_bridge_extends_a_rendered_reply(backend):
    """The completion the template itself writes for a reply: a bridge, if any, extends it."""
    renderer, _ = backend
    conversation = CONVERSATIONS[0]
    prompt = renderer.render_ids(conversation, add_generation_prompt=True)
    full = renderer.render_ids(conversation + [{"role": "assistant", "content": "4"}])
    if full[: len(prompt)] != prompt:
        pytest.skip("this template renders a finished reply differently from a generation prompt + reply")
    completion = full[len(prompt) :]
    stops = renderer.get_stop_token_ids()
    bridge = renderer.bridge_to_next_turn(prompt, completion, [{"role": "user", "content": "And 3+3?"}])
    _assert_bridge_extends(bridge, prompt, completion, stops)


def test_bridge_refuses_assistant_messages(backend):
    renderer, tokenizer = backend
    prompt = renderer.render_ids(CONVERSATIONS[0], add_generation_prompt=True)
    completion = tokenizer.encode("4", add_special_tokens=False) + renderer.get_stop_token_ids()[:1]
    new = [{"role": "user", "content": "More?"}, {"role": "assistant", "content": "Sure."}]
    assert renderer.bridge_to_next_turn(prompt, completion, new) is None


def test_bridge_random_completions(backend):
    renderer, tokenizer = backend
    prompt = renderer.render_ids(CONVERSATIONS[0], add_generation_prompt=True)
    stops = renderer.get_stop_token_ids()
    vocab = len(tokenizer)
    completions = st.lists(
        st.one_of(st.integers(min_value=0, max_value=vocab - 1), st.sampled_from(stops)), min_size=1, max_size=12
    )

    @settings(HYPOTHESIS, max_examples=10)
    @given(completion=completions)
    def check(completion):
        bridge = renderer.bridge_to_next_turn(prompt, completion, [{"role": "user", "content": "Next."}])
        _assert_bridge_extends(bridge, prompt, completion, stops)

    check()
