"""Fixtures that take the outside world away from a test: the network, the optional extras."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_extras(monkeypatch):
    """Neither the prime nor the tinker extra (nor Fireworks' cookbook) importable."""
    for name in ("renderers", "tinker_cookbook", "tinker", "training"):
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            monkeypatch.setitem(sys.modules, loaded, None)
        monkeypatch.setitem(sys.modules, name, None)


@pytest.fixture
def no_network(monkeypatch):
    """Any socket connection (a Hub lookup, a vocab download) fails the test."""

    def refuse(self, *args, **kwargs):
        raise AssertionError(f"network access attempted: connect{args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


def fresh_python(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a new interpreter importing this checkout (what is imported shows there)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
