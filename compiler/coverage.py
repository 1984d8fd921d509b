"""``python -m compiler list``: what the checked-in renderers cover, one row per model.

Per model (per module in the table): its module, short template sha256, status (``current``; ``stale`` when the template
it would be compiled from today, the corpus's or our override's, has another sha256 than the one
the class was compiled from, as ``check`` finds it; ``no source`` when that template is not here),
parity level (``tokens``: verified on the model's own tokenizer; ``structural``: text plus token
ids from a synthetic tokenizer carrying the template's marker strings; ``text``: text only), the
turn facts the class learned (how a turn ends, reasoning markers, tool-call syntax), its knobs and
the bridge's default retention policy. ``none`` means the template has no such thing; ``not
learned`` that the compiler could not learn it (the class docstring says why).

``--format table`` (the default) fits ``--width`` columns (120), shortening the widest cells with
``~``; ``markdown`` and ``json`` give every cell whole. Control characters in a cell (a marker
holding a newline) are shown escaped, as in a Python literal, so a row is always one line.
"""

from __future__ import annotations

import argparse
import json
import unicodedata
from pathlib import Path

from .analysis import parse_template, template_sha256
from .errors import CompileError, SourceError
from .markers import template_markers
from .source import resolve_source

COLUMNS = ("model", "module", "sha256", "status", "parity", "turn", "reasoning", "tool calls", "knobs", "retention")
#: The table's columns (``--format table``, one row per module: its models share one template); the
#: markdown and json forms have one row per model and every column.
TABLE_COLUMNS = ("module", "models", "status", "parity", "turn", "reasoning", "tool calls", "knobs")
NONE, NOT_LEARNED = "none", "not learned"
NARROWEST = 8  # a shortened cell keeps at least this many characters
DEFAULT_WIDTH = 120


def visible(text: str) -> str:
    """``text`` on one line: control characters escaped as in a Python literal (``'\\n'``)."""
    return "".join(character if character.isprintable() else repr(character)[1:-1] for character in text)


def quoted(text: str) -> str:
    return "'" + visible(text) + "'"


def source_status(renderer_class: type, model_id: str, corpus: Path | None) -> tuple[str, str]:
    """(status, parity) of ``model_id``'s renderer (see the module docstring)."""
    try:
        source = resolve_source(
            model_id, corpus=corpus, allow_hub=False, template_name=getattr(renderer_class, "TEMPLATE_NAME", None)
        )
    except SourceError:
        return "no source", "?"
    status = "stale" if template_sha256(source.source) != renderer_class.TEMPLATE_SHA256 else "current"
    if source.tokenizer_dir is not None:
        return status, "tokens"
    markers = template_markers(parse_template(source.source, source.display_name))
    return status, "structural" if markers else "text"


def turn_summary(renderer_class: type) -> str:
    """The close token (``'<|im_end|>'``), or the next messages' headers that end a turn instead."""
    turn = renderer_class.TURN
    if turn is None or "turn" in renderer_class.UNLEARNED:
        return NOT_LEARNED
    if turn.close:
        return unproven_mark(renderer_class, "turn", quoted(turn.close))
    return unproven_mark(renderer_class, "turn", "headers " + " ".join(quoted(stop) for stop in turn.stop_tokens))


def reasoning_summary(renderer_class: type) -> str:
    if "reasoning" in renderer_class.UNLEARNED:
        return NOT_LEARNED
    reasoning = renderer_class.REASONING
    if reasoning is None:
        return NONE
    return unproven_mark(renderer_class, "reasoning", f"{visible(reasoning.open)}...{visible(reasoning.close)}")


def tool_call_summary(renderer_class: type) -> str:
    if "tool_calls" in renderer_class.UNLEARNED:
        return NOT_LEARNED
    calls = renderer_class.TOOL_CALLS
    if calls is None:
        return NONE
    return unproven_mark(renderer_class, "tool_calls", f"{calls.style}: {quoted(calls.call_start.strip())}")


def unproven_mark(renderer_class: type, fact: str, summary: str) -> str:
    """``summary`` of a learned fact, marked ``(unproven)`` when nothing proved it at compile time."""
    return f"{summary} ({UNPROVEN})" if fact in getattr(renderer_class, "UNPROVEN", {}) else summary


UNPROVEN = "unproven"


def parent_of(renderer_class: type) -> str | None:
    """The generated class it inherits from, if any (none do: every module is self-contained)."""
    base = renderer_class.__mro__[1]
    return base.__name__ if base.__name__ != "GeneratedRenderer" else None


