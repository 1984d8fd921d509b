"""Resuming a template's message loop, so that the bridge renders only the end of a conversation.

The bridge renders ``history + [sampled turn] + new`` with the generation prompt, and all of that
text but the last few messages is what the previous prompt already holds. Running the template
over the whole conversation again would make every bridge cost a full render. Instead, a render
that may be bridged from later *records a checkpoint* in its message loop, and the bridge's render
*resumes* from it.

The compiler emits the message loop of a template it proved resumable as
``for index, message in out.message_loop(items, lookahead=d, lists=(...), state=(...))``
(``compiler/translator/resumable.py``), which guarantees, of the loop body:

* it reads the lists of messages (``items`` and ``lists``) only by position relative to the
  current index, at most ``d`` messages ahead (``messages[i + 1]``, ``loop.last``, ``loop.nextitem``),
  or at a fixed position among the first ``leading`` ones (``messages[0]``), never past the end nor
  from it (no ``loop.length``, no negative index); a look through all later messages
  (``for later in messages[i + 1:]``) only as a test whose result can only be set by a message
  that passes it (``scans``: gpt-oss looks for a later final answer);
* everything else it reads from outside the loop is in ``state``, and the only things it changes
  that outlive an iteration are the namespaces in ``state``;
* it does not read the clock.

Two renders of conversations that share their first messages then agree up to the iteration
``j = len(shortest list) - d`` of the shorter one, provided that, at the loop's start, they had
written the same text, held equal ``state`` and lists that start alike: the iterations before ``j``
read the same values and so do the same thing. That is what :func:`message_loop` checks when it
resumes: the text written before the loop, the state at the loop's start, that each list extends
the recorded one, and that no appended message passes a ``scans`` test. Then it puts the
namespaces back as they were at iteration ``j``, drops the text written so far (the previous
render's text up to ``checkpoint.origin`` stands for it) and runs the loop from ``j``. When a check fails, the loop simply runs from the start: a full render, never a
guess.
"""

from __future__ import annotations

from itertools import chain, islice
from typing import Any, Iterator, NamedTuple, Protocol

from ..jinja.runtime import Cycler, Joiner
from ..jinja.values import Namespace, TemplateStr, Undefined

#: Values that change in place when the template calls them (``joiner()``, ``cycler.next()``): a
#: snapshot cannot hold them, so a loop whose state holds one records no checkpoint.
STATEFUL_VALUES = (Namespace, Cycler, Joiner)
STATEFUL_TYPES = frozenset(STATEFUL_VALUES)  # (none of them is subclassed)


class Unrecordable(Exception):
    """The loop's state holds a value a snapshot cannot capture."""


class NamespaceState:
    """A namespace's attributes at one point of a render (the namespace itself changes on)."""

    __slots__ = ("attributes",)

    def __init__(self, namespace: Namespace) -> None:
        attributes = namespace.__dict__
        if not STATEFUL_TYPES.isdisjoint(map(type, attributes.values())):
            raise Unrecordable("a namespace holding a namespace, cycler or joiner")
        self.attributes = dict(attributes)

    def matches(self, value: Any) -> bool:
        return type(value) is Namespace and value.__dict__ == self.attributes

    def restore(self, namespace: Namespace) -> None:
        namespace.__dict__.clear()
        namespace.__dict__.update(self.attributes)


class LoopCheckpoint(NamedTuple):
    """Where a later render of a longer conversation may resume this render's message loop."""

    entry_text: str  # the text written before the loop
    entry_state: tuple  # the loop's state at its start (namespaces as NamespaceState)
    lists: tuple  # the lists the loop reads (items first), as they were
    start: int  # the iteration to resume at
    state: tuple  # the state then
    origin: int  # the character offset of that iteration's text in this render's text


class PendingCheckpoint(NamedTuple):
    """A checkpoint being recorded: its text and offset are known only when the render ends."""

    entry: str | int  # the text written before the loop, or how many parts it was (joined at the end)
    entry_state: tuple
    lists: tuple
    start: int
    state: tuple
    parts_before: int  # parts written before iteration ``start``


class LoopRun:
    """What one render does with its resumable message loop: record a checkpoint (``record``),
    resume from one (``resume_from``), and how that went."""

    __slots__ = ("record", "resume_from", "refused", "resumed_at", "pending")

    def __init__(self, record: bool, resume_from: LoopCheckpoint | None) -> None:
        self.record = record
        self.resume_from = resume_from
        self.refused: str | None = None  # why resume_from could not be used
        self.resumed_at: int | None = None  # the iteration the loop resumed at
        self.pending: PendingCheckpoint | None = None

    def checkpoint(self, parts: list[str], origin: int, text_length: int) -> LoopCheckpoint | None:
        """The recorded checkpoint, given the render's parts and text (from ``origin``) once it ended."""
        pending = self.pending
        if pending is None:
            return None
        entry = pending.entry if isinstance(pending.entry, str) else "".join(parts[: pending.entry])
        tail = sum(map(len, parts[pending.parts_before :]))
        return LoopCheckpoint(entry, pending.entry_state, pending.lists, pending.start, pending.state, origin + text_length - tail)


# --- state ------------------------------------------------------------------------------


