"""Exact ``text -> token ids`` for rendered chats, with per-token offsets, in one backend call.

``TextEncoder.encode(text)`` returns what ``tokenizer.encode(text, add_special_tokens=False)``
returns (which is what ``apply_chat_template(tokenize=True)`` does), computed as follows:

1. Find the added tokens (``<|im_start|>``, ``<think>``, ...) in ``text`` ourselves, the way the
   ``tokenizers`` library's ``AddedVocabulary`` does (``extract_and_normalize`` and
   ``find_matches`` in ``tokenizers/src/tokenizer/added_vocabulary.rs``, version 0.23):

   * one leftmost-longest scan over the contents of all *non-normalized* added tokens, special
     or not, on the raw text; after a match the scan resumes at the end of that match;
   * ``single_word``: a match is dropped (the scan still resumes after it) when the character
     just before it or just after it is a word character, Rust regex ``\\w`` (Unicode);
   * ``lstrip``: the emitted token also covers the whitespace (Rust regex ``\\s``, Unicode
     White_Space) just left of the match, but never text before the previous emitted token;
   * ``rstrip``: the emitted token also covers the whitespace just right of the match;
   * with ``split_special_tokens`` (the backend's ``encode_special_tokens``) special tokens are
     still found but dropped like a failed ``single_word`` match, so they hide what they cover.

2. Encode every text span between emitted tokens and splice the results with the added-token
   ids.  The library itself treats each such span as an independent piece: it normalizes it, looks
   for *normalized* added tokens in the normalized piece (that second pass only ever sees one span),
   pre-tokenizes and runs the model on it.  So a span encoded alone gives exactly the same ids.

   Spans are encoded by one of three backends (``TextEncoder.backend``):

   * ``"fastokens"`` or ``"tiktoken"``: when the tokenizer is provably a rank-based byte-level BPE
     (:mod:`rllm_renderers.encoding.fast_encoder` says what is proved; the proof is computed once per
     tokenizer content and remembered).  tiktoken (the proved rank table) is the default: it is
     built in a fraction of the tokenizer's own load time and holds a few MB.  fastokens
     (:mod:`rllm_renderers.encoding.fastokens_spans`) runs every ``Split`` stage and the BPE in Rust and takes
     all spans of a text in one call, several times faster per render, but building it takes longer
     than loading the tokenizer and holds a second full tokenizer: ``"auto"`` builds it in a
     background thread once the encoder has encoded enough text to show that the process renders
     at scale, and switches to it when it is built (:mod:`rllm_renderers.encoding.engine_upgrade`;
     the same ids before and after); it is also used when asked for (or where tiktoken is not
     installed).  We then also do the second pass (normalized added tokens)
     ourselves; that needs an identity normalizer when there are any.
   * ``"hf"``: ONE ``encode_batch`` call on a *private copy* of the ``tokenizers.Tokenizer``.
     Private because padding, truncation and ``encode_special_tokens`` live on the backend object:
     a data loader padding with the same tokenizer in another thread would otherwise change our ids.
     The copy shares the backend's model, normalizer and pre-tokenizer (nobody configures those per
     call) and holds only its own settings and added vocabulary, so it costs no second vocabulary.
     (The fastokens and tiktoken engines are private objects too, built by us and configured by nobody.)

   ``RLLM_RENDERERS_ENCODER`` (or ``backend=``) forces one: ``hf``, ``tiktoken`` or ``fastokens``
   (the last two still only where the proof holds, else HF).

   Spans are independent, so their ids are cached by content (a bounded LRU): the system prompt and
   tools block that thousands of rollouts share is encoded once.

   The shortest path skips step 1: where fastokens' own scan for added tokens is shown to be the
   one above (no ``lstrip``/``rstrip``/``single_word``/normalized tokens, the engine holding exactly
   our contents with our ids, and agreeing on a probe of every content's prefixes and overlaps:
   ``TextEncoder._engine_scans_like_the_cut``), a text that needs no NFC is one engine call with
   the added tokens left for the engine to find.  Only spans of 4 KB or more in a text's leading
   block are then looked up in the cache (``TextEncoder._encode_marked``).

*Offsets* (``encode_with_offsets``: per token, the character of the text where it starts).  The
library's offsets of a byte-level BPE are character offsets into the original span: a token starts
at the character holding its first byte (a token that starts inside a multi-byte character starts at
that character), mapped back through the normalizer's alignment.  So on the fastokens and tiktoken
backends the starts are computed from the tokens' byte lengths (``SpanBpe.starts``) when that mapping is the
identity: the span is unchanged by NFC and the post-processor does not trim offsets (none,
``TemplateProcessing``, ``ByteLevel(trim_offsets=False)``).  The byte lengths come from the rank
table (tiktoken) or from the engine's vocabulary, id by id as they are met (fastokens).  Otherwise (a span NFC changes, a span
holding a token only the library's whole-word shortcut gives, a trimming post-processor, the HF
backend) the starts are the library's, from one ``encode_batch`` call.

The backend is given spans only, so it must not find non-normalized added tokens in them
again.  Without ``lstrip``/``rstrip``/``single_word`` flags it cannot (a span holds no occurrence
that is kept: the leftmost scan would have found it, and a scan of the span alone starts where
the full scan resumed).  With such flags a span could look
different alone (e.g. a ``single_word`` token at its edge), so we then encode spans with a
private copy of the backend where every non-normalized token is made special and
``encode_special_tokens`` is on: its first pass matches nothing.

*Plain ranges* (the control-token-safe mode of the renderers): ``encode(text, plain_ranges=...)``
looks for added tokens only outside the given character ranges, so text inside them (message
content) is encoded as ordinary text even where it spells ``<|im_end|>``.  With no added-token
look-alike inside the ranges the ids are the ordinary ones.

One pipeline is not span-local: a ``Metaspace`` pre-tokenizer with ``prepend_scheme="first"``
prepends ``▁`` only to the piece at offset 0 of the whole input.  For such tokenizers we encode
the whole text with the backend in one call instead (still exact, just not split).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from .. import forksafe
from .background_proof import Pending, proof_mode

__all__ = ["TextEncoder", "text_encoder_for"]

logger = logging.getLogger(__name__)

# Rust regex ``\s`` in Unicode mode is the White_Space property (the same set as Rust's
# ``char::is_whitespace``).  Python's ``str.isspace`` differs (it also accepts U+001C..U+001F).
_WHITESPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000"
)

# Rust regex ``\w`` in Unicode mode is Alphabetic + Mark + Decimal_Number + Connector_Punctuation
# + Join_Control.  Alphabetic is L* + Nl + Other_Alphabetic; the Other_Alphabetic characters that
# are neither letters nor marks are these symbols (circled / squared Latin letters, Unicode 14).
_OTHER_ALPHABETIC_SYMBOLS = ((0x24B6, 0x24E9), (0x1F130, 0x1F149), (0x1F150, 0x1F169), (0x1F170, 0x1F189))


def _is_word_char(ch: str) -> bool:
    """True when ``ch`` matches Rust regex ``\\w`` (what ``single_word`` calls a word character)."""
    category = unicodedata.category(ch)
    if category[0] in "LM" or category in ("Nd", "Nl", "Pc") or ch in "\u200c\u200d":
        return True
    code = ord(ch)
    return any(low <= code <= high for low, high in _OTHER_ALPHABETIC_SYMBOLS)


def _longest_match_pattern(strings: Iterable[str]) -> re.Pattern[str] | None:
    """A regex whose ``finditer`` yields the leftmost-longest, non-overlapping occurrences of ``strings``.

    Built as a trie: at each node the alternatives start with distinct characters, so at most
    one can go on, and a node that ends a string is made optional (``(?:...)?``, greedy), so the
    longest string wins.  That is Aho-Corasick's ``MatchKind::LeftmostLongest``.
    """
    trie: dict[str, dict] = {}
    for string in strings:
        node = trie
        for ch in string:
            node = node.setdefault(ch, {})
        node[""] = {}  # "" marks the end of a string

    def after(node: dict) -> str:
        branches = []
        for ch in sorted(key for key in node if key):
            child, run = node[ch], ch
            while len(child) == 1 and "" not in child:  # fold a chain of single children into one literal
                ((ch, child),) = child.items()
                run += ch
            branches.append(re.escape(run) + after(child))
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return re.compile(after(trie)) if trie else None


def _added_token_probe(contents: Iterable[str]) -> str:
    """A text on which two scans for ``contents`` that were not both leftmost-longest would differ:
    each content between words and glued to them, each content followed by the rest of every
    longer content it begins (and by that rest cut short), and each content followed by what
    completes a content that one of its suffixes begins."""
    contents = sorted(set(contents))
    starting = {}  # a proper prefix of some content -> that content
    for content in contents:
        for end in range(1, len(content)):
            starting.setdefault(content[:end], content)
    pieces = []
    for content in contents:
        pieces += [f" {content} ", f"x{content}y", content + content]
        longer = starting.get(content)
        if longer is not None:
            pieces += [longer, content + longer[len(content) : -1]]
        for cut in range(1, len(content)):
            other = starting.get(content[cut:])
            if other is not None:
                pieces.append(content + other[len(content) - cut :])
    return "\n".join(pieces)


@dataclass(frozen=True)
class _AddedToken:
    """What the splitter needs to know about one non-normalized added token."""

    id: int
    lstrip: bool
    rstrip: bool
    single_word: bool
    skipped: bool  # a special token while split_special_tokens is on: found, then passed over


def _backend_of(tokenizer: Any):
    """The ``tokenizers.Tokenizer`` behind an HF tokenizer, or ``tokenizer`` itself if it is one."""
    import tokenizers

    if isinstance(tokenizer, tokenizers.Tokenizer):
        return tokenizer
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if isinstance(backend, tokenizers.Tokenizer):
        return backend
    raise TypeError(
        f"expected a tokenizers.Tokenizer or a fast HF tokenizer with .backend_tokenizer, got {type(tokenizer).__name__}"
    )


_ADDED_ATTRIBUTE = "_rllm_added_tokens"


def vocabulary_mark(backend: Any) -> tuple[int, str | None]:
    """A witness of ``backend``'s vocabulary as it is now, cheap to check again: the id the next
    added token will get, and the token that id names now (None).  The library gives a new added
    token ``max(model size, largest added id + 1)``, so the vocabulary grew exactly when
    ``backend.id_to_token(id)`` names another token.  (``id_to_token`` costs 0.1 us, where
    ``get_vocab_size(with_added_tokens=True)`` builds the whole vocabulary for some tokenizers: 0.2 ms
    for Gemma-3's, 40% of its render.)"""
    next_id = max(backend.get_vocab_size(with_added_tokens=False), max(added_tokens_of(backend), default=-1) + 1)
    return next_id, backend.id_to_token(next_id)


def added_tokens_of(backend: Any) -> dict[int, Any]:
    """``backend.get_added_tokens_decoder()`` (id -> ``tokenizers.AddedToken``), kept on the backend
    while its vocabulary size stays the same (the library builds that dict anew on every call, a
    tenth of a second for a few hundred tokens)."""
    size = backend.get_vocab_size(with_added_tokens=True)
    cached = getattr(backend, _ADDED_ATTRIBUTE, None)
    if cached is not None and cached[0] == size:
        return cached[1]
    added = backend.get_added_tokens_decoder()
    try:
        setattr(backend, _ADDED_ATTRIBUTE, (size, added))
    except (AttributeError, TypeError):  # a tokenizers build without instance attributes
        pass
    return added


def has_backend(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` is one :class:`TextEncoder` takes (see :func:`_backend_of`)."""
    try:
        _backend_of(tokenizer)
    except TypeError:
        return False
    return True


def _split_special_tokens(tokenizer: Any, backend) -> bool:
    """HF's ``split_special_tokens`` setting, else the backend's ``encode_special_tokens``."""
    split_special = getattr(tokenizer, "split_special_tokens", None)
    return bool(backend.encode_special_tokens if split_special is None else split_special)


def _prepends_on_first_piece_only(backend) -> bool:
    """True for a Metaspace pre-tokenizer with ``prepend_scheme="first"`` (not span-local)."""
    if backend.pre_tokenizer is None:
        return False

    def walk(node: Any) -> bool:
        if isinstance(node, dict):
            if node.get("type") == "Metaspace" and node.get("prepend_scheme") == "first":
                return True
            return any(walk(value) for value in node.values())
        if isinstance(node, list):
            return any(walk(value) for value in node)
        return False

    return walk(json.loads(backend.pre_tokenizer.__getstate__()))


def _private_copy(backend, split_special_tokens: bool, *, hide: str = "none", added: Any = None):
    """A ``tokenizers.Tokenizer`` that nobody else configures, set up for a plain encode.

    It shares ``backend``'s model (vocabulary and merges: nearly all of its memory), normalizer,
    pre-tokenizer, post-processor and decoder, which nobody configures per call; what callers do
    configure per call (padding, truncation, ``encode_special_tokens``) and the added vocabulary are
    its own.  The added tokens are added again in id order; where that would not give them the same
    ids, :func:`_json_copy` copies the whole tokenizer through its JSON instead.

    ``hide="non-normalized"``: every non-normalized token (and every special token when
    ``split_special_tokens``) is made special and ``encode_special_tokens`` is switched on, so the
    copy's first pass matches nothing; normalized tokens stay matchable in its second pass.
    ``hide="all"``: every added token is made special, so the copy matches no added token at all
    (for spans whose added tokens we found ourselves).  Ids are unchanged.  ``added``: the backend's
    ``get_added_tokens_decoder()``, when the caller has it.
    """
    import tokenizers

    added = sorted((backend.get_added_tokens_decoder() if added is None else added).items())
    copy = tokenizers.Tokenizer(backend.model)
    for part in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        component = getattr(backend, part)
        if component is not None:
            setattr(copy, part, component)
    copy.add_tokens(
        [
            tokenizers.AddedToken(
                token.content,
                single_word=token.single_word,
                lstrip=token.lstrip,
                rstrip=token.rstrip,
                normalized=token.normalized,
                special=_hidden(token, hide, split_special_tokens),
            )
            for _, token in added
        ]
    )
    if copy.get_vocab_size(with_added_tokens=True) != backend.get_vocab_size(with_added_tokens=True) or any(
        copy.token_to_id(token.content) != id_ for id_, token in added
    ):
        copy = _json_copy(backend, split_special_tokens, hide)
    copy.encode_special_tokens = split_special_tokens if hide == "none" else True
    copy.no_truncation()
    copy.no_padding()
    return copy


def _hidden(token: Any, hide: str, split_special_tokens: bool) -> bool:
    """Whether the private copy of kind ``hide`` makes ``token`` special (see :func:`_private_copy`)."""
    if hide == "none":
        return token.special
    return hide == "all" or not token.normalized or (token.special and split_special_tokens)


def _json_copy(backend, split_special_tokens: bool, hide: str):
    """:func:`_private_copy` through the tokenizer's JSON (a second copy of the model): for added
    tokens that, added again in id order, would not get their ids."""
    import tokenizers

    data = json.loads(backend.to_str())
    for entry in data["added_tokens"]:
        entry["special"] = _hidden(_Entry(entry), hide, split_special_tokens)
    copy = tokenizers.Tokenizer.from_str(json.dumps(data))
    before = {token.content: id_ for id_, token in backend.get_added_tokens_decoder().items()}
    after = {token.content: id_ for id_, token in copy.get_added_tokens_decoder().items()}
    if before != after:  # pragma: no cover - the library keeps ids when the JSON keeps its order
        raise RuntimeError("copying the tokenizer changed added-token ids")
    return copy


class _Entry:
    """An ``added_tokens`` entry of the JSON, read like a ``tokenizers.AddedToken``."""

    def __init__(self, entry: dict):
        self.special, self.normalized = entry["special"], entry["normalized"]


def _keeps_offsets(backend) -> bool:
    """True when the post-processor leaves the model's offsets as they are: none, ``TemplateProcessing``
    or ``ByteLevel(trim_offsets=False)`` (a ``Sequence`` of those); trimming moves a start past whitespace."""

    def keeps(node: Any) -> bool:
        if node is None:
            return True
        kind = node.get("type")
        if kind == "Sequence":
            return all(keeps(step) for step in node.get("processors") or [])
        return kind == "TemplateProcessing" or (kind == "ByteLevel" and not node.get("trim_offsets"))

    processor = backend.post_processor
    return keeps(None if processor is None else json.loads(processor.__getstate__()))


BACKENDS = ("auto", "hf", "fastokens", "tiktoken")


def _requested_backend(backend: str | None) -> str:
    """One of ``BACKENDS``: the argument, else ``RLLM_RENDERERS_ENCODER``, else ``"auto"``."""
    choice = backend or os.environ.get("RLLM_RENDERERS_ENCODER") or "auto"
    if choice not in BACKENDS:
        source = "the encoder backend" if backend else "RLLM_RENDERERS_ENCODER (the encoder backend)"
        raise ValueError(f"{source} must be one of {', '.join(map(repr, BACKENDS))}; got {choice!r}")
    return choice


def check_encoder_settings() -> None:
    """A ValueError now, not at the first render, for a bad ``RLLM_RENDERERS_ENCODER``,
    ``RLLM_RENDERERS_PROOF`` or ``RLLM_RENDERERS_UPGRADE_AFTER``."""
    from .engine_upgrade import upgrade_after

    _requested_backend(None)
    proof_mode()
    upgrade_after()


class _SpanCache:
    """A bounded, thread-safe LRU of span text -> ids (exact: spans are encoded independently)."""

    MIN_CHARS = 24  # shorter spans cost less to encode than to look up
    # On the cut path of fastokens (the text's pieces as segments of one call), a lookup also cuts
    # that call in two: only spans this long are looked up there (a hit saves about 4 ns a
    # character, the lookup ~1 us).
    LONG_CHARS = 1024
    # Where the engine finds the added tokens itself (TextEncoder._encode_marked), only spans of
    # MARKED_LONG_CHARS or more among a text's first LEADING_TOKENS added tokens are looked up: there
    # a 1 KB span costs about 3 us to encode, and cutting the call in two plus the lookup about 2.
    MARKED_LONG_CHARS = 4096
    LEADING_TOKENS = 8

    def __init__(self, size: int):
        self.size = size
        self._entries: OrderedDict[tuple[str, str], list[int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> list[int] | None:
        if not self.size or len(key[1]) < self.MIN_CHARS:  # (never stored: see put)
            return None
        with self._lock:
            ids = self._entries.get(key)
            if ids is not None:
                self._entries.move_to_end(key)
            return ids

    def put(self, key: tuple[str, str], ids: list[int]) -> None:
        if not self.size or len(key[1]) < self.MIN_CHARS:
            return
        with self._lock:
            self._entries[key] = ids
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def _after_fork(self) -> None:
        """In a forked child (rllm_renderers.forksafe): a new lock, and nothing half-written kept."""
        self._lock = threading.Lock()
        self._entries = OrderedDict()


def _token_pattern(tokens: dict[str, _AddedToken]) -> re.Pattern[str] | None:
    return _longest_match_pattern(tokens)


def _is_identity_normalizer(backend) -> bool:
    normalizer = backend.normalizer
    if normalizer is None:
        return True
    state = json.loads(normalizer.__getstate__())
    return state.get("type") == "Sequence" and not state.get("normalizers")


def _outside(ranges: Sequence[tuple[int, int]] | None, length: int) -> list[tuple[int, int]]:
    """The parts of ``[0, length)`` not covered by ``ranges`` (which may overlap or be unsorted)."""
    if not ranges:
        return [(0, length)]
    segments, at = [], 0
    for start, end in sorted(ranges):
        start, end = max(0, start), min(length, end)
        if start > at:
            segments.append((at, start))
        at = max(at, end)
    if at < length:
        segments.append((at, length))
    return segments


class TextEncoder:
    """Encodes text exactly like ``tokenizer.encode(text, add_special_tokens=False)``, with offsets.

    Build it once per tokenizer (or use :func:`text_encoder_for`, which caches it).  Accepts a
    fast HF tokenizer (``PreTrainedTokenizerFast`` / ``TokenizersBackend``; its
    ``split_special_tokens`` setting is honoured) or a raw ``tokenizers.Tokenizer``.  Tokens added
    to the tokenizer after construction are not seen: build a new encoder then.

    ``backend``: ``"auto"`` (tiktoken, else fastokens, where the proof holds; else HF ``tokenizers``),
    ``"fastokens"``, ``"tiktoken"`` or ``"hf"``; default from ``RLLM_RENDERERS_ENCODER``.  The choice
    is in :attr:`backend`; why a fast engine was not chosen, or what it leaves out or to HF, in
    :attr:`backend_reason`.
    ``span_cache_size``: how many span encodings to keep (0: none).  Encoding never touches the
    caller's tokenizer object: it uses private copies, so other threads may pad or truncate with
    that tokenizer meanwhile.
    """

    def __init__(self, tokenizer: Any, *, backend: str | None = None, span_cache_size: int = 256):
        shared = _backend_of(tokenizer)
        requested = _requested_backend(backend)
        self._split_special = _split_special_tokens(tokenizer, shared)

        added = added_tokens_of(shared)  # id -> tokenizers.AddedToken
        self._added_tokens = added
        #: Contents of all added tokens (special or not, normalized or not).
        self.added_token_strings: frozenset[str] = frozenset(token.content for token in added.values())
        self._added_ids = {token.content: id_ for id_, token in added.items()}

        def flags(id_: int, token: Any) -> _AddedToken:
            return _AddedToken(id_, token.lstrip, token.rstrip, token.single_word, token.special and self._split_special)

        # First pass (the library's, on the raw text): non-normalized tokens.  Second pass (on each
        # normalized span): normalized tokens; done by us only when the backend cannot do it.
        self._splitters = {token.content: flags(id_, token) for id_, token in added.items() if token.content and not token.normalized}
        self._pattern = _token_pattern(self._splitters)
        self._normalized = {token.content: flags(id_, token) for id_, token in added.items() if token.content and token.normalized}
        self._normalized_pattern = _token_pattern(self._normalized)
        self._identity_normalizer = _is_identity_normalizer(shared)

        self._shared = shared  # read only (decode); never configured by us
        self._vocab_size = shared.get_vocab_size(with_added_tokens=True)
        self._whole_text = _prepends_on_first_piece_only(shared)
        self._flagged = any(token.lstrip or token.rstrip or token.single_word for token in added.values())
        self._copies: dict[str, Any] = {}
        self._copies_lock = threading.Lock()
        self._cache = _SpanCache(span_cache_size)

        self._rank_bpe = None
        if requested == "hf":
            self.backend_reason = "the HF backend was requested"
        elif self._whole_text:
            self.backend_reason = "a Metaspace pre-tokenizer that prepends to the first piece only"
        elif self._normalized and not self._identity_normalizer:
            self.backend_reason = "normalized added tokens under a normalizer"
        else:
            from .fast_encoder import ENGINES, span_bpe_for

            engines = ENGINES if requested == "auto" else (requested,)
            # An engine asked for by name is proved here; "auto" does not wait for a first proof.
            inline = requested != "auto" or proof_mode() == "inline"
            self._rank_bpe, self.backend_reason = span_bpe_for(shared, engines, inline=inline)
        #: Set while the tokenizer's proof runs in the background (HF meanwhile): where its verdict will be.
        self._pending = self.backend_reason if isinstance(self.backend_reason, Pending) else None
        self._set_engine(self._rank_bpe)
        # "auto" on tiktoken: fastokens is built in the background once this encoder has encoded
        # _upgrade_after characters, and taken at the next encode after that (engine_upgrade).
        self._auto = requested == "auto"
        self._upgrade: Any = None
        self._upgrade_after = self._first_upgrade_after()
        self._encoded_chars = 0
        # In a forked child the engine (Rust state) is built again before its first use (_after_fork).
        self._stale_engine = False
        #: Something to do before the next encode (_engine_step): a rebuild or the upgrade.
        self._engine_due = self._upgrade_after is not None
        forksafe.track(self)

    def _set_engine(self, engine: Any) -> None:
        """Encode spans with ``engine`` (None: the HF backend), and set up what follows from it.  The
        engine is set first and the cut last, so a thread encoding meanwhile never pairs the cut
        with an engine that has no segment calls (both engines give the same ids)."""
        # One engine call per text (no cache, no offsets): fastokens' segment list.
        encode_text = getattr(engine, "encode_text", None)
        # The common case of that, with the text cut by one re.split: every match of the added-token
        # pattern is emitted as it is (no lstrip/rstrip/single_word, no skipped or normalized tokens)
        # and fastokens gives each token's id for its content alone.
        cut = None
        if encode_text is not None and self._pattern is not None and not self._flagged and not self._normalized:
            contents = engine.added_contents
            if not engine.shortcut_only and all(
                not token.skipped and contents.get(token.id) == content for content, token in self._splitters.items()
            ):
                cut = re.compile(f"({self._pattern.pattern})").split
        # Where fastokens' own scan for added tokens is shown to find what the cut finds, a text that
        # needs no NFC is not cut at all: it goes as one segment (``_engine_scans_like_the_cut``).
        engine_scans = cut is not None and self._engine_scans_like_the_cut(engine, cut)
        self._rank_bpe = engine
        #: ``"fastokens"``, ``"tiktoken"`` or ``"hf"``: what encodes the text between added tokens.
        self.backend = engine.engine if engine is not None else "hf"
        self._encode_text = encode_text
        # Token starts computed from byte lengths are the library's offsets unless its post-processor
        # trims them (module docstring, "Offsets").
        self._offsets_from_lengths = engine is not None and _keeps_offsets(self._shared)
        self._cut = cut
        self._engine_scans = engine_scans

    def _first_upgrade_after(self) -> int | None:
        """Characters to encode before fastokens is asked for (None: no upgrade for this encoder)."""
        if not self._auto or self.backend != "tiktoken":
            return None
        from .engine_upgrade import upgrade_after

        return upgrade_after()

    def upgrade(self, *, wait: bool = True, timeout: float | None = None) -> str:
        """Ask for fastokens now (an ``"auto"`` encoder on tiktoken; otherwise nothing changes), built
        in the background (:mod:`~rllm_renderers.encoding.engine_upgrade`); with ``wait``, block until
        it is built (or ``timeout`` seconds) and switch to it.  Returns :attr:`backend`."""
        if self._upgrade_after is None:
            return self.backend
        self._upgrade_after = 0
        self._engine_step(0)
        if wait and self._upgrade is not None and self._upgrade.wait(timeout):
            self._engine_step(0)
        return self.backend

    def _engine_step(self, chars: int) -> None:
        """Before an encode of ``chars`` characters: the engine rebuilt in a forked child; fastokens
        asked for once enough text went through tiktoken, and taken once built."""
        if self._stale_engine:
            self._rebuild_engine()
        if self._upgrade_after is None:
            self._engine_due = False
            return
        self._encoded_chars += chars
        if self._upgrade is None:
            if self._encoded_chars < self._upgrade_after:
                return
            from .engine_upgrade import request

            self._upgrade = request(self._shared, self._rank_bpe.content)
        upgrade = self._upgrade
        if not upgrade.done():
            return
        if upgrade.engine is not None:
            self._set_engine(upgrade.engine)
            self.backend_reason = upgrade.reason
        else:
            self.backend_reason = "; ".join(filter(None, [self.backend_reason, upgrade.reason]))
            logger.warning("fastokens was not built (%s); tiktoken keeps encoding", upgrade.reason)
        self._upgrade_after = None
        self._engine_due = False

    def proof_decided_since(self) -> bool:
        """Whether this encoder waits for a background proof (HF meanwhile) that has now been
        decided: then :func:`text_encoder_for` builds a new one, which reads the verdict."""
        return self._pending is not None and self._pending.decided()

    # ------------------------------------------------------------------ public API

    def encode(self, text: str, *, plain_ranges: Sequence[tuple[int, int]] | None = None) -> list[int]:
        """Token ids of ``text`` (no BOS/EOS added), as ``tokenizer.encode(text, add_special_tokens=False)``.

        ``plain_ranges``: half-open character ranges of ``text`` in which no added token is
        recognised (their text is encoded as ordinary text); see the module docstring.
        """
        if self._engine_due:
            self._engine_step(len(text))
        try:
            if self._cut is not None and not plain_ranges:  # _encode's first case
                return self._encode_cut(text)
            return self._encode([text], with_offsets=False, plain_ranges=[plain_ranges])[0][0]
        except BaseException as exc:  # noqa: B036 - a Rust panic is a BaseException
            self._engine_failed(exc)
        return self._encode([text], with_offsets=False, plain_ranges=[plain_ranges])[0][0]

    def encode_with_offsets(
        self, text: str, *, plain_ranges: Sequence[tuple[int, int]] | None = None
    ) -> tuple[list[int], list[int]]:
        """Token ids plus, per token, the index in ``text`` of the character where the token starts.

        An added token starts where its match starts (including whitespace absorbed by
        ``lstrip``); a token of a span starts where the tokenizer's offsets say (computed from byte
        lengths where that is the same; module docstring, "Offsets"), shifted by the span's start.
        Starts never decrease.
        """
        if self._engine_due:
            self._engine_step(len(text))
        try:
            return self._encode([text], with_offsets=True, plain_ranges=[plain_ranges])[0]
        except BaseException as exc:  # noqa: B036 - a Rust panic is a BaseException
            self._engine_failed(exc)
        return self._encode([text], with_offsets=True, plain_ranges=[plain_ranges])[0]

    def encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        """``[encode(t) for t in texts]`` with a single backend call for all spans of all texts."""
        texts = list(texts)
        if self._engine_due:
            self._engine_step(sum(map(len, texts)))
        try:
            return [ids for ids, _ in self._encode(texts, with_offsets=False, plain_ranges=[None] * len(texts))]
        except BaseException as exc:  # noqa: B036 - a Rust panic is a BaseException
            self._engine_failed(exc)
        return [ids for ids, _ in self._encode(texts, with_offsets=False, plain_ranges=[None] * len(texts))]

    def warm(self, *, plain: bool = False) -> None:
        """Build now what the first encode would build: the private backend copy its spans go to
        (the HF backend's, or the one an engine hands a span it does not cover), and with ``plain``
        the copy plain ranges use.  Afterwards no encode builds anything (the span cache and the
        engines' own word caches still fill as texts come; fastokens comes in the background:
        :meth:`upgrade`)."""
        if self._stale_engine:
            self._rebuild_engine()
        for hide in self._hides(plain):
            self._copy(hide)
        if self._rank_bpe is not None and self._rank_bpe.nfc:
            from .span_bpe import unassigned_or_astral

            unassigned_or_astral()

    def _hides(self, plain: bool) -> list[str]:
        """The kinds of private copy :meth:`_encode` may use (see there)."""
        if self._whole_text:
            return ["none"]
        if self._rank_bpe is not None:
            return ["all"]
        return ["non-normalized" if self._flagged else "none", *(["all"] if plain else [])]

    def _engine_failed(self, exc: BaseException) -> None:
        """After an engine panic (a Rust ``PanicException``): the HF backend takes over for good, and
        the panic is logged once; anything else is raised as it is.  A panic of the HF backend
        itself is raised as :class:`~rllm_renderers.encoding.fast_encoder.EnginePanic`, an ``Exception``."""
        from .fast_encoder import EnginePanic, _is_panic

        if not _is_panic(exc):
            raise exc
        if self._rank_bpe is None:
            raise EnginePanic(f"the tokenizers library panicked while encoding: {exc}") from None
        logger.warning("the %s engine panicked (%s); the HF backend encodes from now on", self.backend, exc)
        self._use_hf(f"the {self.backend} engine panicked: {exc}")

    def _use_hf(self, reason: str) -> None:
        self._set_engine(None)
        self._stale_engine = self._engine_due = False
        self._upgrade_after = self._upgrade = None
        self.backend_reason = reason

    def _rebuild_engine(self) -> None:
        """The engine again, in a forked child (its Rust state is per process); HF if that fails.  An
        ``"auto"`` encoder starts again on tiktoken (fastokens would stall the child's first encode
        for seconds) and asks for fastokens again in the background (:meth:`_after_fork`)."""
        from .fast_encoder import ENGINES, span_bpe_for

        self._stale_engine = False
        engine, reason = span_bpe_for(self._shared, ENGINES if self._auto else (self.backend,))
        if engine is None:
            self._use_hf(reason)
            return
        self._set_engine(engine)

    def _after_fork(self) -> None:
        """In a forked child (rllm_renderers.forksafe): new locks, an empty span cache, and the engine
        rebuilt before its next use; an upgrade asked for in the parent is asked for again (its
        thread is not in the child)."""
        self._copies_lock = threading.Lock()
        self._cache._after_fork()
        self._stale_engine = self._rank_bpe is not None
        if self._auto and self._rank_bpe is not None and (self._upgrade is not None or self.backend == "fastokens"):
            self._upgrade, self._upgrade_after = None, 0
        self._engine_due = self._stale_engine or self._upgrade_after is not None

    def clear_cache(self) -> None:
        """Forget the cached span encodings."""
        self._cache.clear()

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` with special tokens kept; ids outside the vocabulary are skipped."""
        ids = ids if type(ids) is list else list(ids)
        try:  # the common case, checked in C: every id is in the vocabulary
            in_range = not ids or (min(ids) >= 0 and max(ids) < self._vocab_size)
        except TypeError:
            in_range = False
        if not in_range or not set(map(type, ids)) <= {int}:
            ids = [token for token in ids if type(token) is int and 0 <= token < self._vocab_size]
        return self._shared.decode(ids, skip_special_tokens=False)

    def token_id(self, token: str) -> int:
        """The id of ``token``: its added-token id, else the one id its text encodes to.

        Raises ``ValueError`` when ``token`` is not an added token and does not encode to exactly one token.
        """
        if token in self._added_ids:
            return self._added_ids[token]
        ids = self.encode(token) if token else []
        if len(ids) != 1:
            raise ValueError(f"{token!r} is not a single token: it encodes to {len(ids)} tokens {ids}")
        return ids[0]

    # ------------------------------------------------------------------ internals

    def _split(
        self, text: str, segments: Sequence[tuple[int, int]] | None = None, *, normalized: bool = False
    ) -> list[tuple[int, int, int | None]]:
        """Cover ``text`` with ``(start, end, id)`` pieces: added tokens (``id``) and spans (``None``).

        A transcription of ``AddedVocabulary::find_matches`` (``normalized``: the second pass, with
        the normalized tokens).  Matches are looked for inside ``segments`` only (default: all of
        ``text``).  With ``rstrip`` the library can emit overlapping pieces (a later match inside
        absorbed whitespace); so do we.
        """
        pattern = self._normalized_pattern if normalized else self._pattern
        tokens = self._normalized if normalized else self._splitters
        pieces: list[tuple[int, int, int | None]] = []
        done = 0  # end of the last emitted added token ("start_offset" in the Rust code)
        if pattern is not None:
            for low, high in segments if segments is not None else ((0, len(text)),):
                for match in pattern.finditer(text, low, high):
                    start, stop = match.span()
                    token = tokens[match.group()]
                    if token.skipped:
                        continue
                    if token.single_word and (
                        (start > 0 and _is_word_char(text[start - 1]))
                        or (stop < len(text) and _is_word_char(text[stop]))
                    ):
                        continue
                    if token.lstrip:
                        while start > done and text[start - 1] in _WHITESPACE:
                            start -= 1
                    if token.rstrip:
                        while stop < len(text) and text[stop] in _WHITESPACE:
                            stop += 1
                    if done < start:
                        pieces.append((done, start, None))
                    pieces.append((start, stop, token.id))
                    done = stop
        if done < len(text):
            pieces.append((done, len(text), None))
        return pieces

    def _encode_cut(self, text: str) -> list[int]:
        """One fastokens call for the whole text (module docstring); with the span cache on, spans of
        ``_SpanCache.LONG_CHARS`` or more (a shared system prompt and tools block) are looked up
        instead, and the text between them goes in one call per stretch.  Where the engine scans
        for the added tokens itself, a text that needs no NFC is not cut (:meth:`_encode_marked`)."""
        if self._engine_scans and (not self._rank_bpe.nfc or text.isascii()):
            return self._encode_marked(text)
        if not self._cache.size:
            return self._rank_bpe.encode_alternating(text, self._cut(text))
        return self._rank_bpe.encode_alternating(text, self._cut(text), self._long_span_ids, _SpanCache.LONG_CHARS)

    def _encode_marked(self, text: str) -> list[int]:
        """The text as one segment in which the engine finds the added tokens; with the span cache on,
        the long spans (``_SpanCache.MARKED_LONG_CHARS``) of its leading block (among its first
        ``_SpanCache.LEADING_TOKENS`` added tokens: where a system prompt and tools block shared by
        many rollouts is) are looked up, and each stretch around them is one segment.  Only the
        leading block is scanned for them: a scan costs about as much per character as the engine's
        encoding saves by a hit."""
        engine = self._rank_bpe
        if not self._cache.size or len(text) < _SpanCache.MARKED_LONG_CHARS:
            return engine.encode_marked(text)
        ids: list[int] = []
        stretch = done = 0  # start of the text not yet encoded; end of the last added token seen
        matches = self._pattern.finditer(text)
        for _ in range(_SpanCache.LEADING_TOKENS):
            match = next(matches, None)
            start = len(text) if match is None else match.start()
            if start - done >= _SpanCache.MARKED_LONG_CHARS:
                if stretch < done:
                    ids += engine.encode_marked(text[stretch:done])
                ids += self._long_span_ids(text[done:start])
                stretch = start
            if match is None:
                break
            done = match.end()
        if stretch < len(text):
            ids += engine.encode_marked(text[stretch:])
        return ids

    def _engine_scans_like_the_cut(self, engine: Any, cut: Any) -> bool:
        """Whether fastokens, given text as one ``allow_special`` segment, finds the added tokens the
        cut finds, at the same places.  Both are leftmost-longest scans (the library's
        ``AddedVocabulary``, which fastokens reimplements, and :func:`_longest_match_pattern`) over
        the same contents, none with ``lstrip``/``rstrip``/``single_word``/``normalized`` (the cut's
        conditions), so they agree if the engine holds exactly those contents with those ids (checked
        here) and implements the scan as documented, which is checked on :func:`_added_token_probe`:
        each content alone, inside words, against the longer contents it begins and overlapping the
        contents its suffixes begin.  The differential tests check the ids on adversarial text."""
        ours = {content: token.id for content, token in self._splitters.items()}
        if engine.engine_added_tokens() != ours:
            return False
        probe = _added_token_probe(ours)
        return engine.encode_marked(probe) == engine.encode_alternating(probe, cut(probe))

    def _long_span_ids(self, span: str) -> list[int]:
        """The ids of a normalized span, through the span cache (its key: the engine's name and the span)."""
        key = (self.backend, span)
        ids = self._cache.get(key)
        if ids is None:
            ids = self._rank_bpe.encode(span)  # never None: no shortcut-only tokens on this path
            self._cache.put(key, ids)
        return ids

    def _copy(self, hide: str):
        """The private backend copy of kind ``hide`` (built on first use, then reused)."""
        copy = self._copies.get(hide)
        if copy is None:
            with self._copies_lock:
                copy = self._copies.get(hide)
                if copy is None:
                    copy = self._copies[hide] = _private_copy(
                        self._shared, self._split_special, hide=hide, added=self._added_tokens
                    )
        return copy

    def _hf_encode(self, spans: list[str], with_offsets: bool, hide: str) -> list[tuple[list[int], list[int]]]:
        """One call on a private copy for all ``spans`` (``encode_batch_fast`` skips offsets)."""
        if not spans:
            return []
        copy = self._copy(hide)
        if not with_offsets:
            return [(encoding.ids, []) for encoding in copy.encode_batch_fast(spans, add_special_tokens=False)]
        encodings = copy.encode_batch(spans, add_special_tokens=False)
        return [(encoding.ids, [start for start, _ in encoding.offsets]) for encoding in encodings]

    def _encode_spans(self, spans: list[str], with_offsets: bool, hide: str) -> list[tuple[list[int], list[int]]]:
        """Ids (and starts) of text spans that hold no added token to find, through the span cache."""
        if with_offsets and not self._offsets_from_lengths:
            return self._hf_encode(spans, True, hide)
        if not with_offsets and not self._cache.size and self._rank_bpe is not None and not self._rank_bpe.shortcut_only:
            # no cache, no offsets, no span the library must encode: straight to the engine
            return [(ids, []) for ids in self._rank_bpe.encode_many(spans)]
        kind = self.backend if self._rank_bpe is not None else hide
        cache = self._cache
        results: list[Any] = [cache.get((kind, span)) for span in spans]
        missing = [index for index, ids in enumerate(results) if ids is None]
        fresh_starts: dict[int, list[int] | None] = {}
        if missing:
            if self._rank_bpe is not None:
                missing_spans = [spans[index] for index in missing]
                if with_offsets:  # one NFC per span for both
                    pairs = self._rank_bpe.encode_many_with_starts(missing_spans)
                    fresh = [ids for ids, _ in pairs]
                    fresh_starts = {index: starts for index, (_, starts) in zip(missing, pairs)}
                else:
                    fresh = self._rank_bpe.encode_many(missing_spans)
                refused = [at for at, ids in enumerate(fresh) if ids is None]  # shortcut-only tokens: HF's
                if refused:
                    library = self._hf_encode([spans[missing[at]] for at in refused], False, hide)
                    for at, (ids, _) in zip(refused, library):
                        fresh[at] = ids
            else:
                fresh = [ids for ids, _ in self._hf_encode([spans[index] for index in missing], False, hide)]
            for index, ids in zip(missing, fresh):
                results[index] = ids
                cache.put((kind, spans[index]), ids)
        if not with_offsets:
            return [(ids, []) for ids in results]
        # Starts from the tokens' byte lengths (RankBpe.starts), where they are the library's.
        starts_of = self._rank_bpe.starts
        encoded = [
            (ids, fresh_starts[index] if index in fresh_starts else starts_of(span, ids))
            for index, (span, ids) in enumerate(zip(spans, results))
        ]
        redo = [index for index, (_, starts) in enumerate(encoded) if starts is None]
        if redo:
            for index, pair in zip(redo, self._hf_encode([spans[index] for index in redo], True, hide)):
                encoded[index] = pair
        return encoded

    def _encode(
        self, texts: list[str], with_offsets: bool, plain_ranges: list[Sequence[tuple[int, int]] | None]
    ) -> list[tuple[list[int], list[int]]]:
        """``(ids, starts)`` per text; ``starts`` stays empty unless ``with_offsets``."""
        plain = any(ranges for ranges in plain_ranges)
        if self._cut is not None and not with_offsets and not plain:
            return [(self._encode_cut(text), []) for text in texts]
        if self._whole_text:
            if plain:
                raise ValueError(
                    "plain (control-token-safe) ranges are not supported for this tokenizer: its Metaspace "
                    "pre-tokenizer is not span-local"
                )
            return self._hf_encode(texts, with_offsets, "none")

        # Who finds the normalized added tokens in a span: the HF copy (its second pass) by default;
        # we do, when tiktoken encodes the spans or when plain ranges must hide them.
        own_second_pass = self._rank_bpe is not None or plain
        if own_second_pass and self._normalized and not self._identity_normalizer:
            raise ValueError(
                "plain (control-token-safe) ranges are not supported for this tokenizer: it has normalized added "
                "tokens under a normalizer"
            )
        if own_second_pass:
            hide = "all"
        else:
            hide = "non-normalized" if self._flagged else "none"

        pieces_per_text = []
        for text, ranges in zip(texts, plain_ranges):
            segments = _outside(ranges, len(text)) if ranges else None
            pieces = self._split(text, segments)
            if own_second_pass and self._normalized_pattern is not None:
                pieces = self._second_pass(text, pieces, ranges)
            pieces_per_text.append(pieces)

        if self._encode_text is not None and not with_offsets and not self._cache.size:
            whole = [self._encode_text(text, pieces) for text, pieces in zip(texts, pieces_per_text)]
            if None not in whole:
                return [(ids, []) for ids in whole]

        spans = [text[start:end] for text, pieces in zip(texts, pieces_per_text) for start, end, id_ in pieces if id_ is None]
        encoded = iter(self._encode_spans(spans, with_offsets, hide))

        results = []
        for pieces in pieces_per_text:
            ids: list[int] = []
            starts: list[int] = []
            for start, _, id_ in pieces:
                if id_ is not None:
                    ids.append(id_)
                    starts.append(start)
                    continue
                span_ids, span_starts = next(encoded)
                ids += span_ids
                if with_offsets:
                    starts += [start + offset for offset in span_starts]
            results.append((ids, starts))
        return results

    def _second_pass(
        self, text: str, pieces: list[tuple[int, int, int | None]], ranges: Sequence[tuple[int, int]] | None
    ) -> list[tuple[int, int, int | None]]:
        """Split each span again on the normalized added tokens (identity normalizer: the span as is)."""
        refined: list[tuple[int, int, int | None]] = []
        for start, end, id_ in pieces:
            if id_ is not None:
                refined.append((start, end, id_))
                continue
            span = text[start:end]
            local = [(low - start, high - start) for low, high in ranges or () if low < end and high > start]
            segments = _outside(local, len(span)) if local else None
            refined += [(start + low, start + high, inner) for low, high, inner in self._split(span, segments, normalized=True)]
        return refined


_CACHE_ATTRIBUTE = "_rllm_text_encoder"


def text_encoder_for(tokenizer: Any, *, backend: str | None = None) -> TextEncoder:
    """The :class:`TextEncoder` of ``tokenizer``, built on first use and cached.

    The encoder is kept in an attribute of the backend ``tokenizers.Tokenizer``, so it lives and
    dies with it (the cycle encoder -> backend is collectable; a pickled or copied tokenizer does not
    carry it).  It is rebuilt when the vocabulary grew, ``split_special_tokens`` changed or another
    ``backend`` (see :class:`TextEncoder`) is asked for.  Two threads may both build it the first
    time; either result is correct.
    """
    shared = _backend_of(tokenizer)
    requested = _requested_backend(backend)
    key = (shared.get_vocab_size(with_added_tokens=True), _split_special_tokens(tokenizer, shared), requested)
    cached = getattr(shared, _CACHE_ATTRIBUTE, None)
    if cached is not None and cached[0] == key and not cached[1].proof_decided_since():
        return cached[1]
    encoder = TextEncoder(tokenizer, backend=requested)
    try:
        setattr(shared, _CACHE_ATTRIBUTE, (key, encoder))
    except (AttributeError, TypeError):  # a tokenizers build without instance attributes: no cache
        pass
    return encoder