def coverage_records(folder: Path, corpus: Path | None) -> list[dict]:
    """One record per model: every fact of the listing, whole (the json form)."""
    from .pipeline import load_generated_file

    records = []
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        renderer_class = load_generated_file(path)
        for model_id in renderer_class.MODEL_IDS:
            status, parity = source_status(renderer_class, model_id, corpus)
            record = {
                "model": model_id,
                "module": path.stem,
                "sha256": renderer_class.TEMPLATE_SHA256,
                "status": status,
                "parity": parity,
                "turn": turn_summary(renderer_class),
                "reasoning": reasoning_summary(renderer_class),
                "tool calls": tool_call_summary(renderer_class),
                "knobs": list(renderer_class.KNOBS),
                "retention": renderer_class.DEFAULT_THINKING_RETENTION,
                "unlearned": dict(renderer_class.UNLEARNED),
                "unproven": dict(getattr(renderer_class, "UNPROVEN", {})),
            }
            parent = parent_of(renderer_class)
            if parent is not None:
                record["parent"] = parent
            records.append(record)
    return sorted(records, key=lambda record: (record["model"], record["module"]))


def row_of(record: dict, columns: tuple[str, ...]) -> list[str]:
    cells = []
    for column in columns:
        value = record.get(column, NONE)
        if column == "sha256":
            value = value[:12]
        elif column == "knobs":
            value = ", ".join(value) if value else NONE
        cells.append(visible(value))
    return cells


def columns_of(records: list[dict], columns: tuple[str, ...]) -> tuple[str, ...]:
    return (*columns, "parent") if any("parent" in record for record in records) else columns


def columns(text: str) -> int:
    """How many terminal columns ``text`` takes: wide and full-width characters (``｜``) take two."""
    return sum(2 if unicodedata.east_asian_width(character) in "WF" else 1 for character in text)


def format_table(records: list[dict], width: int = DEFAULT_WIDTH) -> str:
    """The records as an aligned table no wider than ``width`` (the widest cells shortened), with
    the tool-call column reduced to the call style (the markdown and json forms give it whole)."""
    header = columns_of(records, TABLE_COLUMNS)
    by_module: dict[str, dict] = {}
    for record in records:
        by_module.setdefault(record["module"], {**record, "models": 0})["models"] += 1
    modules = [by_module[module] for module in sorted(by_module)]
    rows = [
        row_of({**record, "models": str(record["models"]), "tool calls": record["tool calls"].split(":")[0]}, header)
        for record in modules
    ]
    widths = [max(columns(row[column]) for row in [list(header), *rows]) for column in range(len(header))]
    separators = 2 * (len(header) - 1)
    while sum(widths) + separators > width:
        # the widest cell is shortened first; the module name (what resolve(renderer=...) takes) last
        shrinkable = [column for column in range(1, len(widths)) if widths[column] > NARROWEST] or [0]
        widest = max(shrinkable, key=lambda column: widths[column])
        if widths[widest] <= NARROWEST:
            break  # as narrow as it goes: wider than asked rather than unreadable
        widths[widest] -= 1

    def fitted(cell: str, size: int) -> str:
        """``cell`` shortened (with ``~``) and padded to ``size`` terminal columns."""
        if columns(cell) > size:
            while columns(cell) > size - 1:
                cell = cell[:-1]
            cell += "~"
        return cell + " " * (size - columns(cell))

    table = [list(header), *rows]
    lines = ["  ".join(fitted(cell, size) for cell, size in zip(row, widths)).rstrip() for row in table]
    lines.insert(1, "  ".join("-" * size for size in widths))
    return "\n".join(lines)


def format_markdown(records: list[dict]) -> str:
    def cell(text: str) -> str:
        return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`")

    header = columns_of(records, COLUMNS)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(value) for value in row_of(record, header)) + " |" for record in records]
    return "\n".join(lines)


def command_list(args: argparse.Namespace) -> int:
    corpus = args.corpus if args.corpus is not None and args.corpus.is_dir() else None
    if args.corpus is not None and corpus is None:
        raise CompileError(f"corpus folder not found: {args.corpus}")
    if not args.dir.is_dir():
        raise CompileError(f"--dir {args.dir} is not a folder of generated renderers")
    records = coverage_records(args.dir, corpus)
    if args.format == "json":
        print(json.dumps(records, indent=2, ensure_ascii=False))
        return 0
    print(format_markdown(records) if args.format == "markdown" else format_table(records, args.width))
    print(f"{len(records)} models in {len({record['module'] for record in records})} modules")
    return 0
