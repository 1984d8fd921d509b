"""The generated renderers, importable as ``rllm_renderers.generated.<module>``.

In a source checkout they live in the repository's top-level ``generated/`` folder (where the
compiler writes them) and this file points the package there. An installed wheel ships that
folder itself under this name (``package-dir`` in pyproject.toml), so this file is not installed.
"""

from pathlib import Path

__path__ = [str(Path(__file__).resolve().parents[2] / "generated")]
