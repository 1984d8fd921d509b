"""What a forked child rebuilds: locks and per-process engine state.

``os.fork()`` copies only the thread that forks.  A lock another thread held at that moment stays
held in the child forever, and a Rust engine (tiktoken, fastokens) may hold its own mutexes or a
thread pool that the child no longer has.  So every lock of the runtime's caches, and every engine
handle, is registered here, and ``os.register_at_fork(after_in_child=...)`` rebuilds them in the
child before it runs anything else: a module's state through :func:`in_child` (a function),
an object's through :func:`track` (its ``_after_fork`` method, while the object lives).  Caches
are emptied there as well (a cache is always allowed to forget; an entry half-written by a thread
that no longer exists is then never read).
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Callable

__all__ = ["in_child", "track"]

_TRACKED: weakref.WeakSet = weakref.WeakSet()


def in_child(callback: Callable[[], None]) -> None:
    """Call ``callback`` in every child forked from now on (where the platform forks)."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=callback)


def track(owner: Any) -> Any:
    """Call ``owner._after_fork()`` in every child forked while ``owner`` lives; returns ``owner``."""
    _TRACKED.add(owner)
    return owner


def _rebuild_tracked() -> None:
    for owner in list(_TRACKED):
        owner._after_fork()


in_child(_rebuild_tracked)
