"""generate / verify / check: the compiler's three jobs, used by the CLI and the tests."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import re
import shlex
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .analysis import (
    TemplateFacts,
    analyse,
    compared_roles,
    knob_candidates,
    parse_template,
    special_tokens_read,
    template_sha256,
)
from .collector import compile_pace
from .emit import BLACK_MODE, ModuleSpec, class_name_for, emit_module, family_module_name, translate_facts
from .errors import CompileError, SourceError, VerificationError
from .load_check import check_load_safe
from .publish import publish_module
from .template_faults import register_generated_code, template_fault
from .oracle import ORACLE_VERSION, TemplateOracle
from .oracles import OracleUnavailable
from .markers import rendered_markers, synthetic_tokenizer, template_markers
from .fact_proof import FactProof, knob_settings, prove_facts
from .probe_shapes import shaped
from .probes import ProbeError, ProbeFacts, Prober, probe
from .source import DEFAULT_TEMPLATE, TemplateSource
from .stability import measure_prefix_stability
from .verify import VerificationReport, features_for, verify
from rllm_renderers.turns.formats import special_token_placeholder

DEFAULT_CORPUS_ARGUMENT = "../shared/corpus"
#: The checked-in renderers (the package ``generated``).
GENERATED_DIR = Path(__file__).resolve().parent.parent / "generated"


@dataclass
class Prepared:
    """A template analysed, with its tokenizer and oracle: what verification needs."""

    source: TemplateSource
    facts: TemplateFacts
    tokenizer: Any
    oracle: TemplateOracle
    # values for the special tokens the class reads at run time, while verifying and probing
    placeholders: dict[str, str]
    # what verification encodes with: the real tokenizer, or a synthetic one carrying the template's
    # marker strings; parity says which ("tokens" / "structural" / "text")
    check_tokenizer: Any = None
    parity: str = "text"
    # without a tokenizer, the marker strings the template writes (its literals and its renders)
    markers: frozenset[str] = frozenset()


@dataclass
class Compiled(Prepared):
    """A prepared template with its emitted module."""

    spec: ModuleSpec | None = None
    code: str = ""
    turn: ProbeFacts | None = None


def load_tokenizer_for(source: TemplateSource) -> Any:
    if source.tokenizer_dir is None:
        return None
    from rllm_renderers.encoding.loading import load_tokenizer

    try:
        return load_tokenizer(source.tokenizer_dir)
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds; all mean "not loadable"
        reason = " ".join(str(exc).split()) or type(exc).__name__  # one line
        raise SourceError(f"cannot load a tokenizer from {source.tokenizer_dir}: {reason}") from None


def regenerate_command(source: TemplateSource, module: str | None) -> str:
    command = f"python -m compiler generate --model {shlex.quote(source.model_id)}"
    if source.origin == "corpus" or (source.origin == "override" and source.tokenizer_dir is not None):
        command += f" --corpus {DEFAULT_CORPUS_ARGUMENT}"  # an override's tokenizer comes from the corpus too
    if source.template_name not in (None, DEFAULT_TEMPLATE):
        command += f" --template-name {shlex.quote(source.template_name)}"
    if module and module != default_module_name(source):
        command += f" --name {module}"
    return command


def default_module_name(source: TemplateSource) -> str:
    """``qwen3``; for a tokenizer's named template other than ``default``, ``<family>_<name>``."""
    module = family_module_name(source.model_id)
    if source.template_name in (None, DEFAULT_TEMPLATE):
        return module
    return f"{module}_{re.sub(r'[^0-9a-z]+', '_', source.template_name.lower()).strip('_') or 'named'}"


def added_token_strings(
    tokenizer: Any, facts: TemplateFacts, placeholders: dict[str, str], markers: frozenset[str] = frozenset()
) -> frozenset[str]:
    """The tokenizer's added tokens; without a tokenizer, the template's ``markers`` (see
    :func:`prepare_source`). Placeholder values of run-time special tokens count as markers either way."""
    if tokenizer is not None:
        from rllm_renderers.encoding.tokenization import text_encoder_for

        return text_encoder_for(tokenizer).added_token_strings | frozenset(placeholders.values())
    return markers | frozenset(facts.special_tokens.values()) | frozenset(placeholders.values())


