"""The rank-BPE proof of a tokenizer seen for the first time, run in a process of its own.

The proof (:mod:`rllm_renderers.encoding.fast_encoder`) runs a BPE over the whole vocabulary: 1 to 6
seconds for a real tokenizer, more than loading the tokenizer itself.  Its verdict is remembered per
tokenizer content (:mod:`rllm_renderers.encoding.proof_cache`), so it runs once per machine; but
that once is the first renderer an engine builds, often inside its event loop.  So, by default,
a renderer that finds no remembered verdict does not wait for one:

* it encodes with the HF backend (exact: it is the tokenizer's own pipeline) meanwhile;
* a background process (``python -I`` running ``rllm_renderers.encoding.proof_worker``, in its own
  session, niced, output to a log beside the marker) runs the proof and writes the marker;
* from then on the renderer (and every one built later) uses the fast engine: an encoder built
  while the proof ran checks for the verdict when it is used (a ``stat``) and is replaced.

A small tokenizer (a JSON under :data:`INLINE_BELOW_CHARACTERS`) is proved inline: that takes less
than starting a process.

At most one such process runs per tokenizer content: it holds ``<marker>.proving`` (created with
``O_EXCL``, holding its pid).  A lock whose process is gone, with no marker written, means the
proof failed there: the next renderer proves in its own process, so that the failure is seen.  A
lock that is not a regular file of this user (a dangling symbolic link, a FIFO, someone else's) is
no lock: it is removed.

The job file and the log are created anew (mode 0600, ``O_EXCL | O_NOFOLLOW``: what was at their
names is removed, never followed).  The process runs isolated: ``python -I`` (no ``PYTHONPATH``, no
user site, not the caller's folder on ``sys.path``) in the cache folder, so a ``json.py`` where the
caller happens to be is never imported.

``RLLM_RENDERERS_PROOF=inline`` proves in the renderer's own process instead, as the compiler and
the tests do (they must run the engine that will serve); an explicitly requested engine
(``RLLM_RENDERERS_ENCODER=tiktoken``) is proved inline too.  The tokenizer's JSON reaches the
background process as a file beside the marker, checked against the content hash it is proved for
before it is used, and removed afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import proof_cache

__all__ = ["MODES", "Pending", "proof_mode", "start", "finished", "job_of"]

MODES = ("background", "inline")

#: A tokenizer JSON shorter than this (a vocabulary of a few thousand tokens) is proved in a few
#: milliseconds, less than starting a process takes: it is proved inline.
INLINE_BELOW_CHARACTERS = 256 * 1024

#: The module the background process runs.
WORKER = "rllm_renderers.encoding.proof_worker"

#: What ``python -I -c`` runs: the package's own folder (argument 1) on ``sys.path``, then the worker
#: with the rest of the arguments (constant code: the paths reach it as arguments, never as code).
BOOTSTRAP = f"import sys; sys.path.insert(0, sys.argv[1]); from {WORKER} import main; sys.exit(main(sys.argv[2:]))"

# Background processes started by this one (kept so that they are reaped, not left as zombies).
_started: list[subprocess.Popen] = []


def proof_mode() -> str:
    """``RLLM_RENDERERS_PROOF``: ``"background"`` (the default) or ``"inline"``."""
    mode = os.environ.get("RLLM_RENDERERS_PROOF") or "background"
    if mode not in MODES:
        raise ValueError(f"RLLM_RENDERERS_PROOF (where the rank-BPE proof runs) must be one of {MODES}; got {mode!r}")
    return mode


def _lock_of(marker: Path) -> Path:
    return marker.with_name(marker.name + ".proving")


def job_of(marker: Path) -> Path:
    """Where the tokenizer JSON waits for the background process proving it into ``marker``."""
    return marker.with_name(marker.name + ".json")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process holds that pid now
        return True
    return True


#: A proof takes seconds; a lock older than this is taken for a dead one (its pid reused since).
STALE_SECONDS = 600


def _running(lock: Path) -> bool | None:
    """True: a live process holds ``lock``; False: its process is gone; None: no lock (a lock that is
    not a regular file of this user, a dangling link for one, is removed: no lock either)."""
    handle = proof_cache.open_private(lock)
    if handle is None:
        if os.path.lexists(lock):
            _remove(lock)
        return None
    try:
        with os.fdopen(handle, "rb") as file:
            age = time.time() - os.fstat(file.fileno()).st_mtime
            pid = int(file.read(32).strip() or 0)
    except (OSError, ValueError):
        return False
    if pid == 0:  # created, its pid not written yet
        return age < 5
    return age < STALE_SECONDS and _alive(pid)


def start(tokenizer_json: str, marker: Path, facts: dict[str, Any]) -> Pending | None:
    """Start (or find running) the background proof of ``tokenizer_json``; the reason to show
    while it runs, or None when this process must prove inline (a previous background proof
    died without a verdict, or none can be started here)."""
    for process in list(_started):
        if process.poll() is not None:
            _started.remove(process)
    lock = _lock_of(marker)
    running = _running(lock)
    if running is False:  # it failed there: prove here, where the failure is seen
        _remove(job_of(marker), lock)
        return None
    if running is None:
        try:
            marker.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            handle = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileExistsError:
            pass  # another process has just started it
        except OSError:
            return None
        else:
            with os.fdopen(handle, "w") as lock_file:
                try:
                    _launch(lock_file, tokenizer_json, marker, facts)
                except OSError:
                    _remove(job_of(marker), lock)
                    return None
    return Pending(
        "this tokenizer is seen for the first time on this machine: its rank-BPE proof runs in a "
        f"background process (verdict in {marker}); meanwhile it is encoded with the HF backend, "
        "and encoders built after the verdict use the fast engine (RLLM_RENDERERS_PROOF=inline waits for it)",
        marker,
    )


class Pending(str):
    """Why a tokenizer has no fast engine yet (a ``str``), and where its verdict will be."""

    marker: Path

    def __new__(cls, reason: str, marker: Path) -> "Pending":
        pending = super().__new__(cls, reason)
        pending.marker = marker
        return pending

    def decided(self) -> bool:
        """Whether the background process has written its verdict (a ``stat``: cheap to ask)."""
        return self.marker.exists()


def _launch(lock_file: Any, tokenizer_json: str, marker: Path, facts: dict[str, Any]) -> None:
    # The lock names this process until the child's pid is known: never a pid nobody holds.
    lock_file.write(str(os.getpid()))
    lock_file.flush()
    with os.fdopen(proof_cache.create_private(job_of(marker)), "wb") as job:
        job.write(tokenizer_json.encode("utf-8", "surrogatepass"))
    package_root = str(Path(__file__).resolve().parents[2])
    with os.fdopen(proof_cache.create_private(marker.with_name(marker.name + ".log")), "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-I", "-c", BOOTSTRAP, package_root, str(marker), json.dumps(facts)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            cwd=marker.parent,
            start_new_session=True,
            close_fds=True,
        )
    lock_file.seek(0)
    lock_file.truncate()
    lock_file.write(str(process.pid))
    _started.append(process)


def _remove(*paths: Path) -> None:
    for path in paths:
        try:
            path.unlink()
        except OSError:
            pass


def finished(marker: Path) -> None:
    """The background process is done with ``marker``'s job: remove it and release the lock
    (called only after a verdict is written: a lock left by a dead process means it failed)."""
    _remove(job_of(marker), _lock_of(marker))
