"""What a span encoder is, and the byte-level alphabet its engines share.

:class:`SpanBpe` encodes a span (text without added tokens) exactly as the tokenizer library's
pipeline does; its engines are :class:`~rllm_renderers.encoding.fast_encoder.RankBpe` (tiktoken)
and :class:`~rllm_renderers.encoding.fastokens_spans.FastokensBpe` (fastokens), both proved equal
to the tokenizer by :mod:`rllm_renderers.encoding.fast_encoder`. This module sits below both, so
neither engine's module imports the other's.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

__all__ = ["BYTE_OF", "SpanBpe", "bytes_of_byte_level", "coverage_note", "nfc_leaves_alone", "unassigned_or_astral"]


def _byte_level_alphabet() -> dict[str, int]:
    """ByteLevel's printable stand-in character for each byte -> the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {chr(byte): byte for byte in printable}
    shifted = 0
    for byte in range(256):
        if byte not in printable:
            mapping[chr(256 + shifted)] = byte
            shifted += 1
    return mapping


BYTE_OF = _byte_level_alphabet()
# bytes.translate table: 1 for a UTF-8 byte that starts a character, 0 for a continuation byte.
_STARTS_A_CHARACTER = bytes(0 if 0x80 <= byte < 0xC0 else 1 for byte in range(256))
_TO_LATIN1 = str.maketrans({ch: chr(byte) for ch, byte in BYTE_OF.items()})


def bytes_of_byte_level(token: str) -> bytes:
    """The bytes a ByteLevel vocabulary string stands for (UnicodeEncodeError for a foreign character)."""
    return token.translate(_TO_LATIN1).encode("latin-1")


@dataclass
class SpanBpe:
    """Encodes a span (text without added tokens) exactly as the library's pipeline does, with the
    engine of a subclass (:class:`RankBpe`: tiktoken; ``fastokens_spans.FastokensBpe``: fastokens).

    What is shared: the library's NFC (skipped where :func:`nfc_leaves_alone` proves it changes
    nothing), the refusal of spans that contain a shortcut-only token's text, and token starts from
    byte lengths."""

    pattern: str
    stages: tuple[str, ...]
    nfc: bool
    #: Texts of the tokens only the library's whole-word shortcut gives (module doc, "Left out"):
    #: a span containing one is not ours to encode (:meth:`encode` returns None).
    shortcut_only: tuple[str, ...] = field(default=(), kw_only=True)
    #: How many vocabulary tokens were left out of the ranks (never made by the merge loop).
    left_out: int = field(default=0, kw_only=True)
    #: The sha256 of the tokenizer JSON the engine was built for (what its proof and plan are kept under).
    content: str = field(default="", kw_only=True)
    _shortcut_search: Any = field(default=None, repr=False, kw_only=True)
    _byte_lengths: Any = field(default=None, repr=False, kw_only=True)

    #: The engine's name (``TextEncoder.backend``).
    engine = ""

    def __post_init__(self) -> None:
        if self.nfc:
            # The library's own NFC: Python's unicodedata follows another Unicode version, and the
            # canonical order of some newer combining marks differs (e.g. U+0EB8 U+0EBA).
            from tokenizers.normalizers import NFC

            self._nfc = NFC().normalize_str
        if self.shortcut_only:
            longest_first = sorted(self.shortcut_only, key=len, reverse=True)
            self._shortcut_search = re.compile("|".join(map(re.escape, longest_first))).search

    def note(self) -> str:
        """What the engine does not cover here ("" when it covers every span)."""
        return coverage_note(self.shortcut_only, self.left_out)

    def normalized(self, span: str) -> str:
        """The span after the library's normalizer (NFC or none)."""
        if self.nfc and not span.isascii() and not nfc_leaves_alone(span):
            return self._nfc(span)
        return span

    def refuses(self, normalized: str) -> bool:
        """True when the (normalized) span contains a shortcut-only token's text: the library's to encode."""
        return self._shortcut_search is not None and self._shortcut_search(normalized) is not None

    def encode(self, span: str) -> list[int] | None:
        """The span's ids, or None when it contains a shortcut-only token's text (the library's to encode)."""
        return self._encode_normalized(self.normalized(span))

    def encode_with_starts(self, span: str) -> tuple[list[int] | None, list[int] | None]:
        """``(encode(span), starts(span, those ids))``, normalizing the span once."""
        normalized = self.normalized(span)
        ids = self._encode_normalized(normalized)
        if ids is None or normalized != span:
            return ids, None
        return ids, self.starts(span, ids, unchanged_by_nfc=True)

    def encode_many(self, spans: list[str]) -> list[list[int] | None]:
        """``[encode(span) for span in spans]`` (an engine may do it in fewer calls)."""
        return [self.encode(span) for span in spans]

    def encode_many_with_starts(self, spans: list[str]) -> list[tuple[list[int] | None, list[int] | None]]:
        """``[encode_with_starts(span) for span in spans]``."""
        return [self.encode_with_starts(span) for span in spans]

    def _encode_normalized(self, span: str) -> list[int] | None:
        raise NotImplementedError

    def _token_lengths(self) -> Any:
        """id -> the token's length in bytes (a mapping; KeyError for an id the engine never gives)."""
        raise NotImplementedError

    def starts(self, span: str, ids: list[int], *, unchanged_by_nfc: bool = False) -> list[int] | None:
        """Where each token of ``ids`` (the span's encoding) starts, as the index of a character of
        ``span``: the library's offsets (a token that starts inside a character starts at that
        character).  None when NFC changes the span (the library's offsets then follow its
        alignment of the normalized text) or an id is not the engine's."""
        lengths = self._byte_lengths
        if lengths is None:
            lengths = self._byte_lengths = self._token_lengths()
        try:
            byte_starts = list(accumulate(map(lengths.__getitem__, ids), initial=0))
        except KeyError:  # a token the engine does not have (a span the library encoded)
            return None
        byte_starts.pop()
        if span.isascii():
            return byte_starts
        if self.nfc and not unchanged_by_nfc and not nfc_leaves_alone(span) and self._nfc(span) != span:
            return None
        # char_at[k + 1]: the index of the character that holds byte k of the span's UTF-8.
        char_at = list(accumulate(span.encode("utf-8").translate(_STARTS_A_CHARACTER), initial=-1))
        return [char_at[at + 1] for at in byte_starts]


