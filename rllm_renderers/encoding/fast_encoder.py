"""A rank-based BPE (``tiktoken``, or ``fastokens``) for the byte-level BPE tokenizers it provably equals.

``rank_bpe_plan(backend)`` decides, from the ``tokenizers.Tokenizer``'s own JSON, whether its
``normalizer -> pre_tokenizer -> BPE`` pipeline on a text span computes exactly what tiktoken's
core BPE computes with the same regex and ranks; if so it returns a :class:`RankBpe` that encodes
spans (the text between added tokens; :mod:`rllm_renderers.encoding.tokenization` finds those itself).
``span_bpe_for(backend, engines)`` returns, under the same proof, the first of ``engines`` that can
run: :class:`RankBpe` (tiktoken; the default, built in a fraction of the tokenizer's load time) or
``fastokens_spans.FastokensBpe`` (a Rust reimplementation of the library's encode path, given the
tokenizer's own pre-tokenizer and merges, faster per render but slower to build and a second full
tokenizer in memory; the proof is the condition for using it, as for tiktoken, and its ids are
compared with the library's by the same differential tests).  The proof's verdict and rank table
are remembered per tokenizer content (:mod:`rllm_renderers.encoding.proof_cache`, checked before use);
fastokens never reads the rank table.

What is proved, and how (the conditions checked, in order):

1. *Pipeline.*  Normalizer: none, an empty ``Sequence``, or ``NFC`` (applied here with the
   library's own ``NFC`` normalizer, to non-ASCII spans that
   :func:`nfc_leaves_alone` cannot show it leaves unchanged).  Pre-tokenizer: ``Split`` stages
   (``behavior="Isolated"``, ``invert=False``) followed by ``ByteLevel(add_prefix_space=False)``, or ``ByteLevel`` alone (its own GPT-2 regex
   when ``use_regex``, else the whole span is one word).  Model: ``BPE`` without dropout, byte
   fallback, continuing-subword prefix or end-of-word suffix, and with all 256 byte symbols.
   The last ``Split`` runs inside tiktoken; earlier ones (DeepSeek has three) run here with the
   ``regex`` module, each output piece going to tiktoken on its own, as the library does.  When
   every earlier stage is one character class repeated (``C+`` or ``C{1,n}``) and the classes are
   pairwise disjoint, the stages run as one ``regex`` split instead (:func:`_one_pass_stages`
   proves that it cuts the same pieces).
   tiktoken keeps only regex matches while ``Split(Isolated)`` also keeps the text between them,
   so the regex given to tiktoken is ``P|(?:(?!P)[\\s\\S])+``: at a position where ``P`` matches it
   is ``P``'s match, elsewhere it takes the run of characters up to the next position where ``P``
   matches, which is exactly the gap ``Split`` keeps.

2. *BPE.*  The library merges, in a word, the adjacent pair with the smallest *merge index*
   (ties: leftmost); tiktoken the adjacent pair whose concatenation has the smallest *rank*
   (ties: leftmost), with rank = token id, considering every pair whose concatenation is in its
   ranks R.  Before that, each may take a *whole-word shortcut*: tiktoken emits a piece that is
   in R as that token; the library, with ``ignore_merges``, emits a word that is in its
   vocabulary as that token.  Checked: (a) every merge's product is in the vocabulary and
   product ids never decrease along the merge list.  Then the *left-out* tokens L are the
   vocabulary tokens that are neither bytes nor merge products, and, unless (c) the merges are
   *closed* (every split of a product into two bytes-or-products is a merge) and the library
   takes the shortcut (the tokenizer.json files converted from tiktoken: Llama-3, gpt-oss, the
   Qwen3.5 file), also (b) the merge products that the library's merge loop, run alone on their
   own bytes, does not turn into that one token.  R = the vocabulary minus L.

   *Left out.*  The merge loop never makes a token of L, in any word: not a non-product (no
   merge makes it); not an unreached product w (if it merged u, v into w somewhere, then by
   locality, below, the loop on w's bytes alone passes through [u, v] and merges it, reaching w).
   So a left-out token is given only by the library's shortcut, on a word equal to it: never
   without ``ignore_merges``; with it, a span containing the text of a left-out token (a word is
   a substring of the normalized span; a token whose bytes are not UTF-8 is never a word) is
   given to the library instead (``RankBpe.encode`` returns None; one regex search per span).
   Transformers loads Qwen3.5 (``Qwen2Tokenizer``) by rebuilding the model from its vocabulary
   and merges without ``ignore_merges``: there the 83 non-products and 118 unreached products
   (token 170315 ``yarakat`` gives [88, 26980, 266]) are never given, L has 201 tokens and no
   span goes to the library; the file itself (``ignore_merges``, closed merges: L = the 83
   non-products) needs the search.

   Proof sketch.  *Locality:* if symbols u, v are adjacent at some step of either algorithm, the
   same algorithm run on the bytes of u + v alone passes through the state [u, v] (the merges
   inside that region happen in the same order: each was the smallest pair when it happened, and
   no merge ever crossed the region's edge).  As a run on given bytes is deterministic and loses
   one symbol per step, *all pairs present at one time whose concatenation is the same token w
   are the same split of w*.  Now run both merge loops on a word; while their states agree, let
   tiktoken pick the leftmost pair (u, v) with the smallest product w in R.  It is a merge: by
   (c) (u and v are in R, so bytes or products), or else because by locality the library alone
   on w's bytes passes through [u, v] and still reaches w (w is not in L).  Every w-pair present
   is that merge.  A present merge with another product w' in R has id(w') > id(w) (tiktoken
   sees it too), so by (a) a larger index than w's merges; one with a product in L is never the
   library's pick (it would make that token).  So the library picks the same leftmost pair; and
   when tiktoken finds no pair, the library finds no merge it would apply.  The shortcut: a
   piece in R is that token in both (tiktoken's shortcut; the library's shortcut, or without
   ``ignore_merges`` its merge loop, by (b)); a piece in L goes to tiktoken's merge loop, which
   equals the library's unless the library's shortcut applies, and those spans go to the
   library; any other piece goes through both merge loops.

The regexes are run by tiktoken's engine (fancy-regex) instead of the library's (Oniguruma) on
the same pattern text; the differential tests compare both on every corpus tokenizer.
"""

