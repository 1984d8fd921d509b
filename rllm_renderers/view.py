"""See the tokens of a render: which message wrote each one, and which the model samples or is trained on.

From a renderer (a notebook)::

    view = token_view(renderer, messages)  # train_on="last_assistant", as build_supervised_example
    print(view.terminal(ids=True))     # ANSI colours, one colour per message
    view.save_html("tokens.html")      # one static file; in Jupyter the view displays itself

    bridge_view(renderer, prompt_ids, completion_ids, bridged, prompt_messages=len(messages))
    # prompt | sampled completion | extension, the new messages numbered after the prompt's

From a shell::

    python -m rllm_renderers.view --model Qwen/Qwen3-8B conversation.json [--ids] [--html out.html]
    python -m rllm_renderers.view bridge --model Qwen/Qwen3-8B bridge.json [--ids] [--html out.html]

The conversation file holds a list of messages, or ``{"messages": [...], "tools": [...]}``. A bridge
file holds ``{"messages": [...], "tools": ..., "completion": ..., "next": [...]}``: the prompt's
messages, the sampled completion (an assistant message, rendered and cut at its first stop token; or
its text; or its token ids) and the messages the bridge appends. The renderer is resolved offline (``rllm_renderers.resolve``) with ``--tokenizer PATH``, or the tokenizer
the corpus lists for the model (``$RLLM_CORPUS``, default ``../shared/corpus``).

The HTML page is self-contained (inline CSS and JS; no server, network or external asset): one
``<span class="tok">`` per token with ``data-id``, ``data-message``, ``data-role``, ``data-sampled``,
``data-content``, ``data-trained`` and ``data-segment``; hovering one shows its id, its text with
visible whitespace, its message and flags in the details box.
"""

from __future__ import annotations

import argparse
import dataclasses
import html
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Message colours (cycled): the HTML page's background hues, and for the terminal a stronger text
#: colour of the same hue, in 24-bit colour and as the nearest 256-colour index (no two alike, none grey).
_HTML_COLOURS = ("#cfe3ff", "#f6d2f2", "#c9f0ee", "#d4f2c8", "#ffe0b3", "#ffd0cc", "#e2d6ff", "#d2e4ea")
_TERMINAL_RGB = (
    (59, 130, 246),  # blue
    (200, 60, 200),  # magenta
    (0, 160, 160),  # teal
    (60, 170, 60),  # green
    (230, 130, 20),  # orange
    (220, 60, 60),  # red
    (140, 90, 230),  # violet
    (70, 140, 170),  # steel blue
)
_TERMINAL_256 = (33, 170, 37, 70, 208, 167, 99, 67)
_SCAFFOLD_RGB, _SCAFFOLD_256, _SCAFFOLD_HTML = (140, 140, 140), 245, "#eeeeee"
COLOUR_CHOICES = ("always", "auto", "never")
#: A bridge's segments, in order, and what the view calls them; the role its completion is shown with.
SEGMENTS = ("prompt", "completion", "extension")
SEGMENT_NAMES = {"prompt": "prompt", "completion": "sampled completion", "extension": "extension"}
COMPLETION_ROLE = "sampled completion"
_WHITESPACE = str.maketrans({" ": "\u2423", "\n": "\u21b5", "\t": "\u21e5", "\r": "\u240d"})


@dataclass(frozen=True)
class TokenRecord:
    """One token as the view shows it."""

    id: int
    text: str
    message: int  # -1: scaffolding outside any message
    role: str
    sampled: bool
    content: bool
    trained: bool
    segment: str  # "render", or for a bridge "prompt", "completion", "extension"


