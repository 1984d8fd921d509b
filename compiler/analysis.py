"""What the compiler learns from a template before emitting code.

* its AST, parsed in transformers' own chat-template environment (same lexer
  settings, same ``{% generation %}`` extension), so whitespace control is
  already applied in the literal text nodes;
* its free variables, split into template inputs, special-token strings
  (``bos_token``...) and knobs (``enable_thinking``...);
* the roles it distinguishes;
* the form of tool-call arguments it consumes (dict or JSON string), learned by
  probe renders through the oracle.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from typing import Callable, Iterable

from jinja2 import TemplateSyntaxError, meta, nodes

from .conversations import with_lead
from .errors import CompileError
from .nesting import too_deep_message
from .translator.expressions import GLOBAL_FUNCTIONS, TemplateNames
from .translator.lower import TEMPLATE_INPUTS, Lowering


@dataclass(frozen=True)
class TemplateFacts:
    name: str  # file name, for messages
    source: str
    sha256: str
    ast: nodes.Template
    knobs: tuple[str, ...]
    special_tokens: dict[str, str]
    roles: tuple[str, ...]
    tool_arguments: str  # "dict" | "string" | "either"
    # special-token variables the template reads whose value is not known at compile time: the class
    # reads them from its tokenizer (or its ``special_tokens=`` argument) when it is built
    runtime_special_tokens: tuple[str, ...] = ()
    # names the template reads that apply_chat_template never passes to it (its own parameters,
    # e.g. continue_final_message): always undefined
    undefined_names: tuple[str, ...] = ()
    # roles of the messages the template requires before the first user message (see required_lead)
    lead_roles: tuple[str, ...] = ()
    # names Jinja binds itself that the template reads (``self``: see JINJA_OWN_NAMES)
    jinja_names: tuple[str, ...] = ()


def template_sha256(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def parse_template(source: str, name: str) -> nodes.Template:
    """Parse with transformers' chat-template environment."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    try:
        environment = _compile_jinja_template(source).environment
        return environment.parse(source)
    except TemplateSyntaxError as exc:
        raise CompileError(f"the template does not parse: {exc.message}", template=name, line=exc.lineno) from None
    except (RecursionError, SyntaxError, MemoryError) as exc:  # (jinja2's parser, or Python on its code)
        message, line = too_deep_message(source, exc)
        raise CompileError(message, template=name, line=line) from None


#: What free_variables renames every name it is not asked about to (never a template's own name).
OTHER_NAMES = "_rllm_other_name_"


def free_variables(ast: nodes.Template, among: Iterable[str]) -> set[str]:
    """The names of ``among`` the template reads free: jinja2's own answer
    (``meta.find_undeclared_variables``), template inputs and global functions aside.

    Jinja's code generator tracks each name on its own, but copies its table of every name a scope
    binds at every ``if``: on a long chain of branches it grows with the square of the template.
    It is run on a copy where every name not asked about is one name (``OTHER_NAMES``), so the table
    stays small; the names asked about are where they were, read and bound as in the template, so
    the answer for them is the same (tests/test_compile_cost.py checks it on every corpus template).
    A copy also because its optimizer folds constants in place (``"x" | safe`` becomes a Markup
    constant): the translator needs the template as written. Answers are kept on the tree (the
    names a compile asks about, SPECIAL_TOKEN_NAMES and the unreachable ones, are asked together:
    one run of the code generator per compile).
    """
    wanted = frozenset(among)
    asked = (wanted | set(SPECIAL_TOKEN_NAMES) | unreachable_names()) - set(TEMPLATE_INPUTS) - set(GLOBAL_FUNCTIONS)
    asked -= {OTHER_NAMES}
    answers = ast.__dict__.setdefault("_rllm_free_variables", {})
    if asked not in answers:
        environment = getattr(ast, "environment", None)
        copied = copy.deepcopy(ast, {id(environment): environment} if environment is not None else None)
        for node in copied.find_all((nodes.Name, nodes.NSRef)):
            if node.name not in asked:
                node.name = OTHER_NAMES
        answers[asked] = frozenset(meta.find_undeclared_variables(copied)) & asked
    return set(answers[asked] & wanted)