from __future__ import annotations

import base64
import sys
from array import array
import hashlib
import itertools
import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from .. import forksafe
from . import background_proof, proof_cache
from .span_bpe import BYTE_OF, SpanBpe, bytes_of_byte_level, coverage_note

__all__ = ["RankBpe", "rank_bpe_plan", "span_bpe_for"]

# ByteLevel's pre-tokenizer regex when ``use_regex`` is on (the GPT-2 pattern).
#: Bumped when the conditions proved here or the marker's format change (invalidates remembered
#: proofs; 6: markers are signed, :mod:`rllm_renderers.encoding.proof_cache`).
PROOF_VERSION = "6"

_GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


class _NotProvable(Exception):
    """The tokenizer is not provably a rank-based BPE; the message says which condition fails."""


class _ByteLengths(dict):
    """id -> the token's length in bytes, looked up in the engine as ids are met (KeyError: not its id)."""

    def __init__(self, token_bytes):
        super().__init__()
        self._token_bytes = token_bytes

    def __missing__(self, id_: int) -> int:
        try:
            length = self[id_] = len(self._token_bytes(id_))
        except (KeyError, OverflowError, TypeError):  # an id the engine does not have
            raise KeyError(id_) from None
        return length


@dataclass
class RankBpe(SpanBpe):
    """The tiktoken engine: the last ``Split`` regex and the rank table in tiktoken, earlier stages here."""

    ranks: dict[bytes, int] = field(repr=False)
    _encoding: Any = field(default=None, repr=False)
    _stage_regexes: tuple = field(default=(), repr=False)
    _one_pass: Any = field(default=None, repr=False)
    _one_pass_ascii: Any = field(default=None, repr=False)
    _short_pieces: dict = field(default_factory=dict, repr=False)
    #: The proof's verdict on :func:`_one_pass_stages` (None: check it here).
    one_pass: bool | None = field(default=None, kw_only=True)

    engine = "tiktoken"

    def __post_init__(self) -> None:
        import tiktoken

        super().__post_init__()
        # P|(?:(?!P)[\s\S])+ keeps the gaps between matches, as Split(Isolated) does (module doc).
        keep_gaps = f"(?:{self.pattern})|(?:(?!(?:{self.pattern}))[\\s\\S])+"
        self._encoding = tiktoken.Encoding(
            "rllm-rank-bpe", pat_str=keep_gaps, mergeable_ranks=self.ranks, special_tokens={}
        )
        self._encode = self._encoding._core_bpe.encode_ordinary
        self._token_bytes = self._encoding._core_bpe.decode_single_token_bytes
        if self.stages:
            import regex

            self._stage_regexes = tuple(regex.compile(stage) for stage in self.stages)
            self._one_pass = _one_pass_stages(self.stages, disjoint=self.one_pass)
            if self._one_pass is not None:
                self._one_pass_ascii = _ascii_one_pass(self.stages)
            self._short_pieces = _short_piece_ids(self.stages, self._encode)

    def _token_lengths(self) -> _ByteLengths:
        return _ByteLengths(self._token_bytes)

    def _encode_normalized(self, span: str) -> list[int] | None:
        if self.refuses(span):
            return None
        if not self._stage_regexes:
            return self._encode(span)
        if self._one_pass is not None:
            # matches and the gaps between them alternate; the gaps may be empty, matches never are
            pieces = (self._one_pass_ascii if span.isascii() else self._one_pass).split(span)
            if len(pieces) == 1:  # no stage matched: the span is one piece
                return self._encode(span)
        else:
            pieces = self._staged_pieces(span)
        ids: list[int] = []
        encode, short = self._encode, self._short_pieces
        for piece in pieces:
            if piece:
                ids += short.get(piece) or encode(piece)
        return ids

    def _staged_pieces(self, span: str) -> list[str]:
        """The pieces the earlier ``Split(Isolated)`` stages cut ``span`` into (matches and gaps),
        one stage after the other, as the library does."""
        pieces = [span]
        for stage in self._stage_regexes:
            cut: list[str] = []
            for piece in pieces:
                done = 0
                for match in stage.finditer(piece):
                    start, stop = match.span()
                    if start == stop:
                        continue
                    if done < start:
                        cut.append(piece[done:start])
                    cut.append(piece[start:stop])
                    done = stop
                if done < len(piece):
                    cut.append(piece[done:])
            pieces = cut
        return pieces


