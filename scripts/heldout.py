"""Compile a folder of chat templates the way a new user would, and tabulate what happened.

Each ``<name>.jinja`` in FOLDER is compiled with nothing but

    python -m compiler generate --model heldout/<name> --template FILE --out OUT/<name> --cases N

(no tokenizer, no flags), one at a time, each under a time limit. The table says, per template:
``verified`` (with any warning about turn facts it could not learn), ``unproven`` (verified, but
some learned fact was proven by nothing: 0 turns read back or 0 bridge points), ``refused`` (the compiler's
error, naming the construct and line), ``mismatch`` (verification found a difference), ``crash``
(anything else: the last line of the traceback) or ``timeout``.

A verified render can still carry wrong turn facts (a stop that cuts content, a reasoning marker
that is not the template's), so each verified class is also read back: ``parse_response`` of what
the template renders for a plain answer, a reasoning answer and tool-calling turns, after the
generation prompt, against the turn itself (``round trip: ...`` in the detail when they differ),
and the bridge from each such sampled turn to the next message is checked against the full render
(wrong tokens, or None where the full render extends the sample).

    python scripts/heldout.py FOLDER [--cases 40] [--timeout 600] [--out /tmp/heldout] [--table FILE]
                                     [--results FILE] [--accept]

Each run is compared with the previous one, kept beside the folder (``FOLDER.results.json``):
a template that verified then and does not now is a regression, and the run exits 1 naming it.
The results file is rewritten only by a run without regressions, or with ``--accept`` (a change
that is meant to refuse what it verified before): a regression keeps failing until it is fixed
or accepted. The first run, with no results file yet, sets the baseline.

The templates stay outside the repository: this is for checking generality on templates nobody
tuned the compiler to.
"""

from __future__ import annotations

import argparse
import json
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


#: Results that verified: "unproven" verified too, with a fact nothing could prove (reported apart).
VERIFIED = ("verified", "unproven")


def classify(returncode: int | None, stdout: str, stderr: str) -> tuple[str, str]:
    lines = [line for line in stderr.splitlines() if line.strip()]
    if returncode is None:
        return "timeout", ""
    if returncode == 0:
        verified = next((line for line in stdout.splitlines() if line.startswith("verified:")), "")
        warning = next((line for line in lines if line.startswith("warning:")), "")
        unproven = next((line for line in lines if line.startswith("warning:") and ": unproven: " in line), "")
        if unproven:  # verified, but some fact was proven by nothing (0 turns read back, 0 bridge points)
            return "unproven", " | ".join(dict.fromkeys(part for part in (verified, warning, unproven) if part))
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
    module = written_module(stdout)
    if result in VERIFIED and module is None:
        detail = f"{detail} | round trip: not run, generate named no module it wrote"
    elif result in VERIFIED:
        command = [sys.executable, str(Path(__file__).resolve()), "--round-trip", str(template), str(module)]
        try:
            checked = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=timeout)
            problems = checked.stdout.strip() if checked.returncode == 0 else f"crash: {checked.stderr.strip()[-300:]}"
        except subprocess.TimeoutExpired:
            problems = "timeout"
        if problems:
            detail = f"{detail} | round trip: {problems}"
    return Outcome(template.stem, result, time.monotonic() - start, re.sub(r"\s+", " ", detail))


def written_module(stdout: str) -> Path | None:
    """The module ``generate`` wrote: the path it prints first. (It is named after the model id,
    normalized to a module name, so it is not ``<stem>.py`` for a file name such as ``Qwen-QwQ-32B``.)"""
    for line in stdout.splitlines():
        if line.endswith(".py") and (ROOT / line).is_file():  # (generate runs in ROOT)
            return ROOT / line
    return None


#: The sample turns (compiler.fact_proof.sample_turns) this script reads back.
ROUND_TRIP_LABELS = ("plain", "reasoning", "one call", "parallel calls")