def compared_roles(ast: nodes.Template) -> tuple[str, ...]:
    """String constants the template compares a ``role`` field with (``message.role == 'user'``)."""
    roles: set[str] = set()

    def is_role_access(node: nodes.Node) -> bool:
        if isinstance(node, nodes.Filter) and node.node is not None:
            return is_role_access(node.node)  # `message.role | upper == 'FUNCTIONS'`
        if isinstance(node, nodes.Getattr):
            return node.attr == "role"
        if isinstance(node, nodes.Getitem):
            return isinstance(node.arg, nodes.Const) and node.arg.value == "role"
        return False

    for compare in ast.find_all(nodes.Compare):
        operands = [compare.expr] + [operand.expr for operand in compare.ops]
        if any(is_role_access(operand) for operand in operands):
            for operand in operands:
                if isinstance(operand, nodes.Const) and isinstance(operand.value, str):
                    roles.add(operand.value)
                if isinstance(operand, (nodes.List, nodes.Tuple)):
                    roles |= {item.value for item in operand.items if isinstance(item, nodes.Const)}
    for test in ast.find_all(nodes.Test):
        if test.name in ("equalto", "eq", "==") and is_role_access(test.node):
            roles |= {arg.value for arg in test.args if isinstance(arg, nodes.Const)}
    return tuple(sorted(roles))


UNKNOWN_ROLE_PROBE = [
    {"role": "user", "content": "Hello."},
    {"role": "zzq7role", "content": "zzq7content"},
]


#: Uniform knob values tried when a probe conversation does not render with the knobs unset
#: (firefunction-v2 concatenates its ``functions`` and ``datetime`` knobs unguarded).
PROBE_KNOB_VALUES = ("custom value", True, False)


def render_probe(oracle, messages: list[dict], knobs: tuple[str, ...] = (), lead: tuple[str, ...] = ()) -> str:
    """The oracle's text for a probe conversation, in the first setting it renders in: no tools,
    then an empty tool list (Hermes-3 and Phi-4 iterate ``tools`` unguarded); knobs unset, then all
    set to one of PROBE_KNOB_VALUES. The ``lead`` messages the template requires (see
    :func:`required_lead`) go first. Raises the first OracleRejected when none renders."""
    from .oracle import OracleRejected

    messages = with_lead(messages, lead)
    knob_settings = [{}] + [{knob: value for knob in knobs} for value in PROBE_KNOB_VALUES if knobs]
    first = None
    for knob_values in knob_settings:
        for tools in (None, []):
            try:
                return oracle.render_text(messages, tools=tools, knobs=knob_values)
            except OracleRejected as exc:
                first = first or exc
    raise first


