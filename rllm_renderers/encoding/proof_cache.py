"""The on-disk cache of rank-BPE proofs (:mod:`rllm_renderers.encoding.fast_encoder`): where it is, how a
marker is written, and how it is checked before it is trusted.

A marker decides token ids, so it is never trusted as it is found:

* It names what it proves: the first line is :data:`MAGIC` with the proof version, the header (the
  third line, JSON) holds the sha256 of the tokenizer JSON it was proved for, and the reader passes
  the facts it already knows of the live tokenizer (its content hash, its pre-tokenizer pattern
  and stages, its normalizer); any difference is a miss.
* It is bound to what it proves and to who wrote it: the second line is an HMAC-SHA256 of every
  byte after it, keyed by a random per-user key kept beside the markers (``.key``, mode 0600, the
  user's own).  An edited, truncated, damaged or forged marker (its name is predictable, its
  content is not secret) is a miss.  A miss proves again (and writes a new marker); the first
  miss per marker is logged.
* Every file is opened without following a symbolic link and checked (``fstat``) to be a regular
  file of this user; the folders holding it must be this user's own, not symbolic links, and not
  writable by group or others (:func:`folder_problem`), else the cache is not used at all.

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
import hmac
import json
import logging
import os
import secrets
import stat
import tempfile
from pathlib import Path
from typing import Any

__all__ = [
    "cache_folder",
    "folder_problem",
    "log_once",
    "open_private",
    "create_private",
    "read_marker",
    "write_marker",
    "MAGIC",
]

logger = logging.getLogger(__name__)

MAGIC = "rllm-renderers rank-bpe proof"

_logged: set[str] = set()


def log_once(key: str, message: str, *args: Any) -> None:
    if key not in _logged:
        _logged.add(key)
        logger.warning(message, *args)


def cache_folder() -> Path | None:
    """The folder of the cache (module docstring), or None when there is no usable one."""
    explicit = os.environ.get("RLLM_RENDERERS_CACHE")
    if explicit:
        if os.path.isabs(explicit):
            return Path(explicit)
        log_once("relative:" + explicit, "RLLM_RENDERERS_CACHE=%r is not an absolute path: ignored", explicit)
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
        log_once("temp:" + str(folder), "%s is not a private folder of this user: proofs are not remembered", folder)
        return None
    return folder


# --- the folders and files of the cache ------------------------------------------------------

_UID = os.getuid() if hasattr(os, "getuid") else None
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def folder_problem(marker: Path) -> str | None:
    """Why the folders holding ``marker`` (its folder and the cache folder above it) may not be
    trusted, or None when they may: each that exists must be a folder (not a symbolic link) of this
    user that neither group nor others may write to (a forged marker or a planted link could wait
    there). A folder not created yet is fine: it is created with mode 0700."""
    for folder in (marker.parent, marker.parent.parent):
        try:
            info = os.lstat(folder)
        except FileNotFoundError:
            continue
        except OSError as exc:
            return f"{folder} cannot be examined ({exc.strerror})"
        if not stat.S_ISDIR(info.st_mode):
            return f"{folder} is not a folder (a symbolic link or a file)"
        if _UID is not None and info.st_uid != _UID:
            return f"{folder} belongs to another user (uid {info.st_uid})"
        if info.st_mode & 0o022:
            return f"{folder} may be written by other users (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def _own_regular_file(handle: int) -> bool:
    info = os.fstat(handle)
    return stat.S_ISREG(info.st_mode) and (_UID is None or info.st_uid == _UID)


def open_private(path: Path) -> int | None:
    """A read-only descriptor of ``path`` when it is a regular file of this user reached without a
    symbolic link; None otherwise (missing, a link, a FIFO, someone else's)."""
    try:
        handle = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    if not _own_regular_file(handle):
        os.close(handle)
        return None
    return handle


def read_private(path: Path) -> bytes | None:
    """The bytes of ``path`` when :func:`open_private` accepts it, else None."""
    handle = open_private(path)
    if handle is None:
        return None
    with os.fdopen(handle, "rb") as file:
        return file.read()


def create_private(path: Path, flags: int = os.O_WRONLY) -> int:
    """A new file at ``path``, mode 0600, never through a symbolic link: whatever is at that name (a
    planted link, a stale file) is removed first; OSError when it cannot be created."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return os.open(path, flags | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)


# --- the key markers are signed with --------------------------------------------------------

_KEY_BYTES = 32


def _key(folder: Path, *, create: bool) -> bytes | None:
    """The per-user key of the markers in ``folder`` (``.key``, mode 0600, this user's own); created
    when missing and ``create``; None when there is none or it is not private."""
    path = folder / ".key"
    handle = open_private(path)
    if handle is None and create and not os.path.lexists(path):
        partial = folder / f".key.{secrets.token_hex(8)}.tmp"
        try:
            with os.fdopen(create_private(partial), "wb") as out:
                out.write(secrets.token_bytes(_KEY_BYTES))
            os.link(partial, path)  # atomic, never over an existing key: two writers agree on one
        except FileExistsError:
            pass
        except OSError:
            return None
        finally:
            try:
                os.unlink(partial)
            except OSError:
                pass
        handle = open_private(path)
    if handle is None:
        return None
    with os.fdopen(handle, "rb") as file:
        if stat.S_IMODE(os.fstat(file.fileno()).st_mode) & 0o077:
            return None
        key = file.read(_KEY_BYTES + 1)
    return key if len(key) == _KEY_BYTES else None


def _signature(key: bytes, rest: bytes) -> str:
    return "hmac-sha256:" + hmac.new(key, rest, hashlib.sha256).hexdigest()


# --- markers ----------------------------------------------------------------------------------


def write_marker(path: Path, header: dict, body: str) -> bool:
    """Write a marker (module docstring) atomically; False when it could not be written."""
    rest = (json.dumps(header, sort_keys=True) + "\n" + body).encode("utf-8")
    partial = None
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        problem = folder_problem(path)
        if problem is not None:
            log_once("folder:" + str(path.parent), "proofs are not remembered: %s", problem)
            return False
        key = _key(path.parent, create=True)
        if key is None:
            log_once("key:" + str(path.parent), "proofs are not remembered: %s/.key is not a private key", path.parent)
            return False
        data = f"{MAGIC}\n{_signature(key, rest)}\n".encode() + rest
        partial = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
        handle = os.open(partial, flags, 0o600)
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
    """``(header, body)`` of the marker at ``path`` when it is intact, signed with this user's key and
    its header agrees with every item of ``expected``; None otherwise (no marker, or a miss, logged
    once per marker)."""
    if folder_problem(path) is not None:
        return None
    data = read_private(path)
    if data is None:
        if os.path.lexists(path):
            log_once("miss:" + str(path), "the remembered proof %s is not used, it is not a file of this user", path)
        return None
    key = _key(path.parent, create=False)
    why = None
    try:
        magic, signature, rest = data.split(b"\n", 2)
        header_line, body = rest.split(b"\n", 1)
        if magic.decode() != MAGIC:
            why = "it is not a proof marker of this format"
        elif key is None or not hmac.compare_digest(signature, _signature(key, rest).encode()):
            why = "its signature does not match (edited, damaged, or not written by this user)"
        else:
            header = json.loads(header_line)
            wrong = [name for name, value in expected.items() if header.get(name) != value]
            if wrong:
                why = f"it proves something else ({', '.join(wrong)} differ)"
            else:
                return header, body.decode("utf-8")
    except (ValueError, UnicodeDecodeError) as exc:
        why = f"it cannot be read ({exc})"
    log_once("miss:" + str(path), "the remembered proof %s is not used, %s: proving again", path, why)
    return None
