"""The arguments of ``python -m compiler diff``, checked before anything heavy is imported.

A missing file or an unknown model id is reported in well under a second (``compiler.__main__``
calls :func:`early_error` before it imports the compiler; ``cli.command_diff`` calls it again).
Only the standard library and :mod:`compiler.source` are used here.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

TEMPLATE_SUFFIXES = (".jinja", ".j2", ".py")


def default_corpus() -> Path | None:
    """``$RLLM_CORPUS``, else the checkout's ``../shared/corpus`` when it exists (model ids resolve there)."""
    from .source import IN_CHECKOUT, REPO_ROOT

    if os.environ.get("RLLM_CORPUS"):
        return Path(os.environ["RLLM_CORPUS"])
    folder = REPO_ROOT.parent / "shared" / "corpus"
    return folder if IN_CHECKOUT and folder.is_dir() else None


def add_diff_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("old", help="a template file, a generated .py file, or a model id (its corpus/override template)")
    parser.add_argument("new", help="the same kinds as OLD")
    parser.add_argument("--model", help="the model a template file is for (its tokenizer; default: the model id side's)")
    parser.add_argument(
        "--corpus", type=Path, help="a folder laid out like ../shared/corpus (default: $RLLM_CORPUS, else ../shared/corpus)"
    )
    parser.add_argument("--tokenizer", type=Path, help="a local tokenizer folder")
    parser.add_argument("--format", choices=("markdown", "terminal"), default="markdown", help="(default: markdown)")
    parser.add_argument("--cases", type=int, default=40, help="generated conversations to compare (default: 40)")
    parser.add_argument("--seed", type=int, default=0, help="(default: 0)")


def side_problem(argument: str, corpus: Path | None) -> str | None:
    """Why ``argument`` names neither a file nor a model whose template can be found, or None."""
    from .errors import SourceError
    from .source import checked_model_id, override_paths, read_corpus_manifest

    path = Path(argument)
    if path.is_file():
        return None
    if path.exists():
        return f"{argument}: not a file"
    if path.suffix in TEMPLATE_SUFFIXES or argument.startswith((".", "/", "~")) or argument.count("/") > 1:
        return f"{argument}: no such file"
    try:
        checked_model_id(argument)
    except SourceError as exc:
        return str(exc)
    if override_paths(argument)[0].is_file():
        return None
    if corpus is not None and any(entry.model_id == argument for entry in read_corpus_manifest(corpus)):
        return None
    where = f"the corpus at {corpus}" if corpus is not None else "no corpus (set RLLM_CORPUS or pass --corpus)"
    return (
        f"no template for {argument!r}: not a file, not in templates_overrides/, and not listed by {where}; "
        "give the template file itself as OLD or NEW"
    )


class QuietParser(argparse.ArgumentParser):
    """A parser that raises instead of printing the usage and exiting."""

    def error(self, message: str):
        raise ValueError(message)


def early_error(argv: list[str]) -> str | None:
    """The first problem with ``diff``'s arguments (``argv`` after ``diff``), or None; arguments
    argparse itself refuses are left to the full parser (it prints the usage)."""
    parser = QuietParser(add_help=False)
    add_diff_arguments(parser)
    try:
        args, _ = parser.parse_known_args(argv)
    except ValueError:
        return None
    if args.cases < 1:
        return f"--cases must be at least 1, not {args.cases}"
    corpus = args.corpus if args.corpus is not None else default_corpus()
    if corpus is not None and not (corpus / "templates" / "MANIFEST.tsv").is_file():
        return f"--corpus {corpus}: no templates/MANIFEST.tsv there"
    for side in (args.old, args.new):
        problem = side_problem(side, corpus)
        if problem is not None:
            return problem
    return None