def coverage_note(shortcut_only: tuple[str, ...], left_out: int) -> str:
    if shortcut_only:
        return (
            f"{len(shortcut_only)} vocabulary tokens are given only by the whole-word shortcut: "
            "a span containing one is encoded by the HF backend"
        )
    if left_out:
        return f"{left_out} vocabulary tokens the tokenizer never gives are left out of the ranks"
    return ""


def nfc_leaves_alone(text: str) -> bool:
    """True when the library's NFC certainly returns ``text`` unchanged; decided with Python's
    ``unicodedata`` (C, a quick check), which is far cheaper than the library's ``normalize_str``
    (it tracks the alignment of every character).

    The condition: ``text`` is NFC by Python's Unicode version V and holds no character V leaves
    unassigned.  The library's NFC follows another version W.  Normalization stability makes a
    character's decomposition and combining class final once it is assigned, and no primary
    composite is ever added for characters already assigned.  If W is older, a character new in V
    is to W an inert starter (class 0, no decomposition, composes with nothing): that only blocks
    more compositions and leaves the canonical order canonical, so W's NFC changes nothing either.
    If W is newer, every character of ``text`` has the same properties in W (all are assigned in
    V), so W's NFC agrees.  (Python's own NFC is never used to normalize: where V and W differ, on a
    text that is not NFC by V, the library's NFC runs.)
    """
    if not unicodedata.is_normalized("NFC", text):
        return False
    if unassigned_or_astral().search(text) is None:  # the common case, one scan in C
        return True
    category = unicodedata.category
    return not any(category(ch) == "Cn" for ch in set(text) if ch > "\x7f")


_UNASSIGNED_OR_ASTRAL: re.Pattern[str] | None = None


def unassigned_or_astral() -> re.Pattern[str]:
    """A character class: the BMP code points Python's Unicode version leaves unassigned, and every
    code point beyond the BMP (``re`` keeps a BMP-only class as a fast table; the rare text that
    matches is checked character by character)."""
    global _UNASSIGNED_OR_ASTRAL
    if _UNASSIGNED_OR_ASTRAL is None:
        ranges: list[list[int]] = []
        for code in range(0x80, 0x10000):
            if unicodedata.category(chr(code)) == "Cn":
                if ranges and ranges[-1][1] == code - 1:
                    ranges[-1][1] = code
                else:
                    ranges.append([code, code])
        body = "".join(f"{re.escape(chr(low))}-{re.escape(chr(high))}" for low, high in ranges)
        _UNASSIGNED_OR_ASTRAL = re.compile(f"[{body}]|[\U00010000-\U0010ffff]")
    return _UNASSIGNED_OR_ASTRAL