# One character class (``\p{N}``, ``\P{..}``, ``\d``-like, or a bracket set without nested sets),
# alone or repeated (``+``, ``{1,n}``): its matches are the runs of the class, cut every 1 / all / n characters.
_CLASS_RUN = re.compile(r"(\\[pP]\{[\w=&.\- ]+\}|\\[dswDSW]|\[\^?(?:\\.|[^\\\[\]])+\])(\+|\{1,[1-9][0-9]*\})?")


def _one_pass_stages(stages: tuple[str, ...], *, disjoint: bool | None = None):
    """One ``regex`` pattern whose ``split`` cuts a span into the pieces the ``Split(Isolated)``
    ``stages`` cut it into one after the other, or None when that is not proved.

    Proved when every stage is ``C_i``, ``C_i+`` or ``C_i{1,n_i}`` for a character class ``C_i`` and no
    character is in two classes (checked over every code point, with the same ``regex`` engine
    that runs the stages).  Then, by induction over the stages: after stages 1..i the pieces are
    the runs of each ``C_j`` (j <= i), maximal in the span and cut every ``n_j`` characters from the
    run's start, and the maximal runs of characters in none of them.  Stage i+1 leaves a ``C_j``
    piece alone (it holds no ``C_{i+1}`` character); in a gap it finds the ``C_{i+1}`` runs, which
    are maximal in the span too (the gap ends at a ``C_j`` character or the span's end), cut from
    their start.  ``(C_1..|C_2..|...)`` scanned left to right finds the same matches: at a
    position at most one alternative can start (disjoint classes), and it takes the same run
    prefix.  ``split`` with the one group returns gap, match, gap, ..., gap (gaps possibly empty).

    ``disjoint``: the verdict of the disjointness check made before (the proof remembers it; it
    scans every code point), None to check here.
    """
    import regex

    if not all(_CLASS_RUN.fullmatch(stage) for stage in stages):
        return None
    if disjoint is False:
        return None
    if len(stages) > 1 and disjoint is None:
        # every code point but the surrogates (4 MB: built for the check, not kept)
        every_character = "".join(map(chr, range(0xD800))) + "".join(map(chr, range(0xE000, 0x110000)))
        classes = [_CLASS_RUN.fullmatch(stage).group(1) for stage in stages]
        for first, cls in enumerate(classes):
            for other in classes[first + 1 :]:
                if regex.search(f"(?={cls}){other}", every_character):
                    return None
    return regex.compile("(" + "|".join(f"(?:{stage})" for stage in stages) + ")")


