"""Where a model's chat template (and tokenizer) comes from.

In order of preference:

1. ``--template FILE`` (and ``--tokenizer DIR``) given explicitly;
2. ``templates_overrides/<org>/<name>.jinja``: our own template for a model whose
   upstream one is missing or unusable (an optional ``<name>.json`` beside it names
   the corpus tokenizer folder, any extra model ids sharing the template, the
   reference implementation the template was written from and, for compiling without a
   tokenizer, the tokenizer's added-token strings, e.g.
   ``{"corpus_tokenizer": "dsv4", "also_models": [...], "oracle": "deepseek-encoder:v4", "added_tokens": [...]}``);
3. a corpus folder laid out like ``../shared/corpus`` (``templates/MANIFEST.tsv``
   maps model ids to template files and tokenizer folders);
4. the ``--tokenizer`` folder's own chat template(s);
5. the Hugging Face Hub or its local cache, through huggingface_hub (build time only;
   ``HF_HUB_OFFLINE=1`` restricts it to the cache).
"""

from __future__ import annotations

import csv
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .errors import SourceError

REPO_ROOT = Path(__file__).resolve().parent.parent
#: Whether the compiler runs from a source checkout (else it is installed as rllm_renderers.compiler).
IN_CHECKOUT = (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "generated").is_dir()
OVERRIDES_DIR = REPO_ROOT / "templates_overrides"


@dataclass(frozen=True)
class TemplateSource:
    model_id: str
    template_path: Path | None  # None when the template came from the Hub's tokenizer_config.json
    source: str
    tokenizer_dir: Path | None
    origin: str  # "file", "override", "corpus", "hub"
    model_ids: tuple[str, ...] = field(default=())  # every model id known to ship this template
    oracle: str | None = None  # a reference implementation to verify against too (override metadata)
    # the tokenizer's added-token strings, as an override declares them for compiling without a tokenizer
    added_tokens: tuple[str, ...] = field(default=())
    # a tokenizer shipping several named templates ({"default": A, "tool_use": B}): which one this
    # is, and every name (see :func:`folder_templates`); None and () for a single template
    template_name: str | None = None
    template_names: tuple[str, ...] = field(default=())

    @property
    def display_name(self) -> str:
        name = self.template_path.name if self.template_path else f"{self.model_id} ({self.origin})"
        return f"{name} [{self.template_name}]" if self.template_name not in (None, DEFAULT_TEMPLATE) else name


#: The template apply_chat_template uses when a tokenizer ships several and the call has no tools.
DEFAULT_TEMPLATE = "default"


@dataclass(frozen=True)
class CorpusEntry:
    model_id: str
    template: Path
    tokenizer: Path | None


#: The largest template file read (the largest real chat template is a few hundred KB).
MAX_TEMPLATE_BYTES = 16 * 1024 * 1024

