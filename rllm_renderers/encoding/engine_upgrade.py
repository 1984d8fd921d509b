"""fastokens, built in a background thread for a tokenizer that tiktoken encodes meanwhile.

Both engines are proved equal to the tokenizer under the same proof
(:mod:`rllm_renderers.encoding.fast_encoder`) and give the same ids.  They differ in cost:

* tiktoken is built from the proved rank table in a fraction of the tokenizer's own load time
  and holds a few MB, but encodes never-seen text at about a fifth of fastokens' speed (its regex
  runs in fancy-regex and it keeps no word cache);
* fastokens encodes it 5-10 times faster, but its build (``fastokens.Tokenizer.from_json_str``)
  takes 1-3 s of CPU and holds a second full tokenizer (+170-190 MB).

So a ``"auto"`` encoder starts on tiktoken, and once its process has encoded
:func:`upgrade_after` characters (default 1,000,000, about 25 renders of a 40 KB conversation: a
process that renders at scale) it asks for fastokens here: one daemon thread per tokenizer content
and process builds it (the Rust build releases the GIL; reading the tokenizer's JSON and the small
top-level values of it does not), and every encoder of that content switches to it at its next
encode (:meth:`~rllm_renderers.encoding.tokenization.TextEncoder.upgrade`).  A short-lived process
never pays for it.  ``RLLM_RENDERERS_UPGRADE_AFTER``: the number of characters (``0``: at the first
encode), or ``never`` (stay on tiktoken).

In a forked child the thread does not exist: the registry is emptied and an encoder that had
asked asks again (:mod:`rllm_renderers.forksafe`).
"""

from __future__ import annotations

import os
import threading

from .. import forksafe

__all__ = ["Upgrade", "request", "upgrade_after"]

DEFAULT_UPGRADE_AFTER = 1_000_000


def upgrade_after() -> int | None:
    """Characters an ``"auto"`` encoder encodes before it asks for fastokens (None: never), from
    ``RLLM_RENDERERS_UPGRADE_AFTER``; a ValueError names a bad value."""
    value = (os.environ.get("RLLM_RENDERERS_UPGRADE_AFTER") or "").strip()
    if not value:
        return DEFAULT_UPGRADE_AFTER
    if value == "never":
        return None
    if value.isdigit():
        return int(value)
    raise ValueError(
        f"RLLM_RENDERERS_UPGRADE_AFTER must be a number of characters or 'never'; got {value!r}"
    )


class Upgrade:
    """The fastokens engine of one tokenizer content, being built in a daemon thread."""

    def __init__(self, backend, content: str):
        self.content = content
        #: The built engine (None until :meth:`done`, and after a failure).
        self.engine = None
        #: Why there is no engine, once done without one.
        self.reason = ""
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._build, args=(backend,), name=f"rllm-fastokens-{content[:8]}", daemon=True
        )
        self._thread.start()

    def _build(self, backend) -> None:
        from .fast_encoder import build_engine

        try:
            self.engine, self.reason = build_engine(backend, self.content, "fastokens")
        except BaseException as exc:  # noqa: B036 - a Rust panic is a BaseException; the encoder stays on tiktoken
            self.engine, self.reason = None, f"the background build of fastokens failed: {exc!r}"
        finally:
            self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the build is over (or ``timeout`` seconds); whether it is over."""
        return self._done.wait(timeout)


_UPGRADES: dict[str, Upgrade] = {}
_LOCK = threading.Lock()


def request(backend, content: str) -> Upgrade:
    """The upgrade of tokenizer content ``content``, started now unless this process has one."""
    with _LOCK:
        upgrade = _UPGRADES.get(content)
        if upgrade is None:
            upgrade = _UPGRADES[content] = Upgrade(backend, content)
        return upgrade


def _after_fork() -> None:
    global _LOCK
    _LOCK = threading.Lock()
    _UPGRADES.clear()


forksafe.in_child(_after_fork)