def _ascii_one_pass(stages: tuple[str, ...]) -> re.Pattern[str]:
    """The one-pass split for ASCII spans, in ``re`` (about 1.5 times faster than ``regex`` on
    them): each class replaced by its ASCII members, listed one by one (found by ``regex`` itself,
    so membership is the same); a class without any is dropped, as it cannot match."""
    import regex

    ascii_text = "".join(map(chr, range(128)))
    alternatives = []
    for stage in stages:
        run = _CLASS_RUN.fullmatch(stage)
        members = regex.findall(run.group(1), ascii_text)
        if members:
            alternatives.append("[" + "".join(re.escape(ch) for ch in members) + "]" + (run.group(2) or ""))
    return re.compile("(" + "|".join(alternatives) + ")" if alternatives else "(?!)")


_SHORT_PIECES_LIMIT = 5000


def _short_piece_ids(stages: tuple[str, ...], encode) -> dict[str, list[int]]:
    """The ids of every ASCII piece a ``C`` or ``C{1,n}`` stage can cut out, when there are at most
    ``_SHORT_PIECES_LIMIT`` of them (DeepSeek's digit groups ``\\p{N}{1,3}``: the 1,110 strings of
    1 to 3 ASCII digits), each computed by ``encode`` (tiktoken) when the encoder is built.

    Looking a piece up therefore gives exactly what encoding it gives, whatever stage cut it; it
    saves a tiktoken call, which is slow on such a piece (no regex match: the gap alternative
    tests ``(?!P)`` at every character).  A complete table of the tokenizer's function on a finite
    set of strings, like the rank table: it is never filled from the text being encoded.
    """
    import regex

    table: dict[str, list[int]] = {}
    for stage in stages:
        run = _CLASS_RUN.fullmatch(stage)
        if run is None or run.group(2) == "+":
            continue
        longest = 1 if run.group(2) is None else int(run.group(2)[3:-1])
        ascii_members = regex.findall(run.group(1), "".join(map(chr, range(128))))
        if sum(len(ascii_members) ** length for length in range(1, longest + 1)) + len(table) > _SHORT_PIECES_LIMIT:
            continue
        for length in range(1, longest + 1):
            for chars in itertools.product(ascii_members, repeat=length):
                piece = "".join(chars)
                table[piece] = encode(piece)
    return table


def _normalizer_is_nfc(normalizer: Any) -> bool:
    """True for NFC, False for none; raises for anything else."""
    if normalizer is None:
        return False
    kind = normalizer.get("type")
    if kind == "NFC":
        return True
    if kind == "Sequence":
        steps = normalizer.get("normalizers") or []
        if not steps:
            return False
        if len(steps) == 1:
            return _normalizer_is_nfc(steps[0])
    raise _NotProvable(f"normalizer {json.dumps(normalizer)[:80]} is neither NFC nor none")


def _split_stages(pre_tokenizer: Any) -> tuple[list[str], str]:
    """(earlier Split regexes, the regex tiktoken runs) of a supported pre-tokenizer."""
    if pre_tokenizer is None:
        raise _NotProvable("no pre-tokenizer (not byte-level)")
    steps = pre_tokenizer.get("pretokenizers") if pre_tokenizer.get("type") == "Sequence" else [pre_tokenizer]
    if not steps or steps[-1].get("type") != "ByteLevel":
        raise _NotProvable("the pre-tokenizer does not end with ByteLevel")
    byte_level = steps[-1]
    if byte_level.get("add_prefix_space"):
        raise _NotProvable("ByteLevel adds a prefix space")
    splits = []
    for step in steps[:-1]:
        if step.get("type") != "Split":
            raise _NotProvable(f"pre-tokenizer step {step.get('type')} is not a Split")
        if step.get("behavior") != "Isolated" or step.get("invert"):
            raise _NotProvable(f"Split behaviour {step.get('behavior')} (invert={step.get('invert')}) is not Isolated")
        pattern = step.get("pattern") or {}
        if "Regex" not in pattern:
            raise _NotProvable("a Split on a literal string, not a regex")
        splits.append(pattern["Regex"])
    if byte_level.get("use_regex", True):
        splits.append(_GPT2_PATTERN)
    if not splits:
        return [], r"[\s\S]+"  # the whole span is one word
    return splits[:-1], splits[-1]


def _check_model(model: dict) -> tuple[dict[str, int], list[tuple[str, str]]]:
    if model.get("type") != "BPE":
        raise _NotProvable(f"model {model.get('type')} is not BPE")
    if model.get("dropout"):
        raise _NotProvable("BPE dropout")
    if model.get("byte_fallback"):
        raise _NotProvable("BPE byte fallback")
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        raise _NotProvable("BPE subword prefix/suffix")
    vocab = model["vocab"]
    merges = [tuple(merge.split(" ", 1)) if isinstance(merge, str) else tuple(merge) for merge in model["merges"]]
    missing = [ch for ch in BYTE_OF if ch not in vocab]
    if missing:
        raise _NotProvable(f"{len(missing)} of the 256 byte symbols are not in the vocabulary")
    return vocab, merges


