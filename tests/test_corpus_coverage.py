"""Every corpus template is checked in, and its learned turn syntax holds on its own renders.

For models without a tokenizer in the corpus the renderer is built with a synthetic
tokenizer carrying the template's marker strings (built here from the template, as
``compiler verify`` does): ids are structural, the text is exact.
"""

from __future__ import annotations

import functools

import pytest

from compiler.analysis import parse_template
from compiler.markers import synthetic_tokenizer, template_markers
from compiler.pipeline import load_generated_file
from compiler.source import read_corpus_manifest
from rllm_renderers.turns.formats import special_token_placeholder
from tests.families import CORPUS, REPO, load_corpus_tokenizer

GENERATED = REPO / "generated"


def manifest():
    if not (CORPUS / "templates" / "MANIFEST.tsv").is_file():
        return []
    return read_corpus_manifest(CORPUS)


ENTRIES = manifest()


@functools.lru_cache(maxsize=None)
def renderers_by_model() -> dict[str, type]:
    by_model = {}
    for path in sorted(GENERATED.glob("*.py")):
        if not path.name.startswith("_"):
            renderer_class = load_generated_file(path)
            for model_id in renderer_class.MODEL_IDS:
                by_model[model_id] = renderer_class
    return by_model


def renderer_for(entry):
    renderer_class = renderers_by_model().get(entry.model_id)
    if renderer_class is None:
        pytest.fail(f"{entry.model_id} has no checked-in renderer")
    if entry.tokenizer is not None:
        return renderer_class(load_corpus_tokenizer(entry.tokenizer.name))
    source = entry.template.read_text(encoding="utf-8")
    runtime = {name: special_token_placeholder(name) for name, baked in renderer_class.SPECIAL_TOKENS.items() if baked is None}
    markers = template_markers(parse_template(source, entry.template.name), runtime.values())
    return renderer_class(synthetic_tokenizer(markers, runtime))


def test_every_corpus_model_has_a_checked_in_renderer():
    if not ENTRIES:
        pytest.skip(f"test corpus not found: {CORPUS} (set RLLM_CORPUS to the corpus folder)")
    missing = [entry.model_id for entry in ENTRIES if entry.model_id not in renderers_by_model()]
    assert not missing, f"no generated renderer for {missing}"


USER = {"role": "user", "content": "What is the capital of France?"}
ANSWER = {"role": "assistant", "content": "Paris is the capital."}


@pytest.mark.parametrize("entry", ENTRIES, ids=[entry.model_id for entry in ENTRIES])
def test_the_learned_close_is_what_the_template_writes_and_parses_back(entry):
    renderer = renderer_for(entry)
    if renderer.TURN is None:
        assert renderer.UNLEARNED.get("turn"), "a missing turn format must say why"
        return
    turn = renderer.TURN
    prompt_text = renderer.render_text([USER], add_generation_prompt=True)
    last = renderer.render_text([USER, ANSWER])
    middle = renderer.render_text([USER, ANSWER, USER])
    # the close is what the template writes right after the last answer (what the model samples);
    # mid-conversation it writes after_close before the next message (gpt-oss closes with <|end|> there)
    assert ANSWER["content"] + turn.close in last
    output = renderer._render_output([USER, ANSWER, USER], None, False)
    next_start = next(offset for offset, index in output.message_spans() if index == 2)
    between = middle[middle.index(ANSWER["content"]) + len(ANSWER["content"]) : next_start]
    assert between.endswith(turn.after_close)
    assert between == turn.close + turn.after_close or not renderer.PREFIX_STABLE
    stops = renderer.get_stop_strings()
    assert stops and all(stop for stop in stops)
    # what the model samples after the generation prompt ends at the first stop; parsing it gives the content
    sampled = last[len(prompt_text) :] if last.startswith(prompt_text) else None
    if sampled is None or ANSWER["content"] not in sampled:
        pytest.skip("the template renders the last assistant turn differently from its generation prompt")
    if turn.close:
        stop_at = min(sampled.find(stop) + len(stop) for stop in stops if stop in sampled)
        sampled = sampled[:stop_at]
    else:
        sampled += stops[0]  # the model stops on the next message's header
    parsed = renderer.parse_response(renderer.encoder.encode(sampled), prompt_ids=renderer.render_ids([USER], add_generation_prompt=True))
    if renderer.UNLEARNED:
        assert parsed.status == "unlearned" and ANSWER["content"] in parsed.content
    else:
        assert (parsed.content.strip(), parsed.status, parsed.tool_calls) == (ANSWER["content"], "ok", [])
