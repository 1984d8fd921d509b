"""The on-disk cache of rank-BPE proofs (:mod:`rllm_renderers.encoding.fast_encoder`): where it is, how a
marker is written, and how it is checked before it is trusted.

A marker decides token ids, so it is never trusted as it is found:

* It names what it proves: the first line is :data:`MAGIC` with the proof version, the header (the
  third line, JSON) holds the sha256 of the tokenizer JSON it was proved for, and the reader passes
  the facts it already knows of the live tokenizer (its content hash, its pre-tokenizer pattern
  and stages, its normalizer); any difference is a miss.
* It carries the sha256 of its own content (the second line: the digest of every byte after it),
  so an edited, truncated or damaged marker is a miss too.  A miss proves again (and writes a new
  marker); the first miss per marker is logged.

The digest detects damage, not a forger who recomputes it: the folder is the user's own (below).

Writing: a new file is created beside the marker under a random name with ``O_CREAT | O_EXCL |
O_NOFOLLOW`` (never an existing file, never through a symbolic link), written, then renamed onto
the marker; on any failure it is removed.  The rename replaces a symbolic link at the marker's
name, never what it points to.

Folder: ``RLLM_RENDERERS_CACHE`` when it is an absolute path, else ``$XDG_CACHE_HOME/rllm_renderers``
when that is absolute, else ``~/.cache/rllm_renderers`` (``HOME``, or the password database when
``HOME`` is unset; not when ``HOME`` is set but empty or relative), else a folder of the system's
temporary folder private to the user (created with mode 0700; used only while it is the user's own
and nobody else may write to it).  A relative path is never used: it would depend on the current
folder.  No usable folder: nothing is remembered (every process proves again).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import stat
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["cache_folder", "read_marker", "write_marker", "MAGIC"]

logger = logging.getLogger(__name__)

MAGIC = "rllm-renderers rank-bpe proof"

_logged: set[str] = set()


def _log_once(key: str, message: str, *args: Any) -> None:
    if key not in _logged:
        _logged.add(key)
        logger.warning(message, *args)


def cache_folder() -> Path | None:
    """The folder of the cache (module docstring), or None when there is no usable one."""
    explicit = os.environ.get("RLLM_RENDERERS_CACHE")
    if explicit:
        if os.path.isabs(explicit):
            return Path(explicit)
        _log_once("relative:" + explicit, "RLLM_RENDERERS_CACHE=%r is not an absolute path: ignored", explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "rllm_renderers"
    home = os.environ.get("HOME")
    if home is None:
        try:
            import pwd

            home = pwd.getpwuid(os.getuid()).pw_dir
        except (ImportError, KeyError, OSError):
            home = None
    if home and os.path.isabs(home):
        return Path(home) / ".cache" / "rllm_renderers"
    return _private_temporary_folder()


def _private_temporary_folder() -> Path | None:
    """``<tmp>/rllm_renderers-<uid>``, when it is (or can be made) the user's own, mode 0700."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    folder = Path(tempfile.gettempdir()) / f"rllm_renderers-{uid if uid is not None else 'user'}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or (uid is not None and info.st_uid != uid) or info.st_mode & 0o022:
        _log_once("temp:" + str(folder), "%s is not a private folder of this user: proofs are not remembered", folder)
        return None
    return folder


def write_marker(path: Path, header: dict, body: str) -> bool:
    """Write a marker (module docstring) atomically; False when it could not be written."""
    rest = (json.dumps(header, sort_keys=True) + "\n" + body).encode("utf-8")
    data = f"{MAGIC}\nsha256:{hashlib.sha256(rest).hexdigest()}\n".encode() + rest
    partial = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        handle = os.open(partial, flags, 0o644)
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(partial, path)
    except OSError:  # a read-only or full cache folder: decide again next time
        if partial is not None:
            try:
                os.unlink(partial)
            except OSError:
                pass
        return False
    return True


def read_marker(path: Path, expected: dict) -> tuple[dict, str] | None:
    """``(header, body)`` of the marker at ``path`` when it is intact and its header agrees with
    every item of ``expected``; None otherwise (no marker, or a miss, logged once per marker)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    why = None
    try:
        magic, digest, rest = data.split(b"\n", 2)
        header_line, body = rest.split(b"\n", 1)
        if magic.decode() != MAGIC:
            why = "it is not a proof marker of this format"
        elif digest.decode() != "sha256:" + hashlib.sha256(rest).hexdigest():
            why = "its content does not match its digest (edited or damaged)"
        else:
            header = json.loads(header_line)
            wrong = [key for key, value in expected.items() if header.get(key) != value]
            if wrong:
                why = f"it proves something else ({', '.join(wrong)} differ)"
            else:
                return header, body.decode("utf-8")
    except (ValueError, UnicodeDecodeError) as exc:
        why = f"it cannot be read ({exc})"
    _log_once("miss:" + str(path), "the remembered proof %s is not used, %s: proving again", path, why)
    return None