def _check_merges(vocab: dict[str, int], merges: list[tuple[str, str]]) -> set[str]:
    """Condition (a); returns the merge products."""
    products: set[str] = set()
    previous = -1
    for index, (left, right) in enumerate(merges):
        product = left + right
        rank = vocab.get(product)
        if rank is None or left not in vocab or right not in vocab:
            raise _NotProvable(f"merge {index} ({left!r}, {right!r}) involves a token outside the vocabulary")
        if rank < previous:
            raise _NotProvable(f"merge {index} makes token {rank}, after a merge that made token {previous}")
        products.add(product)
        previous = rank
    return products


def _merges_are_closed(vocab: dict[str, int], merges: list[tuple[str, str]], products: set[str]) -> bool:
    """Condition (c)'s first half: every split of a product into two bytes or products is a merge."""
    symbols = products | set(BYTE_OF)
    merge_set = set(merges)
    for token in products:
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in symbols and right in symbols and (left, right) not in merge_set:
                return False
    return True


def _unreached(vocab: dict[str, int], merges: list[tuple[str, str]], products: set[str]) -> set[str]:
    """Condition (b): the merge products that the library's merge loop (no whole-word shortcut)
    does not turn into themselves from their own bytes."""
    import tokenizers

    bpe = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=merges, ignore_merges=False))
    # Byte-level strings hold no real space, so one call with a whitespace split encodes every
    # product as its own BPE word.
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    words = sorted(products)
    want = [vocab[word] for word in words]
    if bpe.encode(" ".join(words), add_special_tokens=False).ids == want:
        return set()
    encodings = bpe.encode_batch_fast(words, add_special_tokens=False)
    return {word for word, id_, encoding in zip(words, want, encodings) if encoding.ids != [id_]}


def _shortcut_texts(tokens: set[str]) -> tuple[str, ...]:
    """The texts of byte-level ``tokens`` that a pre-token can equal (valid UTF-8), sorted."""
    texts = set()
    for token in tokens:
        try:
            texts.add(bytes_of_byte_level(token).decode("utf-8"))
        except UnicodeDecodeError:  # a piece of a character: no pre-token (a str) is ever this
            pass
    return tuple(sorted(texts))


def _state(component: Any) -> Any:
    """The JSON dict of a normalizer / pre-tokenizer object (None stays None)."""
    return None if component is None else json.loads(component.__getstate__())


def _check_model_object(model: Any) -> None:
    """The cheap part of the model checks, on the live ``tokenizers.models.BPE`` object."""
    if type(model).__name__ != "BPE":
        raise _NotProvable(f"model {type(model).__name__} is not BPE")
    if getattr(model, "dropout", None):
        raise _NotProvable("BPE dropout")
    if getattr(model, "byte_fallback", False):
        raise _NotProvable("BPE byte fallback")
    if getattr(model, "continuing_subword_prefix", None) or getattr(model, "end_of_word_suffix", None):
        raise _NotProvable("BPE subword prefix/suffix")


def _proof_marker(sha256: str):
    """Where the verdict for tokenizer content ``sha256`` is remembered across processes (None: nowhere)."""
    folder = proof_cache.cache_folder()
    return None if folder is None else folder / "rank_bpe_proofs" / f"{PROOF_VERSION}-{sha256}"


@dataclass
class Proof:
    """What the proof established for one tokenizer content: the span pipeline, and the rank table
    (parsed from the remembered marker's verified text only when an engine needs it: fastokens does not)."""

    pattern: str
    stages: tuple[str, ...]
    nfc: bool
    shortcut_only: tuple[str, ...]
    left_out: int
    #: Whether the stages run as one split (:func:`_one_pass_stages`; its check scans every code point).
    one_pass: bool = False
    _ranks: dict[bytes, int] | None = field(default=None, repr=False)
    _rank_lines: str | None = field(default=None, repr=False)

    def header(self) -> dict:
        return {"pattern": self.pattern, "stages": list(self.stages), "nfc": self.nfc,
                "shortcut_only": list(self.shortcut_only), "left_out": self.left_out,
                "one_pass": self.one_pass}  # fmt: skip

    @property
    def ranks(self) -> dict[bytes, int]:
        if self._ranks is None:
            self._ranks, self._rank_lines = _ranks_from_text(self._rank_lines), None
        return self._ranks

    def note(self) -> str:
        return coverage_note(self.shortcut_only, self.left_out)


