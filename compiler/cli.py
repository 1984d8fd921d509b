"""Command line: ``python -m compiler generate | verify | check | list | diff``."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from .emit import BLACK_MODE
from .coverage import DEFAULT_WIDTH, command_list
from .diff_arguments import add_diff_arguments, default_corpus, early_error
from .errors import CompileError
from .index import INDEX_FILE, index_is_current, module_entry, recorded_fingerprints
from .publish import repair_index
from .oracles import OracleUnavailable
from .pipeline import (
    compile_source,
    ensure_importable,
    generate,
    load_generated_file,
    prepare_source,
    reference_oracle,
    failure_text,
    source_drifted,
    verified_fingerprint,
    verify_compiled,
)
from .template_faults import (
    DEFAULT_COMPILE_SECONDS,
    DEFAULT_RENDER_CHARACTERS,
    DEFAULT_RENDER_SECONDS,
    RenderBudgetExceeded,
    render_budget,
    template_fault,
)
from .source import IN_CHECKOUT, REPO_ROOT, override_paths, read_corpus_manifest, resolve_source

#: The checkout's generated/ folder; installed (the rllm-compile script), ./generated.
GENERATED_DIR = REPO_ROOT / "generated" if IN_CHECKOUT else Path("generated")


def positive_int(value: str) -> int:
    """``--cases``: at least one generated conversation (the fixed edge cases alone prove little)."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def output_folder(path: Path | str) -> Path:
    """``--out``: a folder, or a path where one can be created (no file in the way); never empty
    (``Path("")`` is the working folder, which nobody asked for)."""
    if not str(path).strip():
        raise CompileError("--out must be a folder path, got an empty one")
    path = Path(path)
    for candidate in (path, *path.parents):
        if candidate.exists():
            if not candidate.is_dir():
                what = "is" if candidate == path else f"is inside {candidate}, which is"
                raise CompileError(f"--out {path} {what} a file, not a folder")
            break
    return path


def module_name(value: str) -> str:
    """``--name``: a Python module name (it becomes ``<name>.py`` and the class name)."""
    if not value.isidentifier() or not value.islower() or value.startswith("_"):
        raise argparse.ArgumentTypeError(f"expected a lowercase Python module name such as qwen3_5, got {value!r}")
    return value


def positive_seconds(value: str) -> float:
    """``--render-budget`` / ``--budget``: a positive number of seconds."""
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {value!r}") from None
    if not seconds > 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {value!r}")
    return seconds


def add_budget_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--render-budget",
        type=positive_seconds,
        default=DEFAULT_RENDER_SECONDS,
        metavar="SECONDS",
        help=f"the longest one render of the template may run while compiling (default {DEFAULT_RENDER_SECONDS:g})",
    )
    parser.add_argument(
        "--budget",
        type=positive_seconds,
        default=DEFAULT_COMPILE_SECONDS,
        metavar="SECONDS",
        help=f"the longest the compile or verification of one template may run in all (default {DEFAULT_COMPILE_SECONDS:g})",
    )
    parser.add_argument(
        "--render-characters",
        type=positive_int,
        default=DEFAULT_RENDER_CHARACTERS,
        metavar="N",
        help=f"the most one render of the template may write while compiling (default {DEFAULT_RENDER_CHARACTERS})",
    )