#: What a file that is not a regular file is, by its ``stat`` kind.
SPECIAL_FILES = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def read_template(path: Path) -> str:
    """The text of a template file; SourceError naming the file when it is missing, not a regular
    file (a folder, a FIFO, ``/dev/zero``: named as such, never read), too large, or not UTF-8 text."""
    try:  # (non-blocking: opening a FIFO must not wait for a writer)
        handle = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise SourceError(f"template file not found: {path}") from None
    except OSError as exc:
        raise SourceError(f"cannot read template file {path}: {exc.strerror or exc}") from None
    mode = os.fstat(handle).st_mode
    for is_kind, kind in SPECIAL_FILES:
        if is_kind(mode):
            os.close(handle)
            raise SourceError(f"template file {path} is {kind}, not a regular file")
    with os.fdopen(handle, "rb") as file:
        try:
            data = file.read(MAX_TEMPLATE_BYTES + 1)
        except OSError as exc:
            raise SourceError(f"cannot read template file {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_TEMPLATE_BYTES:
        raise SourceError(f"template file {path} is larger than {MAX_TEMPLATE_BYTES // (1024 * 1024)} MB: not a chat template")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(f"template file {path} is not UTF-8 text (byte {exc.start}: {data[exc.start:exc.start + 1]!r})") from None
    if "\x00" in text:
        raise SourceError(f"template file {path} is not a text file (it contains NUL bytes)")
    return checked_template_text(text, f"template file {path}")


def checked_model_id(model_id: str) -> str:
    """``model_id`` when it names a model (``org/name``, or a bare ``name``); a SourceError when it
    could name a path (it is looked up under templates_overrides/): no ``..``, no leading or
    doubled ``/``, no more than one ``/``."""
    parts = model_id.split("/")
    if (
        not model_id
        or len(parts) > 2
        or any(part in ("", ".", "..") for part in parts)
        or "\x00" in model_id
        or model_id != model_id.strip()
    ):
        raise SourceError(f"model id {model_id!r} is not an org/name pair (such as Qwen/Qwen3-8B)")
    return model_id


def checked_template_text(text: str, where: str) -> str:
    """``text`` unless it is empty (an empty template renders nothing: there is nothing to compile)."""
    if not text.strip():
        raise SourceError(f"{where}: the template is empty")
    return text


def read_corpus_manifest(corpus: Path) -> list[CorpusEntry]:
    manifest = corpus / "templates" / "MANIFEST.tsv"
    if not manifest.is_file():
        raise SourceError(f"no corpus manifest at {manifest}")
    entries = []
    with manifest.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            tokenizer = None
            if row.get("tokenizer") and row["tokenizer"] != "-":
                tokenizer = corpus / "tokenizers" / row["tokenizer"]
            entries.append(CorpusEntry(row["model_id"], corpus / "templates" / row["file"], tokenizer))
    return entries


def override_paths(model_id: str) -> tuple[Path, Path]:
    """The override template (and its metadata) for ``model_id``: its own, or one listing it in ``also_models``."""
    org, _, name = checked_model_id(model_id).partition("/")
    folder = OVERRIDES_DIR / org if name else OVERRIDES_DIR
    stem = name or org
    own = folder / f"{stem}.jinja", folder / f"{stem}.json"
    if own[0].is_file():
        return own
    for metadata_path in sorted(OVERRIDES_DIR.glob("**/*.json")):
        metadata = json.loads(metadata_path.read_text(encoding="utf-8"))
        if model_id in metadata.get("also_models", []) and metadata_path.with_suffix(".jinja").is_file():
            return metadata_path.with_suffix(".jinja"), metadata_path
    return own


def resolve_source(
    model_id: str,
    *,
    template: Path | None = None,
    tokenizer: Path | None = None,
    corpus: Path | None = None,
    allow_hub: bool = True,
    template_name: str | None = None,
) -> TemplateSource:
    """Find the template (and tokenizer folder) for ``model_id``; raises SourceError naming what is missing."""
    checked_model_id(model_id)
    corpus_entries = read_corpus_manifest(corpus) if corpus else []
    by_model = {entry.model_id: entry for entry in corpus_entries}

    if template is not None:
        source = read_template(template)
        tokenizer_dir = tokenizer or (by_model[model_id].tokenizer if model_id in by_model else None)
        return TemplateSource(model_id, template, source, tokenizer_dir, "file", same_template_ids(model_id, source, corpus_entries))

    override, metadata_path = override_paths(model_id)
    if override.is_file():
        metadata = json.loads(metadata_path.read_text(encoding="utf-8")) if metadata_path.is_file() else {}
        tokenizer_dir = tokenizer
        if tokenizer_dir is None and corpus and metadata.get("corpus_tokenizer"):
            tokenizer_dir = corpus / "tokenizers" / metadata["corpus_tokenizer"]
        primary = override.relative_to(OVERRIDES_DIR).with_suffix("").as_posix()
        model_ids = tuple(dict.fromkeys((primary, *metadata.get("also_models", []))))
        return TemplateSource(
            model_id,
            override,
            read_template(override),
            tokenizer_dir,
            "override",
            model_ids,
            metadata.get("oracle"),
            tuple(metadata.get("added_tokens", ())),
        )

    if model_id in by_model:
        entry = by_model[model_id]
        source = read_template(entry.template)
        return TemplateSource(
            model_id, entry.template, source, tokenizer or entry.tokenizer, "corpus", same_template_ids(model_id, source, corpus_entries)
        )

    if tokenizer is not None and tokenizer.is_dir():
        source = folder_source(model_id, tokenizer, tokenizer, "tokenizer", template_name)
        if source is not None:
            return source
    if allow_hub:
        return hub_source(model_id, tokenizer, template_name)
    raise SourceError(
        f"no template for {model_id!r}: pass --template, add templates_overrides/{model_id}.jinja, "
        "or point --corpus at a folder whose MANIFEST.tsv lists it"
    )


def same_template_ids(model_id: str, source: str, entries: list[CorpusEntry]) -> tuple[str, ...]:
    ids = [model_id]
    for entry in entries:
        if entry.model_id != model_id and entry.template.is_file() and entry.template.read_text(encoding="utf-8") == source:
            ids.append(entry.model_id)
    return tuple(ids)


def folder_templates(folder: Path) -> dict[str, str]:
    """The chat templates a tokenizer folder ships, by name (one template is named ``default``).

    As transformers reads them: ``chat_template.jinja`` and ``additional_chat_templates/*.jinja``,
    else ``tokenizer_config.json``'s ``chat_template`` (a string, or a list of ``{name, template}``).
    """
    templates: dict[str, str] = {}
    if (folder / "chat_template.jinja").is_file():
        templates[DEFAULT_TEMPLATE] = read_template(folder / "chat_template.jinja")
        for path in sorted((folder / "additional_chat_templates").glob("*.jinja")):
            templates[path.stem] = read_template(path)
        return templates
    config_path = folder / "tokenizer_config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    except (OSError, ValueError) as exc:
        raise SourceError(f"cannot read {config_path}: {exc}") from None
    shipped = config.get("chat_template") if isinstance(config, dict) else None
    if isinstance(shipped, str):
        templates[DEFAULT_TEMPLATE] = shipped
    elif isinstance(shipped, list):
        for item in shipped:
            if not (isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("template"), str)):
                raise SourceError(f"{config_path}: chat_template lists an entry that is not {{name, template}}: {item!r:.80}")
            templates[item["name"]] = item["template"]
    for name, text in templates.items():
        checked_template_text(text, f"{config_path} ({name})")
    return templates