class TokenView:
    """The tokens of one render or bridge, ready to print or to write as HTML."""

    def __init__(self, records: list[TokenRecord], title: str = "tokens", *, bridge: bool = False) -> None:
        self.records = records
        self.title = title
        self.bridge = bridge  # a bridge: prompt, sampled completion and extension; nothing is trained

    def message_counts(self) -> list[tuple[int, str, int, int, int]]:
        """Per message (scaffolding as -1): (index, role, tokens, sampled, trained)."""
        counts: dict[int, list] = {}
        for record in self.records:
            entry = counts.setdefault(record.message, [record.role, 0, 0, 0])
            entry[1] += 1
            entry[2] += record.sampled
            entry[3] += record.trained
        return [(index, *counts[index]) for index in sorted(counts)]

    # --- terminal -----------------------------------------------------------------

    def terminal(self, *, ids: bool = False, colour: bool = True, truecolour: bool | None = None) -> str:
        """The text coloured by message; sampled tokens underlined, trained ones bold. A line break
        is shown where a message ends and the next text would go on on its line (harmony writes
        ``<|end|><|start|>``). ``ids``: one line per token with its id, text (whitespace visible),
        message and flags, under a legend line. ``truecolour``: 24-bit colour (default: when
        ``$COLORTERM`` says the terminal has it), else the 256-colour palette."""
        if truecolour is None:
            truecolour = os.environ.get("COLORTERM", "").lower() in ("truecolor", "24bit")
        paint = (lambda text, record: _paint(text, record, truecolour)) if colour else (lambda text, record: text)
        if ids:
            lines = [self.ids_legend()]
            for k, record in enumerate(self.records):
                flags = "".join(
                    mark if on else "."
                    for mark, on in (("S", record.sampled), ("C", record.content), ("T", record.trained))[: 2 if self.bridge else 3]
                )
                line = f"{k:>6} {record.id:>8} {flags} m{record.message:<3} {record.role:<9} {record.segment:<10} {record.text.translate(_WHITESPACE)!r}"
                lines.append(paint(line, record))
            return "\n".join(lines)
        breaks = self.message_breaks()
        pieces = []
        for k, record in enumerate(self.records):
            if k in breaks:
                pieces.append("\n")  # a message break the render does not write
            pieces.append(paint(record.text, record))
        legend = "  ".join(
            paint(self.legend_entry(entry), _legend_record(entry[0], entry[1])) for entry in self.message_counts()
        )
        key = "underlined: sampled" if self.bridge else "underlined: sampled, bold: trained"
        return f"{''.join(pieces)}\n\n{legend}\n{key if colour else ''}".rstrip()

    def message_breaks(self) -> set[int]:
        """Positions where the terminal view starts a new line the render does not write: where a
        message ends and the text goes on on its line, and before every other token with the text
        that begins such a line (harmony's ``<|start|>`` after its own system preamble)."""
        records = self.records
        breaks = {
            k
            for k in range(1, len(records))
            if records[k - 1].message >= 0
            and records[k].message != records[k - 1].message
            and not records[k - 1].text.endswith("\n")
        }
        openers = {records[k].text for k in breaks}
        breaks |= {
            k for k in range(1, len(records)) if records[k].text in openers and not records[k - 1].text.endswith("\n")
        }
        return breaks

    def ids_legend(self) -> str:
        """What the columns and flag letters of the ``ids`` view mean."""
        trained = "" if self.bridge else ", T trained"
        return f"   pos       id flags (S sampled, C content{trained}; . no) message role segment text"

    def legend_entry(self, entry: tuple[int, str, int, int, int]) -> str:
        index, role, tokens, sampled, trained = entry
        if self.bridge:
            return f"[{segment_name(index, role)}] {tokens} tokens"
        return f"[{index}] {role}: {tokens} tokens, {trained} trained"

    # --- HTML -----------------------------------------------------------------------

    def html(self) -> str:
        """One self-contained HTML page (inline CSS and JS, nothing fetched)."""
        tokens = "".join(_token_span(k, record, self.bridge) for k, record in enumerate(self.records))
        legend = "".join(
            f'<li><span class="swatch" style="background:{_background(index)}"></span>'
            + (
                f'{html.escape(segment_name(index, role))}: <b data-count="{index}">{count}</b> tokens'
                if self.bridge
                else f"{'scaffolding' if index < 0 else f'message {index}'} ({html.escape(role or '-')}): "
                f'<b data-count="{index}">{count}</b> tokens, {sampled} sampled, {trained} trained'
            )
            + "</li>"
            for index, role, count, sampled, trained in self.message_counts()
        )
        segments = [segment for segment in SEGMENTS if any(record.segment == segment for record in self.records)]
        segment_key = (
            "<p class='segments'>"
            + " ".join(f'<span class="seg seg-{s}">{SEGMENT_NAMES[s]}</span>' for s in segments)
            + "</p>"
            if self.bridge
            else ""
        )
        if self.bridge:
            summary = f"{len(self.records)} tokens. <u>underlined</u>: sampled by the model."
        else:
            summary = (
                f"{len(self.records)} tokens, {sum(record.trained for record in self.records)} trained. "
                "<u>underlined</u>: sampled by the model; <b>bold, green bar</b>: trained."
            )
        return _PAGE.format(
            title=html.escape(self.title), legend=legend, segments=segment_key, tokens=tokens, summary=summary
        )

    def save_html(self, path: str | os.PathLike[str]) -> Path:
        path = Path(path)
        path.write_text(self.html(), encoding="utf-8")
        return path

    def _repr_html_(self) -> str:  # Jupyter
        return self.html()

    def __str__(self) -> str:
        return self.terminal(colour=False)


