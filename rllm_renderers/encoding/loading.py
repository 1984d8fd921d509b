"""Loading tokenizers from local folders, never from the network.

transformers is imported inside the function, so importing ``rllm_renderers`` stays cheap and
does not require transformers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["load_tokenizer"]


def load_tokenizer(folder: str | os.PathLike[str], **kwargs: Any):
    """Load the HF tokenizer saved in ``folder`` (``tokenizer.json`` + ``tokenizer_config.json``).

    Only local files are read (``local_files_only=True``); extra keyword arguments go to
    ``AutoTokenizer.from_pretrained`` (e.g. ``split_special_tokens=True``).
    """
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"tokenizer folder not found: {path}")
    from transformers import AutoTokenizer  # lazy: keep transformers out of `import rllm_renderers`

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True, **kwargs)
