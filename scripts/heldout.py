"""Compile a folder of chat templates the way a new user would, and tabulate what happened.

Each ``<name>.jinja`` in FOLDER is compiled with nothing but

    python -m compiler generate --model heldout/<name> --template FILE --out OUT/<name> --cases N

(no tokenizer, no flags), one at a time, each under a time limit. The table says, per template:
``verified`` (with any warning about turn facts it could not learn), ``refused`` (the compiler's
error, naming the construct and line), ``mismatch`` (verification found a difference), ``crash``
(anything else: the last line of the traceback) or ``timeout``.

    python scripts/heldout.py FOLDER [--cases 40] [--timeout 600] [--out /tmp/heldout] [--table FILE]

The templates stay outside the repository: this is for checking generality on templates nobody
tuned the compiler to.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Outcome:
    template: str
    result: str  # verified / refused / mismatch / crash / timeout
    seconds: float
    detail: str


def classify(returncode: int | None, stdout: str, stderr: str) -> tuple[str, str]:
    lines = [line for line in stderr.splitlines() if line.strip()]
    if returncode is None:
        return "timeout", ""
    if returncode == 0:
        verified = next((line for line in stdout.splitlines() if line.startswith("verified:")), "")
        warning = next((line for line in lines if line.startswith("warning:")), "")
        return "verified", " | ".join(part for part in (verified, warning) if part)
    error = next((line for line in reversed(lines) if line.startswith("error:")), "")
    if error:
        return ("mismatch" if "mismatch" in error else "refused"), error
    return "crash", lines[-1] if lines else f"exit status {returncode}"


def compile_one(template: Path, out: Path, cases: int, timeout: float) -> Outcome:
    command = [
        sys.executable, "-m", "compiler", "generate", "--model", f"heldout/{template.stem}",
        "--template", str(template), "--out", str(out / template.stem), "--cases", str(cases),
    ]  # fmt: skip
    (out / template.stem).mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    start = time.monotonic()
    try:
        done = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=timeout)
        returncode, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired:
        returncode, stdout, stderr = None, "", ""
    result, detail = classify(returncode, stdout, stderr)
    return Outcome(template.stem, result, time.monotonic() - start, re.sub(r"\s+", " ", detail))


def table(outcomes: list[Outcome]) -> str:
    rows = ["| template | result | seconds | detail |", "|---|---|---|---|"]
    rows += [f"| {o.template} | {o.result} | {o.seconds:.0f} | {o.detail.replace('|', '/')} |" for o in outcomes]
    verified = sum(outcome.result == "verified" for outcome in outcomes)
    return "\n".join(rows) + f"\n\nverified: {verified}/{len(outcomes)}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a folder of <name>.jinja chat templates")
    parser.add_argument("--cases", type=int, default=40, help="conversations verified per template")
    parser.add_argument("--timeout", type=float, default=600, help="seconds allowed per template")
    parser.add_argument("--out", type=Path, default=Path("/tmp/heldout"), help="where generated modules go")
    parser.add_argument("--table", type=Path, help="also write the markdown table here")
    args = parser.parse_args(argv)
    templates = sorted(args.folder.glob("*.jinja"))
    if not templates:
        parser.error(f"no .jinja files in {args.folder}")
    outcomes = []
    for template in templates:
        outcome = compile_one(template, args.out, args.cases, args.timeout)
        print(f"{outcome.template}\t{outcome.result}\t{outcome.seconds:.0f}s\t{outcome.detail}", flush=True)
        outcomes.append(outcome)
    text = table(outcomes)
    if args.table:
        args.table.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