def round_trip(template: Path, module: Path) -> list[str]:
    """What the compiled class reads back wrong from the template's own renders of assistant turns.

    A turn is checked only where the model could have sampled it (the render after the generation
    prompt extends the prompt), and only for what the render shows (a template that drops
    reasoning or tool calls is not faulted for it); a turn the next message's header ends is read
    from the render with that message.
    """
    from compiler.fact_proof import as_written, follower, sample_turns, tools_for
    from compiler.pipeline import load_generated_file, prepare_source
    from compiler.source import resolve_source

    prepared = prepare_source(resolve_source(f"heldout/{template.stem}", template=template, allow_hub=False))
    renderer = load_generated_file(module)(prepared.check_tokenizer, special_tokens=prepared.placeholders)
    if renderer.TURN is None or renderer.UNLEARNED:
        return []  # parse_response degrades by design; generate said so
    history = [{"role": "user", "content": "What is up?"}]
    tools = tools_for(renderer, history)  # (the proof's own sample turns and tools, read back from outside)
    problems = []
    turns = sample_turns()
    for label in ROUND_TRIP_LABELS:
        turn, next_message = turns[label], follower(turns[label])
        try:
            prompt = renderer.render_text(as_written(renderer, history), tools=tools, add_generation_prompt=True)
            if renderer.TURN.close:
                full = renderer.render_text(as_written(renderer, history + [turn]), tools=tools)
            else:
                messages = as_written(renderer, history + [turn, next_message])
                full = renderer.render_text(messages, tools=tools, add_generation_prompt=True)
        except ValueError:
            continue
        if not full.startswith(prompt):
            continue
        completion = rendered = full[len(prompt) :]
        stops = [(completion.find(stop), stop) for stop in renderer.get_stop_strings() if stop in completion]
        if stops:
            at, stop = min(stops)
            header = renderer.generation_prompt().strip()
            if renderer.TURN.close and header and header in rendered[at + len(stop) :]:
                continue  # the template writes another turn for the same message (a call per turn)
            completion = completion[: at + len(stop)]
        parsed = renderer.parse_response(
            renderer.encoder.encode(completion), tools=tools, prompt_ids=renderer.encoder.encode(prompt)
        )
        found = []
        if turn["content"] and turn["content"] in rendered and (parsed.content or "").strip() != turn["content"]:
            found.append(f"content {parsed.content!r}")
        reasoning = turn.get("reasoning_content")
        if reasoning and reasoning in rendered and parsed.reasoning_content != reasoning:
            found.append(f"reasoning {parsed.reasoning_content!r}")
        calls = turn.get("tool_calls") or []
        if calls and "get_weather" in rendered:  # the template renders the calls (some only the first)
            expected = [(call["function"]["name"], call["function"]["arguments"]) for call in calls]
            expected = [(name, arguments) for name, arguments in expected if name in rendered]
            got = [(call.name, call.arguments) for call in parsed.tool_calls]
            if got != expected:
                found.append(f"calls {got!r}")
        if not found:  # (a turn read back otherwise is not what the template renders the sample as)
            found += bridge_problems(renderer, history, turn, next_message, tools, completion)
        if found:
            problems.append(f"{label}: " + ", ".join(found) + f" from {completion!r}")
    return problems


def bridge_problems(renderer, history: list[dict], turn: dict, follower: dict, tools, completion: str) -> list[str]:
    """The bridge after the sampled ``completion`` with ``follower``, against the full render: wrong
    tokens, or None where the full render extends prompt + completion (a miss)."""
    from compiler.fact_proof import as_written

    history, turn, follower = as_written(renderer, history), *as_written(renderer, [turn, follower])
    try:
        prompt = renderer.render_ids(history, tools=tools, add_generation_prompt=True)
        expected = renderer.render_ids(history + [turn, follower], tools=tools, add_generation_prompt=True)
    except ValueError:
        return []
    sampled = renderer.encoder.encode(completion)
    bridged = renderer.bridge_to_next_turn(prompt, sampled, [follower], tools=tools)
    extends = expected[: len(prompt) + len(sampled)] == prompt + sampled
    if bridged is None:
        from compiler.bridge_proof import answers_depend_on_call_ids

        if answers_depend_on_call_ids(renderer, sampled, history, turn, [follower], tools):
            return []  # the render needs the call ids the tokens do not carry: None is the answer
        return ["bridge: None where the full render extends the sample"] if extends else []
    if bridged.token_ids != expected and (extends or renderer.thinking_retention == "template"):
        return ["bridge: WRONG tokens"]
    return []