def _paint(text: str, record: TokenRecord, truecolour: bool) -> str:
    scaffold = record.message < 0
    if truecolour:
        red, green, blue = _SCAFFOLD_RGB if scaffold else _TERMINAL_RGB[record.message % len(_TERMINAL_RGB)]
        style = [f"38;2;{red};{green};{blue}"]
    else:
        style = [f"38;5;{_SCAFFOLD_256 if scaffold else _TERMINAL_256[record.message % len(_TERMINAL_256)]}"]
    style += (["4"] if record.sampled else []) + (["1"] if record.trained else [])
    return f"\x1b[{';'.join(style)}m{text}\x1b[0m"


def segment_name(index: int, role: str) -> str:
    """How a bridge view names a message: the prompt, the sampled completion, or a new message."""
    if index < 0:
        return "prompt and scaffolding"
    if role == COMPLETION_ROLE:
        return f"{index} sampled completion"
    return f"{index} {role} (extension)"


def _legend_record(index: int, role: str) -> TokenRecord:
    return TokenRecord(0, "", index, role, False, False, False, "render")


def _background(message: int) -> str:
    return _SCAFFOLD_HTML if message < 0 else _HTML_COLOURS[message % len(_HTML_COLOURS)]


def _token_span(position: int, record: TokenRecord, bridge: bool = False) -> str:
    classes = ["tok"] + [name for name, on in (("sampled", record.sampled), ("trained", record.trained)) if on]
    classes.append(f"seg-{record.segment}")
    shown = html.escape(record.text.replace("\n", "\u21b5\n"))
    attributes = {
        "data-pos": position,
        "data-id": record.id,
        "data-message": record.message,
        "data-role": record.role,
        "data-sampled": str(record.sampled).lower(),
        "data-content": str(record.content).lower(),
        "data-trained": str(record.trained).lower(),
        "data-segment": record.segment,
        "data-text": record.text.translate(_WHITESPACE),
    }
    if bridge:  # nothing of a bridge is trained: no flag to explain
        del attributes["data-trained"]
    data = " ".join(f'{name}="{html.escape(str(value), quote=True)}"' for name, value in attributes.items())
    return f'<span class="{" ".join(classes)}" style="background:{_background(record.message)}" {data}>{shown}</span>'


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.2em; color: #222; }}
h1 {{ font-size: 1.3em; }}
#tokens {{ font-family: ui-monospace, monospace; font-size: 14px; white-space: pre-wrap; line-height: 1.9;
  border: 1px solid #ccc; padding: .6em; }}
