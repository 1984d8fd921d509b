"""The background process of :mod:`rllm_renderers.encoding.background_proof`:
``python -I -c BOOTSTRAP PACKAGE_ROOT MARKER FACTS`` (``main(MARKER, FACTS)``) proves the tokenizer JSON waiting
beside ``MARKER`` (after checking it is the content ``FACTS`` names) and writes the verdict there."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from .background_proof import finished, job_of
from .fast_encoder import prove_and_remember
from .proof_cache import read_private


def main(argv: list[str] | None = None) -> int:
    marker_text, facts_text = argv if argv is not None else sys.argv[1:]
    marker, facts = Path(marker_text), json.loads(facts_text)
    try:
        os.nice(10)
    except OSError:
        pass
    job = job_of(marker)
    data = read_private(job)  # (a regular file of this user, never through a symbolic link)
    if data is None:
        print(f"{job} is not a file of this user: not proved", file=sys.stderr)
        return 1
    tokenizer_json = data.decode("utf-8", "surrogatepass")
    content = hashlib.sha256(tokenizer_json.encode("utf-8", "surrogatepass")).hexdigest()
    if content != facts.get("content"):
        print(f"{job} is not the tokenizer {facts.get('content')} (sha256 {content}): not proved", file=sys.stderr)
        return 1
    prove_and_remember(tokenizer_json, marker, facts)
    finished(marker)
    return 0


if __name__ == "__main__":
    sys.exit(main())