def _ranks_as_text(ranks: dict[bytes, int]) -> str:
    """The rank table as three base64 lines: the tokens' bytes joined, their lengths and their ranks
    (``uint32``, little-endian).  A table of 200k tokens reads back in a few tens of ms."""
    tokens = list(ranks)
    lengths, values = array("I", map(len, tokens)), array("I", ranks.values())
    if sys.byteorder != "little":
        lengths.byteswap()
        values.byteswap()
    return "\n".join(base64.b64encode(part).decode() for part in (b"".join(tokens), lengths.tobytes(), values.tobytes())) + "\n"


def _ranks_from_text(text: str) -> dict[bytes, int]:
    """:func:`_ranks_as_text` read back (ValueError when the three lines do not fit together)."""
    joined, lengths_data, values_data = (base64.b64decode(line, validate=True) for line in text.split("\n")[:3])
    lengths, values = array("I"), array("I")
    lengths.frombytes(lengths_data)
    values.frombytes(values_data)
    if sys.byteorder != "little":
        lengths.byteswap()
        values.byteswap()
    if len(lengths) != len(values) or sum(lengths) != len(joined):
        raise ValueError("the remembered rank table is inconsistent")
    ends = list(accumulate(lengths))
    return dict(zip(map(joined.__getitem__, map(slice, [0, *ends[:-1]], ends)), values))


def _live_facts(content: str, structure: tuple[bool, tuple[str, ...], str]) -> dict:
    """What a marker must say to be this tokenizer's: its content hash, the proof version, and the
    normalizer and pre-tokenizer read from the live object (``structure``: nfc, stages, pattern)."""
    nfc, stages, pattern = structure
    return {"content": content, "version": PROOF_VERSION, "nfc": nfc, "stages": list(stages), "pattern": pattern}


def _remember(marker, facts: dict, verdict: str, proof: Proof | None = None) -> bool:
    """Write the verdict (with a proof: its header and rank table); False when it could not."""
    if marker is None:
        return False
    header = {**facts, "verdict": verdict}
    body = ""
    if proof is not None:
        header.update(proof.header(), ranks=len(proof.ranks))
        body = _ranks_as_text(proof.ranks)
    return proof_cache.write_marker(marker, header, body)


def _remembered(marker, facts: dict) -> tuple[Proof | None, str] | None:
    """The verdict a verified marker holds (:mod:`rllm_renderers.encoding.proof_cache`), or None when there is
    none or it is not this tokenizer's or not intact (a miss: the caller proves again)."""
    if marker is None:
        return None
    found = proof_cache.read_marker(marker, facts)
    if found is None:
        return None
    header, body = found
    try:
        if header["verdict"] != "proved":
            return None, str(header["verdict"]).removeprefix("refused: ")
        proof = Proof(header["pattern"], tuple(header["stages"]), header["nfc"], tuple(header["shortcut_only"]),
                      header["left_out"], header["one_pass"], _rank_lines=body)  # fmt: skip
    except (KeyError, TypeError, AttributeError):
        return None
    return proof, proof.note()


def _prove(
    tokenizer_json: str, marker, facts: dict, *, inline: bool = True
) -> tuple[Proof | None, str] | background_proof.Pending:
    """The verdict remembered for exactly this content, else proved here (``inline``) or, when
    it is not, the proof started in a background process (what to say meanwhile)."""
    remembered = _remembered(marker, facts)
    if remembered is not None:  # decided before for exactly this content
        return remembered
    if not inline and marker is not None and len(tokenizer_json) >= background_proof.INLINE_BELOW_CHARACTERS:
        pending = background_proof.start(tokenizer_json, marker, facts)
        if pending is not None:
            return pending
    return prove_and_remember(tokenizer_json, marker, facts)