.tok {{ border-right: 1px solid #fff; border-radius: 2px; cursor: default; }}
.tok.sampled {{ text-decoration: underline; text-decoration-thickness: 2px; }}
.tok.trained {{ font-weight: bold; box-shadow: inset 0 -3px 0 #2a7d2a; }}
.tok.seg-completion {{ outline: 1px dashed #c60; }}
.tok.seg-extension {{ outline: 1px dotted #06c; }}
.tok:hover, .tok.active {{ outline: 2px solid #000; }}
#details {{ position: sticky; top: 0; background: #fffbe6; border: 1px solid #e0d090; padding: .4em .6em;
  font-family: ui-monospace, monospace; min-height: 1.4em; }}
ul.legend {{ list-style: none; padding: 0; columns: 2; }}
.swatch {{ display: inline-block; width: 1em; height: 1em; vertical-align: middle; margin-right: .4em;
  border: 1px solid #999; }}
.seg {{ padding: 0 .4em; margin-right: .6em; }} .seg-completion.seg {{ outline: 1px dashed #c60; }}
.seg-extension.seg {{ outline: 1px dotted #06c; }} .seg-prompt.seg {{ outline: 1px solid #999; }}
</style></head><body>
<h1>{title}</h1>
<p>{summary} Hover a token for its details.</p>
{segments}
<ul class="legend">{legend}</ul>
<div id="details">hover a token</div>
<div id="tokens">{tokens}</div>
<script>
(function () {{
  var details = document.getElementById("details");
  function show(event) {{
    var t = event.target.closest(".tok");
    if (!t) return;
    var d = t.dataset;
    details.textContent = "#" + d.pos + "  id " + d.id + "  text \\u201c" + d.text + "\\u201d  message " + d.message +
      " (" + (d.role || "scaffolding") + ")  sampled=" + d.sampled + " content=" + d.content +
      (d.trained ? " trained=" + d.trained : "") + " segment=" + d.segment;
  }}
  document.getElementById("tokens").addEventListener("mouseover", show);
}})();
</script>
</body></html>
"""


# --- building views ----------------------------------------------------------------------


def token_view(
    renderer: Any,
    messages: list[dict],
    *,
    tools: list[dict] | None = None,
    add_generation_prompt: bool = False,
    train_on: str | None = "last_assistant",
    title: str | None = None,
) -> TokenView:
    """The view of ``renderer``'s render of ``messages``. ``train_on``: the policy of
    ``build_supervised_example`` whose weights mark trained tokens (None: none are marked; ignored
    with the generation prompt, which is no training example)."""
    weights = None
    if train_on is not None and not add_generation_prompt:
        example = renderer.build_supervised_example(messages, tools=tools, train_on=train_on)
        rendered, weights = example.rendered, example.weights
    else:
        rendered = renderer.render(messages, tools=tools, add_generation_prompt=add_generation_prompt)
    records = _records(renderer, rendered, weights, ["render"] * len(rendered.token_ids))
    return TokenView(records, title or f"{type(renderer).__name__}: {len(messages)} messages")


def bridge_view(
    renderer: Any,
    prompt_ids: list[int],
    completion_ids: list[int],
    bridged: Any,
    *,
    prompt_messages: int = 0,
    title: str | None = None,
) -> TokenView:
    """A bridge (``bridge_to_next_turn``'s result) as prompt, sampled completion and extension.

    The completion is what of ``completion_ids`` the bridge kept (cut at its stop, or closed); it is
    message ``prompt_messages`` (how many messages the prompt rendered), and the new messages are
    numbered after it, as in the conversation they continue. Nothing is marked trained."""
    ids = list(bridged.token_ids)
    if ids[: len(prompt_ids)] != list(prompt_ids):
        raise ValueError("the bridged tokens do not start with prompt_ids")
    kept = len(prompt_ids)
    while (
        kept < len(ids)
        and kept - len(prompt_ids) < len(completion_ids)
        and ids[kept] == completion_ids[kept - len(prompt_ids)]
    ):
        kept += 1
    added = getattr(bridged, "_added", None)
    if added is not None and added:  # a BridgedTokens knows where its extension starts
        kept = len(ids) - added
    segments = (
        ["prompt"] * len(prompt_ids) + ["completion"] * (kept - len(prompt_ids)) + ["extension"] * (len(ids) - kept)
    )
    sampled = [segment == "completion" for segment in segments]
    records = []
    for record, segment in zip(_records(renderer, bridged, None, segments, sampled=sampled), segments):
        if segment == "completion":
            record = dataclasses.replace(record, message=prompt_messages, role=COMPLETION_ROLE)
        elif segment == "extension" and record.message >= 0:
            record = dataclasses.replace(record, message=record.message + prompt_messages + 1)
        records.append(record)
    return TokenView(records, title or f"{type(renderer).__name__}: bridge", bridge=True)


def _records(
    renderer: Any, rendered: Any, weights: list[float] | None, segments: list[str], sampled=None
) -> list[TokenRecord]:
    roles = list(rendered.message_roles)
    indices, content = rendered.message_indices, rendered.is_content
    sampled = rendered.sampled_mask if sampled is None else sampled
    records = []
    for k, token in enumerate(rendered.token_ids):
        index = indices[k]
        records.append(
            TokenRecord(
                id=int(token),
                text=renderer.decode([token]),
                message=index,
                role=roles[index] if 0 <= index < len(roles) else "",
                sampled=bool(sampled[k]),
                content=bool(content[k]),
                trained=bool(weights[k]) if weights is not None else False,
                segment=segments[k],
            )
        )
    return records


# --- command line --------------------------------------------------------------------------


def corpus_tokenizer_folder(model: str, corpus: str | os.PathLike[str] | None = None) -> Path:
    """The tokenizer folder the corpus manifest lists for ``model`` (``$RLLM_CORPUS``, default
    ``../shared/corpus``); a model it does not list, or lists without a tokenizer, is an error."""
    import csv

    root = Path(
        corpus or os.environ.get("RLLM_CORPUS") or Path(__file__).resolve().parent.parent.parent / "shared" / "corpus"
    )
    manifest = root / "templates" / "MANIFEST.tsv"
    if not manifest.is_file():
        raise FileNotFoundError(f"no corpus manifest at {manifest} (set RLLM_CORPUS, or pass --tokenizer PATH)")
    with manifest.open(encoding="utf-8") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            if row.get("model_id") == model:
                name = row.get("tokenizer") or "-"
                if name == "-":
                    raise ValueError(f"the corpus lists no tokenizer for {model!r}; pass --tokenizer PATH")
                return root / "tokenizers" / name
    raise ValueError(f"the corpus does not list {model!r}; pass --tokenizer PATH")


def read_conversation(path: str | os.PathLike[str]) -> tuple[list[dict], list[dict] | None]:
    """Messages and tools from a JSON file: a list of messages or ``{"messages": ..., "tools": ...}``."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, list):
        return data, None
    if isinstance(data, dict) and isinstance(data.get("messages"), list):
        return data["messages"], data.get("tools")
    raise ValueError(f"{path}: expected a list of messages or an object with a 'messages' list")


def completion_ids(renderer: Any, completion: Any, prompt: list[int], messages: list[dict], tools) -> list[int]:
    """A bridge file's ``completion`` as token ids: ids as given; text encoded; an assistant
    message rendered after the prompt and cut after its first stop token (as a rollout stops)."""
    if isinstance(completion, list) and all(isinstance(token, int) for token in completion):
        return completion
    if isinstance(completion, str):
        return list(renderer.encoder.encode(completion))
    if isinstance(completion, dict) and completion.get("role") == "assistant":
        full = renderer.render_ids([*messages, completion], tools=tools)
        if full[: len(prompt)] != prompt:
            raise ValueError("the completion message does not render as a continuation of the prompt")
        sampled = full[len(prompt) :]
        stops = set(renderer.get_stop_token_ids())
        cut = next((k + 1 for k, token in enumerate(sampled) if token in stops), len(sampled))
        return sampled[:cut]
    raise ValueError("'completion' must be token ids, text, or an assistant message")


def read_bridge(path: str | os.PathLike[str]) -> tuple[list[dict], Any, Any, list[dict]]:
    """(prompt messages, tools, completion, next messages) from a bridge file."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise ValueError(f"{path}: expected an object with 'messages', 'completion' and 'next'")
    if "completion" not in data or not isinstance(data.get("next"), list):
        raise ValueError(f"{path}: a bridge file needs 'completion' and a 'next' list of messages")
    return data["messages"], data.get("tools"), data["completion"], data["next"]


def build_parser(bridge: bool) -> argparse.ArgumentParser:
    prog = "python -m rllm_renderers.view" + (" bridge" if bridge else "")
    description = (
        "See a bridge: the prompt, the sampled completion and the extension bridge_to_next_turn appends."
        if bridge
        else __doc__.split("\n")[0] + " (bridge: `python -m rllm_renderers.view bridge --help`)"
    )
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    if bridge:
        parser.add_argument("file", help="JSON file: {messages, tools, completion, next}")
    else:
        parser.add_argument("conversation", help="JSON file: a list of messages, or {messages, tools}")
    parser.add_argument("--model", required=True, help="model id (resolved offline, no Hub lookup)")
    parser.add_argument("--tokenizer", help="tokenizer folder (default: the corpus's for the model)")
    parser.add_argument("--ids", action="store_true", help="one line per token: id, text, message, flags")
    parser.add_argument("--html", metavar="OUT", help="write a self-contained HTML page")
    if not bridge:
        parser.add_argument(
            "--train-on",
            default="last_assistant",
            choices=("last_assistant", "all_assistant", "all", "none"),
            help="the tokens marked trained (build_supervised_example's policy, and its default)",
        )
        parser.add_argument("--generation-prompt", action="store_true", help="render with the generation prompt")
    parser.add_argument(
        "--colour",
        "--color",
        choices=COLOUR_CHOICES,
        default="auto",
        help="ANSI colours: auto = when writing to a terminal (24-bit where $COLORTERM says so, else 256)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    bridge = argv[:1] == ["bridge"]
    args = build_parser(bridge).parse_args(argv[1:] if bridge else argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from .encoding.loading import load_tokenizer
    from .core.registry import resolve

    try:
        tokenizer = load_tokenizer(args.tokenizer or corpus_tokenizer_folder(args.model))
        renderer = resolve(args.model, tokenizer).renderer
        if bridge:
            messages, tools, completion, following = read_bridge(args.file)
            prompt = renderer.render_ids(messages, tools=tools, add_generation_prompt=True)
            sampled = completion_ids(renderer, completion, prompt, messages, tools)
            bridged = renderer.bridge_to_next_turn(prompt, sampled, following, tools=tools)
            if bridged is None:
                raise ValueError("the bridge returned None: this completion is re-rendered, not bridged")
            view = bridge_view(
                renderer, prompt, sampled, bridged, prompt_messages=len(messages),
                title=f"{args.model}: {Path(args.file).name} (bridge)",
            )
        else:
            messages, tools = read_conversation(args.conversation)
            view = token_view(
                renderer,
                messages,
                tools=tools,
                add_generation_prompt=args.generation_prompt,
                train_on=None if args.train_on == "none" else args.train_on,
                title=f"{args.model}: {Path(args.conversation).name}",
            )
    except (OSError, ValueError, LookupError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.html:
        print(f"wrote {view.save_html(args.html)} ({len(view.records)} tokens)")
    else:
        colour = args.colour == "always" or (args.colour == "auto" and sys.stdout.isatty())
        print(view.terminal(ids=args.ids, colour=colour))
    return 0


if __name__ == "__main__":
    sys.exit(main())
