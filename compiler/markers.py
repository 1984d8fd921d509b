"""The special-looking strings a template writes, and a tokenizer that carries them.

Without the model's tokenizer the compiler still needs to know which literal strings
are markers (``<|im_end|>``, ``</assistant>``, ``[INST]``, ``]~b]``): the turn probes split
an assistant turn's close at its first marker, and verification checks token ids
*structurally* with a tokenizer that carries these strings as special added tokens
(byte-level BPE over the 256 byte symbols, no merges, like the corpus's synthetic
tokenizers). Ids mean nothing there; what is checked is that the renderer splits the
text around special tokens as the tokenizer does. It cannot catch BPE merges across
span boundaries: real parity needs the real tokenizer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable

from jinja2 import nodes

#: Shapes of marker strings in template literals: ``<|...|>`` / ``<｜...｜>`` / ``<...>`` tags,
#: ``[|...|]``, ``[INST]``-style bracket words, and short bracketed punctuation (``]~b]``, ``[e~[``).
MARKER_PATTERN = re.compile(
    r"<[|｜][^<>\n]{1,40}?[|｜]>"
    r"|</?[A-Za-z_|][^<>\s]{0,40}>"
    r"|<[^<>\s]{1,40}[|]>"
    r"|\[\|[^\[\]\s]{1,40}\|\]"
    r"|\[/?[A-Za-z][A-Za-z_]{1,20}\]"
    r"|[\[\]][^\s\[\]\w]{1,3}[a-z]{0,2}[^\s\[\]\w]?[\[\]]"
    r"|\[[a-z][~!][\[\]]"
)


def markers_in(texts: Iterable[str]) -> frozenset[str]:
    found: set[str] = set()
    for text in texts:
        found.update(MARKER_PATTERN.findall(text))
    return frozenset(found)


def template_literals(ast: nodes.Template) -> list[str]:
    """Every literal string of the template: its text and its string constants."""
    texts = [node.data for node in ast.find_all(nodes.TemplateData)]
    texts += [node.value for node in ast.find_all(nodes.Const) if isinstance(node.value, str)]
    return texts


def template_markers(ast: nodes.Template, extra: Iterable[str] = ()) -> frozenset[str]:
    """The marker strings among the template's literals, plus ``extra`` (e.g. placeholder values)."""
    return markers_in(template_literals(ast)) | frozenset(value for value in extra if value)


#: Needle conversations whose text holds no marker: a marker in their render was written by the
#: template, also one it computes (``'<think{}>'.format(tag)``, ``'<|' ~ role ~ '|>'``).
_NEEDLE_TOOLS = [{"type": "function", "function": {"name": "fnq7", "description": "dq7", "parameters": {"type": "object", "properties": {"akq7": {"type": "string"}}}}}]
_NEEDLE_CALL = {"id": "inq7xaaaa", "type": "function", "function": {"name": "fnq7", "arguments": {"akq7": "avq7"}}}
_NEEDLE_CONVERSATIONS = [
    ([{"role": "user", "content": "uq7"}], None),
    ([{"role": "system", "content": "sq7"}, {"role": "user", "content": "uq7"}], None),
    ([{"role": "user", "content": "uq7"}, {"role": "assistant", "content": "cnq7", "reasoning_content": "rnq7"}], None),
    (
        [
            {"role": "user", "content": "uq7"},
            {"role": "assistant", "content": "", "tool_calls": [_NEEDLE_CALL]},
            {"role": "tool", "content": "tq7", "tool_call_id": "inq7xaaaa"},
            {"role": "assistant", "content": "cnq8"},
        ],
        _NEEDLE_TOOLS,
    ),
]


def rendered_markers(render: Callable[..., str], known: Iterable[str] = ()) -> frozenset[str]:
    """The marker strings in the template's renders of needle conversations
    (``render(messages, tools=..., add_generation_prompt=...)``; one it rejects is skipped).

    ``known``: the markers already known (the literals', the special tokens'). Each is a token of
    its own, so a new marker is looked for only in the text between them: Mistral's ``"]" +
    eos_token`` before ``[TOOL_RESULTS]`` renders ``]</s>[``, which the bracketed-punctuation shape
    matches, and a token ``]</s>[`` would swallow the stop ``</s>`` (no real tokenizer has it)."""
    found: set[str] = set()
    known = sorted({marker for marker in known if marker}, key=len, reverse=True)
    between_known = re.compile("|".join(map(re.escape, known))) if known else None
    for messages, tools in _NEEDLE_CONVERSATIONS:
        given = json.dumps([messages, tools], ensure_ascii=False)
        for add_generation_prompt in (False, True):
            try:
                text = render(messages, tools=tools, add_generation_prompt=add_generation_prompt)
            except Exception:  # noqa: BLE001 - a template may refuse any of these; the others still count
                continue
            for piece in between_known.split(text) if between_known else [text]:
                found.update(marker for marker in MARKER_PATTERN.findall(piece) if marker not in given)
    return frozenset(found)


def synthetic_tokenizer(special_strings: Iterable[str], special_tokens: dict[str, str]):
    """A byte-level BPE tokenizer (256 byte symbols, no merges) with ``special_strings`` as special
    added tokens (``normalized=False``, no lstrip/rstrip) and ``special_tokens`` (``bos_token``...)
    set to the given strings, which are added too."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {symbol: index for index, symbol in enumerate(sorted(alphabet))}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    strings = sorted(set(special_strings) | set(special_tokens.values()))
    backend.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in strings])
    return PreTrainedTokenizerFast(tokenizer_object=backend, clean_up_tokenization_spaces=False, **special_tokens)