def table(outcomes: list[Outcome]) -> str:
    rows = ["| template | result | seconds | detail |", "|---|---|---|---|"]
    rows += [f"| {o.template} | {o.result} | {o.seconds:.0f} | {o.detail.replace('|', '/')} |" for o in outcomes]
    verified = sum(outcome.result == "verified" for outcome in outcomes)
    unproven = sum(outcome.result == "unproven" for outcome in outcomes)
    return "\n".join(rows) + f"\n\nverified: {verified}/{len(outcomes)}, unproven: {unproven}/{len(outcomes)}\n"


def results_path(folder: Path) -> Path:
    """Where a folder's previous results are kept: beside it, not in it (its ``*.jinja`` stay templates)."""
    folder = folder.resolve()
    return folder.parent / f"{folder.name}.results.json"


def load_results(path: Path) -> dict[str, dict]:
    """The previous run's outcome per template, or {} when there is none yet."""
    if not path.is_file():
        return {}
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
        return {name: dict(entry) for name, entry in recorded["templates"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise SystemExit(f"error: {path} is not a held-out results file ({error}); move it away to start anew")


def save_results(path: Path, outcomes: list[Outcome], cases: int) -> None:
    entries = {o.template: {"result": o.result, "detail": o.detail} for o in outcomes}
    text = json.dumps({"cases": cases, "templates": entries}, indent=1, sort_keys=True) + "\n"
    partial = path.with_name(path.name + ".partial")  # (a crash mid-write leaves the old file whole)
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


def compare(previous: dict[str, dict], outcomes: list[Outcome]) -> tuple[list[str], list[str]]:
    """(regressions, other changes) of this run against the previous one. A regression is a template
    that verified before and does not now; the other changes are worth a look but fail nothing."""
    regressions, changes = [], []
    for outcome in outcomes:
        before = previous.get(outcome.template)
        if before is None:
            changes.append(f"new: {outcome.template} {outcome.result}")
        elif before["result"] in VERIFIED and outcome.result not in VERIFIED:
            regressions.append(f"REGRESSION: {outcome.template} verified before, {outcome.result} now: {outcome.detail}")
        elif before["result"] != outcome.result:
            changes.append(f"changed: {outcome.template} {before['result']} -> {outcome.result}")
        elif before.get("detail") != outcome.detail and outcome.result == "verified":
            changes.append(f"detail changed: {outcome.template}: {before.get('detail')!r} -> {outcome.detail!r}")
    ran = {outcome.template for outcome in outcomes}
    changes += [f"not run: {name} (in the previous results, not in the folder)" for name in sorted(set(previous) - ran)]
    return regressions, changes


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--round-trip"]:  # one verified class, in its own process (see compile_one)
        print("; ".join(round_trip(Path(argv[1]), Path(argv[2]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a folder of <name>.jinja chat templates")
    parser.add_argument("--cases", type=int, default=40, help="conversations verified per template")
    parser.add_argument("--timeout", type=float, default=600, help="seconds allowed per template")
    parser.add_argument("--out", type=Path, default=Path("/tmp/heldout"), help="where generated modules go")
    parser.add_argument("--table", type=Path, help="also write the markdown table here")
    parser.add_argument("--results", type=Path, help="the previous results to compare with (FOLDER.results.json)")
    parser.add_argument("--accept", action="store_true", help="record this run as the baseline despite regressions")
    args = parser.parse_args(argv)
    templates = sorted(args.folder.glob("*.jinja"))
    if not templates:
        parser.error(f"no .jinja files in {args.folder}")
    results = args.results or results_path(args.folder)
    previous = load_results(results)  # (read before the long run: a damaged file fails now, not after it)
    outcomes = []
    for template in templates:
        outcome = compile_one(template, args.out, args.cases, args.timeout)
        print(f"{outcome.template}\t{outcome.result}\t{outcome.seconds:.0f}s\t{outcome.detail}", flush=True)
        outcomes.append(outcome)
    text = table(outcomes)
    if args.table:
        args.table.write_text(text, encoding="utf-8")
    print(text)
    regressions, changes = compare(previous, outcomes)
    if not previous:
        print(f"no previous results: this run is the baseline ({results})")
    else:
        print("\n".join(changes + regressions) or f"no change against {results}")
    if regressions and not args.accept:
        print(f"{len(regressions)} regression(s); {results} kept as it was (--accept records this run)")
        return 1
    save_results(results, outcomes, args.cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
