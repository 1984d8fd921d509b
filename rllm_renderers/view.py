"""See the tokens of a render: which message wrote each one, and which the model samples or is trained on.

From a renderer (a notebook)::

    view = token_view(renderer, messages, train_on="all_assistant")
    print(view.terminal(ids=True))     # ANSI colours, one colour per message
    view.save_html("tokens.html")      # one static file; in Jupyter the view displays itself

    bridge_view(renderer, prompt_ids, completion_ids, bridged)   # prompt | completion | extension

From a shell::

    python -m rllm_renderers.view --model Qwen/Qwen3-8B conversation.json [--ids] [--html out.html]

The conversation file holds a list of messages, or ``{"messages": [...], "tools": [...]}``. The
renderer is resolved offline (``rllm_renderers.resolve``) with ``--tokenizer PATH``, or the tokenizer
the corpus lists for the model (``$RLLM_CORPUS``, default ``../shared/corpus``).

The HTML page is self-contained (inline CSS and JS; no server, network or external asset): one
``<span class="tok">`` per token with ``data-id``, ``data-message``, ``data-role``, ``data-sampled``,
``data-content``, ``data-trained`` and ``data-segment``; hovering one shows its id, its text with
visible whitespace, its message and flags in the details box.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Message colours (cycled): terminal 256-colour codes and HTML colours of the same hue.
_TERMINAL_COLOURS = (33, 35, 36, 32, 214, 203, 141, 110)
_HTML_COLOURS = ("#cfe3ff", "#f6d2f2", "#c9f0ee", "#d4f2c8", "#ffe0b3", "#ffd0cc", "#e2d6ff", "#d2e4ea")
_SCAFFOLD_TERMINAL, _SCAFFOLD_HTML = 245, "#eeeeee"
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

    def __init__(self, records: list[TokenRecord], title: str = "tokens") -> None:
        self.records = records
        self.title = title

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

    def terminal(self, *, ids: bool = False, colour: bool = True) -> str:
        """The text coloured by message; sampled tokens underlined, trained ones bold. ``ids``: one
        line per token with its id, text (whitespace visible), message and flags."""
        if ids:
            lines = []
            for k, record in enumerate(self.records):
                flags = "".join(
                    mark if on else "."
                    for mark, on in (("S", record.sampled), ("C", record.content), ("T", record.trained))
                )
                line = f"{k:>6} {record.id:>8} {flags} m{record.message:<3} {record.role:<9} {record.segment:<10} {record.text.translate(_WHITESPACE)!r}"
                lines.append(self._paint(line, record) if colour else line)
            return "\n".join(lines)
        text = "".join(self._paint(record.text, record) if colour else record.text for record in self.records)
        legend = "  ".join(
            (
                self._paint(f"[{index}] {role}: {tokens} tokens, {trained} trained", _legend_record(index, role))
                if colour
                else f"[{index}] {role}: {tokens} tokens, {trained} trained"
            )
            for index, role, tokens, _, trained in self.message_counts()
        )
        key = "underlined: sampled, bold: trained" if colour else ""
        return f"{text}\n\n{legend}\n{key}".rstrip()

    @staticmethod
    def _paint(text: str, record: TokenRecord) -> str:
        colour = (
            _SCAFFOLD_TERMINAL if record.message < 0 else _TERMINAL_COLOURS[record.message % len(_TERMINAL_COLOURS)]
        )
        style = [f"38;5;{colour}"] + (["4"] if record.sampled else []) + (["1"] if record.trained else [])
        return f"\x1b[{';'.join(style)}m{text}\x1b[0m"

    # --- HTML -----------------------------------------------------------------------

    def html(self) -> str:
        """One self-contained HTML page (inline CSS and JS, nothing fetched)."""
        tokens = "".join(_token_span(k, record) for k, record in enumerate(self.records))
        legend = "".join(
            f'<li><span class="swatch" style="background:{_background(index)}"></span>'
            f"{'scaffolding' if index < 0 else f'message {index}'} ({html.escape(role or '-')}): "
            f'<b data-count="{index}">{count}</b> tokens, {sampled} sampled, {trained} trained</li>'
            for index, role, count, sampled, trained in self.message_counts()
        )
        segments = sorted({record.segment for record in self.records} - {"render"})
        segment_key = (
            "<p class='segments'>" + " ".join(f'<span class="seg seg-{s}">{s}</span>' for s in segments) + "</p>"
            if segments
            else ""
        )
        return _PAGE.format(
            title=html.escape(self.title),
            legend=legend,
            segments=segment_key,
            tokens=tokens,
            total=len(self.records),
            trained=sum(record.trained for record in self.records),
        )

    def save_html(self, path: str | os.PathLike[str]) -> Path:
        path = Path(path)
        path.write_text(self.html(), encoding="utf-8")
        return path

    def _repr_html_(self) -> str:  # Jupyter
        return self.html()

    def __str__(self) -> str:
        return self.terminal(colour=False)


def _legend_record(index: int, role: str) -> TokenRecord:
    return TokenRecord(0, "", index, role, False, False, False, "render")


def _background(message: int) -> str:
    return _SCAFFOLD_HTML if message < 0 else _HTML_COLOURS[message % len(_HTML_COLOURS)]


def _token_span(position: int, record: TokenRecord) -> str:
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
<p>{total} tokens, {trained} trained. <u>underlined</u>: sampled by the model; <b>bold, green bar</b>: trained.
Hover a token for its details.</p>
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
      " trained=" + d.trained + " segment=" + d.segment;
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
    train_on: str | None = "all_assistant",
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
    renderer: Any, prompt_ids: list[int], completion_ids: list[int], bridged: Any, *, title: str | None = None
) -> TokenView:
    """A bridge (``bridge_to_next_turn``'s result) as prompt, sampled completion and bridged extension.

    The completion is what of ``completion_ids`` the bridge kept (cut at its stop, or closed)."""
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
    records = _records(renderer, bridged, None, segments, sampled=sampled)
    return TokenView(records, title or f"{type(renderer).__name__}: bridge")


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rllm_renderers.view", description=__doc__.split("\n")[0])
    parser.add_argument("conversation", help="JSON file: a list of messages, or {messages, tools}")
    parser.add_argument("--model", required=True, help="model id (resolved offline, no Hub lookup)")
    parser.add_argument("--tokenizer", help="tokenizer folder (default: the corpus's for the model)")
    parser.add_argument("--ids", action="store_true", help="one line per token: id, text, message, flags")
    parser.add_argument("--html", metavar="OUT", help="write a self-contained HTML page")
    parser.add_argument(
        "--train-on", default="all_assistant", choices=("last_assistant", "all_assistant", "all", "none")
    )
    parser.add_argument("--generation-prompt", action="store_true", help="render with the generation prompt")
    parser.add_argument("--no-colour", action="store_true", help="plain text")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from .encoding.loading import load_tokenizer
    from .core.registry import resolve

    try:
        messages, tools = read_conversation(args.conversation)
        tokenizer = load_tokenizer(args.tokenizer or corpus_tokenizer_folder(args.model))
        renderer = resolve(args.model, tokenizer).renderer
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
        print(view.terminal(ids=args.ids, colour=not args.no_colour and sys.stdout.isatty()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