def learn_turn_format(renderer_class: type, prepared: Prepared, features) -> ProbeFacts:
    """Probe the first-pass class (an exact translation) for the facts parse and bridge need."""
    tokenizer, facts, placeholders = prepared.tokenizer, prepared.facts, prepared.placeholders
    renderer = renderer_class(tokenizer, special_tokens=placeholders, **dict(features.base_knobs))
    eos = getattr(tokenizer, "eos_token", None) if tokenizer is not None else None
    eos = eos or facts.special_tokens.get("eos_token") or placeholders.get("eos_token")
    markers = added_token_strings(tokenizer, facts, placeholders, prepared.markers)
    turn = probe(shaped(renderer), markers, eos)  # (conversations in the shape the template accepts)
    turn = with_knob_stops(turn, renderer_class, prepared, features, markers)
    stable, counterexample = measure_prefix_stability(renderer, features, cases=STABILITY_CASES, seed_value=0)
    return dataclasses.replace(turn, prefix_stable=stable, prefix_counterexample=counterexample)


STABILITY_CASES = 150


def with_knob_stops(turn: ProbeFacts, renderer_class: type, prepared: Prepared, features, markers) -> ProbeFacts:
    """``turn`` with the tool-calling turns' closes under every knob value, not only the base ones
    (Llama 3.1 ends a call with ``<|eom_id|>`` when ``builtin_tools`` is set)."""
    if turn.turn is None or not turn.turn.close.strip():
        return turn
    stops = list(turn.turn.stop_tokens)
    for settings in list(knob_settings(features))[1:]:
        try:
            renderer = renderer_class(prepared.tokenizer, special_tokens=prepared.placeholders, **settings)
            closes = Prober(shaped(renderer), markers).tool_call_closes(turn.turn.close, turn.turn.after_close)
        except ValueError:
            continue
        stops += [close for close in closes if close not in stops]
    if len(stops) == len(turn.turn.stop_tokens):
        return turn
    return dataclasses.replace(turn, turn=dataclasses.replace(turn.turn, stop_tokens=tuple(stops)))


def prepare_source(source: TemplateSource, *, special_tokens: dict[str, str] | None = None) -> Prepared:
    """Load the tokenizer, build the oracle and analyse the template (no emission).

    Special-token values known now (the tokenizer's, ``special_tokens``) are baked into the class.
    The template's other special-token variables are read by the class when it is built; here
    both the oracle and the class get placeholder values for them (``<{eos_token}>``).
    """
    given = dict(special_tokens or {})
    tokenizer = load_tokenizer_for(source)
    known = {**(dict(tokenizer.special_tokens_map) if tokenizer is not None else {}), **given}
    known = {name: value for name, value in known.items() if isinstance(value, str)}
    ast = parse_template(source.source, source.display_name)
    placeholders = {name: special_token_placeholder(name) for name in special_tokens_read(ast) if name not in known}
    check_tokenizer, parity, markers = tokenizer, "tokens", frozenset()
    if tokenizer is None:
        # the literals' markers, and those the template computes (Hunyuan's '<think{}>'.format(tag))
        text_only = TemplateOracle(source.source, special_tokens={**placeholders, **given})
        markers = template_markers(ast, [*placeholders.values(), *given.values(), *source.added_tokens])
        markers |= rendered_markers(text_only.render_text, known=markers)
        check_tokenizer = synthetic_tokenizer(markers, {**placeholders, **given})
        parity = "structural" if markers else "text"
    oracle = TemplateOracle(source.source, tokenizer=check_tokenizer, special_tokens={**placeholders, **given})
    facts = analyse(source.source, source.display_name, special_tokens=known, oracle=oracle, ast=ast)
    return Prepared(source, facts, tokenizer, oracle, placeholders, check_tokenizer, parity, markers)


def compile_source(
    source: TemplateSource,
    *,
    module: str | None = None,
    special_tokens: dict[str, str] | None = None,
) -> Compiled:
    """Analyse and emit (no verification, nothing written).

    The module is self-contained: nothing but the template (and its tokenizer) is consulted, so
    the same template gives the same bytes whatever the output folder or the checkout holds.
    """
    with template_fault(source.display_name, source.source), compile_pace():
        return _compile_source(source, module, special_tokens)


