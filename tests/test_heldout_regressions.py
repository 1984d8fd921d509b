"""Public templates that compiled once and then failed (issues 38 and 40), each reduced to its construct.

Every template here is compiled as ``generate --template FILE`` compiles it (no tokenizer: the
synthetic one of :mod:`compiler.markers`), and must verify with every fact proven and no wrong bridge.
"""

from __future__ import annotations

import pytest


# --- scripts/heldout.py compares each run with the previous one -----------------------------


def test_the_heldout_run_fails_on_a_template_that_verified_before(tmp_path):
    from tests.test_heldout_script import load_script

    heldout = load_script()
    outcome = heldout.Outcome
    folder = tmp_path / "templates"
    results = heldout.results_path(folder)
    assert results == tmp_path / "templates.results.json"  # beside the folder, not in it
    assert heldout.load_results(results) == {}  # the first run sets the baseline
    before = [outcome("a", "verified", 1, "verified: ok"), outcome("b", "refused", 1, "error: x"), outcome("c", "verified", 1, "v")]
    heldout.save_results(results, before, cases=5)
    previous = heldout.load_results(results)
    assert previous["a"] == {"result": "verified", "detail": "verified: ok"}
    now = [outcome("a", "crash", 1, "AttributeError"), outcome("b", "verified", 1, "v"), outcome("d", "verified", 1, "v")]
    regressions, changes = heldout.compare(previous, now)
    assert regressions == ["REGRESSION: a verified before, crash now: AttributeError"]
    assert "changed: b refused -> verified" in changes and "new: d verified" in changes
    assert any(change.startswith("not run: c") for change in changes)
    assert heldout.compare(previous, before) == ([], [])
    results.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(SystemExit, match="not a held-out results file"):
        heldout.load_results(results)


def test_a_regression_keeps_the_previous_results_until_accepted(tmp_path, monkeypatch):
    from tests.test_heldout_script import load_script

    heldout = load_script()
    folder = tmp_path / "templates"
    folder.mkdir()
    (folder / "a.jinja").write_text("{{ messages }}", encoding="utf-8")
    results = heldout.results_path(folder)
    heldout.save_results(results, [heldout.Outcome("a", "verified", 1, "v")], cases=5)
    kept = results.read_text(encoding="utf-8")
    monkeypatch.setattr(heldout, "compile_one", lambda template, *rest: heldout.Outcome(template.stem, "refused", 1, "error: e"))
    assert heldout.main([str(folder), "--cases", "5"]) == 1
    assert results.read_text(encoding="utf-8") == kept
    assert heldout.main([str(folder), "--cases", "5", "--accept"]) == 0
    assert heldout.load_results(results)["a"]["result"] == "refused"
    assert heldout.main([str(folder), "--cases", "5"]) == 0  # (refused then and now: no regression)
