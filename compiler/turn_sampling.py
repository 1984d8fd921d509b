"""What a model samples for an assistant turn, read off the template (the bridge proof and the turn-level tests)."""

from __future__ import annotations

import json
import os

from rllm_renderers.bridging.bridge import close_end, first_stop_end
from .probes import TAG, back_to_boundary, common_prefix, first_added_token, last_added_token
from rllm_renderers.turns.parsing import decoded_prefix_lengths, token_index_at


def turn_points(messages: list[dict]):
    """``(history, assistant, new)`` for every assistant turn after the first message: the
    conversation before it, the turn, and the non-assistant messages that follow it (maybe none)."""
    for index, message in enumerate(messages):
        if message.get("role") != "assistant" or index == 0:
            continue
        end = index + 1
        while end < len(messages) and messages[end].get("role") != "assistant":
            end += 1
        yield messages[:index], message, messages[index + 1 : end]


def sampled_turn(renderer, history, assistant, tools, new=None):
    """``(prompt ids, completion ids)``: the assistant turn as the template renders it after the
    generation prompt, cut right after its first stop token; None when no model samples it so.

    A turn that nothing closes (GLM: the next header's first token is the stop the model samples)
    is read from the rendering with the ``new`` messages (None without them). None also when the
    message's own text holds a stop token, and when the template goes on with another turn for the
    same message (gpt-oss writes one turn per parallel call, and the model samples them one by one).
    """
    closed = bool(renderer.TURN.close)
    if not closed and not new:
        return None
    try:
        prompt = renderer.render_ids(history, tools=tools, add_generation_prompt=True)
        if closed:
            full = renderer.render_ids(history + [assistant], tools=tools)
        else:
            full = renderer.render_ids(history + [assistant] + new, tools=tools, add_generation_prompt=True)
    except ValueError:
        return None
    if full[: len(prompt)] != prompt:
        return None
    stops = set(renderer.get_stop_token_ids())
    completion = full[len(prompt) :]
    close = next((k for k, token in enumerate(completion) if token in stops), None)
    text_close = text_stop_token(renderer, completion)
    if text_close is not None and (close is None or text_close < close):
        close = text_close
    if close is None or writes_a_stop(renderer, assistant):
        return None
    header = renderer.generation_prompt().strip()
    if closed and header and header in renderer.decode(completion[close + 1 :]):
        return None
    return prompt, completion[: close + 1]


def text_stop_token(renderer, completion: list[int]) -> int | None:
    """The index of the token that completes the first stop string not a single token (``USER:``,
    ``[Round``) in the decoded ``completion``, or None: an engine that stops on text stops there."""
    text_stops = renderer._parse_facts().text_stops
    text = renderer.decode(completion)
    found = [text.find(stop) + len(stop) for stop in text_stops if stop and stop in text]
    if not found:
        return None
    return token_index_at(decoded_prefix_lengths(renderer._decode, completion), min(found)) - 1


def writes_a_stop(renderer, assistant) -> bool:
    """Whether the message's own text (content, reasoning, calls) holds a stop token's text."""
    text = json.dumps(assistant, ensure_ascii=False, default=str)
    return any(stop in text for stop in renderer.TURN.stop_tokens if stop)


#: The reasoning of a turn built by :func:`reasoned_turn`.
THOUGHT = "First I check what was asked.\n"


def reasoned_turn(renderer, history, assistant, tools):
    """``(prompt ids, completion ids)`` for a template that never writes reasoning but cuts it out of
    the content (QwQ, DeepSeek-R1), whose turns :func:`sampled_turn` cannot read off the template:
    what the model samples is a reasoning block (with its open marker unless the prompt opened it),
    then the turn as the template writes it, cut right after its first stop token. None for other
    templates.
    """
    reasoning = renderer.REASONING
    if reasoning is None or not reasoning.in_content or writes_a_stop(renderer, assistant):
        return None
    try:
        prompt = renderer.render_ids(history, tools=tools, add_generation_prompt=True)
        prompt_text = renderer.render_text(history, tools=tools, add_generation_prompt=True)
        turn_text = renderer.render_text(history + [assistant], tools=tools)
    except ValueError:
        return None
    if prompt_text.rstrip().endswith(reasoning.close):
        return None  # the prompt closes an empty block (thinking off): the model samples no reasoning
    block = reasoning.open + reasoning.after_open
    opened = prompt_text.rstrip().endswith(reasoning.open)  # (and the white space after it, learned or not)
    # the turn's text starts where the prompt's header ends (before a prefilled open marker)
    header_end = prompt_text.rstrip().rfind(reasoning.open) if opened else len(prompt_text)
    start = min(len(os.path.commonprefix([prompt_text, turn_text])), header_end)
    turn = turn_text[start:]
    # the turn may write the block's close itself, after no reasoning (DeepSeek-V3.1's `</think>content`)
    close = "" if turn.startswith(reasoning.close) else reasoning.close + reasoning.after_close
    text = ("" if opened else block) + THOUGHT + close + turn
    ids = renderer.encoder.encode(text)
    stops = set(renderer.get_stop_token_ids())
    stop = next((k for k, token in enumerate(ids) if token in stops), None)
    return None if stop is None else (prompt, ids[: stop + 1])


def template_suffix(renderer, tokenizer, history, assistant, new, tools, full_text) -> list[int] | None:
    """The template's tokens for the new messages after the history: ``full_text`` (the template's
    render of history + turn + new, with the generation prompt) from the end of the sampled turn's
    close on (the turn's span comes from the renderer's message marks, on the same text; the close
    is its last stop token, else its last added token), encoded."""
    output = renderer._render_output(history + [assistant] + new, tools, True)
    if output.text() != full_text:
        return None
    starts = {index: offset for offset, index in reversed(output.message_spans())}
    turn, following = starts.get(len(history)), starts.get(len(history) + 1)
    if turn is None:
        return None
    if following is None:  # the template writes the new messages inside the turn (Gemma-4)
        end = first_stop_end(renderer, full_text, turn)
    else:
        end = close_end(renderer, full_text, turn, following)
    return None if end is None else tokenizer.encode(full_text[end:], add_special_tokens=False)


def after_prefill(prompt: str, full: str, markers: frozenset[str]) -> str | None:
    """What the model samples after ``prompt`` for the turn ``full`` renders where the prompt ends
    with a prefill that the turn's history form lacks, and the history form is still what a model
    samples after it; None otherwise. Two prefills qualify:

    * an open tag whose close the turn starts with: the model closed the block at once
      (DeepSeek-V3.1 with thinking prompts ``<think>``, history writes ``</think>Fine.``);
    * an empty closed block, both markers absent from the turn (Gemma-4 with thinking off prompts
      ``<|channel>thought\n<channel|>``, history writes the answer alone).
    """
    header = back_to_boundary(common_prefix(prompt, full))
    prefill, turn = prompt[len(header) :].strip(), full[len(header) :]
    if not prefill or not prompt.startswith(header):
        return None
    if TAG.fullmatch(prefill) and turn.startswith("</" + prefill[1:]):
        return turn
    first, last = first_added_token(prefill, markers), last_added_token(prefill, markers)
    if first is None or last is None or first == last or not prefill.startswith(first):
        return None
    return turn if first not in turn and last not in turn else None