def prove_and_remember(tokenizer_json: str, marker, facts: dict) -> tuple[Proof | None, str]:
    """Run the proof of ``tokenizer_json`` and remember its verdict at ``marker`` (None: nowhere)."""
    data = json.loads(tokenizer_json)
    try:
        nfc = _normalizer_is_nfc(data.get("normalizer"))
        stages, pattern = _split_stages(data.get("pre_tokenizer"))
        vocab, merges = _check_model(data["model"])
        ignore_merges = bool(data["model"].get("ignore_merges"))
        products = _check_merges(vocab, merges)
        # Tokens the merge loop never makes (module doc, "Left out"): kept out of the ranks.
        left_out = {token for token in vocab if token not in products and token not in BYTE_OF}
        if not (ignore_merges and _merges_are_closed(vocab, merges, products)):
            left_out |= _unreached(vocab, merges, products)
    except _NotProvable as exc:
        _remember(marker, facts, f"refused: {exc}")
        return None, str(exc)
    kept = products - left_out
    ranks = {bytes_of_byte_level(token): id_ for token, id_ in vocab.items() if token in kept}
    ranks.update({bytes([byte]): vocab[ch] for ch, byte in BYTE_OF.items()})
    # Only the whole-word shortcut can give a left-out token; without it, none is ever given.
    shortcut_only = _shortcut_texts(left_out) if ignore_merges else ()
    one_pass = bool(stages) and _one_pass_stages(tuple(stages)) is not None
    proof = Proof(pattern, tuple(stages), nfc, shortcut_only, len(left_out), one_pass, _ranks=ranks)
    _remember(marker, facts, "proved", proof)
    return proof, proof.note()


def _is_panic(exc: BaseException) -> bool:
    """A Rust panic raised through PyO3 (``pyo3_runtime.PanicException``, a ``BaseException``)."""
    return type(exc).__name__ == "PanicException"


class EnginePanic(RuntimeError):
    """A Rust engine panicked (its ``PanicException`` is a ``BaseException``; this is an ``Exception``)."""


def _build(engine: str, proof: Proof, tokenizer_json: str, content: str) -> tuple[SpanBpe | None, str]:
    """The span encoder of ``engine`` for a proved tokenizer (content hash ``content``), or (None, why not)."""
    common = {"shortcut_only": proof.shortcut_only, "left_out": proof.left_out, "content": content}
    try:
        if engine == "fastokens":
            from .fastokens_spans import FastokensBpe

            return FastokensBpe(proof.pattern, proof.stages, proof.nfc, tokenizer_json, **common), proof.note()
        return RankBpe(proof.pattern, proof.stages, proof.nfc, proof.ranks, one_pass=proof.one_pass, **common), proof.note()
    except ImportError as exc:
        return None, f"{engine} is not installed ({exc})"
    except ValueError as exc:  # the library could not compile the regex or load the tokenizer
        return None, f"{engine} refused the tokenizer: {exc}"
    except BaseException as exc:  # noqa: B036 - a Rust panic is a BaseException
        if not _is_panic(exc):
            raise
        return None, f"{engine} panicked while building its encoder: {exc}"


# Per tokenizer content (sha256 of its JSON): the proof (pure Python data, kept by a forked child),
# and per engine the span encoder built from it (Rust state, rebuilt in a child: rllm_renderers.forksafe).
# Built once per process, not per renderer or tokenizer object.  Bounded: a process rarely holds
# more tokenizers than this.  Plan: (encoder or None, note or why not, whether the proof itself was refused).
_PROOFS: OrderedDict[str, tuple[Proof | None, str]] = OrderedDict()
_PLANS: OrderedDict[tuple[str, str], tuple[SpanBpe | None, str, bool]] = OrderedDict()
_PLANS_LOCK = threading.Lock()
_PLANS_SIZE = 8


def forget() -> None:
    """Forget every proof and engine this process holds (as a new process starts: the remembered
    markers are read again)."""
    with _PLANS_LOCK:
        _PLANS.clear()
        _PROOFS.clear()


def _after_fork() -> None:
    global _PLANS_LOCK
    _PLANS_LOCK = threading.Lock()
    _PLANS.clear()


forksafe.in_child(_after_fork)

#: The engines, in the order ``"auto"`` tries them: tiktoken first (built in a fraction of the
#: tokenizer's own load time, a rank table of a few MB), fastokens on request or later, built in the
#: background (engine_upgrade; faster per render, but its build takes longer than loading the
#: tokenizer and holds a second full tokenizer).
ENGINES = ("tiktoken", "fastokens")


def rank_bpe_plan(backend: Any, engine: str = "tiktoken") -> tuple[SpanBpe | None, str]:
    """``(span encoder, note)`` when the ``tokenizers.Tokenizer`` is provably a rank-based BPE on
    spans, else ``(None, why not)``; ``engine`` (``"tiktoken"`` or ``"fastokens"``) runs it."""
    return span_bpe_for(backend, (engine,))


def _remembered_plan(key: tuple[str, str]):
    with _PLANS_LOCK:
        plan = _PLANS.get(key)
        if plan is not None:
            _PLANS.move_to_end(key)
        return plan


