"""The installed layout: everything under ``rllm_renderers`` (no top-level ``compiler`` or
``generated`` packages in site-packages), the generated renderers as ``rllm_renderers.generated``,
the compiler as ``rllm_renderers.compiler`` with an ``rllm-compile`` script.

Builds a real wheel from a copy of the sources (no network: the build uses the installed setuptools).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_the_checkout_reads_generated_as_rllm_renderers_generated():
    import rllm_renderers.generated as package

    assert [Path(p) for p in package.__path__] == [REPO / "generated"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    pytest.importorskip("setuptools")
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for folder in ("rllm_renderers", "compiler", "generated"):
        shutil.copytree(REPO / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode != 0:
        pytest.fail(f"building the wheel failed:\n{result.stderr[-2000:]}")
    (built,) = out.glob("*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_installs_one_top_level_package(wheel):
    tops = {name.split("/")[0] for name in wheel.namelist() if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"rllm_renderers"}


#: source folder -> where it lands in the wheel
LAYOUT = {"rllm_renderers": "rllm_renderers", "generated": "rllm_renderers/generated", "compiler": "rllm_renderers/compiler"}


def test_the_wheel_ships_every_source_file(wheel):
    """pyproject.toml lists the packages explicitly: a new subpackage must be added there."""
    names = set(wheel.namelist())
    shim = REPO / "rllm_renderers" / "generated" / "__init__.py"  # checkout only; generated/__init__.py ships
    for folder, target in LAYOUT.items():
        for path in (REPO / folder).rglob("*.py"):
            if path == shim or "__pycache__" in path.parts:
                continue
            relative = path.relative_to(REPO / folder).as_posix()
            assert f"{target}/{relative}" in names, f"{path.relative_to(REPO)} is not in the wheel"


def test_the_wheel_ships_renderers_index_and_compiler(wheel):
    names = set(wheel.namelist())
    assert "rllm_renderers/generated/_index.py" in names
    assert wheel.read("rllm_renderers/generated/__init__.py") == (REPO / "generated" / "__init__.py").read_bytes()
    assert {"rllm_renderers/compiler/cli.py", "rllm_renderers/compiler/__main__.py"} <= names
    entry_points = next(name for name in names if name.endswith(".dist-info/entry_points.txt"))
    assert "rllm-compile = rllm_renderers.compiler:main" in wheel.read(entry_points).decode()
