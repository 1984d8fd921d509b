"""scripts/prime_suite_expected.py: judging a PrimeIntellect-suite report against the explained failures."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("prime_suite_expected", REPO / "scripts" / "prime_suite_expected.py")
checker = importlib.util.module_from_spec(spec)
spec.loader.exec_module(checker)

FAILING = "tests/test_parity.py::test_renderer_matches_reference[openai/gpt-oss-20b-tool-call-none-defaults]"
CLASSES = {"classes": [{"id": "a", "reason": "r", "tests": ["tests/test_parity.py::*[openai/gpt-oss-20b-tool-call-none-*"]}]}


def run(tmp_path, failures, *flags):
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"totals": {"passed": 1}, "failures": {f: "test" for f in failures}}))
    expected = tmp_path / "expected.json"
    expected.write_text(json.dumps(CLASSES))
    return checker.main([str(report), str(expected), *flags])


def test_only_star_is_a_wildcard():
    assert checker.matches(FAILING, "*[openai/gpt-oss-20b-tool-call-none-*")
    assert not checker.matches(FAILING.replace("[", "x"), "*[openai/gpt-oss-20b-tool-call-none-*")
    assert not checker.matches(FAILING, "*[o]*tool-call-none-defaults]x")


def test_explained_failures_pass_and_others_fail(tmp_path):
    assert run(tmp_path, [FAILING]) == 0
    assert run(tmp_path, [FAILING, FAILING.replace("gpt-oss-20b", "Qwen/Qwen3-8B")]) == 1


def test_a_class_that_no_longer_fails_fails_a_full_run_only(tmp_path):
    assert run(tmp_path, []) == 1
    assert run(tmp_path, [], "--partial") == 0


def test_the_checked_in_classes_are_well_formed():
    classes = json.loads((REPO / "scripts" / "prime_suite_expected.json").read_text(encoding="utf-8"))["classes"]
    assert len({c["id"] for c in classes}) == len(classes)
    assert all(c["reason"] and c["whose"] and c["tests"] for c in classes)