def _keep(table: OrderedDict, key: Any, value: Any) -> None:
    with _PLANS_LOCK:
        table[key] = value
        while len(table) > _PLANS_SIZE:
            table.popitem(last=False)


def span_bpe_for(backend: Any, engines: tuple[str, ...] = ENGINES, *, inline: bool = True) -> tuple[SpanBpe | None, str]:
    """The span encoder of the first of ``engines`` that can run the tokenizer, when it is provably
    a rank-based BPE on spans: ``(encoder, note)``; else ``(None, why not)``.

    Cheap structural checks run on the live object first.  The rest (the merge table, and the BPE
    run over the whole vocabulary that proves condition (b), seconds for a large vocabulary) runs
    once per tokenizer content per process, and its verdict (with the proved rank table, so a
    later process skips parsing the JSON too) is remembered across processes in a marker file
    keyed by the sha256 of the tokenizer JSON and checked before it is used
    (:mod:`rllm_renderers.encoding.proof_cache`).  An engine is built once per content and engine per
    process; the rank table is read only by the tiktoken engine.  ``inline=False``: a content with
    no remembered verdict is proved in a background process (:mod:`~rllm_renderers.encoding.background_proof`)
    and this call returns ``(None, why)`` at once; a later call finds the verdict.
    """
    unknown = [engine for engine in engines if engine not in ENGINES]
    if unknown or not engines:
        raise ValueError(f"engines must be among {ENGINES}, got {engines!r}")
    try:
        nfc = _normalizer_is_nfc(_state(backend.normalizer))
        stages, pattern = _split_stages(_state(backend.pre_tokenizer))
        _check_model_object(backend.model)
    except _NotProvable as exc:
        return None, str(exc)
    tokenizer_json = backend.to_str()
    content = _content_hash(tokenizer_json)
    if engines == ENGINES:  # "auto": fastokens where this process has built it already (engine_upgrade)
        upgraded = _remembered_plan((content, "fastokens"))
        if upgraded is not None and upgraded[0] is not None:
            return upgraded[0], upgraded[1]
    failures = []
    for engine in engines:
        plan = _remembered_plan((content, engine))
        if plan is None:
            with _PLANS_LOCK:
                proved = _PROOFS.get(content)
            if proved is None:
                facts = _live_facts(content, (nfc, tuple(stages), pattern))
                marker = _proof_marker(content)
                problem = None if marker is None else proof_cache.folder_problem(marker)
                if problem is not None:  # anyone may have written there: the exact HF backend encodes
                    proved = (None, f"the proof cache is not used, {problem}: the HF backend encodes")
                    proof_cache.log_once("folder:" + str(marker.parent), "%s", proved[1])
                else:
                    proved = _prove(tokenizer_json, marker, facts, inline=inline)
                if isinstance(proved, background_proof.Pending):  # HF for now, asked again next time
                    return None, proved
                _keep(_PROOFS, content, proved)
            proof, reason = proved
            plan = (None, reason, True) if proof is None else (*_build(engine, proof, tokenizer_json, content), False)
            _keep(_PLANS, (content, engine), plan)
        encoder, reason, refused = plan
        if encoder is not None or refused:
            return encoder, "; ".join(filter(None, [*failures, reason]))
        failures.append(reason)
    return None, "; ".join(failures)


def _content_hash(tokenizer_json: str) -> str:
    return hashlib.sha256(tokenizer_json.encode("utf-8", "surrogatepass")).hexdigest()


def build_engine(backend: Any, content: str, engine: str) -> tuple[SpanBpe | None, str]:
    """The span encoder of ``engine`` for the tokenizer whose content hash is ``content`` and whose
    proof this process holds (an engine built later: :mod:`~rllm_renderers.encoding.engine_upgrade`),
    kept like the others; ``(None, why not)`` when it cannot be built or the tokenizer's content is no
    longer ``content``."""
    plan = _remembered_plan((content, engine))
    if plan is None:
        tokenizer_json = backend.to_str()
        if _content_hash(tokenizer_json) != content:
            return None, "the tokenizer changed since its proof"
        with _PLANS_LOCK:
            proved = _PROOFS.get(content)
        if proved is None:  # forgotten meanwhile (a bounded table): prove again through the usual path
            return span_bpe_for(backend, (engine,))
        proof, reason = proved
        plan = (None, reason, True) if proof is None else (*_build(engine, proof, tokenizer_json, content), False)
        _keep(_PLANS, (content, engine), plan)
    return plan[0], plan[1]
