"""What a tokenizer holds, as one short hash: how ``resolve`` recognises a tokenizer it has seen.

A checkpoint in a local folder, a fine-tune or a revision of a known model often ships the
tokenizer its renderer was verified with, under another name and sometimes without a chat
template (DeepSeek-V4 ships none). :func:`tokenizer_fingerprint` hashes what tells tokenizers
apart, cheaply enough to run on every ``resolve`` (well under 10 ms on a 260k vocabulary):

* the vocabulary size, added tokens included;
* every added token, as ``(id, content)``;
* a sample of the vocabulary: the token strings at 64 evenly spaced ids (hashing all of it
  would cost 0.1 to 0.3 s).

The compiler records the fingerprint of the tokenizer each renderer was verified with in
``generated/_index.py``; a tokenizer with the same fingerprint has the same ids for the same
text wherever it matters to a renderer. Special-token flags, normalizer settings and the like
are left out: a fine-tune that changes them keeps its fingerprint, and the renderer encodes
with the tokenizer it is given anyway.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["FINGERPRINT_VERSION", "tokenizer_fingerprint"]

#: Part of the hashed text: a change of what is hashed must not match old fingerprints.
FINGERPRINT_VERSION = 1
#: How many vocabulary entries (evenly spaced ids) the fingerprint samples.
VOCAB_SAMPLES = 64


def tokenizer_fingerprint(tokenizer: Any) -> str | None:
    """sha256 (hex) of what ``tokenizer`` holds; None for an object that is not a fast tokenizer
    (a ``tokenizers.Tokenizer`` or an HF tokenizer with a ``backend_tokenizer``), which then cannot
    be recognised by content."""
    backend = _backend(tokenizer)
    if backend is None:
        return None
    size = backend.get_vocab_size(with_added_tokens=True)
    added = sorted((int(id_), token.content) for id_, token in backend.get_added_tokens_decoder().items())
    sample = [backend.id_to_token(i * size // VOCAB_SAMPLES) for i in range(VOCAB_SAMPLES)] if size else []
    payload = {"version": FINGERPRINT_VERSION, "size": size, "added": added, "sample": sample}
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _backend(tokenizer: Any) -> Any:
    from .tokenization import _backend_of

    try:
        return _backend_of(tokenizer)
    except (ImportError, TypeError):  # no tokenizers library, or not a fast tokenizer
        return None
