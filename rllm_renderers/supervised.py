"""Supervised training examples from a renderer's own attribution.

A compiled renderer knows, for every token of a render, which message wrote it and whether the
model samples it (:class:`~rllm_renderers.types.RenderedTokens`). A supervised example is that
render with a weight per token: 1.0 where the loss applies, 0.0 elsewhere.

Two rules decide the weights:

* **What is trained is what the model samples.** For an assistant message, that is its content,
  reasoning and tool calls as the template writes them, and the close token the model samples to
  end its turn (``<|im_end|>``). It is never the turn's header or the generation prompt the
  template writes before it (``<|im_start|>assistant\\n``, a prefilled ``<think>\\n``, the
  ``</think>`` DeepSeek-V4 writes where its prompt has ``<think>``, in a turn whose reasoning it
  dropped: its chat mode's prompt), nor what the template writes after the close (the ``\\n``
  before the next message, an ``eos_token`` the template appends at the end of the conversation).
* **A rewritten history is trained as rewritten.** An example is the template's render of the
  whole conversation, so where the template rewrites earlier turns (Qwen3 drops the reasoning of
  turns before the last user message), ``train_on="all_assistant"`` trains those turns as the
  template rewrote them, not as the model sampled them. Where that matters, use the per-turn split
  (:func:`build_supervised_examples_per_turn`, what the Fireworks cookbook calls disaggregation):
  one example per assistant message, each the render of the conversation up to and including that
  message, trained on that message alone, so every turn is trained after the prompt it was sampled
  from. :func:`build_supervised_examples` with ``split="auto"`` picks the single example when it
  trains every turn exactly as its own per-turn example does, and the split otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from .types import Message, RenderedTokens, ToolSpec


class AttributingRenderer(Protocol):
    """What an example is built from: a render with per-token attribution, and the learned turn
    syntax (a :class:`~rllm_renderers.core.base.GeneratedRenderer`)."""

    TURN: Any

    def render(self, messages: list[Message], *, tools: Any = None, add_generation_prompt: bool = False) -> RenderedTokens: ...


#: The ``train_on`` policies of :func:`build_supervised_example`.
TRAIN_ON = ("last_assistant", "all_assistant", "all")
#: The ``split`` choices of :func:`build_supervised_examples`.
SPLITS = ("auto", "never", "per_turn")


@dataclass
class SupervisedExample:
    """Token ids with one loss weight per token, and the render they come from.

    ``weights[k]`` is 1.0 when token ``k`` is trained, else 0.0. ``rendered`` holds the attribution
    (message index, sampled and content flags per token) the weights were read from, and
    ``trained_messages`` the indices of the messages whose tokens are trained (empty for
    ``train_on="all"``, which trains every token).
    """

    token_ids: list[int]
    weights: list[float]
    rendered: RenderedTokens
    trained_messages: tuple[int, ...] = ()

    @property
    def trained_mask(self) -> list[bool]:
        """``weights`` as booleans (True: trained)."""
        return [weight > 0 for weight in self.weights]

    @property
    def num_trained(self) -> int:
        return sum(1 for weight in self.weights if weight > 0)


def build_supervised_example(
    renderer: AttributingRenderer,
    messages: list[Message],
    *,
    tools: list[ToolSpec] | None = None,
    train_on: str = "last_assistant",
) -> SupervisedExample:
    """The template's render of ``messages`` (no generation prompt) with a weight per token.

    ``train_on``:

    * ``"last_assistant"``: the tokens the model samples in the last assistant message;
    * ``"all_assistant"``: those of every assistant message, earlier turns as the template
      renders them in this conversation (rewritten history is trained as rewritten);
    * ``"all"``: every token.

    Raises ValueError naming what is wrong: an unknown ``train_on``, a conversation without an
    assistant message (for the assistant policies), a renderer that has not learned how an assistant
    turn ends, or an assistant message of which the template writes no sampled token (for
    ``"last_assistant"``: the last one; for ``"all_assistant"``: all of them).
    """
    if train_on not in TRAIN_ON:
        raise ValueError(f"train_on must be one of {', '.join(map(repr, TRAIN_ON))}; got {train_on!r}")
    rendered = renderer.render(messages, tools=tools, add_generation_prompt=False)
    if train_on == "all":
        return SupervisedExample(list(rendered.token_ids), [1.0] * len(rendered.token_ids), rendered)
    assistants = _assistant_indices(renderer, messages)
    chosen = assistants[-1:] if train_on == "last_assistant" else assistants
    trained = trained_tokens(rendered, set(chosen))
    if not any(trained):
        which = f"message {chosen[0]}" if len(chosen) == 1 else f"messages {', '.join(map(str, chosen))}"
        raise ValueError(
            f"{type(renderer).__name__}'s template writes no token the model samples for assistant {which} "
            f"(train_on={train_on!r}): nothing to train"
        )
    return SupervisedExample(
        list(rendered.token_ids), [1.0 if flag else 0.0 for flag in trained], rendered, tuple(chosen)
    )


def trained_tokens(rendered: RenderedTokens, message_indices: set[int]) -> list[bool]:
    """Per token, whether the model samples it in one of these messages.

    A run of sampled tokens belongs to the message its first token is attributed to (the close a
    template writes after a message's content belongs to the turn the model closes with it).
    """
    flags = [False] * len(rendered.token_ids)
    owner = -1
    for k, sampled in enumerate(rendered.sampled_mask):
        if not sampled:
            owner = -1
            continue
        if owner < 0:
            owner = rendered.message_indices[k]
        flags[k] = owner in message_indices
    return flags


def build_supervised_examples_per_turn(
    renderer: AttributingRenderer, messages: list[Message], *, tools: list[ToolSpec] | None = None
) -> list[SupervisedExample]:
    """One example per assistant message: the render of ``messages[: i + 1]`` trained on message ``i``.

    Every turn is trained after the prompt the template gives it when it is the newest turn, which is
    the prompt it was sampled from (disaggregation). Costs one render per assistant message.
    """
    examples = []
    for index in _assistant_indices(renderer, messages):
        examples.append(build_supervised_example(renderer, messages[: index + 1], tools=tools))
    return examples


def build_supervised_examples(
    renderer: AttributingRenderer,
    messages: list[Message],
    *,
    tools: list[ToolSpec] | None = None,
    split: str = "auto",
) -> list[SupervisedExample]:
    """Examples that train every assistant message.

    ``split``: ``"never"``: one example, ``train_on="all_assistant"`` (rewritten turns trained as
    rewritten); ``"per_turn"``: :func:`build_supervised_examples_per_turn`; ``"auto"``: the one
    example when, for every assistant message, its per-turn example is a prefix of it with the same
    trained tokens (so the single sequence trains each turn exactly as sampled), else the split.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(map(repr, SPLITS))}; got {split!r}")
    if split == "never":
        return [build_supervised_example(renderer, messages, tools=tools, train_on="all_assistant")]
    per_turn = build_supervised_examples_per_turn(renderer, messages, tools=tools)
    if split == "per_turn":
        return per_turn
    whole = build_supervised_example(renderer, messages, tools=tools, train_on="all_assistant")
    if all(_trains_turn_alike(whole, turn) for turn in per_turn):
        return [whole]
    return per_turn


def _trains_turn_alike(whole: SupervisedExample, turn: SupervisedExample) -> bool:
    """Whether ``whole`` holds ``turn``'s tokens at its start and trains its turn on the same tokens."""
    length = len(turn.token_ids)
    if whole.token_ids[:length] != turn.token_ids:
        return False
    (index,) = turn.trained_messages
    in_whole = trained_tokens(whole.rendered, {index})
    return in_whole[:length] == turn.trained_mask and not any(in_whole[length:])


def _assistant_indices(renderer: AttributingRenderer, messages: list[Message]) -> list[int]:
    if renderer.TURN is None:
        raise ValueError(
            f"{type(renderer).__name__} has not learned how an assistant turn ends (TURN is None): "
            "it cannot tell which tokens the model samples"
        )
    if not isinstance(messages, (list, tuple)):
        raise ValueError(f"messages must be a list of dicts, got {type(messages).__name__}")
    indices = [
        i for i, message in enumerate(messages) if isinstance(message, dict) and message.get("role") == "assistant"
    ]
    if not indices:
        raise ValueError(
            "the conversation has no assistant message: nothing to train (use train_on='all' to train every token)"
        )
    return indices