def accepted_roles(
    oracle, compared: tuple[str, ...], knobs: tuple[str, ...] = (), lead: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """The roles a renderer accepts: any (``()``) when the template renders an unknown role's
    message, else the roles the template compares with, the standard roles whose messages it
    renders without naming them as constants (``message.role == user_token`` after
    ``{% set user_token = "user" %}``), and always the CONVERSATION_ROLES. A template that silently
    drops messages of other roles (Qwen3 renders nothing for a "developer" message) gets a renderer
    that refuses them with an error naming the role, since a dropped message is never what a caller
    meant. A role the template compares upper-cased (``role | upper == 'FUNCTIONS'``) is accepted
    lower-cased too where its message renders."""
    from .oracle import OracleRejected

    try:
        text = render_probe(oracle, UNKNOWN_ROLE_PROBE, knobs, lead)
    except OracleRejected:
        text = ""
    if "zzq7content" in text:
        return ()
    candidates = [role for role in STANDARD_ROLES if role not in compared]
    candidates += sorted({role.lower() for role in compared} - set(compared) - set(STANDARD_ROLES))
    rendered = {role for role in candidates if renders_role(oracle, role, knobs, lead)}
    return tuple(sorted(set(compared) | rendered | set(CONVERSATION_ROLES)))


def required_lead(renders: Callable[[list[dict]], bool], roles: tuple[str, ...]) -> tuple[str, ...]:
    """The roles of the messages a template requires before its first user message: ``()`` when
    a lone user message renders, else the first of ``roles`` (lower-case names first) whose
    message, alone or after a system message, makes one render (firefunction-v1 refuses every
    conversation without a ``functions`` message). ``renders(messages)`` says whether it renders."""
    if renders([_PROBE_USER]):
        return ()
    others = sorted({*roles, *(role.lower() for role in roles)} - set(CONVERSATION_ROLES), key=lambda r: (r != r.lower(), r))
    for role in others:
        for lead in ((role,), ("system", role)):
            if renders(with_lead([_PROBE_USER], lead)):
                return lead
    return ()




STANDARD_ROLES = ("system", "user", "assistant", "tool")
#: The roles every conversation is made of, never refused: a renderer is for assistant turns after
#: user turns. A template may still write nothing of one (vLLM's Granite template compares only
#: 'user' and drops assistant messages, as others drop past reasoning); the renderer then writes
#: nothing of it too, and one that refuses such a message raises the template's own error.
CONVERSATION_ROLES = ("user", "assistant")
_PROBE_USER = {"role": "user", "content": "Hello."}
_PROBE_CALL = {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}


def renders_probe(oracle, messages: list[dict], knobs: tuple[str, ...] = ()) -> bool:
    """Whether :func:`render_probe` renders ``messages`` in some setting."""
    from .oracle import OracleRejected

    try:
        render_probe(oracle, messages, knobs)
    except OracleRejected:
        return False
    return True


def renders_role(oracle, role: str, knobs: tuple[str, ...] = (), lead: tuple[str, ...] = ()) -> bool:
    """Whether some short conversation ending in a ``role`` message shows that message's content."""
    from .oracle import OracleRejected

    message = {"role": role, "content": "zzq7content"}
    contexts = (
        [],
        [_PROBE_USER],
        [_PROBE_USER, {"role": "assistant", "content": "Hi."}],
        [_PROBE_USER, {"role": "assistant", "content": "", "tool_calls": [_PROBE_CALL]}],
    )
    for context in contexts:
        try:
            if "zzq7content" in render_probe(oracle, [*context, message], knobs, lead):
                return True
        except OracleRejected:
            continue
    return False


def split_free_variables(
    ast: nodes.Template, special_token_values: dict[str, str], name: str
) -> tuple[tuple[str, ...], dict[str, str], tuple[str, ...]]:
    """Free variables -> (knobs, special tokens with known values, special tokens read at run time).

    (Names that can never reach the template, see ``undefined_names``, are none of these.)

    A free variable is a name the template reads that no ``set`` or loop binds at
    that point under Jinja's scoping rules; the translator resolves names exactly,
    so a first translation pass tells which ones stay free. Special-token names
    (``bos_token``...) take the tokenizer's values when there is one; without a value
    they are read when the renderer is built (from its tokenizer or ``special_tokens=``),
    never refused. Every other free name is a knob.
    """
    free = free_variables(ast, special_token_values)
    special = {variable: value for variable, value in special_token_values.items() if variable in free}
    first_pass = Lowering(name, TemplateNames(knobs={}, special_tokens={v: v.upper() for v in special}))
    first_pass.lower_template(ast)
    knobs, runtime = [], []
    for variable in sorted(first_pass.unresolved - set(unreachable_names()) - set(JINJA_OWN_NAMES)):
        (runtime if variable in SPECIAL_TOKEN_NAMES else knobs).append(variable)
    return tuple(knobs), special, tuple(runtime)


#: Names Jinja itself binds in every template, never a knob: ``self`` is the template (its blocks).
#: Each maps to the runtime value generated code gives it.
JINJA_OWN_NAMES = {"self": "jinja.TemplateReference()"}


def jinja_own_names(ast: nodes.Template, name: str) -> tuple[str, ...]:
    """The names of :data:`JINJA_OWN_NAMES` the template reads free (jinja2's own analysis does
    not report them: the translator's first pass does)."""
    first_pass = Lowering(name, TemplateNames(knobs={}, special_tokens={}))
    first_pass.lower_template(ast)
    return tuple(sorted(set(JINJA_OWN_NAMES) & first_pass.unresolved))


def unreachable_names() -> frozenset[str]:
    """Names apply_chat_template keeps for itself: a template reading one always sees it undefined."""
    from .oracle import RESERVED_KNOBS

    return frozenset(RESERVED_KNOBS)


def undefined_names(ast: nodes.Template) -> tuple[str, ...]:
    """The unreachable names a template reads (Nemotron reads ``continue_final_message``)."""
    return tuple(sorted(free_variables(ast, unreachable_names())))


#: The special-token attributes of a transformers tokenizer that ``apply_chat_template`` passes to a
#: template as variables (``special_tokens_map``; its list-valued ``additional_special_tokens`` aside).
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def special_tokens_read(ast: nodes.Template) -> tuple[str, ...]:
    """The special-token variables a template may read (free names among SPECIAL_TOKEN_NAMES)."""
    free = free_variables(ast, SPECIAL_TOKEN_NAMES)
    return tuple(name for name in SPECIAL_TOKEN_NAMES if name in free)


PROBE_ARGUMENTS = {"city": "Paris", "days": 3}


def probe_tool_arguments(oracle, roles: tuple[str, ...], knobs: tuple[str, ...] = (), lead: tuple[str, ...] = ()) -> str:
    """Which form of tool-call arguments the template renders faithfully.

    Renders one tool call with dict arguments and one with the same arguments as
    a JSON string. A template that double-encodes the string (``tojson`` on it)
    or fails on it consumes dicts; one that fails on the dict (string
    concatenation) consumes strings; one that renders both sensibly takes either.
    """
    from .oracle import OracleRejected

    as_string = json.dumps(PROBE_ARGUMENTS)

    def render(arguments) -> str | None:
        call = {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
        # Some templates render tool calls only without content (DeepSeek-V3), others need it.
        for content in (None, ""):
            messages = [
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": content, "tool_calls": [call]},
            ]
            try:
                text = render_probe(oracle, messages, knobs, lead)
            except OracleRejected:
                continue
            if "get_weather" in text:
                return text
        return None

    with_dict, with_string = render(dict(PROBE_ARGUMENTS)), render(as_string)
    double_encoded = json.dumps(as_string)
    string_ok = with_string is not None and double_encoded not in with_string and "city" in with_string
    dict_ok = with_dict is not None and "Paris" in with_dict and "{'city'" not in with_dict
    if dict_ok and string_ok:
        return "either"
    if dict_ok:
        return "dict"
    if string_ok:
        return "string"
    return "either"


KNOB_GUESSES = (True, False, "custom value", [], ["code_interpreter", "python"])


def knob_candidates(ast: nodes.Template, knobs: tuple[str, ...]) -> dict[str, tuple]:
    """Values worth trying for each knob: constants the template compares it with, then generic
    guesses of each type (the verifier drops the ones the template refuses)."""
    candidates: dict[str, list] = {knob: [] for knob in knobs}
    for compare in ast.find_all(nodes.Compare):
        operands = [compare.expr] + [operand.expr for operand in compare.ops]
        names = [operand.name for operand in operands if isinstance(operand, nodes.Name) and operand.name in candidates]
        for name in names:
            for operand in operands:
                # `knob == 'x'`, and `knob in ['x', 'y']`
                items = operand.items if isinstance(operand, (nodes.List, nodes.Tuple)) else [operand]
                for item in items:
                    if isinstance(item, nodes.Const) and item.value not in candidates[name]:
                        candidates[name].append(item.value)
    for values in candidates.values():
        values.extend(guess for guess in KNOB_GUESSES if guess not in values)
    return {knob: tuple(values) for knob, values in candidates.items()}


def analyse(
    source: str, name: str, *, special_tokens: dict[str, str], oracle, ast: nodes.Template | None = None
) -> TemplateFacts:
    """Everything the emitter needs to know about one template.

    ``special_tokens`` are the values known at compile time (the tokenizer's, ``--special-token``);
    the oracle may carry placeholder values for the others (see ``pipeline.prepare_source``).
    ``ast``: the template parsed already (:func:`parse_template`; its free variables are kept on it).
    """
    ast = parse_template(source, name) if ast is None else ast
    knobs, special, runtime = split_free_variables(ast, special_tokens, name)
    compared = compared_roles(ast)
    lead = required_lead(lambda messages: renders_probe(oracle, messages, knobs), compared)
    roles = accepted_roles(oracle, compared, knobs, lead)
    return TemplateFacts(
        name=name,
        source=source,
        sha256=template_sha256(source),
        ast=ast,
        knobs=knobs,
        special_tokens=special,
        roles=roles,
        tool_arguments=probe_tool_arguments(oracle, roles, knobs, lead),
        runtime_special_tokens=runtime,
        undefined_names=undefined_names(ast),
        lead_roles=lead,
        jinja_names=jinja_own_names(ast, name) if any(own in source for own in JINJA_OWN_NAMES) else (),
    )
