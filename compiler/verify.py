"""Differential verification: a generated renderer against transformers' apply_chat_template.

Conversations come from the hypothesis strategies in :mod:`compiler.conversations`,
drawn over every feature the template reads (its roles, its knobs, the tool-call
argument form it consumes). For each one the renderer must give the oracle's
text (and token ids, when a tokenizer is present), or raise ``ValueError`` where
the template raises; for ``raise_exception`` the message must be the same. On a
mismatch hypothesis shrinks the conversation, and the report carries the
smallest failing one with a diff.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from hypothesis import HealthCheck, Phase, given, seed, settings

from rllm_renderers.jinja import runtime as jinja

from .attribution import attribution_mismatch, needle_conversation, only_unmarked
from .case_features import case_features, disagreement_table
from .conversations import Case, ConversationFeatures, conversation_cases, fixed_edge_cases, with_lead
from .oracle import OracleRejected, TemplateOracle
from .sandbox_probe import HOSTILE_CONTENTS, generated_code_of, unchecked_lookups
from .sampled_turns import mask_problem

DEFAULT_ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass
class Failure:
    case: Case
    reason: str
    diff: str = ""

    def report(self) -> str:
        lines = [f"mismatch: {self.reason}", "smallest failing conversation:", self.case.describe()]
        if self.diff:
            lines += ["diff (template -> renderer):", self.diff]
        return "\n".join(lines)


@dataclass
class VerificationReport:
    text_checked: int = 0
    text_matched: int = 0
    tokens_checked: int = 0
    tokens_matched: int = 0
    rejected_alike: int = 0  # cases the template and the renderer both refused
    resumes_checked: int = 0  # renders resumed from a checkpoint of a shorter conversation, compared
    resumed: int = 0  # of those, how many did resume (the rest re-ran the whole template)
    attribution_checked: int = 0  # needle versions of the cases whose caller-text marks were exact
    attribution_refused: int = 0  # needle versions the template refused (nothing to check)
    attribution_unmarked: int = 0  # needle versions with caller text the runtime left unmarked
    sandbox_probes: int = 0  # hostile conversations rendered alike (compiler.sandbox_probe)
    sandbox_code_checked: bool = False  # the generated code read: every sandboxed lookup is jinja's
    first_unmarked: str | None = None
    failure: Failure | None = None
    notes: list[str] = field(default_factory=list)
    # keep-going runs (against a reference that is not the template): every differing case
    disagreements: list[Failure] = field(default_factory=list)
    feature_counts: Counter = field(default_factory=Counter)  # features over all checked cases
    reference: VerificationReport | None = None  # the same class against a reference oracle (generate)
    verified_cases: list[Case] = field(default_factory=list, repr=False)  # the cases rendered exactly
    facts: Any = None  # the proof of the class's stops and parse (compiler.fact_proof.FactProof)
    bridge: Counter | None = None  # the bridge differential's counts (compiler.bridge_proof), both retentions
    bridge_examples: list[str] = field(default_factory=list)  # its first problems
    unproven: dict[str, str] = field(default_factory=dict)  # facts nothing proved (fact -> why)

    @property
    def ok(self) -> bool:
        return self.failure is None and self.problem() is None

    def problem(self) -> str | None:
        """What the proofs of the learned facts found wrong (None: nothing)."""
        problems = []
        if self.facts is not None and self.facts.failed:
            problems += [f"{fact} is learned but wrong: {why}" for fact, why in self.facts.failed.items()]
        if self.facts is not None and self.facts.marks_wrong:
            problems.append(f"render() marks sampled what no model samples: {self.facts.marks_wrong[0]}")
        if self.bridge is not None and self.bridge["wrong"]:
            problems.append(f"the bridge gave wrong tokens at {self.bridge['wrong']} points: {self.bridge_examples}")
        return "\n".join(problems) or None

    def summary(self) -> str:
        parts = [f"text: {self.text_matched}/{self.text_checked} match"]
        if self.tokens_checked:
            parts.append(f"tokens: {self.tokens_matched}/{self.tokens_checked} match")
        parts.append(f"({self.rejected_alike} rejected alike)")
        if self.resumes_checked:
            parts.append(f"resumed: {self.resumed} of {self.resumes_checked} renders, all exact")
        if self.attribution_checked or self.attribution_refused:
            parts.append(
                f"attribution: {self.attribution_checked} exact ({self.attribution_refused} needle versions refused"
                + (f", {self.attribution_unmarked} with caller text left unmarked: {self.first_unmarked}" if self.attribution_unmarked else "")
                + ")"
            )
        if self.sandbox_probes or self.sandbox_code_checked:
            code = "code checked" if self.sandbox_code_checked else "code NOT checked (not at hand)"
            parts.append(f"sandbox: {self.sandbox_probes} hostile conversations alike, {code}")
        if self.facts is not None:
            parts.append(self.facts.summary())
        if self.bridge is not None:
            bridge = self.bridge
            parts.append(
                f"bridge: {bridge['exact']}/{bridge['answers']} answers exact at {bridge['points']} points,"
                f" {bridge['none']} None ({bridge['miss']} where it could have bridged), {bridge['wrong']} wrong"
            )
        return ", ".join(parts)

    def unproven_warnings(self) -> list[str]:
        """One line per reason some facts were proven by nothing: ``unproven: FACT, FACT: why``."""
        by_reason: dict[str, list[str]] = {}
        for fact, why in self.unproven.items():
            by_reason.setdefault(why, []).append(fact)
        return [f"unproven: {', '.join(facts)}: {why}" for why, facts in by_reason.items()]

    def disagreement_report(self) -> str:
        """Where a keep-going run differed: a feature table, then the smallest differing case."""
        if not self.disagreements:
            return ""
        cases = [failure.case for failure in self.disagreements]
        lines = disagreement_table(cases, self.feature_counts, self.text_checked)
        smallest = min(self.disagreements, key=lambda failure: len(failure.case.describe()))
        lines += ["", smallest.report()]
        return "\n".join(lines)


def features_for(
    renderer_class: type,
    knob_candidates: dict[str, tuple],
    template_roles: tuple[str, ...] = (),
    special_tokens: dict[str, str] | None = None,
) -> ConversationFeatures:
    """What to draw for this template: its roles, knob values it accepts, its tool-call limits.

    ``template_roles`` are the roles the template compares with; a template that renders any
    role (``ROLES == ()``) is still exercised with the ones it names (Gemma-3 names no tool role).
    ``special_tokens`` are the values for the special tokens the class reads when it is built
    (without them a template that writes ``bos_token`` renders nothing to probe).
    """
    build = probe_builder(renderer_class, special_tokens)
    named = renderer_class.ROLES or tuple(template_roles)
    roles = tuple(role for role in DEFAULT_ROLES if role in named) or DEFAULT_ROLES
    roles = tuple(dict.fromkeys(roles + ("user", "assistant")))
    lead = renderer_class.LEAD_ROLES
    roles += tuple(role for role in lead if role not in roles)
    probe = with_lead(PROBE_CONVERSATION, lead)
    arguments_form = "string" if renderer_class.TOOL_ARGUMENTS == "string" else "dict"
    candidates = {knob: knob_candidates.get(knob, (True, False)) for knob in renderer_class.KNOBS}
    base = base_knob_values(build, candidates, probe)
    knobs = tuple(
        (knob, accepted_knob_values(build, knob, candidates[knob], base, probe)) for knob in renderer_class.KNOBS
    )
    return ConversationFeatures(
        roles=roles,
        knobs=knobs,
        base_knobs=tuple(base.items()),
        arguments_form=arguments_form,
        tool_calls="tool" in roles,
        max_tool_calls=max_tool_calls(build, probe),
        lead_roles=lead,
    )


PROBE_CONVERSATION = [{"role": "user", "content": "Hello."}]


def probe_builder(renderer_class: type, special_tokens: dict[str, str] | None) -> Callable[..., Any]:
    """Builds a tokenizer-less instance with these knobs (and the special-token values the class
    reads when it is built: without them a template that writes ``bos_token`` renders nothing)."""
    return lambda **knobs: renderer_class(None, special_tokens=dict(special_tokens or {}), **knobs)


def renders_plainly(build: Callable[..., Any], knobs: dict, probe: list[dict] = PROBE_CONVERSATION) -> bool:
    try:
        build(**knobs).render_text(probe, add_generation_prompt=True)
    except ValueError:
        return False
    return True


def base_knob_values(
    build: Callable[..., Any], candidates: dict[str, tuple], probe: list[dict] = PROBE_CONVERSATION
) -> dict:
    """Knob values every case starts from: none when the template renders a plain conversation
    with its knobs unset; else the first choice, taking the i-th candidate of every knob, that
    renders it (firefunction-v2 needs both `functions` and `datetime` to be strings)."""
    if not candidates or renders_plainly(build, {}, probe):
        return {}
    for position in range(max(len(values) for values in candidates.values())):
        choice = {knob: values[min(position, len(values) - 1)] for knob, values in candidates.items() if values}
        if renders_plainly(build, choice, probe):
            return choice
    return {}


def accepted_knob_values(
    build: Callable[..., Any], knob: str, candidates: tuple, base: dict | None = None, probe: list[dict] = PROBE_CONVERSATION
) -> tuple:
    """The candidate values with which the template renders a plain conversation (the other
    knobs at their ``base`` values)."""
    accepted = tuple(value for value in candidates if renders_plainly(build, {**(base or {}), knob: value}, probe))
    return accepted or candidates[:1]


def max_tool_calls(build: Callable[..., Any], probe: list[dict] = PROBE_CONVERSATION) -> int:
    """1 when the template refuses two tool calls in one turn (Llama 3.x), else 3."""
    call = {"id": "call00001", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
    for content in (None, ""):
        turn = {"role": "assistant", "content": content, "tool_calls": [call, dict(call, id="call00002")]}
        try:
            build().render_text(probe + [turn])
        except ValueError:
            continue
        return 3
    return 1


class DifferentialChecker:
    """Compares one renderer class with the oracle, case by case."""

    def __init__(
        self, renderer_class: type, oracle: TemplateOracle, tokenizer: Any = None, special_tokens: dict | None = None
    ) -> None:
        self.renderer_class = renderer_class
        self.oracle = oracle
        self.tokenizer = tokenizer
        self.special_tokens = dict(special_tokens or {})  # the values the oracle renders run-time special tokens with
        self.report = VerificationReport()
        self._renderers: dict[str, Any] = {}

    def renderer(self, knobs: dict) -> Any:
        key = json.dumps(knobs, sort_keys=True, default=repr)
        if key not in self._renderers:
            self._renderers[key] = self.renderer_class(self.tokenizer, special_tokens=self.special_tokens, **knobs)
        return self._renderers[key]

    def check(self, case: Case) -> Failure | None:
        """None when the renderer agrees with the template on ``case``."""
        renderer = self.renderer(case.knobs)
        try:
            messages = renderer.normalize_messages(case.messages)
        except ValueError as exc:
            return Failure(case, f"the renderer refused the input: {exc}")
        arguments = dict(tools=case.tools, add_generation_prompt=case.add_generation_prompt)
        self.report.text_checked += 1
        try:
            expected = self.oracle.render_text(messages, knobs=case.knobs, **arguments)
        except OracleRejected as rejection:
            return self._check_rejection(renderer, messages, arguments, case, rejection)
        try:
            failure = self._compare_rendered(renderer, messages, arguments, expected, case)
            if failure is None and getattr(self.oracle, "is_template", True):
                failure = self._check_attribution(renderer, case)
            if failure is None:
                self.report.verified_cases.append(case)
            return failure
        except OracleRejected:
            raise
        except Exception as exc:  # any failure of the renderer here (render_text, render...) is a mismatch to report
            return Failure(case, f"the template renders but the renderer raised {type(exc).__name__}: {exc}")

    def _check_attribution(self, renderer, case: Case) -> Failure | None:
        """The case with its messages' strings replaced by needles (:mod:`compiler.attribution`): the
        renderer's caller-text marks must be exactly where the template writes each message's needles."""
        needled, owners = needle_conversation(case.messages)
        needle_case = dataclasses.replace(case, messages=needled)
        arguments = dict(tools=case.tools, add_generation_prompt=case.add_generation_prompt)
        try:
            messages = renderer.normalize_messages(needled)
            expected = self.oracle.render_text(messages, knobs=case.knobs, **arguments)
        except (ValueError, OracleRejected):
            self.report.attribution_refused += 1
            return None
        output = renderer._render_output(messages, case.tools, case.add_generation_prompt)
        if output.text() != expected:
            return Failure(needle_case, "text differs (the needle version of the case)", text_diff(expected, output.text()))
        problem = attribution_mismatch(expected, output.caller_ranges(), owners)
        if problem is not None and only_unmarked(problem):
            self.report.attribution_unmarked += 1  # (stated in the summary: is_content is incomplete there)
            if self.report.first_unmarked is None:
                self.report.first_unmarked = problem
            return None
        if problem is not None:
            return Failure(needle_case, f"attribution: {problem}")
        self.report.attribution_checked += 1
        return None

    def _compare_rendered(self, renderer, messages, arguments, expected: str, case: Case) -> Failure | None:
        """The renderer's text (warm and resumed too), then its token ids, against the template's."""
        actual = renderer.render_text(messages, **arguments)
        if actual != expected:
            return Failure(case, "text differs", text_diff(expected, actual))
        # Again, with the caches this render filled (converted tools, memoized macros) now warm.
        again = renderer.render_text(messages, **arguments)
        if again != expected:
            return Failure(case, "text differs on the second render (warm caches)", text_diff(expected, again))
        failure = self._check_resumed(renderer, messages, arguments, expected, case)
        if failure is not None:
            return failure
        self.report.text_matched += 1
        if self.tokenizer is None:
            return None
        self.report.tokens_checked += 1
        expected_ids = self.oracle.render_ids(messages, knobs=case.knobs, **arguments)
        actual_ids = renderer.render_ids(messages, **arguments)
        if actual_ids != expected_ids:
            return Failure(case, "token ids differ", ids_diff(expected_ids, actual_ids, self.tokenizer))
        rendered = renderer.render(messages, **arguments)
        if rendered.token_ids != actual_ids or len(rendered.message_indices) != len(actual_ids):
            return Failure(case, "render() disagrees with render_ids()")
        problem = mask_problem(renderer, rendered)
        if problem is not None:
            return Failure(case, f"render() marks sampled what no model samples: {problem}")
        self.report.tokens_matched += 1
        return None

    def _check_resumed(self, renderer, messages, arguments, expected: str, case: Case) -> Failure | None:
        """Render the case again resumed from each shorter conversation's checkpoint (as the bridge
        does): the text, message marks and content ranges must be the full render's from the
        resumed point on."""
        converted, tools = renderer.template_inputs(messages, arguments["tools"])
        gp = arguments["add_generation_prompt"]
        full = None
        for length in range(1, len(converted)):
            try:
                shorter = renderer._run_template(jinja.TemplateList(converted[:length]), tools, True, record=True)
            except ValueError:
                continue  # the template refuses the shorter conversation: no prompt to go on from
            checkpoint = shorter.checkpoint
            if checkpoint is None:
                continue
            self.report.resumes_checked += 1
            resumed = renderer._run_template(converted, tools, gp, resume_from=checkpoint)
            origin = resumed.origin
            if resumed.resumed_at is None:
                continue
            self.report.resumed += 1
            if shorter.text()[:origin] != expected[:origin] or resumed.text() != expected[origin:]:
                detail = text_diff(expected[origin:], resumed.text())
                return Failure(case, f"text differs when resumed after message {length} (at character {origin})", detail)
            if full is None:
                full = renderer._run_template(converted, tools, gp)
            if shifted(resumed.message_spans(), origin) != spans_from(full.message_spans(), origin) or [
                (low + origin, high + origin) for low, high in resumed.content_ranges()
            ] != [(low, high) for low, high in full.content_ranges() if low >= origin]:
                return Failure(case, f"message marks differ when resumed after message {length}")
        return None

    def _check_rejection(self, renderer, messages, arguments, case, rejection: OracleRejected) -> Failure | None:
        try:
            renderer.render_text(messages, **arguments)
        except Exception as exc:
            if getattr(self.oracle, "is_template", True):
                mismatch = rejection_mismatch(rejection, exc)
            else:  # a Python reference words its refusals its own way: the renderer must refuse too
                mismatch = None if isinstance(exc, ValueError) else f"the reference refused; the renderer raised {exc!r}"
            if mismatch is not None:
                return Failure(case, f"both refuse, but differently: {mismatch}")
            self.report.text_matched += 1
            self.report.rejected_alike += 1
            return None
        return Failure(case, f"the template raised {rejection!r} but the renderer rendered")


def shifted(spans: list[tuple[int, int]], origin: int) -> list[tuple[int, int]]:
    return [(offset + origin, index) for offset, index in spans]


def spans_from(spans: list[tuple[int, int]], origin: int) -> list[tuple[int, int]]:
    """``spans`` (``(start, message index)``, each reaching to the next) seen from ``origin`` on."""
    inside = [(origin, index) for offset, index in spans if offset <= origin][-1:]
    return inside + [(offset, index) for offset, index in spans if offset > origin]


#: Jinja's own refusals; the runtime raises them as a plain ``TemplateError``.
TEMPLATE_REFUSALS = ("TemplateError", "TemplateRuntimeError", "UndefinedError", "SecurityError")
#: Refusals whose message is part of the contract (``raise_exception``, apply_chat_template's own checks).
SAME_MESSAGE = ("TemplateError", "ValueError")


def rejection_mismatch(rejection: OracleRejected, exc: BaseException) -> str | None:
    """None when the renderer refused the way Jinja did, else what differs.

    ``raise_exception`` (TemplateError, same message), an undefined value used (UndefinedError)
    and the sandbox's SecurityError must come out as the runtime's ``TemplateError``; a Jinja
    ``TypeError`` as a ``TypeError`` (the runtime's ``TemplateTypeError``); anything else as an
    exception of the same name (``ValueError`` for an empty conversation: same message too). A
    ``KeyError`` or ``AttributeError`` from generated code where Jinja raised ``UndefinedError``
    is a translation bug, never "rejected alike".
    """
    expected = rejection.exc_type_name
    got = f"{type(exc).__name__}: {exc}"
    if expected in TEMPLATE_REFUSALS:
        kind_ok = isinstance(exc, jinja.TemplateError) and not isinstance(exc, TypeError)
    else:
        kind_ok = expected in {cls.__name__ for cls in type(exc).__mro__}
    if not kind_ok:
        return f"the template raised {expected} ({rejection.message!r}); the renderer raised {got}"
    if expected in SAME_MESSAGE and str(exc) != rejection.message:
        return f"messages differ: {rejection.message!r} vs {str(exc)!r}"
    return None


def verify(
    renderer_class: type,
    oracle: TemplateOracle,
    *,
    tokenizer: Any = None,
    cases: int = 200,
    seed_value: int = 0,
    knob_candidates: dict[str, tuple] | None = None,
    template_roles: tuple[str, ...] = (),
    keep_going: bool = False,
    special_tokens: dict[str, str] | None = None,
) -> VerificationReport:
    """Run fixed edge cases, then ``cases`` generated ones; stop at the first mismatch (shrunk).

    With ``keep_going`` (for a reference that is not the template) every case is checked and
    each disagreement recorded with its conversation features (``report.disagreements``).
    ``special_tokens`` are the values the oracle gives special-token variables that the class
    reads at run time (placeholders when there is no tokenizer); the class is built with them.
    """
    checker = DifferentialChecker(renderer_class, oracle, tokenizer, special_tokens)
    features = features_for(renderer_class, knob_candidates or {}, template_roles, special_tokens)
    report = checker.report

    def check_and_record(case: Case) -> Failure | None:
        failure = checker.check(case)
        if keep_going:
            report.feature_counts.update(case_features(case))
            if failure is not None:
                report.disagreements.append(failure)
                report.failure = report.failure or failure
                return None
        return failure

    for case in fixed_edge_cases(features):
        failure = check_and_record(case)
        if failure is not None:
            report.failure = failure
            return report
    if not keep_going:  # (the sandbox is the template's: probed against the template itself)
        report.failure = sandbox_probe(checker, renderer_class)
        if report.failure is not None:
            return report
    if cases <= 0:
        return report

    failures: list[Failure] = []

    @settings(
        max_examples=cases,
        database=None,
        deadline=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        report_multiple_bugs=False,
        print_blob=False,
    )
    @seed(seed_value)
    @given(conversation_cases(features))
    def property_holds(case: Case) -> None:
        failure = check_and_record(case)
        if failure is not None:
            failures.append(failure)
            raise AssertionError(failure.reason)

    try:
        property_holds()
    except AssertionError:
        # hypothesis replays the shrunk example last, so the last failure is the smallest.
        checker.report.failure = failures[-1]
    report = checker.report
    if report.failure is None and report.text_checked and report.rejected_alike == report.text_checked:
        # every conversation was refused by both sides: agreement on refusals proves no rendering
        reason = f"the template rendered none of the {report.text_checked} conversations tried, so nothing was verified"
        report.failure = Failure(Case(list(PROBE_CONVERSATION), add_generation_prompt=True), reason)
    return report


def sandbox_probe(checker: DifferentialChecker, renderer_class: type) -> Failure | None:
    """The sandbox probe (:mod:`compiler.sandbox_probe`): the generated code reads every name the
    sandbox checks through the runtime, and hostile contents render as under transformers."""
    report = checker.report
    code = generated_code_of(renderer_class)
    if code is not None:
        unchecked = unchecked_lookups(code)
        if unchecked:
            reason = f"the generated code reads {len(unchecked)} name(s) the sandbox checks as plain Python: {unchecked[:3]}"
            return Failure(Case(list(PROBE_CONVERSATION), add_generation_prompt=True), reason)
        report.sandbox_code_checked = True
    verified = len(report.verified_cases)
    for content in HOSTILE_CONTENTS:
        case = Case([{"role": "user", "content": content}], add_generation_prompt=True)
        failure = checker.check(case)
        if failure is not None:
            return dataclasses.replace(failure, reason=f"sandbox probe: {failure.reason}")
        report.sandbox_probes += 1
    del report.verified_cases[verified:]  # (probes only: the proofs that follow use the drawn cases)
    return None


def text_diff(expected: str, actual: str) -> str:
    lines = difflib.unified_diff(
        expected.splitlines(keepends=True), actual.splitlines(keepends=True), "template", "renderer", lineterm=""
    )
    return "\n".join(repr(line) if not line.startswith(("---", "+++", "@@")) else line for line in lines)


def ids_diff(expected: list[int], actual: list[int], tokenizer: Any) -> str:
    first = next((i for i, (a, b) in enumerate(zip(expected, actual)) if a != b), min(len(expected), len(actual)))
    window = slice(max(0, first - 3), first + 5)
    return (
        f"first difference at token {first}\n"
        f"  template: {expected[window]} {tokenizer.convert_ids_to_tokens(expected[window])}\n"
        f"  renderer: {actual[window]} {tokenizer.convert_ids_to_tokens(actual[window])}"
    )