def _compile_source(source, module, special_tokens) -> Compiled:
    prepared = prepare_source(source, special_tokens=special_tokens)
    facts = prepared.facts
    module_name = module or default_module_name(source)
    spec = ModuleSpec(
        module=module_name,
        class_name=class_name_for(module_name),
        model_ids=source.model_ids or (source.model_id,),
        command=regenerate_command(source, module),
        oracle_version=ORACLE_VERSION,
        template_name=source.template_name,
    )
    translation = translate_facts(facts)
    first_pass = load_renderer_class(
        emit_module(facts, spec, formatted=False, translation=translation), spec.module, spec.class_name
    )
    features = features_for(
        first_pass, knob_candidates(facts.ast, facts.knobs), compared_roles(facts.ast), prepared.placeholders
    )
    turn = learn_turn_format(first_pass, prepared, features)
    turn = proven(turn, first_pass, prepared)
    code = emit_module(facts, spec, turn, translation=translation)
    prepared_fields = {field.name: getattr(prepared, field.name) for field in dataclasses.fields(Prepared)}
    return Compiled(**prepared_fields, spec=spec, code=code, turn=turn)


#: The package the checked-in generated modules belong to (the checkout's generated/ folder).
GENERATED_PACKAGE = "rllm_renderers.generated"


def folder_package(folder: Path | None) -> str:
    """A package name whose modules are the files of ``folder``: rllm_renderers.generated for the
    checked-in folder, a private one otherwise (generated modules import nothing from it)."""
    if folder is None or folder.resolve() == GENERATED_DIR.resolve():
        ensure_importable()
        return GENERATED_PACKAGE
    package = "_rllm_generated_" + hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:12]
    if package not in sys.modules:
        module = types.ModuleType(package)
        module.__path__ = [str(folder.resolve())]
        sys.modules[package] = module
    return package


def load_renderer_class(code: str, module_name: str, class_name: str) -> type:
    """Execute generated code as a fresh module (not registered in sys.modules)."""
    check_load_safe(code, f"<generated {module_name}>")
    register_generated_code(f"<generated {module_name}>", code)
    package = folder_package(None)
    module = types.ModuleType(f"{package}.{module_name}")
    module.__file__ = f"<generated {module_name}>"
    module.__package__ = package
    exec(compile(code, module.__file__, "exec"), module.__dict__)
    return getattr(module, class_name)


