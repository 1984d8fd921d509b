"""A template that loops, recurses or grows without end fails as one error naming its statement.

The compiler runs the template (through Jinja, as the oracle) and its translation (the generated
class) many times while probing and verifying. A template can make one run take forever (nested
``range(10**5)`` loops), recurse without end (a macro calling itself) or ask for more than the
sandbox allows (``range(10**9)``), or make every render slow (a 100 MB string per render: each
render within its budget, thousands of them past any patience). :func:`render_budget` is a
watchdog that stops any one render running past its time budget, and the compile of one template
running past the whole-compile budget (``--budget``); :func:`template_fault` turns such a failure,
or an error the template's own computation raises (a ``KeyError`` of ``"%(a)s" % {}``), into a
CompileError that names the template line being run, found from the stack: the generated code's
comments quoting the template's statements (looked up in the template), or the line table of
Jinja's compiled template; past the whole-compile budget, also the conversation being rendered.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import traceback
from contextlib import contextmanager
from types import FrameType
from typing import Iterator

from .errors import CompileError
from .template_tags import line_of

#: Seconds one render (of the template or of its translation) may take while compiling.
DEFAULT_RENDER_SECONDS = 10.0
#: Characters one render of the translation may write (a chat prompt is a few MB at most): a loop
#: writing without end is stopped before it fills the memory, not only when its time is up.
DEFAULT_RENDER_CHARACTERS = 10_000_000
#: Seconds the compile (or verification) of one template may take in all.
DEFAULT_COMPILE_SECONDS = 600.0
#: How long past the whole-compile budget the watchdog waits for a render to stop in.
COMPILE_GRACE_SECONDS = 2.0
#: How often the watchdog looks at the running render.
TICK_SECONDS = 0.25
#: Errors a template's own computation raises (any, with template code on the stack: a ``KeyError``
#: of ``"%(a)s" % {}``, a RecursionError) that would otherwise escape as a traceback.
TEMPLATE_FAULTS = (Exception,)

#: Generated code by its file name (``<generated qwen3>`` or a path), to map a line to the template's.
_GENERATED_CODE: dict[str, list[str]] = {}


class RenderBudgetExceeded(BaseException):
    """One render ran past its budget (a BaseException: no ``except Exception`` may swallow it, as
    the oracle's rejection handler would). ``what``: "the 10 s budget", "the 10000000-character budget"."""

    def __init__(self, what: str, frame: FrameType) -> None:
        super().__init__(f"one render ran past {what}")
        self.what = what
        self.location = template_location(innermost_template_frame(frame))


class CompileBudgetExceeded(RenderBudgetExceeded):
    """The compile of one template ran past the whole-compile budget; ``conversation``: the one
    being rendered then (JSON, shortened), when a render was running."""

    def __init__(self, seconds: float, frame: FrameType) -> None:
        super().__init__(f"the {seconds:g} s compile budget", frame)
        self.conversation = conversation_on_stack(frame)


def conversation_on_stack(frame: FrameType | None, longest: int = 300) -> str | None:
    """The ``messages`` a render running on the stack was given, as short JSON; None when none is."""
    while frame is not None:
        messages = frame.f_locals.get("messages") if frame.f_code.co_name != "<module>" else None
        if isinstance(messages, (list, tuple)) and messages and all(isinstance(item, dict) for item in messages):
            text = json.dumps(list(messages), ensure_ascii=False, default=repr)
            return text if len(text) <= longest else text[: longest - 3] + "..."
        frame = frame.f_back
    return None


#: The whole-compile budget in force (render_budget) and when the outermost template_fault began.
_COMPILE: dict[str, float | None] = {"seconds": None, "started": None}
_COMPILE_DEPTH = [0]


def register_generated_code(filename: str, code: str) -> None:
    """Remember a generated module's text, so a fault inside it can name the template line."""
    _GENERATED_CODE[filename] = code.splitlines()


def registered_code(filename: str) -> str | None:
    """The generated module registered under ``filename``, or None."""
    lines = _GENERATED_CODE.get(filename)
    return None if lines is None else "\n".join(lines) + "\n"


def is_template_frame(frame: FrameType) -> bool:
    """Generated code, or Jinja's compiled template (live: its ``debug_info`` line table; in a
    traceback Jinja rewrote, a frame already numbered in template lines)."""
    filename = frame.f_code.co_filename
    jinja = "debug_info" in frame.f_globals or "__jinja_exception__" in frame.f_globals
    return filename in _GENERATED_CODE or (filename == "<template>" and jinja)


def template_frames(frame: FrameType | None) -> list[FrameType]:
    """The frames running template code, innermost first."""
    frames = []
    while frame is not None:
        if is_template_frame(frame):
            frames.append(frame)
        frame = frame.f_back
    return frames


def innermost_template_frame(frame: FrameType | None) -> FrameType | None:
    frames = template_frames(frame)
    return frames[0] if frames else None


def template_location(frame: FrameType | None, line: int | None = None) -> tuple[int | None, str] | None:
    """(template line, what the code says it runs there) for a frame running template code."""
    if frame is None:
        return None
    line = frame.f_lineno if line is None else line
    filename = frame.f_code.co_filename
    if filename in _GENERATED_CODE:
        for text in reversed(_GENERATED_CODE[filename][:line]):
            comment = text.strip()
            if comment.startswith("# {%"):  # the statement's own text: its line is looked up in the source
                return None, comment[2:]
        return None
    if "debug_info" not in frame.f_globals:
        return line, ""  # a frame of a traceback Jinja rewrote: numbered in template lines
    pairs = [pair.split("=") for pair in frame.f_globals["debug_info"].split("&") if "=" in pair]
    template_lines = [int(template) for template, code in sorted(pairs, key=lambda p: int(p[1])) if int(code) <= line]
    return (template_lines[-1], "") if template_lines else None


def describe_location(template: str, source: str, location: tuple[int | None, str] | None) -> str:
    """``name:12: {% for %} ({%- for i in range(100000) %})``: the template line and its text."""
    if location is None:
        return f"{template}: "
    number, label = location
    if number is None:  # a generated comment quoting the statement (see compiler.template_tags)
        number = line_of(source, label)
        if number is None:
            return f"{template}: at {label}: "
    lines = source.splitlines()
    text = " ".join(lines[number - 1].split()) if 0 < number <= len(lines) else ""
    text = text if len(text) <= 80 else text[:77] + "..."
    shown = f"{label} ({text})" if label and text else label or text
    return f"{template}:{number}: at {shown}: " if shown else f"{template}:{number}: "


def characters_written(root: FrameType) -> int:
    """What the render running in ``root`` (a generated ``render_template``) has written so far."""
    parts = getattr(root.f_locals.get("out"), "parts", None)
    return sum(map(len, parts)) if isinstance(parts, list) else 0


#: The character budget in force (set by render_budget), for Jinja's side: see limit_jinja_output.
_CHARACTER_LIMIT: list[int | None] = [None]


def limit_jinja_output(template) -> None:
    """Make a compiled Jinja template (the oracle's) stop, inside render_budget, once its output
    passes the character budget: its environment's ``concat`` (the join of the rendered pieces)
    counts them. Jinja then never holds more than the budget in memory."""
    template.environment.concat = _budgeted_concat


def _budgeted_concat(pieces) -> str:
    limit = _CHARACTER_LIMIT[0]
    if limit is None:
        return "".join(pieces)
    kept, size = [], 0
    for piece in pieces:
        size += len(piece)
        kept.append(piece)
        if size > limit:
            frame = getattr(pieces, "gi_frame", None)
            raise RenderBudgetExceeded(f"the {limit}-character budget", frame)
    return "".join(kept)


@contextmanager
def render_budget(
    seconds: float = DEFAULT_RENDER_SECONDS,
    characters: int = DEFAULT_RENDER_CHARACTERS,
    compile_seconds: float | None = None,
) -> Iterator[None]:
    """Raise RenderBudgetExceeded in any render that runs longer than ``seconds`` or whose output
    (the generated class's; Jinja's is not visible until it returns) passes ``characters``, and
    CompileBudgetExceeded once one template's compile (a :func:`template_fault` block) has run
    ``compile_seconds`` in all.

    A watchdog on SIGALRM (so only in the main thread; elsewhere nothing is limited) looks at the
    stack every tick: while the outermost template frame stays the same, one render is running.
    """
    _CHARACTER_LIMIT[0] = characters
    _COMPILE["seconds"] = compile_seconds
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        try:
            yield
        finally:
            _CHARACTER_LIMIT[0] = _COMPILE["seconds"] = None
        return
    watched: dict[str, object] = {"root": None, "since": 0.0}

    def tick(signum: int, frame: FrameType | None) -> None:
        frames = template_frames(frame)
        root = frames[-1] if frames else None
        now = time.monotonic()
        started, budget = _COMPILE["started"], _COMPILE["seconds"]
        if started is not None and budget is not None and now - started > budget:
            # stopped inside a render when one runs, to name its conversation (a few ticks of grace)
            if root is not None or now - started > budget + COMPILE_GRACE_SECONDS:
                _COMPILE["started"] = None  # raised once: the compile unwinds
                raise CompileBudgetExceeded(budget, frame)
        if root is None or root is not watched["root"]:
            watched["root"], watched["since"] = root, now  # a strong reference: the frame is not reused
        elif now - watched["since"] > seconds:
            watched["root"] = None
            raise RenderBudgetExceeded(f"the {seconds:g} s budget", frame)
        if root is not None and root.f_code.co_filename in _GENERATED_CODE and characters_written(root) > characters:
            watched["root"] = None
            raise RenderBudgetExceeded(f"the {characters}-character budget", frame)

    previous = signal.signal(signal.SIGALRM, tick)
    signal.setitimer(signal.ITIMER_REAL, TICK_SECONDS, TICK_SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        watched["root"] = None
        _CHARACTER_LIMIT[0] = _COMPILE["seconds"] = None


@contextmanager
def template_fault(template: str, source: str) -> Iterator[None]:
    """Turn a template's runaway computation into a CompileError naming its statement.

    An error raised with no template code on its stack is the compiler's own and passes through.
    The outermost such block starts the whole-compile clock (:func:`render_budget`).
    """
    _COMPILE_DEPTH[0] += 1
    if _COMPILE_DEPTH[0] == 1:
        _COMPILE["started"] = time.monotonic()
    try:
        yield
    except CompileBudgetExceeded as exc:
        where = describe_location(template, source, exc.location)
        rendering = f", rendering the conversation {exc.conversation}" if exc.conversation else ""
        raise CompileError(f"{where}the compile ran past {exc.what} (raise it with --budget){rendering}") from None
    except RenderBudgetExceeded as exc:
        where = describe_location(template, source, exc.location)
        option = "--render-budget" if " s budget" in exc.what else "--render-characters"
        raise CompileError(f"{where}one render ran past {exc.what} (raise it with {option})") from None
    except CompileError:
        raise
    except TEMPLATE_FAULTS as exc:
        frames = [(frame, line) for frame, line in traceback.walk_tb(exc.__traceback__) if is_template_frame(frame)]
        if not frames:
            raise
        frame, line = frames[-1]
        where = describe_location(template, source, template_location(frame, line))
        reason = " ".join(str(exc).split()) or "no detail"
        raise CompileError(f"{where}the template raised {type(exc).__name__} ({reason[:200]})") from None
    finally:
        _COMPILE_DEPTH[0] -= 1
        if _COMPILE_DEPTH[0] == 0:
            _COMPILE["started"] = None