#: Values a snapshot keeps as they are without a look inside (immutable, or templates cannot change them).
PLAIN_VALUES = frozenset((str, TemplateStr, int, float, bool, type(None), Undefined))


def snapshot(values: tuple) -> tuple:
    """``values`` as they are now: namespaces as copies of their attributes, the rest as they are
    (nothing else can change: templates cannot mutate lists, dicts or strings)."""
    if not values:
        return values
    taken = []
    for value in values:
        kind = type(value)
        if kind in PLAIN_VALUES:
            taken.append(value)
        elif kind is Namespace:
            taken.append(NamespaceState(value))
        elif isinstance(value, STATEFUL_VALUES):
            raise Unrecordable(f"a {kind.__name__}")
        else:
            if isinstance(value, (list, tuple, dict)) and any(
                isinstance(item, STATEFUL_VALUES) for item in (value.values() if isinstance(value, dict) else value)
            ):
                raise Unrecordable("a container holding a namespace, cycler or joiner")
            taken.append(value)
    return tuple(taken)


def same_state(recorded: tuple, values: tuple) -> bool:
    """Whether ``values`` equal the ``recorded`` snapshot (same types, equal values)."""
    for old, new in zip(recorded, values):
        if type(old) is NamespaceState:
            if not old.matches(new):
                return False
        elif old is not new and (type(old) is not type(new) or not _equal(old, new)):
            return False
    return True


def _equal(old: Any, new: Any) -> bool:
    try:
        return bool(old == new)
    except Exception:  # a value whose comparison raises is not known to be the same
        return False


def extends(current: Any, recorded: Any) -> bool:
    """Whether the list ``current`` starts with the items of ``recorded`` (equal values)."""
    try:
        size = len(recorded)
        return type(current) is type(recorded) and len(current) >= size and current[:size] == recorded
    except Exception:
        return False


def restore(recorded: tuple, values: tuple) -> None:
    """Put the namespaces among ``values`` back as ``recorded`` holds them."""
    for old, new in zip(recorded, values):
        if type(old) is NamespaceState:
            old.restore(new)


# --- the loop ---------------------------------------------------------------------------


class LoopOutput(Protocol):
    """What the loop needs of the render's output (:class:`~rllm_renderers.core.output.RenderOutput`)."""

    loop_run: "LoopRun"
    parts: list[str]

    def skip_to(self, origin: int) -> None: ...


def message_loop(
    out: "LoopOutput", items: Any, lookahead: int, leading: int, lists: tuple, state: tuple, scans: tuple
) -> Iterator:
    """``enumerate(items)``, resumed from the render's checkpoint where that is exact, recording one
    when the render asks for it (see the module docstring and ``RenderOutput.message_loop``)."""
    run = out.loop_run
    lists = (items, *lists)
    start = 0
    checkpoint = run.resume_from
    if checkpoint is not None:
        refusal = resume_refusal(checkpoint, "".join(out.parts), lists, state, scans)
        if refusal is None:
            restore(checkpoint.state, state)
            out.skip_to(checkpoint.origin)
            start = run.resumed_at = checkpoint.start
        else:
            run.refused = refusal
    try:
        shortest = min(map(len, lists))
    except TypeError:  # a list without a length (a generator): no checkpoint
        shortest = -1
    stop = shortest - lookahead  # the first iteration that may read past the shortest list
    if not run.record or stop < start or shortest < leading:
        return enumerate(islice(items, start, None), start) if start else enumerate(items)
    try:
        entry_state = checkpoint.entry_state if start else snapshot(state)
    except Unrecordable:
        return enumerate(items)
    entry = checkpoint.entry_text if start else len(out.parts)  # (the parts are joined when it is finished)
    recording = _recording_from(out, items, stop, (entry, entry_state, lists), state)
    return chain(enumerate(islice(items, start, stop), start), recording)


def _recording_from(out: "LoopOutput", items: Any, stop: int, entry: tuple, state: tuple) -> Iterator:
    """Record the checkpoint when the loop reaches iteration ``stop``, then go on."""
    try:
        out.loop_run.pending = PendingCheckpoint(*entry, stop, snapshot(state), len(out.parts))
    except Unrecordable:
        pass
    yield from enumerate(islice(items, stop, None), stop)


def resume_refusal(checkpoint: LoopCheckpoint, entry_text: str, lists: tuple, state: tuple, scans: tuple) -> str | None:
    """Why this render cannot resume from ``checkpoint`` (None: it can)."""
    if entry_text != checkpoint.entry_text:
        return "the text before the message loop differs"
    if len(lists) != len(checkpoint.lists) or not all(map(extends, lists, checkpoint.lists)):
        return "the messages do not extend the checkpoint's"
    if not same_state(checkpoint.entry_state, state):
        return "the loop's state at its start differs"
    for scanned, test in scans:
        recorded = next((old for new, old in zip(lists, checkpoint.lists) if new is scanned), None)
        if recorded is None or any(_passes(test, item) for item in scanned[len(recorded) :]):
            return "an appended message is one the loop looks ahead for"
    return None


def _passes(test: Any, item: Any) -> bool:
    try:
        return bool(test(item))
    except Exception:  # the template would fail on it: only a full render can say how
        return True