def folder_source(
    model_id: str, folder: Path, tokenizer: Path | None, origin: str, template_name: str | None
) -> TemplateSource | None:
    """The template ``template_name`` (default: ``default``) of a tokenizer folder; None if it ships none."""
    templates = folder_templates(folder)
    if not templates:
        return None
    name = template_name or DEFAULT_TEMPLATE
    if name not in templates:
        raise SourceError(f"{folder} ships no chat template named {name!r} (it has {', '.join(sorted(templates))})")
    jinja_file = folder / "chat_template.jinja" if name == DEFAULT_TEMPLATE else folder / "additional_chat_templates" / f"{name}.jinja"
    names = tuple(sorted(templates, key=lambda n: (n != DEFAULT_TEMPLATE, n))) if len(templates) > 1 else ()
    return TemplateSource(
        model_id,
        jinja_file if jinja_file.is_file() else None,
        templates[name],
        tokenizer or folder,
        origin,
        (model_id,),
        template_name=name if names else None,
        template_names=names,
    )


def hub_source(model_id: str, tokenizer: Path | None, template_name: str | None = None) -> TemplateSource:
    """The template and tokenizer from the Hub (or, offline, its cache)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - huggingface_hub comes with transformers
        raise SourceError("huggingface_hub is needed to fetch templates from the Hub") from None
    try:
        folder = Path(
            snapshot_download(
                model_id,
                allow_patterns=[
                    "tokenizer.json",
                    "tokenizer_config.json",
                    "chat_template.jinja",
                    "additional_chat_templates/*.jinja",
                    "special_tokens_map.json",
                ],
                local_files_only=os.environ.get("HF_HUB_OFFLINE") == "1",
            )
        )
    except Exception as exc:  # the hub library raises many kinds; all mean "not available"
        raise SourceError(f"could not get {model_id!r} from the Hugging Face Hub or its cache: {exc}") from None
    source = folder_source(model_id, folder, tokenizer, "hub", template_name)
    if source is None:
        raise SourceError(f"{model_id!r} ships no chat template; add one under templates_overrides/")
    return source
