"""Command line: ``python -m compiler generate | verify | check``."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from .coverage import command_list
from .errors import CompileError
from .pipeline import (
    compile_source,
    ensure_importable,
    generate,
    load_generated_file,
    prepare_source,
    source_drifted,
    verify_compiled,
)
from .source import REPO_ROOT, read_corpus_manifest, resolve_source

GENERATED_DIR = REPO_ROOT / "generated"


def add_source_options(parser: argparse.ArgumentParser) -> None:
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
    parser.add_argument("--offline", action="store_true", help="never look at the Hugging Face Hub")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m compiler", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    generate_parser = commands.add_parser("generate", help="compile, verify and write generated/<module>.py")
    add_source_options(generate_parser)
    generate_parser.add_argument("--out", type=Path, default=GENERATED_DIR, help="output folder (default generated/)")
    generate_parser.add_argument("--name", help="module name (default: derived from the model id)")
    generate_parser.add_argument(
        "--parent", help="inherit from this module of the output folder (default: the best match there, if any)"
    )
    generate_parser.add_argument("--cases", type=int, default=200, help="generated conversations to verify")
    generate_parser.add_argument("--seed", type=int, default=0)

    verify_parser = commands.add_parser("verify", help="check a checked-in renderer against its template")
    add_source_options(verify_parser)
    verify_parser.add_argument("--all", action="store_true", help="every corpus model with a generated renderer")
    verify_parser.add_argument("--dir", type=Path, default=GENERATED_DIR, help="where generated renderers live")
    verify_parser.add_argument("--cases", type=int, default=200)
    verify_parser.add_argument("--seed", type=int, default=0)

    list_parser = commands.add_parser("list", help="coverage table of the checked-in renderers")
    list_parser.add_argument("--corpus", type=Path, help="a corpus folder (tells which models have a tokenizer)")
    list_parser.add_argument("--dir", type=Path, default=GENERATED_DIR)

    check_parser = commands.add_parser("check", help="regenerate every checked-in file and compare")
    check_parser.add_argument("--corpus", type=Path, default=REPO_ROOT.parent / "shared" / "corpus")
    check_parser.add_argument("--dir", type=Path, default=GENERATED_DIR)
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
    return resolve_source(
        model,
        template=args.template,
        tokenizer=args.tokenizer,
        corpus=args.corpus,
        allow_hub=not (args.offline or os.environ.get("HF_HUB_OFFLINE") == "1"),
    )


def command_generate(args: argparse.Namespace) -> int:
    source = source_from_args(args)
    path, report, compiled = generate(
        source,
        args.out,
        cases=args.cases,
        seed=args.seed,
        module=args.name,
        special_tokens=special_tokens_option(args.special_token),
        parent_module=args.parent,
    )
    print(path)
    print(f"verified: {report.summary()} [parity: {compiled.parity}]")
    warning = compiled.turn.warning() if compiled.turn is not None else None
    if warning:
        print(f"warning: {path.name}: {warning}", file=sys.stderr)
    return 0


def generated_files(folder: Path) -> list[Path]:
    return sorted(path for path in folder.glob("*.py") if not path.name.startswith("_"))


def verify_one(path: Path, source, args: argparse.Namespace) -> bool:
    renderer_class = load_generated_file(path)
    if source_drifted(renderer_class, source):
        print(f"{path.name}: DRIFT: the template changed since generation (regenerate it)")
        return False
    # the checked-in class is what is verified: analysing the template is enough, no re-emission
    prepared = prepare_source(source, special_tokens=special_tokens_option(args.special_token))
    report = verify_compiled(renderer_class, prepared, cases=args.cases, seed=args.seed)
    print(f"{path.name} ({source.model_id}): {report.summary()} [parity: {prepared.parity}]")
    if not report.ok:
        print(report.failure.report())
    return report.ok


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
        print(f"verified: {sum(verified)}/{len(entries)} models")
        return 0 if entries and all(verified) else 1
    source = source_from_args(args)
    candidates = [path for path in generated_files(args.dir) if source.model_id in load_generated_file(path).MODEL_IDS]
    if not candidates:
        raise CompileError(f"no generated renderer in {args.dir} lists {source.model_id!r}; run generate first")
    return 0 if verify_one(candidates[0], source, args) else 1


def command_check(args: argparse.Namespace) -> int:
    problems = 0
    files = generated_files(args.dir)
    with tempfile.TemporaryDirectory() as scratch:
        for path in files:
            renderer_class = load_generated_file(path)
            model_id = renderer_class.MODEL_IDS[0]
            corpus = args.corpus if args.corpus.is_dir() else None
            source = resolve_source(model_id, corpus=corpus, allow_hub=False)
            if source_drifted(renderer_class, source):
                print(f"DRIFT {path.name}: the template of {model_id} changed since generation")
                problems += 1
                continue
            compiled = compile_source(source, module=path.stem, ladder_dir=args.dir)
            fresh = Path(scratch) / path.name
            fresh.write_text(compiled.code, encoding="utf-8")
            if fresh.read_bytes() != path.read_bytes():
                print(f"STALE {path.name}: regenerating gives different code ({compiled.spec.command})")
                problems += 1
            else:
                print(f"ok {path.name}")
    print(f"checked: {len(files) - problems}/{len(files)} up to date")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    ensure_importable()
    args = build_parser().parse_args(argv)
    handlers = {"generate": command_generate, "verify": command_verify, "check": command_check, "list": command_list}
    try:
        return handlers[args.command](args)
    except CompileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
