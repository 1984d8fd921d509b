"""A template statement's own text (``{% if tools %}``), for the generated code to point back with.

Generated code names where a statement came from by the statement itself, never by its line
number: a comment added above it, or a whitespace-control change (``{%-`` for ``{%``), must leave
the generated file unchanged but for its sha lines. The tags are matched to the parsed template's
nodes in source order (``if``/``elif`` tags to ``If`` nodes, ``for`` tags to ``For`` nodes, ...), so
two tags on one line (a one-line template) still get their own text. A fault inside generated
code finds its template line again by looking the text up in the template (:func:`line_of`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from jinja2 import nodes

#: ``{% keyword rest %}`` with optional whitespace control; comments and raw blocks are removed first.
TAG = re.compile(r"\{%[-+]?\s*([A-Za-z_]\w*)(.*?)\s*[-+]?%\}", re.S)
COMMENT = re.compile(r"\{#.*?#\}", re.S)
RAW = re.compile(r"\{%[-+]?\s*raw\s*[-+]?%\}.*?\{%[-+]?\s*endraw\s*[-+]?%\}", re.S)
#: The block tags whose nodes the generated code comments, by the node type they parse to.
KEYWORDS = {"if": nodes.If, "elif": nodes.If, "for": nodes.For, "macro": nodes.Macro, "call": nodes.CallBlock}
LONGEST = 100  # characters of a tag shown in a comment


@dataclass(frozen=True)
class Tag:
    line: int
    keyword: str
    text: str  # normalised: ``{% if tools %}``, whitespace collapsed, no whitespace control


def block_tags(source: str) -> list[Tag]:
    """The template's block tags in source order (blanked comments and raw blocks keep line numbers)."""
    blank = lambda match: re.sub(r"[^\n]", " ", match.group(0))  # noqa: E731 - keeps offsets
    text = RAW.sub(blank, COMMENT.sub(blank, source))
    tags = []
    line, counted = 1, 0  # the line of offset `counted` (counted on from the previous tag: one pass)
    for match in TAG.finditer(text):
        keyword, rest = match.group(1), " ".join(match.group(2).split())
        line, counted = line + text.count("\n", counted, match.start()), match.start()
        tags.append(Tag(line, keyword, f"{{% {keyword} {rest} %}}" if rest else f"{{% {keyword} %}}"))
    return tags


def comment_text(text: str) -> str:
    """``text`` safe on one comment line: printable text verbatim, else escaped (no line break)."""
    return text if text.isprintable() else ascii(text)[1:-1]


def shortened(text: str) -> str:
    return text if len(text) <= LONGEST else text[: LONGEST - 3] + "..."


def tag_texts(template: nodes.Template, source: str | None) -> dict[int, str]:
    """``id(node)`` -> its tag's text, for the template's If / For / Macro / CallBlock nodes.

    Nodes and tags of each kind are paired in source order when their counts agree (they do for
    any template Jinja parsed from ``source``); otherwise a node gets the text of the one tag of its
    kind on its line, if there is exactly one."""
    if source is None:
        return {}
    tags = block_tags(source)
    ordered = in_source_order(template)
    texts: dict[int, str] = {}
    for kind in {nodes.If, nodes.For, nodes.Macro, nodes.CallBlock}:
        found = [node for node in ordered if type(node) is kind]
        kind_tags = [tag for tag in tags if KEYWORDS.get(tag.keyword) is kind]
        if len(found) == len(kind_tags):
            texts.update((id(node), shortened(tag.text)) for node, tag in zip(found, kind_tags))
            continue
        for node in found:
            on_line = [tag for tag in kind_tags if tag.line == node.lineno]
            if len(on_line) == 1:
                texts[id(node)] = shortened(on_line[0].text)
    return texts


def in_source_order(node: nodes.Node) -> list[nodes.Node]:
    """``node`` and its descendants, pre-order (a node's fields are in source order)."""
    found = [node]
    for child in node.iter_child_nodes():
        found += in_source_order(child)
    return found


def line_of(source: str, comment: str) -> int | None:
    """The line of the first tag a generated comment quotes (``{% for x in y %}: ...``), or None."""
    for tag in block_tags(source):
        if comment.startswith(comment_text(shortened(tag.text))):
            return tag.line
    return None
