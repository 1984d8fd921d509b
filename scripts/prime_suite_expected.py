"""Judge a PrimeIntellect-suite report (scripts/prime_suite.sh) against the failures we expect.

Usage: prime_suite_expected.py REPORT.json EXPECTED.json [--partial]

EXPECTED.json lists failure classes, each with the README's reason and the test ids it covers
(patterns in which only ``*`` is a wildcard: test ids are full of ``[`` and ``]``). Exit 1 when a failure matches no class (a regression, or a class nobody has
explained yet), or, on a full run, when a class matches no failure (it was fixed: drop it and its
README row). ``--partial``: a run of some files or a ``-k`` selection, so an unmatched class is fine.
"""

from __future__ import annotations

import json
import re
import sys


def matches(nodeid: str, pattern: str) -> bool:
    """Whether ``nodeid`` matches ``pattern``, whose only wildcard is ``*`` (any run of characters)."""
    return re.fullmatch(".*".join(re.escape(part) for part in pattern.split("*")), nodeid) is not None


def classify(failures: list[str], classes: list[dict]) -> tuple[dict[str, list[str]], list[str]]:
    """Failing test ids by class id (the first class whose pattern matches), and the unmatched ids."""
    matched: dict[str, list[str]] = {c["id"]: [] for c in classes}
    unmatched = []
    for nodeid in failures:
        owner = next((c for c in classes if any(matches(nodeid, p) for p in c["tests"])), None)
        if owner is None:
            unmatched.append(nodeid)
        else:
            matched[owner["id"]].append(nodeid)
    return matched, unmatched


def main(argv: list[str]) -> int:
    partial = "--partial" in argv
    paths = [a for a in argv if a != "--partial"]
    if len(paths) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    report = json.load(open(paths[0], encoding="utf-8"))
    classes = json.load(open(paths[1], encoding="utf-8"))["classes"]
    matched, unmatched = classify(sorted(report["failures"]), classes)
    totals = report["totals"]
    print(f"prime-suite (ours): {totals['passed']} passed, {sum(len(v) for v in matched.values()) + len(unmatched)} failed")
    for cls in classes:
        print(f"  {len(matched[cls['id']]):4d}  {cls['id']}: {cls['reason']}")
    status = 0
    if unmatched:
        print(f"prime-suite: {len(unmatched)} failure(s) no expected class explains:", file=sys.stderr)
        for nodeid in unmatched:
            print(f"  {nodeid}", file=sys.stderr)
        status = 1
    stale = [c["id"] for c in classes if not matched[c["id"]]]
    if stale and not partial:
        print(f"prime-suite: expected failure class(es) no longer fail: {', '.join(stale)}; drop them "
              "(and their README rows)", file=sys.stderr)
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
