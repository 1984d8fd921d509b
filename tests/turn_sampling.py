"""What a model samples for an assistant turn, read off the template (shared by the turn-level tests)."""

from __future__ import annotations

import json


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
    if close is None or writes_a_stop(renderer, assistant):
        return None
    header = renderer.generation_prompt().strip()
    if closed and header and header in renderer.decode(completion[close + 1 :]):
        return None
    return prompt, completion[: close + 1]


def writes_a_stop(renderer, assistant) -> bool:
    """Whether the message's own text (content, reasoning, calls) holds a stop token's text."""
    text = json.dumps(assistant, ensure_ascii=False, default=str)
    return any(stop in text for stop in renderer.TURN.stop_tokens if stop)