def load_generated_file(path: Path) -> type:
    """The renderer class defined in a generated file; a CompileError naming the file when it is not one (it is read, and checked, before it runs)."""
    try:
        code = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CompileError(f"cannot read {path}: {exc}") from None
    check_load_safe(code, str(path))
    register_generated_code(str(path), code)
    spec = importlib.util.spec_from_file_location(f"{folder_package(path.parent)}.{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - e.g. an import the runtime no longer has
        raise CompileError(f"{path} cannot be loaded: {type(exc).__name__}: {exc}") from None
    classes = [
        value
        for value in vars(module).values()
        if isinstance(value, type) and value.__module__ == module.__name__ and hasattr(value, "TEMPLATE_SHA256")
    ]
    if len(classes) != 1:
        raise CompileError(f"{path} should define exactly one renderer class, found {len(classes)}")
    return classes[0]


def verify_compiled(
    renderer_class: type, prepared: Prepared, *, cases: int, seed: int, oracle: Any = None, prove: bool = True
) -> VerificationReport:
    """Check the class against its template, or against ``oracle`` (a reference that is not the
    template, see :mod:`compiler.oracles`: every case is checked and the differences tallied).
    Against the template, the class's learned facts are proven too (``prove``): its stops and
    parse (:mod:`compiler.fact_proof`) and its bridge on the verified conversations
    (:mod:`compiler.bridge_proof`, at most ``BRIDGE_CASES`` of them)."""
    report = verify(
        renderer_class,
        prepared.oracle if oracle is None else oracle,
        tokenizer=prepared.check_tokenizer,
        special_tokens=prepared.placeholders,
        cases=cases,
        seed_value=seed,
        knob_candidates=knob_candidates(prepared.facts.ast, prepared.facts.knobs),
        template_roles=compared_roles(prepared.facts.ast),
        keep_going=oracle is not None,
    )
    if oracle is None and prove and report.failure is None:
        from .bridge_proof import bridge_counts

        report.facts = prove_class_facts(renderer_class, prepared)
        report.bridge, report.bridge_examples = bridge_counts(
            renderer_class, prepared.check_tokenizer, prepared.oracle, prepared.placeholders,
            report.verified_cases[:BRIDGE_CASES],
        )
        report.unproven = proven_by_nothing(renderer_class, report)
    return report


def proven_by_nothing(renderer_class: type, report: VerificationReport) -> dict[str, str]:
    """The facts ``renderer_class`` uses that the report's proofs checked nowhere (fact -> why): its
    turn facts when no sample turn read back, its bridge when no bridge point was played."""
    unproven = {}
    if renderer_class.TURN is not None and not renderer_class.UNLEARNED and report.facts is not None:
        learned = ProbeFacts(renderer_class.TURN, renderer_class.REASONING, renderer_class.TOOL_CALLS, ())
        unproven.update(unproven_facts(learned, report.facts))
    if renderer_class.TURN is not None and not renderer_class.UNLEARNED and report.bridge is not None:
        if not report.bridge["points"]:
            unproven["bridge"] = "no bridge point in the verified conversations (0 turns to bridge from)"
    return unproven


#: Verified conversations the bridge differential plays (per retention mode).
BRIDGE_CASES = 80


def failure_text(report: VerificationReport) -> str:
    """What a report that is not ok found: the render mismatch, else the learned facts' proof."""
    return report.failure.report() if report.failure is not None else f"mismatch: {report.problem()}"


def reference_oracle(name: str | None, prepared: Prepared) -> Any:
    """The named reference oracle (``--oracle``, else the override's own), or None."""
    name = name or prepared.source.oracle
    if name is None:
        return None
    from .oracles import load_oracle

    return load_oracle(name, prepared.tokenizer)


def generate(
    source: TemplateSource,
    out_dir: Path,
    *,
    cases: int,
    seed: int,
    module: str | None = None,
    special_tokens: dict[str, str] | None = None,
    oracle: str | None = None,
) -> tuple[Path, VerificationReport, Compiled]:
    """Compile, verify against the template and (when named, or named by the override) the
    reference oracle, then write ``<out_dir>/<module>.py``; raises VerificationError on a mismatch.
    The returned report is the template's; ``report.reference`` the oracle's, if one was run."""
    with compile_pace():
        return _generate(
            source, out_dir, cases=cases, seed=seed, module=module, special_tokens=special_tokens, oracle=oracle
        )


def _generate(source, out_dir, *, cases, seed, module, special_tokens, oracle):
    compiled = compile_source(source, module=module, special_tokens=special_tokens)
    renderer_class = load_renderer_class(compiled.code, compiled.spec.module, compiled.spec.class_name)
    with template_fault(source.display_name, source.source):
        report = verify_compiled(renderer_class, compiled, cases=cases, seed=seed)
    if not report.ok:
        raise VerificationError(failure_text(report), template=compiled.facts.name)
    try:
        reference = reference_oracle(oracle, compiled)
    except OracleUnavailable as exc:
        if oracle is not None:  # asked for on the command line: its absence is an error
            raise
        reference = None  # named only by the override: say it was not run
        report.notes.append(f"not verified against {compiled.source.oracle}: {exc}")
    if reference is not None:
        against_reference = verify_compiled(renderer_class, compiled, cases=cases, seed=seed, oracle=reference)
        if not against_reference.ok:
            raise VerificationError(
                f"the renderer differs from {oracle or compiled.source.oracle}:\n{against_reference.disagreement_report()}",
                template=compiled.facts.name,
            )
        report.reference = against_reference
    path = publish_module(
        out_dir,
        f"{compiled.spec.module}.py",
        compiled.code,
        BLACK_MODE,
        fingerprints={compiled.spec.module: verified_fingerprint(compiled)},
    )
    return path, report, compiled


def verified_fingerprint(prepared: Prepared) -> str | None:
    """The fingerprint the index records for a renderer verified with ``prepared``: its real
    tokenizer's, or None (verified against a template alone, or a synthetic tokenizer)."""
    if prepared.tokenizer is None:
        return None
    from rllm_renderers.encoding.fingerprint import tokenizer_fingerprint

    return tokenizer_fingerprint(prepared.tokenizer)


def source_drifted(renderer_class: type, source: TemplateSource) -> bool:
    return renderer_class.TEMPLATE_SHA256 != template_sha256(source.source)


def ensure_importable() -> None:
    """From a checkout, make the repository root importable (for ``rllm_renderers``); installed, nothing to do."""
    from .source import IN_CHECKOUT

    root = str(Path(__file__).resolve().parent.parent)
    if IN_CHECKOUT and root not in sys.path:
        sys.path.insert(0, root)


def with_facts(renderer_class: type, turn: ProbeFacts) -> type:
    """``renderer_class`` (a first pass) with the turn facts ``turn`` holds, as the emitted class has them."""
    constants = {"TURN": turn.turn, "REASONING": turn.reasoning, "TOOL_CALLS": turn.tool_calls}
    return type(renderer_class.__name__, (renderer_class,), {**constants, "UNLEARNED": dict(turn.unlearned)})


def proven(turn: ProbeFacts, first_pass: type, prepared: Prepared) -> ProbeFacts:
    """``turn`` with each fact that fails its proof (:mod:`compiler.fact_proof`) unlearned, with the reason.

    Reasoning the base knobs do not render (thinking off) but another knob value does, which the
    proof then finds unread, is learned under that value, where that makes every fact prove
    (DeepSeek-V3.2, command-r7b: ``<think>``, ``<|START_THINKING|>`` only with thinking on)."""
    proof = prove_class_facts(with_facts(first_pass, turn), prepared)
    if not proof.failed:
        return with_unproven(turn, proof)
    if turn.reasoning is None and turn.turn is not None:
        for candidate in reasoning_under_other_knobs(turn, first_pass, prepared):
            candidate_proof = prove_class_facts(with_facts(first_pass, candidate), prepared)
            if not candidate_proof.failed:
                return with_unproven(candidate, candidate_proof)
    unlearned = {**turn.unlearned, **{fact: f"proof failed: {why}" for fact, why in proof.failed.items()}}
    return dataclasses.replace(turn, unlearned=unlearned)


def with_unproven(turn: ProbeFacts, proof: FactProof) -> ProbeFacts:
    """``turn`` with its learned turn facts marked unproven when their proof read no turn back."""
    unproven = unproven_facts(turn, proof)
    return dataclasses.replace(turn, unproven=unproven) if unproven else turn


def unproven_facts(turn: ProbeFacts, proof: FactProof) -> dict[str, str]:
    """The learned turn facts (fact -> why) a proof that read no sample turn back leaves unproven."""
    if proof.checked or turn.turn is None or turn.unlearned:
        return {}
    why = UNPROVEN_TURNS + (f" ({proof.skipped} sample turns written otherwise)" if proof.skipped else "")
    learned = {"turn": turn.turn, "reasoning": turn.reasoning, "tool_calls": turn.tool_calls}
    return {fact: why for fact, value in learned.items() if value is not None}


UNPROVEN_TURNS = "no turn of the template's history continues its generation prompt: 0 sample turns read back"


def reasoning_under_other_knobs(turn: ProbeFacts, first_pass: type, prepared: Prepared):
    """``turn`` with the reasoning format learned under each non-base knob value that renders one
    (with the turn's content lead kept, and dropped as an empty block the parser reads itself)."""
    features = features_for(
        first_pass, knob_candidates(prepared.facts.ast, prepared.facts.knobs), compared_roles(prepared.facts.ast),
        prepared.placeholders,
    )
    markers = added_token_strings(prepared.tokenizer, prepared.facts, prepared.placeholders, prepared.markers)
    for settings in list(knob_settings(features))[1:]:
        try:
            renderer = first_pass(prepared.tokenizer, special_tokens=prepared.placeholders, **settings)
            reasoning = Prober(shaped(renderer), markers).reasoning_format()
        except (ValueError, ProbeError):
            continue
        if reasoning is None:
            continue
        notes = tuple(note for note in turn.notes if "does not render reasoning_content" not in note)
        notes += (f"reasoning markers learned with {settings} (the base knobs render no reasoning)",)
        learned = dataclasses.replace(turn, reasoning=reasoning, notes=notes)
        yield learned
        if turn.turn.content_lead.strip():
            yield dataclasses.replace(learned, turn=dataclasses.replace(turn.turn, content_lead=""))


def prove_class_facts(renderer_class: type, prepared: Prepared) -> FactProof:
    """Prove the stops and the parse of ``renderer_class`` on the template's renders (:mod:`compiler.fact_proof`)."""
    features = features_for(
        renderer_class, knob_candidates(prepared.facts.ast, prepared.facts.knobs), compared_roles(prepared.facts.ast),
        prepared.placeholders,
    )
    return prove_facts(renderer_class, prepared.check_tokenizer, prepared.placeholders, features)
