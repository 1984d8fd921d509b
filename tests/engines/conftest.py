"""Fixtures for tests with a real vLLM server: ``vllm_server(family, extra_args)`` gives the running
server for a family's toy model, one at a time (a server holds ~2 GB), reused across the tests
that ask for the same family and arguments, and stopped at the end of the session."""

from __future__ import annotations

import pytest

from tests.engines.vllm_server import VllmServer, vllm_available, write_toy_model


class _OneServer:
    """The session's running server: asking for another family stops the previous one first."""

    def __init__(self, folder) -> None:
        self.folder = folder
        self.key = None
        self.server: VllmServer | None = None

    def __call__(self, family: str, extra_args=(), env: dict | None = None) -> VllmServer:
        key = (family, tuple(extra_args), tuple(sorted((env or {}).items())))
        if key != self.key:
            self.close()
            model_dir = write_toy_model(family, self.folder / family)
            self.server = VllmServer(model_dir, extra_args=extra_args, env=env)
            self.server.start()
            self.key = key
        return self.server

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
        self.server, self.key = None, None


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    """``vllm_server(family, extra_args=(), env=None) -> VllmServer`` (skips when vLLM cannot run here)."""
    reason = vllm_available()
    if reason:
        pytest.skip(reason)
    servers = _OneServer(tmp_path_factory.mktemp("vllm-models"))
    yield servers
    servers.close()
