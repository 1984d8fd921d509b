"""Writing into an output folder: a module and the index that lists it, as one step.

``generate`` writes ``<module>.py`` and ``_index.py``. Two runs into one folder, or a run
stopped between the two writes, must still leave a folder whose index lists exactly its
modules. So each run holds the folder's lock (``flock`` on the folder itself: no lock file to
leave behind) while it reads the folder and writes both files, each file is replaced whole
(written beside it, synced, renamed), and the index is computed from the folder under that
lock. A run killed between the two writes leaves a module its index does not list:
:func:`repair_index` (run by ``check``) rewrites the index from the folder's modules.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import black

from .index import INDEX_FILE, index_is_current, index_source

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: runs into one folder are not serialised
    fcntl = None


@contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """Hold ``folder``'s exclusive lock (created if missing); other generate runs wait for it."""
    folder.mkdir(parents=True, exist_ok=True)
    if fcntl is None:
        yield
        return
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing releases the lock


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` completely or not at all (a reader sees the old file or the new)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def publish_module(
    folder: Path, name: str, code: str, mode: black.Mode, fingerprints: dict[str, str | None] | None = None
) -> Path:
    """Write ``<folder>/<name>`` and the folder's index listing it, under the folder's lock.

    The index is computed (which also checks every module already there) before anything is
    written, so a folder holding a foreign file gets neither file. ``fingerprints``: the tokenizer
    fingerprints to record for modules (see :func:`compiler.index.index_source`).
    """
    path = folder / name
    with folder_lock(folder):
        index = index_source(folder, mode, pending={name: code}, fingerprints=fingerprints)
        write_atomically(path, code)
        write_atomically(folder / INDEX_FILE, index)
    return path


def repair_index(folder: Path, mode: black.Mode) -> bool:
    """Rewrite ``folder``'s index from its modules if it does not list exactly them; True if it did."""
    with folder_lock(folder):
        if index_is_current(folder, mode):
            return False
        write_atomically(folder / INDEX_FILE, index_source(folder, mode))
        return True
