"""Tests against real inference servers (vLLM), run in their own virtual environments."""