def add_source_options(parser: argparse.ArgumentParser) -> None:
    add_budget_option(parser)
    parser.add_argument("--model", help="model id, e.g. Qwen/Qwen3-8B")
    parser.add_argument("--template", type=Path, help="a Jinja chat template file to compile")
    parser.add_argument("--tokenizer", type=Path, help="a local tokenizer folder (tokenizer.json + config)")
    parser.add_argument("--corpus", type=Path, help="a folder laid out like ../shared/corpus")
    parser.add_argument(
        "--special-token",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a special-token variable the template reads, when no tokenizer gives it (e.g. bos_token=<s>)",
    )
    parser.add_argument(
        "--template-name",
        metavar="NAME",
        help="one of the named templates a tokenizer ships (e.g. tool_use); generate compiles every one by default",
    )
    parser.add_argument("--offline", action="store_true", help="never look at the Hugging Face Hub")
    parser.add_argument(
        "--oracle",
        metavar="NAME",
        help="also verify against a reference implementation: deepseek-encoder:v4, fireworks:<renderer> or "
        "harmony (default: the one an override template names)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m compiler" if IN_CHECKOUT else "rllm-compile", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    generate_parser = commands.add_parser("generate", help="compile, verify and write generated/<module>.py")
    add_source_options(generate_parser)
    generate_parser.add_argument("--out", default=GENERATED_DIR, help="output folder (default generated/)")
    generate_parser.add_argument("--name", type=module_name, help="module name (default: derived from the model id)")
    generate_parser.add_argument(
        "--all", action="store_true", help="every renderer checked in to generated/ (same module names), into --out"
    )
    generate_parser.add_argument("--cases", type=positive_int, default=200, help="generated conversations to verify")
    generate_parser.add_argument("--seed", type=int, default=0)

    verify_parser = commands.add_parser("verify", help="check a checked-in renderer against its template")
    add_source_options(verify_parser)
    verify_parser.add_argument("--all", action="store_true", help="every corpus model with a generated renderer")
    verify_parser.add_argument("--dir", type=Path, default=GENERATED_DIR, help="where generated renderers live")
    verify_parser.add_argument("--cases", type=positive_int, default=200)
    verify_parser.add_argument("--seed", type=int, default=0)

    list_parser = commands.add_parser("list", help="coverage table of the checked-in renderers")
    list_parser.add_argument("--corpus", type=Path, help="a corpus folder (tells which models have a tokenizer)")
    list_parser.add_argument("--dir", type=Path, default=GENERATED_DIR)
    list_parser.add_argument("--format", choices=("table", "markdown", "json"), default="table")
    list_parser.add_argument(
        "--width", type=positive_int, default=DEFAULT_WIDTH, help=f"table width in columns (default {DEFAULT_WIDTH})"
    )

    diff_parser = commands.add_parser(
        "diff",
        help="what changes in a renderer's behaviour between two templates (exit 0: none, 1: changed, 2: error)",
    )
    add_budget_option(diff_parser)
    add_diff_arguments(diff_parser)

    check_parser = commands.add_parser("check", help="regenerate every checked-in file and compare")
    check_parser.add_argument("--corpus", type=Path, default=REPO_ROOT.parent / "shared" / "corpus" if IN_CHECKOUT else None)
    check_parser.add_argument("--dir", type=Path, default=GENERATED_DIR)
    add_budget_option(check_parser)
    return parser


def special_tokens_option(values: list[str]) -> dict[str, str]:
    tokens = {}
    for value in values:
        name, separator, token = value.partition("=")
        if not separator:
            raise CompileError(f"--special-token expects NAME=VALUE, got {value!r}")
        tokens[name] = token
    return tokens


def source_from_args(args: argparse.Namespace, model: str | None = None):
    model = model or args.model
    if not model:
        if args.template is None:
            raise CompileError("give --model (and optionally --template / --corpus)")
        model = args.template.stem.replace("__", "/")
    source = resolve_source(
        model,
        template=args.template,
        tokenizer=args.tokenizer,
        corpus=args.corpus,
        allow_hub=not (args.offline or os.environ.get("HF_HUB_OFFLINE") == "1"),
        template_name=args.template_name,
    )
    if args.template_name is not None and not source.template_names:
        raise CompileError(f"--template-name {args.template_name}: {source.display_name} is the only template there")
    return source


def command_generate(args: argparse.Namespace) -> int:
    args.out = output_folder(args.out)
    if args.all:
        return generate_all(args)
    source = source_from_args(args)
    if source.template_names and args.template_name is None:  # every named template, default first
        if args.name:
            raise CompileError(f"--name: the tokenizer ships {len(source.template_names)} templates; give --template-name too")
        for name in source.template_names:
            args.template_name = name
            generate_one(args, source_from_args(args))
        return 0
    return generate_one(args, source)


def generate_all(args: argparse.Namespace) -> int:
    """Regenerate each checked-in renderer (its first model id, template name and module name) into
    ``--out``. Each module is self-contained, so neither the order nor ``--out``'s contents matter."""
    if args.model or args.template or args.name or args.template_name:
        raise CompileError("generate --all takes no --model, --template, --name or --template-name")
    for path in generated_files(GENERATED_DIR):
        entry = module_entry(path)  # read, not imported: a file an older compiler wrote may not load
        source = resolve_source(entry.model_ids[0], corpus=args.corpus, allow_hub=False, template_name=entry.template_name)
        args.name = path.stem
        generate_one(args, source)
    return 0


def generate_one(args: argparse.Namespace, source) -> int:
    path, report, compiled = generate(
        source,
        args.out,
        cases=args.cases,
        seed=args.seed,
        module=args.name,
        special_tokens=special_tokens_option(args.special_token),
        oracle=args.oracle,
    )
    print(path)
    print(f"verified: {report.summary()} [parity: {compiled.parity}]")
    if report.reference is not None:
        print(f"against {args.oracle or source.oracle}: {report.reference.summary()}")
    for note in report.notes:
        print(f"note: {note}")
    warning = compiled.turn.warning() if compiled.turn is not None else None
    if warning:
        print(f"warning: {path.name}: {warning}", file=sys.stderr)
    for line in report.unproven_warnings():
        print(f"warning: {path.name}: {line}", file=sys.stderr)
    return 0


def generated_files(folder: Path) -> list[Path]:
    return sorted(path for path in folder.glob("*.py") if not path.name.startswith("_"))


def verify_one(path: Path, source, args: argparse.Namespace) -> bool:
    renderer_class = load_generated_file(path)
    if source_drifted(renderer_class, source):
        print(f"{path.name}: DRIFT: the template changed since generation (regenerate it)")
        return False
    # the checked-in class is what is verified: analysing the template is enough, no re-emission
    with template_fault(source.display_name, source.source):
        prepared = prepare_source(source, special_tokens=special_tokens_option(args.special_token))
        report = verify_compiled(renderer_class, prepared, cases=args.cases, seed=args.seed)
    print(f"{path.name} ({source.model_id}): {report.summary()} [parity: {prepared.parity}]")
    for line in report.unproven_warnings():
        print(f"warning: {path.name}: {line}", file=sys.stderr)
    if not report.ok:
        print(failure_text(report))
        return False
    oracle_name = getattr(args, "oracle", None) or source.oracle
    try:
        reference = reference_oracle(oracle_name, prepared)
    except OracleUnavailable as exc:
        print(f"{path.name}: cannot check against {oracle_name}: {exc}")
        return False
    if reference is None:
        return True
    against = verify_compiled(renderer_class, prepared, cases=args.cases, seed=args.seed, oracle=reference)
    print(f"{path.name} against {oracle_name}: {against.summary()}")
    if not against.ok:
        print(against.disagreement_report())
    return against.ok


def renderers_by_model(folder: Path) -> dict[str, Path]:
    by_model = {}
    for path in generated_files(folder):
        for model_id in load_generated_file(path).MODEL_IDS:
            by_model[model_id] = path
    return by_model


def command_verify(args: argparse.Namespace) -> int:
    if args.all:
        if args.corpus is None:
            raise CompileError("verify --all needs --corpus")
        if args.oracle:
            raise CompileError("verify --all uses each override's own oracle; give --oracle with --model")
        by_model = renderers_by_model(args.dir)
        results: dict[Path, bool] = {}
        verified = []
        entries = read_corpus_manifest(args.corpus)
        for entry in entries:
            path = by_model.get(entry.model_id)
            if path is None:
                print(f"{entry.model_id}: MISSING: no generated renderer lists it")
                verified.append(False)
                continue
            if path not in results:
                source = resolve_source(entry.model_id, corpus=args.corpus, allow_hub=False)
                results[path] = verify_one(path, source, args)
            else:
                print(f"{path.name} ({entry.model_id}): same template, verified above")
            verified.append(results[path])
        for path in generated_files(args.dir):  # our own templates (templates_overrides/), not in the corpus
            model_id = load_generated_file(path).MODEL_IDS[0]
            if path not in results and override_paths(model_id)[0].is_file():
                results[path] = verify_one(path, resolve_source(model_id, corpus=args.corpus, allow_hub=False), args)
                verified.append(results[path])
        print(f"verified: {sum(verified)}/{len(verified)} models")
        return 0 if verified and all(verified) else 1
    source = source_from_args(args)
    listing = [path for path in generated_files(args.dir) if source.model_id in load_generated_file(path).MODEL_IDS]
    # a tokenizer's named templates share model ids: the module compiled from this one comes first
    candidates = sorted(listing, key=lambda path: source_drifted(load_generated_file(path), source))
    if not candidates:
        raise CompileError(f"no generated renderer in {args.dir} lists {source.model_id!r}; run generate first")
    return 0 if verify_one(candidates[0], source, args) else 1


def command_check(args: argparse.Namespace) -> int:
    if not args.dir.is_dir():
        raise CompileError(f"--dir {args.dir} is not a folder of generated renderers")
    problems = 0
    # first, as it needs no template: e.g. a generate run stopped between its two writes
    if repair_index(args.dir, BLACK_MODE):
        print(f"REPAIRED {INDEX_FILE}: it did not list exactly the renderers in {args.dir}; rewritten from them")
        problems += 1
    else:
        print(f"ok {INDEX_FILE}")
    files = generated_files(args.dir)
    fingerprints: dict[str, str | None] = {}  # of the tokenizers the renderers verify with now
    with tempfile.TemporaryDirectory() as scratch:
        for path in files:
            renderer_class = load_generated_file(path)
            model_id = renderer_class.MODEL_IDS[0]
            corpus = args.corpus if args.corpus is not None and args.corpus.is_dir() else None
            source = resolve_source(model_id, corpus=corpus, allow_hub=False)
            if source_drifted(renderer_class, source):
                print(f"DRIFT {path.name}: the template of {model_id} changed since generation")
                problems += 1
                continue
            compiled = compile_source(source, module=path.stem)
            fingerprints[path.stem] = verified_fingerprint(compiled)
            fresh = Path(scratch) / path.name
            fresh.write_text(compiled.code, encoding="utf-8")
            if fresh.read_bytes() != path.read_bytes():
                print(f"STALE {path.name}: regenerating gives different code ({compiled.spec.command})")
                problems += 1
            else:
                print(f"ok {path.name}")
    if not index_is_current(args.dir, BLACK_MODE, fingerprints):  # (its listing was repaired above)
        recorded = recorded_fingerprints(args.dir)
        moved = sorted(module for module, value in fingerprints.items() if recorded.get(module) != value)
        print(
            f"STALE {INDEX_FILE}: the tokenizer fingerprint of {', '.join(moved) or 'a renderer'} is not the one of "
            "the tokenizer it verifies with (regenerate those to rewrite it)"
        )
        problems += 1
    print(f"checked: {len(files) + 1 - problems}/{len(files) + 1} up to date (renderers and index)")
    return 1 if problems else 0


def command_diff(args: argparse.Namespace) -> int:
    """Exit status 0: no behaviour change; 1: changed; an error (main) is 2."""
    problem = early_error([args.old, args.new, *(["--corpus", str(args.corpus)] if args.corpus else [])])
    if problem is not None:
        raise CompileError(problem)
    from .behaviour_diff import compare, load_side
    from .diff_report import report

    corpus = args.corpus if args.corpus is not None else default_corpus()
    model = args.model
    if model is None:  # a model id on one side gives a template file on the other its tokenizer
        ids = [side for side in (args.old, args.new) if not Path(side).exists()]
        model = ids[0] if ids else None
    sides = [load_side(side, model=model, corpus=corpus, tokenizer=args.tokenizer) for side in (args.old, args.new)]
    diff = compare(*sides, cases=args.cases, seed_value=args.seed)
    print(report(diff, markdown=args.format == "markdown"), end="")
    return 1 if diff.changed else 0


def main(argv: list[str] | None = None) -> int:
    ensure_importable()
    # Verification must run the encoder that will serve: prove a new tokenizer here, not in the
    # background (rllm_renderers.encoding.background_proof), unless the caller chose otherwise.
    os.environ.setdefault("RLLM_RENDERERS_PROOF", "inline")
    args = build_parser().parse_args(argv)
    handlers = {
        "generate": command_generate,
        "verify": command_verify,
        "check": command_check,
        "list": command_list,
        "diff": command_diff,
    }
    failure = 2 if args.command == "diff" else 1  # diff's 1 means "behaviour changed"
    try:
        budget = getattr(args, "render_budget", DEFAULT_RENDER_SECONDS)
        characters = getattr(args, "render_characters", DEFAULT_RENDER_CHARACTERS)
        with render_budget(budget, characters, getattr(args, "budget", None)):
            return handlers[args.command](args)
    except RenderBudgetExceeded as exc:  # outside any one template's compile (template_fault names it there)
        print(f"error: {exc}", file=sys.stderr)
        return failure
    except CompileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return failure
    except OSError as exc:  # e.g. an output folder that cannot be written
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{exc.strerror or exc}", file=sys.stderr)
        return failure
