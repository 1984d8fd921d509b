"""Extend a sampled turn with the next messages without re-encoding history.

Contract of ``bridge_turn(renderer, p, c, new, tools=..., messages=...)``:

* ``c'`` is the completion ``c`` cut right after its first stop token, or, when it was
  truncated before any, ``c`` with the template's close token appended.
* The result is ``None`` or tokens ``p + c' + S``, where ``S`` is exactly what the template
  writes after the sampled turn for ``new`` and the generation prompt, given the real
  history: ``S`` is cut from ``render(history + [sampled turn] + new,
  add_generation_prompt=True)`` right after the sampled turn's close and encoded alone
  (after the close token, as the tokenizer sees it in the full text).
* ``thinking_retention="template"``: the result is non-None exactly when that full render
  starts with the text of ``p + c'`` (the template does not rewrite history), and then its
  text is the full render's text. ``"verbatim"``: the sampled tokens are kept as sampled,
  also where the template would rewrite them (drop reasoning), as long as the template writes
  the turn's parsed content back when it is the last message (else the parse missed structure
  and the history would be a guess: ``None``). When the template writes the new messages
  inside the sampled turn (Gemma-4's tool responses), the turn ends at its first stop.

History-dependent template state (a flag set by the first tool result of the conversation,
the parity of a message's index, a system prompt) comes from the real history, never from
stand-ins: ``messages=`` (the conversation ``p`` was rendered from, without the sampled turn),
or else the renderer's memory of prompts it produced itself (``render_ids`` with the
generation prompt, and earlier bridge results), keyed by the prompt's exact ids. A history the
renderer does not vouch for (``messages=`` other than the remembered ones, a prompt it never
produced, the remembered messages with other ``tools``) is rendered and must prove to be the
prompt's: the remembered text for those ids, or text that encodes (under "template": or whose ids
decode) to exactly the prompt; else None (for ``messages=``, with the reason logged: a caller's
mismatch is never an exception, so a gateway never fails the request over it).
Under "verbatim" a prompt may hold turns kept as sampled, which the template renders otherwise,
so only its end is compared with ``messages``. A prompt the renderer cannot trace back to its
messages gets ``None``.

``None`` also when: no previous prompt or no new message; an assistant message among the new
ones; the completion does not parse into a turn the template can render (a malformed tool
call); the template rejects the new messages; the previous prompt was not rendered with the
generation prompt. A completion that leaves its reasoning open is read as that reasoning, a
guess: it bridges only where the template renders that turn exactly as sampled, also under
"verbatim".

Cost: the new messages (and ``messages=``, when given) are converted once for the template. The
translated template runs once, resumed near the end of the history where its message loop is
resumable (:mod:`rllm_renderers.bridging.resume`: the text before the loop, and the loop's state, are
checked equal to the previous prompt's render; then the loop runs from the last history message
the new ones can change); otherwise, and for ``control_token_safe`` renderers, over the whole
conversation (twice when the prompt is not remembered: its text is needed too, and is encoded
once to prove it the prompt's). No tokenizer work on a remembered history: only the completion is
decoded and only ``S`` is encoded; the attribution of the result is computed when first read. What grows with the conversation is C-level list work: the
caller's prompt compared with the renderer's copy, and the result's fresh list. A remembered
prompt's copy is shared with the prompts bridged from it (grown in place), so it is not copied again.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from ..jinja import runtime as jinja
from ..turns.parsing import as_token_ids, decoded_prefix_lengths, token_index_at, token_sequence
from .memory import PROMPT_TAIL_TOKENS, History, PromptText, Recalled, text_from
from .recovery import Unrecoverable, explain_once, recover_conversation
from ..encoding.offsets import inside_ranges, span_values
from ..turns.messages import RENDERABLE_CALLS, content_text, message_from_parse
from .contract import BridgeableRenderer
from ..turns.boundaries import cut_at_stop, tool_names
from ..types import BridgedTokens, Message, RenderedTokens, ToolSpec

if TYPE_CHECKING:  # pragma: no cover
    from ..core.output import RenderOutput

RETENTION_POLICIES = ("template", "verbatim")
INTEGERS = frozenset((int,))
#: Characters of a prompt's text looked at before its last tokens (longer than any added token).
TOKEN_TEXT_WINDOW = 256


logger = logging.getLogger(__name__)
_explained: set[type] = set()  # classes whose "cannot bridge" reason was logged
_mismatches: set[tuple[type, str]] = set()  # (class, reason) of a caller's mismatch logged as a warning


def unlearned_reason(renderer: BridgeableRenderer) -> str | None:
    """Why this renderer can never bridge (turn facts it did not learn), logged once per class."""
    if not renderer.UNLEARNED and renderer.TURN is not None:
        return None
    reason = "; ".join(f"{fact}: {why}" for fact, why in renderer.UNLEARNED.items()) or "no turn format"
    if type(renderer) not in _explained:
        _explained.add(type(renderer))
        logger.warning("%s.bridge_to_next_turn always returns None: %s", type(renderer).__name__, reason)
    return reason



# --- inputs -------------------------------------------------------------------------------


def checked_new_messages(new_messages: Any) -> list[Message]:
    """The new messages as a list of dicts with a string role; anything else is a ValueError naming it."""
    if not isinstance(new_messages, (list, tuple)):
        raise ValueError(f"new_messages must be a list of message dicts, got {type(new_messages).__name__}")
    for index, message in enumerate(new_messages):
        if not isinstance(message, dict):
            raise ValueError(f"new_messages[{index}] must be a message dict, got {type(message).__name__}")
        if not isinstance(message.get("role"), str):
            raise ValueError(f"new_messages[{index}] has no string 'role'")
    return list(new_messages)


# --- the sampled turn ---------------------------------------------------------------------


def closed_completion(renderer: BridgeableRenderer, completion_ids: list[int]) -> list[int] | None:
    """The completion cut right after its first stop, or with the template's close appended.

    None when that cannot be done exactly: a stop string that ends inside a token, or a
    truncated completion whose close is text of several tokens (its tokens would depend on
    what precedes it). A turn that nothing closes (the next header ends it) needs no close.
    """
    completion = list(completion_ids)
    facts = renderer._parse_facts()
    close, close_id, stop_ids, text_stops = renderer.TURN.close, facts.close_id, facts.stop_ids, facts.text_stops
    if text_stops and not any(token in set(stop_ids) for token in completion):
        text = renderer._decode(completion)
        found = [(text.find(stop) + len(stop), stop) for stop in text_stops if stop in text]
        if found:
            stop_end, stop = min(found)
            end = token_index_at(decoded_prefix_lengths(renderer._decode, completion), stop_end)
            return completion[:end] if renderer._decode(completion[:end]).endswith(stop) else None
    cut = cut_at_stop(completion, stop_ids, close_id)
    if cut is None and not close:
        return completion  # nothing closes the turn: a truncated completion is complete as it is
    return cut


def sampled_turn_as_message(
    renderer: BridgeableRenderer, completion_ids: list[int], tools
) -> tuple[Message, bool] | None:
    """The assistant message the completion encodes, and whether it is only a guess; None when it
    does not parse cleanly.

    A turn that leaves its reasoning open is a guess (its reasoning is the open block's text): it
    may only bridge where the template renders it exactly as sampled. A tool-call turn without
    text gets ``content=""``: transformers drops ``content=None`` before rendering, and several
    templates refuse an assistant message without content.
    """
    # (as parse_response, without token spans; reasoning the template finds in the content stays there)
    parsed = renderer._parse_turn(completion_ids, tools, for_template=True).parsed
    if parsed is None or any(call.status not in RENDERABLE_CALLS for call in parsed.calls):
        return None
    return message_from_parse(parsed, renderer.TURN.content_parts), parsed.reasoning_complete is False


CALL_ID_KEYS = frozenset({"id", "tool_call_id"})


@functools.cache
def template_reads_call_ids(renderer_class: type) -> bool:
    """Whether the translated template can read a call id at all: a string constant ``"id"`` or
    ``"tool_call_id"`` in the code of the class's own methods (the template, statement by statement;
    generated code reads ``x.id`` as ``jinja.getattr(x, "id")``). A template that names neither
    cannot render the tool results by the ids, so the bridge need not render again to find out.
    """

    def constants(code) -> set:
        found = set()
        for constant in code.co_consts:
            if isinstance(constant, str):
                found.add(constant)
            elif hasattr(constant, "co_consts"):
                found |= constants(constant)
        return found

    codes = [getattr(value, "__code__", None) for value in vars(renderer_class).values()]
    return any(constants(code) & CALL_ID_KEYS for code in codes if code is not None)


def renders_by_missing_names(renderer: BridgeableRenderer, history: History, sampled: Message, new) -> bool:
    """Whether the new messages render differently depending on the name of a sampled call whose name
    did not parse (rendered as ``""``). The tokens may not say which name the model wrote: Gemma-4's
    ``call:{x{a:1}}`` is the tool ``{x``, or no name and other arguments, and it writes the name again
    in the tool result. Rendered with such calls named ``x`` too: the text the new messages add after
    the turn must be the same (GLM's ``<tool_call></tool_call>`` is a call without a name, whatever
    follows)."""
    calls = sampled.get("tool_calls") or []
    unnamed = {index for index, call in enumerate(calls) if not call["function"]["name"]}
    if not unnamed or not new:
        return False

    def added_text(name: str) -> str | None:
        named = {
            **sampled,
            "tool_calls": [
                {**call, "function": {**call["function"], "name": name}} if index in unnamed else call
                for index, call in enumerate(calls)
            ],
        }
        try:
            turn = renderer._run_template(
                jinja.TemplateList(history.messages + renderer.template_messages([named])), history.tools, False
            ).text()
            whole = renderer._run_template(
                jinja.TemplateList(history.messages + renderer.template_messages([named] + new)), history.tools, True
            ).text()
        except ValueError:
            return None
        return whole[len(turn) :] if whole.startswith(turn) else None

    as_parsed = added_text("")
    return as_parsed is None or as_parsed != added_text("x")


def renders_by_call_ids(renderer: BridgeableRenderer, history: History, sampled: Message, new, tools, render) -> bool:
    """Whether the template renders the new tool results differently depending on the ids of the
    sampled calls, when the completion does not carry them: DeepSeek-V4 sorts results into call
    order by ``tool_call_id``; a Gemma-4-style template finds a result's tool name through the id
    of the call it answers. The ids are not in the tokens, so no bridge.

    Rendered once more with the ids of the new tool messages given to the calls in reverse order
    (one call: the id its result names).
    """
    calls = sampled.get("tool_calls") or []
    answered = [message.get("tool_call_id") for message in new if message.get("role") == "tool"]
    if not calls or not answered or not template_reads_call_ids(type(renderer)):
        return False
    if any(call["id"] != f"call_{index}" for index, call in enumerate(calls)):
        return False  # the completion carries its own call ids (Kimi): the template sees them
    ids = (answered[::-1] + [f"call_{index}" for index in range(len(calls))])[: len(calls)]
    swapped = {**sampled, "tool_calls": [{**call, "id": ids[index]} for index, call in enumerate(calls)]}
    try:
        messages = history.messages + renderer.template_messages([swapped] + new)
        other = renderer._run_template(jinja.TemplateList(messages), history.tools, True, resume_from=render.checkpoint)
    except ValueError:
        return True
    if other.origin == render.origin:  # (the same text read from other messages is another render too)
        return other.text() != render.text or other.caller_ranges() != render.output.caller_ranges()
    return str(PromptText(render.prompt_text, other.origin, other.text())) != str(render.full_text())


# --- the history behind a prompt ----------------------------------------------------------


def recalled_prompt(renderer: BridgeableRenderer, previous_prompt_ids: Any) -> tuple[list, Recalled | None]:
    """The previous prompt's ids and, when the renderer produced that prompt, what it remembers of it.

    A prompt equal to one the renderer remembers goes on from the renderer's own copy (its ints,
    whatever equal values the caller passed); any other is checked to be integers, and so are the
    last ids of a remembered one (floats equal to its ids are refused as the bad input they are,
    without a check of every id).
    """
    prompt = token_sequence(previous_prompt_ids, "previous_prompt_ids")
    recalled = renderer.prompt_histories.recall(prompt)
    if recalled is None or not set(map(type, prompt[-PROMPT_TAIL_TOKENS:])) <= INTEGERS:
        return as_token_ids(prompt, "previous_prompt_ids", renderer.vocab_size), None
    return prompt, recalled


def history_of(
    renderer: BridgeableRenderer, remembered: History | None, messages, template_tools: Any
) -> tuple[History | None, bool]:
    """The conversation the prompt was rendered from, and whether it is known to be that prompt's:
    ``messages`` when given, else ``remembered`` (the renderer's memory of that prompt);
    ``template_tools``: the caller's tools as the template sees them.

    A remembered prompt of the same conversation and tools lends its text and its checkpoint (the
    template run they save is only needed to know them): known. Any other history (the caller's
    ``messages``, or the remembered messages with other tools) is rendered by the bridge and must
    prove to be the prompt's (:func:`renders_previous_prompt`).
    """
    if messages is None:
        if remembered is None:
            return None, False
        if remembered.tools is template_tools or remembered.tools == template_tools:
            return remembered, True
        return History(remembered.messages, template_tools), False  # other tools: do they render alike?
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ValueError("messages must be the non-empty list of messages the previous prompt was rendered from")
    template_messages = list(renderer.template_messages(list(messages)))
    # only the same conversation lends its text: two texts can encode to the same ids (NFC)
    if remembered is not None and remembered.tools == template_tools and remembered.messages == template_messages:
        return History(template_messages, template_tools, remembered.prompt_text, remembered.checkpoint), True
    return History(template_messages, template_tools), False


def renders_previous_prompt(
    renderer: BridgeableRenderer,
    prompt: list[int],
    history: History,
    render: "ExtendedRender",
    remembered: History | None,
    messages_given: bool,
) -> bool:
    """Whether the history the bridge rendered (``render.prompt_text``) is the previous prompt's:
    its text is the text the renderer remembers for those ids, or it encodes to them (as
    ``render_ids`` would), or, for a prompt the renderer does not know, they decode to it (sampled
    tokens other than the tokenizer's own split of their text).

    Under "verbatim" a prompt may hold sampled turns kept as sampled, which the template renders
    otherwise, and the caller's messages for them need not be what the parser read: a history given
    as ``messages=`` is compared on the prompt's end only (:func:`ends_like`). One encode of the
    history's text: the price of a history the renderer cannot vouch for.
    """
    if messages_given and renderer.thinking_retention == "verbatim":
        return True
    text = str(render.prompt_text)
    if remembered is not None and str(remembered.prompt_text) == text:
        return True
    output = render.history_output
    plain = renderer._plain_ranges(output, text, history.messages) if renderer.plain_content_roles else None
    if renderer.encoder.encode(text, plain_ranges=plain) == prompt:
        return True
    return remembered is None and renderer._decode(prompt) == text


# --- the bridge ---------------------------------------------------------------------------


def bridge_turn(
    renderer: BridgeableRenderer,
    previous_prompt_ids: Any,
    previous_completion_ids: Any,
    new_messages: Any,
    *,
    tools: list[ToolSpec] | None = None,
    messages: list[Message] | None = None,
) -> RenderedTokens | None:
    prompt, recalled = recalled_prompt(renderer, previous_prompt_ids)
    completion = as_token_ids(previous_completion_ids, "previous_completion_ids", renderer.vocab_size)
    new = checked_new_messages(new_messages)
    if not prompt or not new or any(message["role"] == "assistant" for message in new):
        return None
    try:
        new_inputs = renderer.template_messages(new)
    except ValueError as exc:  # a role the template does not render, a malformed tool call
        raise ValueError(f"new_messages: {exc}") from None
    if unlearned_reason(renderer) is not None:
        return None
    template_tools = renderer.template_tools(tools)
    remembered = recalled.history if recalled else None
    history, known = history_of(renderer, remembered, messages, template_tools)
    turn = BridgePoint(renderer, prompt, recalled, completion, new, new_inputs, tools)
    if history is None:  # a prompt the renderer did not produce (an inference server's): read it back
        return bridge_from_recovered(turn, template_tools)
    if messages is None and recalled.others:  # other sessions' conversations with the same prompt ids
        return bridge_from_shared(turn, recalled, template_tools)
    bridged = turn.bridge(history, known, remembered, messages is not None)
    if bridged is None:
        return None
    result, memory = bridged
    renderer.prompt_histories.remember(result.token_ids, memory, extends=recalled)
    return result


def bridge_from_recovered(turn: "BridgePoint", template_tools: Any) -> RenderedTokens | None:
    """The bridge from a prompt the renderer did not produce, on the conversations recovered from the
    prompt's text (:mod:`rllm_renderers.bridging.recovery`). Each reading that proves to be the prompt's (it
    encodes to exactly the prompt) is bridged; all of them must give the same tokens (a reading that
    gives None, or other tokens, means the prompt does not say which history it holds), and at
    least one must prove."""
    renderer = turn.renderer
    try:
        recovery = recover_conversation(renderer, renderer._decode(turn.prompt), turn.tools)
    except Unrecoverable as exc:
        explain_once(renderer, str(exc))
        return None
    outcomes = []
    for reading in (recovery.messages, *recovery.variants):
        try:
            history = History(list(renderer.template_messages(reading)), template_tools)
            outcomes.append(turn.bridge(history, False, None, True, strict=True))
        except (ValueError, NotThePrompt):  # not a conversation the template takes, or not this prompt's
            continue
    if not outcomes:
        explain_once(renderer, "prove: no conversation read from the text encodes to the prompt's ids")
        return None
    if any(outcome is None for outcome in outcomes):
        # (as with a caller's messages: mostly a template that rewrites the sampled turn, a normal None)
        explain_once(renderer, "no bridge on the recovered conversation either", always_debug=True)
        return None
    result, memory = outcomes[0]
    if any(list(other.token_ids) != list(result.token_ids) for other, _ in outcomes[1:]):
        explain_once(renderer, "hidden: conversations the prompt cannot tell apart bridge to other tokens")
        return None
    renderer.prompt_histories.remember(result.token_ids, memory)
    return result


def bridge_from_shared(turn: "BridgePoint", recalled: Recalled, template_tools: Any) -> RenderedTokens | None:
    """The bridge from a prompt the renderer remembers with several histories (sessions whose
    conversations render to the same ids: a user may type the control tokens that spell another
    session's turns). The ids do not say which history they hold, so each is bridged, and the
    bridge goes on only when all give the same tokens (as recovery requires of its readings);
    else None, never one session's template state in another's prompt."""
    renderer = turn.renderer
    outcomes = []
    for remembered in (recalled.history, *recalled.others):
        history, known = history_of(renderer, remembered, None, template_tools)
        outcome = turn.bridge(history, known, remembered, False)
        if outcome is None:
            return None
        outcomes.append(outcome)
    result = outcomes[0][0]
    if any(list(other.token_ids) != list(result.token_ids) for other, _ in outcomes[1:]):
        logger.debug(
            "%s: no bridge: conversations of other sessions render to the same prompt ids and bridge to other tokens",
            type(renderer).__name__,
        )
        return None
    for _, memory in outcomes:  # (all of them again: the ids still do not say which one)
        renderer.prompt_histories.remember(result.token_ids, memory)
    return result


class NotThePrompt(Exception):
    """A recovered conversation whose render is not the previous prompt (``BridgePoint.bridge``, strict)."""


class BridgePoint(NamedTuple):
    """One call of the bridge: the previous prompt (and what the renderer remembers of it), the
    completion, and the new messages (as given and as the template takes them)."""

    renderer: BridgeableRenderer
    prompt: list[int]
    recalled: Recalled | None
    completion: list[int]
    new: list[Message]
    new_inputs: list
    tools: Any

    def bridge(
        self, history: History, known: bool, remembered: History | None, messages_given: bool, *, strict: bool = False
    ) -> "tuple[BridgedTokens, History] | None":
        """The bridged tokens on ``history`` and what to remember of them; None as the contract says.

        ``known``: the history is the prompt's (remembered); else it must prove to be
        (:func:`renders_previous_prompt`; ``strict``: on every token, also under "verbatim"), and a
        caller's ``messages`` (``messages_given``) that does not gives None (logged), a recovered one
        (``strict``) :class:`NotThePrompt`.
        """
        renderer, prompt, completion, new = self.renderer, self.prompt, self.completion, self.new
        kept = closed_completion(renderer, completion)
        parsed = sampled_turn_as_message(renderer, kept, self.tools) if kept else None
        if parsed is None:
            return None
        sampled, guessed = parsed
        try:
            sampled_input = renderer.template_messages([sampled])
        except ValueError:
            return None  # the sampled turn as parsed is not a message the template takes
        extended = History(history.messages + sampled_input + self.new_inputs, history.tools)
        render = render_extended(renderer, history, extended)
        if render is None:
            return None
        if renders_by_call_ids(renderer, history, sampled, new, self.tools, render):
            return None
        if renders_by_missing_names(renderer, history, sampled, new):
            return None
        if not ends_like(renderer, prompt, render.prompt_text):
            if strict:
                raise NotThePrompt
            return no_generation_prompt_or_mismatch(renderer, prompt, history, history.messages if messages_given else None)
        if not known and not renders_previous_prompt(
            renderer, prompt, history, render, remembered, messages_given and not strict
        ):
            if strict:
                raise NotThePrompt
            if not messages_given:
                return None  # the prompt's own conversation renders otherwise with these tools
            return caller_mismatch(
                renderer,
                "previous_prompt_ids are not the template's rendering of `messages` with these `tools` (they "
                "differ before the prompt's end); pass the conversation and tools the previous prompt was "
                "rendered from (without the sampled turn)",
            )
        suffix_start = sampled_turn_end(
            renderer,
            render,
            renderer._decode(kept),
            len(history.messages),
            rewrite_allowed=lambda: not guessed and renders_its_content(renderer, history, extended, render),
        )
        if suffix_start is None:
            return None
        recalled = self.recalled
        base = recalled.ids() if recalled else list(prompt)  # a fresh list the result takes over
        base += kept
        result = bridged_tokens(renderer, base, render, suffix_start, len(history.messages) + 1, new, extended)
        if result is None:
            return None
        return result, History(extended.messages, extended.tools, render.full_text(), render.output.checkpoint)


class ExtendedRender(NamedTuple):
    """The template's render of the extended conversation (history + sampled turn + new messages),
    beside the previous prompt's text. Where the render resumed its message loop
    (:mod:`rllm_renderers.bridging.resume`), ``text`` starts at character ``origin`` of the full text, and so
    do the offsets of ``output``: the two renders agree before it."""

    prompt_text: "str | PromptText"  # the previous prompt's whole text
    output: "RenderOutput"
    text: str  # output.text()
    checkpoint: Any  # the history's, which ``output`` (and any other run of a longer conversation) may resume from
    history_output: "RenderOutput | None" = None  # the history's render, when it was rendered here (not remembered)

    @property
    def origin(self) -> int:
        return self.output.origin

    @property
    def prompt_tail(self) -> str:
        """The previous prompt's text from ``origin`` on."""
        return text_from(self.prompt_text, self.origin)

    def full_text(self) -> "str | PromptText":
        return PromptText(self.prompt_text, self.origin, self.text) if self.origin else self.text


def render_extended(renderer: BridgeableRenderer, history: History, extended: History) -> ExtendedRender | None:
    """The extended conversation rendered with the generation prompt, resumed from the history's
    checkpoint where that is exact; None when the template refuses.

    Content a ``control_token_safe`` renderer encodes as plain text is found in the whole text
    (``GeneratedRenderer._plain_ranges``), so such a renderer renders it whole.
    """
    try:
        prompt_text, checkpoint, earlier = history.prompt_text, history.checkpoint, None
        if prompt_text is None:  # a conversation the renderer did not remember: its text is needed too
            earlier = renderer._run_template(jinja.TemplateList(history.messages), history.tools, True, record=True)
            prompt_text, checkpoint = earlier.text(), earlier.checkpoint
        if renderer.plain_content_roles:
            checkpoint = None
        output = renderer._run_template(
            jinja.TemplateList(extended.messages), extended.tools, True, record=True, resume_from=checkpoint
        )
    except ValueError:  # the template's own refusal (TemplateError and its TypeError flavour)
        return None
    return ExtendedRender(prompt_text, output, output.text(), checkpoint, earlier)


def ends_like(renderer: BridgeableRenderer, prompt: list[int], prompt_text: "str | PromptText") -> bool:
    """Whether the previous prompt ends as the history's rendering with the generation prompt does.

    Compared on its last few tokens. Under "verbatim" only on those after its last stop token,
    which must follow a token that ends a turn: what precedes it may be a sampled turn kept as
    sampled, which the template renders differently.
    """
    tail = prompt[-PROMPT_TAIL_TOKENS:]
    after_stop = False
    if renderer.thinking_retention == "verbatim":
        stops = set(renderer.get_stop_token_ids())
        last_stop = max((index for index, token in enumerate(tail) if token in stops), default=-1)
        if 0 <= last_stop < len(tail) - 1:
            tail, after_stop = tail[last_stop + 1 :], True
    text = renderer._decode(tail).lstrip("\ufffd")  # a multi-byte character cut at the start
    if not text or not prompt_text.endswith(text):
        # decoding is not always faithful (a SentencePiece decoder turns a literal "▁" into a
        # space): compare the ids themselves, at the price of encoding the history's text once
        if after_stop or renderer.encoder.encode(str(prompt_text))[-len(tail) :] != tail:
            return False
        return True
    end = len(prompt_text) - len(text)
    before = max(end - TOKEN_TEXT_WINDOW, 0)
    return not after_stop or ends_with_turn_end(renderer, text_from(prompt_text, before)[: end - before])


def ends_with_turn_end(renderer: BridgeableRenderer, text: str) -> bool:
    """Whether ``text`` ends with a stop token, the close, or (gpt-oss' ``<|end|>``) another added token."""
    closes = (renderer.TURN.close, *renderer.TURN.stop_tokens)
    return any(token and text.endswith(token) for token in closes) or any(
        token and text.endswith(token) for token in renderer.encoder.added_token_strings
    )


def no_generation_prompt_or_mismatch(renderer, prompt, history: History, messages) -> None:
    """The prompt does not end like its history rendered with the generation prompt.

    Rendered without it (Gemma would then get no model header): None. Anything else means
    ``messages`` is not the conversation of this prompt, which is the caller's error.
    """
    if messages is None:
        return None  # the memory holds prompts with the generation prompt only
    try:
        without = renderer._run_template(jinja.TemplateList(history.messages), history.tools, False).text()
    except ValueError:
        without = None
    if without is not None and ends_like(renderer, prompt, without):
        return None
    return caller_mismatch(
        renderer,
        "previous_prompt_ids do not end as the template renders `messages` with the generation prompt; "
        "pass the conversation the previous prompt was rendered from (without the sampled turn)",
    )


def caller_mismatch(renderer: BridgeableRenderer, reason: str) -> None:
    """None for a caller's ``messages`` that are not the previous prompt's (a partial or other
    history, another server's render of it): the engine re-renders, as after any None, and never
    fails the request (a gateway would answer 500). Logged as a warning once per renderer class and
    reason, at debug level after that."""
    key = (type(renderer), reason)
    level = logging.DEBUG if key in _mismatches else logging.WARNING
    _mismatches.add(key)
    logger.log(level, "%s: no bridge: %s", type(renderer).__name__, reason)
    return None


def sampled_turn_end(
    renderer: BridgeableRenderer,
    render: ExtendedRender,
    completion_text: str,
    turn_index: int,
    *,
    rewrite_allowed: Callable[[], bool] = lambda: True,
) -> int | None:
    """Where in ``render.text`` the sampled turn (with its close) ends, or None.

    When the full rendering starts with prompt + completion, right after them. Otherwise the
    template rewrote history: None under the "template" policy (or when the sampled turn's message
    may not be what was sampled, ``rewrite_allowed()`` false); under "verbatim", the end of the
    turn's close as the template writes it (see :func:`close_end`).
    """
    text, prompt_tail = render.text, render.prompt_tail
    if text.startswith(prompt_tail) and text.startswith(completion_text, len(prompt_tail)):
        return len(prompt_tail) + len(completion_text)
    if renderer.thinking_retention == "template" or not renderer.TURN.close or not rewrite_allowed():
        return None  # (a turn the next header ends has no close of its own to keep it by)
    starts = {index: offset for offset, index in reversed(render.output.message_spans())}  # index -> first character
    turn_start, new_start = starts.get(turn_index), starts.get(turn_index + 1)
    if turn_start is None:
        return None
    if new_start is None:  # the new messages are written inside the turn (Gemma-4's tool responses)
        return first_stop_end(renderer, text, turn_start)
    return close_end(renderer, text, turn_start, new_start)


def renders_its_content(
    renderer: BridgeableRenderer, history: History, extended: History, render: ExtendedRender
) -> bool:
    """Whether the template writes the sampled turn's content as parsed when that turn is the last message.

    A template may rewrite a turn in history (drop its reasoning), which "verbatim" keeps as sampled;
    but content the template itself does not write back (Gemma-4 strips a thought channel the
    parser read as content) means the parse missed structure, and the history would be a guess.
    """
    turn = extended.messages[len(history.messages)]
    content = content_text(turn.get("content")) if isinstance(turn, dict) or hasattr(turn, "get") else None
    reasoning = renderer.REASONING
    if isinstance(content, str) and reasoning is not None and reasoning.in_content:
        content = content.split(reasoning.close)[-1].strip()  # the template cuts the block out itself
    if not isinstance(content, str) or not content:
        return True
    try:
        out = renderer._run_template(
            jinja.TemplateList(extended.messages[: len(history.messages) + 1]),
            history.tools,
            False,
            resume_from=render.checkpoint,
        )
    except ValueError:
        return False
    start = {index: offset for offset, index in reversed(out.message_spans())}.get(len(history.messages))
    if start is None:  # written after the message loop (Nemotron-Nano): after the history's own text
        start = max(len(render.prompt_text) - len(renderer.generation_prompt()) - out.origin, 0)
    return content in out.text()[start:]


def first_stop_end(renderer: BridgeableRenderer, text: str, start: int) -> int | None:
    """The end of the first stop token (or close) the template writes in ``text`` from ``start`` on."""
    closes = (renderer.TURN.close, *renderer.TURN.stop_tokens)
    found = min(((text.find(token, start), token) for token in closes if token and token in text[start:]), default=None)
    return found[0] + len(found[1]) if found else None


def close_end(renderer: BridgeableRenderer, text: str, start: int, end: int) -> int | None:
    """The end of the last turn-ending token the template writes in ``text[start:end]`` (a turn's span).

    A stop token or the close when there is one; else the last added token (gpt-oss closes a
    turn in history with ``<|end|>``, which the model never samples).
    """
    closes = (renderer.TURN.close, *renderer.TURN.stop_tokens)
    found = max(((text.rfind(token, start, end), token) for token in closes if token), default=(-1, ""))
    if found[0] < 0:
        added = renderer.encoder.added_token_strings
        found = max(((text.rfind(token, start, end), token) for token in added if token), default=(-1, ""))
    return found[0] + len(found[1]) if found[0] >= 0 else None


def bridged_tokens(
    renderer: BridgeableRenderer,
    prefix: list[int],
    render: ExtendedRender,
    suffix_start: int,
    first_new: int,
    new,
    extended: History,
) -> BridgedTokens | None:
    """``prefix`` + ``render.text`` from ``suffix_start`` on, encoded after the close token.

    ``prefix`` is a fresh list (prompt + kept completion) that the result takes over.

    The new tokens are attributed as ``render`` attributes them (message marks, content marks), when
    the result's attribution is first read; the prefix, which the caller already holds with its own
    attribution, gets -1 / False. With ``control_token_safe``, new content of those roles is encoded
    as plain text, as ``render_ids`` would.
    """
    output, text = render.output, render.text
    anchor = renderer._decode(prefix[-1:])
    shift = suffix_start - len(anchor)  # offset in ``text`` of the encoded string's first character
    encoded = anchor + text[suffix_start:]

    def in_suffix(ranges):
        return [(max(low, suffix_start) - shift, high - shift) for low, high in ranges if high > suffix_start]

    plain = None
    if renderer.plain_content_roles:  # (never resumed: the render is the whole text)
        plain = in_suffix(renderer._plain_ranges(output, text, extended.messages))
    ids = renderer.encoder.encode(encoded, plain_ranges=plain)
    if ids[:1] != prefix[-1:]:
        return None  # the close does not stand alone as a token here (never seen; refuse rather than guess)

    def added_attribution() -> tuple[list[int], list[bool]]:
        again, offsets = renderer.encoder.encode_with_offsets(encoded, plain_ranges=plain)
        if again != ids:
            raise RuntimeError("the encoder gave other ids with offsets than without: please report this")
        part_starts = output.part_starts()
        offsets = offsets[1:]
        indices = new_message_indices(output.attributed_spans(part_starts), [shift + offset for offset in offsets], first_new)
        return indices, inside_ranges(offsets, in_suffix(output.content_ranges(part_starts)))

    token_ids = prefix  # the caller's fresh prompt + completion list
    token_ids += ids[1:]
    return BridgedTokens(
        token_ids,
        message_roles=[message.get("role", "") for message in new],
        message_tool_names=tool_names(new),
        added=len(ids) - 1,
        added_attribution=added_attribution,
    )


def new_message_indices(spans: list[tuple[int, int]], offsets: list[int], first_new: int) -> list[int]:
    """Per token (character offset in the full text, ascending), the index in ``new_messages`` of the
    message whose rendering it belongs to (the template's own message marks, ``spans``), or -1 for
    scaffolding."""
    return [index - first_new if index >= first_new else -1 for index in span_values(offsets, spans)]
