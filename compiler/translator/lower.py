"""Lower a parsed chat template (jinja2 AST) to the translator's IR (:mod:`.ir`).

A visitor with one method per node type, in two sections: statements (which add IR
statements to the current block) and expressions (which return a :class:`PyExpr`, a
Python ``ast`` expression with what is known about its value). Every node type the
visitor does not know raises :class:`CompileError` naming the construct and its
template line: nothing is skipped silently.

The result reads like the template: ``{{ x }}`` becomes ``out.append(x)``,
``{% for message in messages %}`` a ``for`` loop, ``message.content`` becomes
``message["content"]``. Where Jinja and Python differ the code calls a helper from
:mod:`rllm_renderers.template_runtime` (imported as ``jinja``): the filters and tests
of its ``FILTERS`` / ``TESTS`` registry, ``jinja.defined(x)``, ...

Jinja scoping is kept exact: a loop body is a fresh scope every iteration (a ``set``
inside it is invisible after the loop, and a name read before its ``set`` in an
iteration sees the outer value), so names that would leak are renamed.
"""

from __future__ import annotations

import ast
import builtins
import keyword
from collections import Counter
from dataclasses import dataclass, field

from jinja2 import nodes
from jinja2.defaults import DEFAULT_FILTERS, DEFAULT_TESTS

from rllm_renderers import template_runtime

from ..errors import CompileError
from . import ir
from .ir import Piece, attribute, call, const, jinja, name, store, subscript
from .scopes import (
    Scope,
    assigned_names,
    branch_topics,
    contains_output,
    count_reads,
    describe,
    dispatched_roles,
    first_use,
    is_namespace_call,
    is_split_end,
    loop_attributes_used,
    loop_control_of_this_loop,
    macro_called_before_set,
    macro_reads,
    may_read_before_assignment,
    target_names,
)

BINARY_OPERATORS = {
    nodes.Add: ast.Add,
    nodes.Sub: ast.Sub,
    nodes.Mul: ast.Mult,
    nodes.Div: ast.Div,
    nodes.FloorDiv: ast.FloorDiv,
    nodes.Mod: ast.Mod,
    nodes.Pow: ast.Pow,
}

COMPARE_OPERATORS = {
    "eq": ast.Eq,
    "ne": ast.NotEq,
    "gt": ast.Gt,
    "gteq": ast.GtE,
    "lt": ast.Lt,
    "lteq": ast.LtE,
    "in": ast.In,
    "notin": ast.NotIn,
}

INVERTED_COMPARE = {"eq": "ne", "ne": "eq", "in": "notin", "notin": "in"}

# The filters and tests transformers' chat-template environment has (jinja2's plus ``tojson``).
JINJA_FILTERS = frozenset(DEFAULT_FILTERS) | {"tojson"}
JINJA_TESTS = frozenset(DEFAULT_TESTS)

# Template inputs that apply_chat_template passes besides knobs and special tokens.
TEMPLATE_INPUTS = ("messages", "tools", "documents", "add_generation_prompt")

# Globals of transformers' chat-template environment, and their Python spelling.
GLOBAL_FUNCTIONS = {
    "raise_exception": "jinja.raise_exception",
    "strftime_now": "jinja.strftime_now",
    "namespace": "jinja.Namespace",
    "range": "range",
    "dict": "dict",
}

# Filters whose result is always a str (so ``~`` and output need no ``str()``).
STRING_FILTERS = {
    "tojson",
    "trim",
    "string",
    "upper",
    "lower",
    "capitalize",
    "title",
    "join",
    "replace",
    "safe",
    "center",
    "indent",
    "format",
    "truncate",
    "wordwrap",
    "striptags",
    "urlize",
    "xmlattr",
    "filesizeformat",
    "urlencode",
    "escape",
    "e",
    "forceescape",
}

# Filters whose result is never a Markup, whatever their input.
PLAIN_RESULT_FILTERS = {"tojson", "join", "replace", "title", "length", "count", "int", "float", "abs", "items"}

# Filters that keep a Markup a Markup (Jinja's ``soft_str``).
SOFT_STR_FILTERS = {"trim", "upper", "lower", "capitalize"}

DICT_METHODS = {attr for attr in dir(dict) if not attr.startswith("_")}

RESERVED_NAMES = set(keyword.kwlist) | set(dir(builtins)) | {"jinja", "out", "self", "json", "parts"}

# Message fields whose text is the message's own body (attributed as content).
CONTENT_FIELDS = {"content", "reasoning_content", "thinking"}
# Fields of a tool call the model writes (attributed as content of the assistant message).
TOOL_CALL_FIELDS = {"name", "arguments", "function"}
# Filters and methods that keep a content value content (trimmed, converted, split).
CONTENT_PRESERVING_FILTERS = {"trim", "string", "safe", "d", "default", "tojson", "replace"}
CONTENT_PRESERVING_METHODS = {"strip", "lstrip", "rstrip", "split", "rsplit", "replace"}


@dataclass
class PyExpr:
    """A Python expression, and whether it is known to be a str (or may be a Markup)."""

    node: ast.expr
    is_str: bool = False
    markup: bool = False  # may be a markupsafe.Markup (from `| safe`), whose `+` escapes

    def as_str(self) -> ast.expr:
        """The Jinja string conversion of this value (``str(x)`` unless it is a plain str already)."""
        return self.node if self.is_str and not self.markup else call("str", self.node)


@dataclass
class LoopContext:
    """What the body of one ``{% for %}`` needs to translate ``loop.*``."""

    index: str  # Python name of the 0-based index, when loop attributes are used
    items: ast.expr  # the sequence iterated (for len / neighbours)
    uses: set[str]
    changed: str = ""  # Python name remembering loop.changed()'s last arguments


@dataclass
class TemplateNames:
    """How the template's free variables map to Python."""

    knobs: dict[str, str]  # knob name -> Python local name
    special_tokens: dict[str, str]  # special-token variable (bos_token) -> constant name (BOS_TOKEN)


@dataclass
class Resolved:
    """What a template name means here: a Python expression and where it comes from."""

    node: ast.expr
    kind: str  # "local", "global", "literal" or "unknown" (a free name: Undefined)


class Lowering:
    """Builds the IR of a template body; see the module docstring."""

    def __init__(self, template_name: str, names: TemplateNames) -> None:
        self.template_name = template_name
        self.names = names
        self.body: list[ir.Stmt] = []  # the block statements are added to
        self.scope = Scope()
        self.loops: list[LoopContext] = []
        self.namespaces: set[str] = set()  # Python names bound to a namespace()
        self.macros: dict[str, str] = {}
        self.used_names: set[str] = set(RESERVED_NAMES) | set(TEMPLATE_INPUTS)
        self.used_names |= set(names.knobs.values()) | set(names.special_tokens.values())
        self.output = "out"  # the list-like object `{{ }}` appends to
        self.function_reads: Counter[str] = Counter()
        self.message_sources = {"messages"}  # names holding (slices of) the messages list
        self.unresolved: set[str] = set()  # free names that are not inputs: the template's knobs
        self.marking_messages = False  # inside the message loop (only the outermost one marks)
        self.methods: list[ir.Method] = []  # role methods split out of the message loop
        self.method_names: set[str] = set()
        self.markup_possible = False  # the template uses `| safe`, the one source of Markup values
        self.markup_names: set[str] = set()  # template names that may hold a Markup
        self.markup_attributes: set[str] = set()  # namespace attributes that may hold one
        self.computed_names: set[str] = set()  # template names some `set` binds to a computed value
        self.computed_attributes: set[str] = set()  # namespace attributes some `set` binds to one
        self.namespace_names: set[str] = set()  # template names bound to a namespace()
        self.content_names: set[str] = set()  # template names some `set` binds to message content
        self.tool_call_names: set[str] = set()  # template names bound to a tool call
        self.known_strings: set[str] = set()  # template names an enclosing `is string` test checked
        self.noted_renames: set[str] = set()  # renamed locals whose reason a comment already gave
        self.hoisted: dict[str, str] = {}  # top-level macro -> the method it becomes
        self.macro_names: set[str] = set()  # every macro the template defines

    # --- building -----------------------------------------------------------------

    def error(self, node: nodes.Node, what: str) -> CompileError:
        return CompileError(what, template=self.template_name, line=getattr(node, "lineno", None))

    def add(self, statement: ir.Stmt) -> None:
        self.body.append(statement)

    def comment(self, node: nodes.Node, text: str) -> None:
        self.add(ir.Comment(node.lineno, text))

    def lower_block(self, body: list[nodes.Node]) -> list[ir.Stmt]:
        """``body``'s statements as a new IR block (the current block is left as it was)."""
        saved, self.body = self.body, []
        try:
            self.block(body)
            return self.body
        finally:
            self.body = saved

    def fresh_name(self, wanted: str) -> str:
        """A Python name for ``wanted`` that collides with nothing visible here.

        Names of scopes that have ended may be reused: Jinja has forgotten them too.
        """
        base = wanted if wanted.isidentifier() else "value"
        if base in RESERVED_NAMES:
            base += "_"
        taken = self.used_names | self.scope.visible_python_names()
        candidate, counter = base, 1
        while candidate in taken:
            counter += 1
            candidate = f"{base}_{counter}"
        self.scope.helpers.add(candidate)
        return candidate

    # --- entry point --------------------------------------------------------------

    def lower_template(self, template: nodes.Template) -> ir.Program:
        self.function_reads = count_reads(template.body)
        for input_name in TEMPLATE_INPUTS:
            self.scope.names[input_name] = input_name
        for knob, local in self.names.knobs.items():
            self.scope.names[knob] = local
        for variable, constant in self.names.special_tokens.items():
            self.scope.names[variable] = constant
        self.find_value_kinds(template)
        self.bind_template_names(template)
        self.block(template.body)
        return ir.Program(self.body, self.methods)

    def find_value_kinds(self, template: nodes.Template) -> None:
        """Which names hold namespaces, computed values (not wrapped template data), Markups or content."""
        assignments = list(template.find_all((nodes.Assign, nodes.AssignBlock)))
        self.namespace_names = {
            assign.target.name
            for assign in assignments
            if isinstance(assign, nodes.Assign)
            and isinstance(assign.target, nodes.Name)
            and is_namespace_call(assign.node)
        }
        while True:  # to a fixed point: `{% set a = [1] %}{% set b = a %}` makes both computed
            known = (set(self.computed_names), set(self.computed_attributes))
            for assign in assignments:
                if isinstance(assign, nodes.AssignBlock) or self.is_computed(assign.node):
                    if isinstance(assign.target, nodes.NSRef):
                        self.computed_attributes.add(assign.target.attr)
                    self.computed_names |= target_names(assign.target)
            if known == (self.computed_names, self.computed_attributes):
                break
        self.markup_possible = any(node.name == "safe" for node in template.find_all(nodes.Filter))
        if self.markup_possible:
            self.find_markup_names(template)
        self.find_content_names(template)

    def find_content_names(self, template: nodes.Template) -> None:
        """Names a ``set`` binds to message content, and loop variables over tool calls."""
        self.macro_names = {macro.name for macro in template.find_all(nodes.Macro)}
        while True:
            known = (set(self.content_names), set(self.tool_call_names))
            for assign in template.find_all(nodes.Assign):
                if isinstance(assign.target, nodes.Name):
                    if self.is_content_node(assign.node):
                        self.content_names.add(assign.target.name)
                    if self.is_tool_call_node(assign.node):
                        self.tool_call_names.add(assign.target.name)
            for loop in template.find_all(nodes.For):
                iterated = loop.iter
                if isinstance(iterated, nodes.Getattr) and iterated.attr == "tool_calls" or (
                    isinstance(iterated, nodes.Getitem)
                    and isinstance(iterated.arg, nodes.Const)
                    and iterated.arg.value == "tool_calls"
                ):
                    self.tool_call_names |= target_names(loop.target)
            if known == (self.content_names, self.tool_call_names):
                return

    def is_tool_call_node(self, node: nodes.Node) -> bool:
        if isinstance(node, nodes.Name):
            return node.name in self.tool_call_names
        if isinstance(node, (nodes.Getattr, nodes.Getitem)):
            key = node.attr if isinstance(node, nodes.Getattr) else getattr(node.arg, "value", None)
            return key == "function" and self.is_tool_call_node(node.node)
        return False

    def is_content_node(self, node: nodes.Node) -> bool:
        """Whether ``node`` writes a message's own text: its content or reasoning (trimmed, split,
        converted), or a field of one of its tool calls."""
        if isinstance(node, nodes.Name):
            return node.name in self.content_names
        if isinstance(node, (nodes.Getattr, nodes.Getitem)):
            key = node.attr if isinstance(node, nodes.Getattr) else getattr(node.arg, "value", None)
            if key in CONTENT_FIELDS and isinstance(node.node, nodes.Name):
                return True
            if key in TOOL_CALL_FIELDS and self.is_tool_call_node(node.node):
                return True
            if isinstance(node, nodes.Getitem) and isinstance(node.node, nodes.Call):
                return self.is_content_node(node.node)  # content.split(...)[-1]
            return False
        if isinstance(node, nodes.Filter):
            return node.name in CONTENT_PRESERVING_FILTERS and node.node is not None and self.is_content_node(node.node)
        if isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr):
            return node.node.attr in CONTENT_PRESERVING_METHODS and self.is_content_node(node.node.node)
        if isinstance(node, nodes.Call) and isinstance(node.node, nodes.Name) and node.node.name in self.macro_names:
            # a macro that renders a message's content (`render_content(message.content)`)
            return bool(node.args) and self.is_content_node(node.args[0])
        return False

    def bind_template_names(self, template: nodes.Template) -> None:
        """Bind, before the first statement, the top-level names something may read before their ``set``.

        A macro may call one defined after it (Jinja looks it up at call time). A loop, macro or set
        block that reads a top-level variable sees the template's own variable, never the context's:
        Undefined until its set runs (`{% if c %}{% set x = 1 %}{% endif %}{{ x }}` too). A name
        the top level itself reads before any set is a knob instead (the read leaves it unresolved).
        """
        macros = {macro.name: macro_reads(macro) for macro in template.find_all(nodes.Macro)}
        body = template.body
        self.hoisted = self.hoistable_macros(template, macros)
        for macro_name in sorted(self.hoisted):
            method = self.fresh_method_name(f"macro_{macro_name}")
            self.hoisted[macro_name] = self.macros[macro_name] = method
        for node in body:
            if isinstance(node, nodes.Macro) and node.name in self.hoisted:
                continue
            if isinstance(node, nodes.Macro) and node.name not in self.macros and self.scope.lookup(node.name) is None:
                function = self.fresh_name(f"macro_{node.name}")
                self.macros[node.name] = self.scope.names[node.name] = function
                if may_read_before_assignment(body, node.name) or macro_called_before_set(body, node.name, macros):
                    self.add(ir.Assign(store(function), undefined(node.name)))
        for template_name in sorted(assigned_names(body) - set(macros)):
            first = first_use(body, template_name)
            if self.scope.lookup(template_name) is not None or first == "read":
                continue
            early = may_read_before_assignment(body, template_name) or macro_called_before_set(
                body, template_name, macros
            )
            if first == "inner read" or early:
                local = self.assign_name(template_name)
                if early:
                    self.add(ir.Assign(store(local), undefined(template_name)))

    def hoistable_macros(self, template: nodes.Template, macros: dict[str, Counter[str]]) -> dict[str, str]:
        """Top-level macros that can be methods of the class rather than closures rebuilt every render:
        defined once, never reassigned nor called before their definition, reading nothing of the
        render's own variables (only their arguments, globals, special tokens and other such macros)."""
        body = template.body
        defined = Counter(node.name for node in template.find_all(nodes.Macro))
        assigned = set()
        for node in template.find_all((nodes.Assign, nodes.AssignBlock, nodes.For)):
            assigned |= target_names(node.target)
        allowed = set(GLOBAL_FUNCTIONS) | set(self.names.special_tokens) | {"caller", "varargs", "kwargs", "loop"}
        allowed |= {"true", "false", "none", "True", "False", "None"}
        candidates = {
            node.name
            for node in body
            if isinstance(node, nodes.Macro)
            and defined[node.name] == 1
            and node.name not in assigned
            and node.name not in self.names.knobs
            and not may_read_before_assignment(body, node.name)
            and not macro_called_before_set(body, node.name, macros)
        }
        own_locals = {}
        for node in body:
            if isinstance(node, nodes.Macro) and node.name in candidates:
                inner = set()
                for child in node.find_all((nodes.Assign, nodes.AssignBlock, nodes.For)):
                    inner |= target_names(child.target)
                own_locals[node.name] = {local for local in inner if not may_read_before_assignment(node.body, local)}
        while True:  # a macro calling a macro that cannot be hoisted cannot be hoisted either
            keep = {
                name_
                for name_ in candidates
                if set(+macros[name_]) - own_locals[name_] <= allowed | candidates
            }
            if keep == candidates:
                return dict.fromkeys(sorted(keep), "")
            candidates = keep

    def block(self, body: list[nodes.Node]) -> None:
        for node in body:
            self.statement(node)

    def statement(self, node: nodes.Node) -> None:
        visitor = getattr(self, f"stmt_{type(node).__name__}", None)
        if visitor is None:
            raise self.error(node, f"cannot translate the statement {describe(node)}")
        visitor(node)

    # --- statements ---------------------------------------------------------------

    def stmt_Output(self, node: nodes.Output) -> None:
        children = [child for child in node.nodes if not (isinstance(child, nodes.TemplateData) and not child.data)]
        pieces: list[Piece] = []
        operands = [operand for child in children for operand in self.output_operands(child)]
        for child, raw in operands:
            if isinstance(child, nodes.TemplateData):
                pieces.append(Piece(const(child.data)))
                continue
            if is_raise_exception(child):
                if pieces:
                    self.add(ir.Append(self.output, pieces))
                    pieces = []
                self.raise_statement(child)
                continue
            value = self.expr(child)
            # A lone string piece needs no str() even when it may be a Markup: there is nothing to escape.
            lone = len(operands) == 1 and value.is_str
            piece = value.node if lone or raw else value.as_str()
            content = self.output == "out" and self.marking_messages and self.is_content_node(child)
            pieces.append(Piece(piece, content=content))
        if pieces:
            self.add(ir.Append(self.output, pieces))

    def output_operands(self, node: nodes.Node) -> list[tuple[nodes.Node, bool]]:
        """The pieces an output expression concatenates, so that message content is appended (and
        attributed) on its own; ``True`` marks an operand of ``+`` (not converted to a string).

        ``{{ a ~ b }}`` converts every operand, so its pieces in a row are the same text.
        ``{{ 'a' + b + c }}`` starting with a literal concatenates strings: appending its operands
        in a row gives the same text, and ``append_content`` raises as ``+`` would on a non-string;
        it is split only where message content is an operand and no other operand would start a
        new ``+`` after it. A chain with an operand that may be a Markup (``| safe``) stays whole:
        the Markup escapes the other operands.
        """
        if isinstance(node, nodes.Concat):
            if self.markup_possible and any(self.markup_node(child) for child in node.nodes):
                return [(node, False)]
            return [(child, False) for child in node.nodes]
        if isinstance(node, nodes.Add):
            operands = add_operands(node)
            if self.markup_possible and any(self.markup_node(operand) for operand in operands):
                return [(node, False)]
            starts_with_text = isinstance(operands[0], nodes.Const) and isinstance(operands[0].value, str)
            content = [self.is_content_node(operand) for operand in operands]
            if starts_with_text and any(content):
                # after a content piece the next plain operand starts its own `+`: it must be text
                followers = [operands[i + 1] for i in range(len(operands) - 1) if content[i] and not content[i + 1]]
                if all(isinstance(f, nodes.Const) and isinstance(f.value, str) for f in followers):
                    return [(operand, True) for operand in operands]
        return [(node, False)]

    def raise_statement(self, node: nodes.Call) -> None:
        """``{{ raise_exception(message) }}``: the template refuses the input, with ``message``."""
        if len(node.args) != 1 or node.kwargs or node.dyn_args or node.dyn_kwargs:
            raise self.error(node, "cannot translate raise_exception without exactly one message argument")
        message = self.expr(node.args[0])
        self.add(ir.Raise(jinja("TemplateError"), message.as_str()))

    def stmt_If(self, node: nodes.If) -> None:
        self.add(self.if_chain(node, lambda body, test: self.lower_block(body)))

    def if_chain(self, node: nodes.If, lower_body, label: str = "{% if %}") -> ir.If:
        """The ``if`` / ``elif`` / ``else`` chain of ``node``, each body lowered by ``lower_body(body, test)``."""
        tests = [node.test] + [elif_node.test for elif_node in node.elif_]
        bodies = [node.body] + [elif_node.body for elif_node in node.elif_]
        chain: ir.If | None = None
        last: ir.If | None = None
        for test, body in zip(tests, bodies):
            link = ir.If(self.expr(test).node, [], pure_test=is_pure_test(test))
            checked = string_checked_name(test)
            if checked and not self.markup_possible and checked not in assigned_names(body):
                self.known_strings.add(checked)  # `{% if x is string %}`: no str(x) needed in the branch
                link.body = lower_body(body, test)
                self.known_strings.discard(checked)
            else:
                link.body = lower_body(body, test)
            if chain is None:
                chain = link
                chain.line, chain.label = node.lineno, label
            else:
                last.orelse = [link]
            last = link
        if node.else_:
            last.orelse = self.lower_block(node.else_)
        return chain

    def stmt_Assign(self, node: nodes.Assign) -> None:
        value = self.expr(node.node)
        if isinstance(node.target, nodes.NSRef):
            namespace = self.name_load(node.target.name, node.target).node
            self.add(ir.Assign(ast.Attribute(value=namespace, attr=node.target.attr, ctx=ast.Store()), value.node))
            return
        target = self.assign_target(node.target)
        if is_namespace_call(node.node) and isinstance(node.target, nodes.Name):
            self.namespaces.add(target.id)
        if isinstance(node.target, nodes.Name) and self.is_message_source(node.node):
            self.message_sources.add(target.id)
        self.add(ir.Assign(target, value.node, note=self.rename_note(node.target, target)))

    def rename_note(self, target: nodes.Node, python_target: ast.expr) -> str | None:
        """Why a ``set`` target has another Python name than in the template (a Jinja scope rule)."""
        if not isinstance(target, nodes.Name) or python_target.id == target.name:
            return None
        if python_target.id.rstrip("_") == target.name:
            return None  # only a Python keyword or builtin avoided
        if python_target.id in self.noted_renames:
            return None
        self.noted_renames.add(python_target.id)
        return f"Jinja scoping: {target.name!r} set here is local to this loop or macro, hence {python_target.id!r}"

    def stmt_AssignBlock(self, node: nodes.AssignBlock) -> None:
        if not isinstance(node.target, nodes.Name):
            raise self.error(node, "cannot translate a {% set %} block with a non-name target")
        self.comment(node, "{% set " + node.target.name + " %} ... {% endset %}")
        parts = self.fresh_name(f"{node.target.name}_parts")
        self.add(ir.Assign(store(parts), ast.List(elts=[], ctx=ast.Load())))
        saved = self.output
        self.output = parts
        self.block(node.body)
        self.output = saved
        value = PyExpr(joined(parts), is_str=True)
        if node.filter is not None:
            value = self.filter_expr(node.filter, value)
        target = self.assign_target(node.target)
        self.add(ir.Assign(target, value.node, note=self.rename_note(node.target, target)))

    def assign_name(self, template_name: str) -> str:
        existing = self.scope.names.get(template_name)
        if existing is None:
            existing = self.fresh_name(template_name)
            self.scope.names[template_name] = existing
        return existing

    def assign_target(self, target: nodes.Node) -> ast.expr:
        if isinstance(target, nodes.Name):
            return store(self.assign_name(target.name))
        if isinstance(target, nodes.Tuple):
            return ast.Tuple(elts=[self.assign_target(item) for item in target.items], ctx=ast.Store())
        raise self.error(target, f"cannot assign to {describe(target)}")

    def stmt_For(self, node: nodes.For) -> None:
        if node.recursive:
            raise self.error(node, "cannot translate a recursive {% for %} loop")
        uses = loop_attributes_used(node.body, self.error)
        self.comment(node, "{% for %}")
        iterable = self.expr(node.iter)
        items: ast.expr = iterable.node
        if node.test is not None:
            # `{% for x in xs if test %}`: loop attributes count the filtered items only.
            filtered = self.fresh_name("filtered")
            self.enter_scope(node, loop_target_only=True)
            target = self.assign_target(node.target)
            condition = self.expr(node.test).node
            self.leave_scope()
            element = ast.Tuple(elts=target.elts, ctx=ast.Load()) if isinstance(target, ast.Tuple) else name(target.id)
            comprehension = ast.comprehension(target=target, iter=iterable.node, ifs=[condition], is_async=0)
            self.add(ir.Assign(store(filtered), ast.ListComp(elt=element, generators=[comprehension])))
            items = name(filtered)
        completed = ""
        if node.else_ and loop_control_of_this_loop(node.body):
            # Jinja runs `else` when no iteration reached the end of the body (`break`/`continue` skip it).
            completed = self.fresh_name("completed_iteration")
            self.add(ir.Assign(store(completed), const(False)))
        needs_sequence = uses & {"last", "length", "revindex", "revindex0", "nextitem"}
        needs_sequence = needs_sequence or (node.else_ and not completed)
        if needs_sequence and not isinstance(items, ast.Name):
            sequence = self.fresh_name("items")
            self.add(ir.Assign(store(sequence), call("list", items)))
            items = name(sequence)
        changed = ""
        if "changed" in uses:
            changed = self.fresh_name("changed_arguments")
            self.add(ir.Assign(store(changed), const(None)))
        marks_messages = (
            self.output == "out"
            and not self.marking_messages
            and isinstance(node.target, nodes.Name)
            and self.is_message_source(node.iter)
            and contains_output(node.body)
        )
        self.enter_scope(node)
        target = self.assign_target(node.target)
        index = ""
        loop_target, loop_iter = target, items
        if uses - {"depth", "depth0"}:
            index = self.fresh_name(f"{target.id}_index" if isinstance(target, ast.Name) else "index")
            loop_target = ast.Tuple(elts=[store(index), target], ctx=ast.Store())
            loop_iter = call("enumerate", items)
        self.loops.append(LoopContext(index=index, items=items, uses=uses, changed=changed))
        saved, self.body = self.body, []
        if marks_messages:
            self.add(ir.ExprStmt(call("out.mark_message", name(target.id))))
        self.initialise_scope_reads(node.body, target_names(node.target))
        if marks_messages:
            self.marking_messages = True
            self.message_loop_body(node)
            self.marking_messages = False
        else:
            self.block(node.body)
        if completed:
            self.add(ir.Assign(store(completed), const(True)))
        loop_body, self.body = self.body, saved
        self.loops.pop()
        self.leave_scope()
        self.add(ir.For(loop_target, loop_iter, loop_body))
        if marks_messages:
            self.add(ir.ExprStmt(call("out.mark_scaffold")))
        if node.else_:
            condition = name(completed) if completed else items
            self.add(ir.If(ast.UnaryOp(op=ast.Not(), operand=condition), self.lower_block(node.else_)))

    # --- role methods -------------------------------------------------------------------

    def message_loop_body(self, loop: nodes.For) -> None:
        """The message loop's body; a role dispatch in it becomes one method per role."""
        for position, statement in enumerate(loop.body):
            rest = loop.body[position + 1 :]
            if isinstance(statement, nodes.If) and dispatched_roles(statement, loop.target.name):
                self.role_dispatch(statement, loop, rest)
            else:
                self.statement(statement)

    def role_dispatch(self, node: nodes.If, loop: nodes.For, rest: list[nodes.Node]) -> None:
        """``if role == 'user' ... elif role == 'assistant' ...`` with each branch in its own method."""

        def branch(body: list[nodes.Node], test: nodes.Node) -> list[ir.Stmt]:
            roles = branch_topics(test, loop.target.name)
            extracted = self.extract_branch(body, roles, loop, rest, test.lineno)
            return extracted if extracted is not None else self.lower_block(body)

        self.add(self.if_chain(node, branch, label="{% if %} on the message's role"))

    def extract_branch(self, body, roles: list[str], loop, rest, line: int) -> list[ir.Stmt] | None:
        """``body`` as a method, and the block calling it; None when that is unsafe."""
        if not roles or not body or loop_control_of_this_loop(body):
            return None
        if any(isinstance(node, nodes.Macro) for node in body):
            return None
        if any(
            isinstance(node.node, nodes.Name) and node.node.name == "loop" and node.attr == "changed"
            for statement in body
            for node in statement.find_all(nodes.Getattr)
        ):
            return None  # loop.changed() keeps state across iterations in a render_template local
        later_reads = count_reads(rest)
        if any(later_reads[assigned] for assigned in assigned_names(body)):
            return None  # the branch sets something the rest of the iteration reads
        method_name = self.fresh_method_name("render_" + "_or_".join(roles))
        enclosing = self.scope.visible_python_names() | self.bound_locals()  # before the body adds its own
        method_body = self.lower_block(body)
        # names the branch sets before any read are the method's own locals; everything else it reads
        # (the message, loop index, namespaces, knobs, values set earlier in the iteration) is passed in
        own = {
            self.scope.lookup(assigned) or assigned
            for assigned in assigned_names(body)
            if not may_read_before_assignment(body, assigned)
        }
        parameters = free_variables(method_body, enclosing - own - {"out"})
        # the message and its loop index first, then the rest in order of first use
        leading = [self.scope.lookup(loop.target.name), self.loops[-1].index]
        parameters = [p for p in leading if p in parameters] + [p for p in parameters if p not in leading]
        end_line = max(
            [statement.lineno for statement in body]
            + [n.lineno for statement in body for n in statement.find_all(nodes.Node) if n.lineno]
        )
        self.methods.append(
            ir.Method(
                method_name,
                [ir.Parameter("out"), *(ir.Parameter(p) for p in parameters)],
                method_body,
                f"The template's {' / '.join(roles)} branch of the message loop (lines {line}-{end_line}).",
            )
        )
        arguments = [name("out"), *(name(p) for p in parameters)]
        return [ir.ExprStmt(call(attribute(name("self"), method_name), *arguments))]

    def fresh_method_name(self, wanted: str) -> str:
        candidate, counter = wanted, 1
        while candidate in self.method_names:
            counter += 1
            candidate = f"{wanted}_{counter}"
        self.method_names.add(candidate)
        return candidate

    def bound_locals(self) -> set[str]:
        """Python names render_template binds besides template names (inputs, knobs, loop helpers)."""
        closures = {local for macro, local in self.macros.items() if macro not in self.hoisted}
        return set(TEMPLATE_INPUTS) | set(self.names.knobs.values()) | closures

    # --- macros, call blocks, filter blocks ---------------------------------------------

    def stmt_Macro(self, node: nodes.Macro) -> None:
        if node.name in self.hoisted and self.scope.parent is None:
            method = self.hoisted[node.name]
            # a method has its own namespace: only module constants (special tokens) are visible
            saved_scope, saved_used = self.scope, self.used_names
            self.scope = Scope(names=dict(self.names.special_tokens))
            self.used_names = set(RESERVED_NAMES) | set(self.names.special_tokens.values())
            try:
                function = self.function(node, method, "")
            finally:
                self.scope, self.used_names = saved_scope, saved_used
            end_line = max(n.lineno for n in node.find_all(nodes.Node) if n.lineno) if node.body else node.lineno
            self.methods.append(
                ir.Method(
                    method,
                    function.parameters,
                    function.body,
                    f"The template's macro {node.name} (lines {node.lineno}-{end_line}).",
                    varargs=function.varargs,
                    kwargs=function.kwargs,
                )
            )
            return
        reserved = self.macros.get(node.name)  # by bind_template_names
        if reserved and self.scope.names.get(node.name) == reserved:
            function = reserved
        else:
            function = self.fresh_name(f"macro_{node.name}")
        self.macros[node.name] = function
        self.scope.names[node.name] = function
        self.add(self.function(node, function, f"{{% macro {node.name} %}}"))

    def function(self, node: nodes.Macro | nodes.CallBlock, function: str, label: str) -> ir.Function:
        """A macro (or a call block's ``caller``) as a nested function returning its text."""
        reads = count_reads(node.body)
        saved_reads, saved_output, saved_loops = self.function_reads, self.output, self.loops
        saved_marking = self.marking_messages
        self.function_reads, self.loops, self.marking_messages = reads, [], False
        self.enter_scope(node)
        parameters: list[ir.Parameter] = []
        late_defaults = []
        defaults = [None] * (len(node.args) - len(node.defaults)) + list(node.defaults)
        for argument, default_node in zip(node.args, defaults):
            local = self.assign_name(argument.name)
            if default_node is None:
                parameters.append(ir.Parameter(local, undefined(argument.name)))
            elif isinstance(default_node, nodes.Name) or any(True for _ in default_node.find_all(nodes.Name)):
                # Jinja evaluates a default at call time, where it sees the earlier arguments.
                parameters.append(ir.Parameter(local, jinja("MISSING")))
                late_defaults.append((local, default_node))
            else:
                parameters.append(ir.Parameter(local, self.expr(default_node).node))
        # Jinja gives a macro `caller`, `varargs` and `kwargs` only when its body reads them.
        caller = varargs = kwargs = None
        if isinstance(node, nodes.Macro) and reads["caller"]:
            caller = self.scope.names["caller"] = "caller"  # the keyword a {% call %} block passes
            parameters.append(ir.Parameter(caller, undefined("caller")))
        if reads["varargs"]:
            varargs = self.assign_name("varargs")
        if reads["kwargs"]:
            kwargs = self.assign_name("kwargs")
        saved_body, self.body = self.body, []
        for local, default_node in late_defaults:
            test = ast.Compare(left=name(local), ops=[ast.Is()], comparators=[jinja("MISSING")])
            self.add(ir.If(test, [ir.Assign(store(local), self.expr(default_node).node)]))
        parts = self.fresh_name("parts")
        self.output = parts
        self.add(ir.Assign(store(parts), ast.List(elts=[], ctx=ast.Load())))
        self.initialise_scope_reads(node.body, {argument.name for argument in node.args})
        self.block(node.body)
        self.add(ir.Return(joined(parts)))
        body, self.body = self.body, saved_body
        self.leave_scope()
        self.function_reads, self.output, self.loops = saved_reads, saved_output, saved_loops
        self.marking_messages = saved_marking
        result = ir.Function(function, parameters, body, node.lineno, label)
        if varargs:
            result.varargs = varargs
        if kwargs:
            result.kwargs = kwargs
        return result

    def stmt_CallBlock(self, node: nodes.CallBlock) -> None:
        call_node = node.call
        if isinstance(call_node, nodes.Call) and isinstance(call_node.node, nodes.ExtensionAttribute):
            if call_node.node.name == "_generation_support":
                # transformers' {% generation %} marks the assistant's own tokens; it renders its body.
                self.comment(node, "{% generation %}: the assistant's sampled tokens")
                self.block(node.body)
                return
        if not isinstance(call_node, nodes.Call) or call_node.dyn_args or call_node.dyn_kwargs:
            raise self.error(node, "cannot translate this {% call %} block")
        caller = self.fresh_name("caller")
        self.add(self.function(node, caller, "{% call %}: its body is the macro's caller()"))
        with_caller = nodes.Call(
            call_node.node, call_node.args, [*call_node.kwargs, nodes.Keyword("caller", nodes.Name(caller, "load"))],
            None, None, lineno=call_node.lineno,
        )
        self.scope.names.setdefault(caller, caller)
        self.stmt_Output(nodes.Output([with_caller], lineno=node.lineno))

    def stmt_FilterBlock(self, node: nodes.FilterBlock) -> None:
        """``{% filter f %}body{% endfilter %}``: the body's text through the filter (its own scope)."""
        self.comment(node, f"{{% filter {node.filter.name} %}}")
        parts = self.fresh_name("filtered_parts")
        self.add(ir.Assign(store(parts), ast.List(elts=[], ctx=ast.Load())))
        saved_output, saved_marking = self.output, self.marking_messages
        self.output, self.marking_messages = parts, False
        scope = Scope(parent=self.scope)
        self.scope = scope
        self.rename_scope_locals(scope, assigned_names(node.body), count_reads(node.body))
        self.initialise_scope_reads(node.body, set())
        self.block(node.body)
        self.leave_scope()
        self.output, self.marking_messages = saved_output, saved_marking
        value = self.filter_expr(node.filter, PyExpr(joined(parts), is_str=True))
        self.add(ir.Append(self.output, [Piece(value.as_str())]))

    def stmt_ExprStmt(self, node: nodes.ExprStmt) -> None:
        if is_raise_exception(node.node):
            self.raise_statement(node.node)
            return
        self.add(ir.ExprStmt(self.expr(node.node).node))

    def stmt_Break(self, node: nodes.Break) -> None:
        self.add(ir.Break())

    def stmt_Continue(self, node: nodes.Continue) -> None:
        self.add(ir.Continue())

    # --- scopes -------------------------------------------------------------------

    def enter_scope(self, node: nodes.Node, *, loop_target_only: bool = False) -> None:
        """Open a Jinja scope (loop body, macro, caller) and rename names that would leak."""
        scope = Scope(parent=self.scope)
        if isinstance(node, nodes.For):
            assigned = target_names(node.target)
            if not loop_target_only:
                assigned |= assigned_names(node.body)
            body_reads = count_reads(node.body)
            for target in target_names(node.target):
                body_reads[target] = 0  # reads of the loop variable outside this loop are all outside
        else:
            assigned = {argument.name for argument in node.args} | assigned_names(node.body)
            body_reads = Counter()
        self.rename_scope_locals(scope, assigned, body_reads)
        self.scope = scope

    def rename_scope_locals(self, scope: Scope, assigned: set[str], body_reads: Counter[str]) -> None:
        for assigned_name in sorted(assigned):
            outer = self.scope.lookup(assigned_name)
            read_outside = self.function_reads[assigned_name] > body_reads[assigned_name]
            if outer is None and not read_outside:
                continue  # the name is new and never read elsewhere: no rename needed
            scope.names[assigned_name] = self.fresh_name(assigned_name)

    def leave_scope(self) -> None:
        assert self.scope.parent is not None
        self.scope = self.scope.parent

    def initialise_scope_reads(self, body: list[nodes.Node], bound: set[str]) -> None:
        """A name read before its ``set`` in this scope sees the outer value (or Undefined)."""
        macros = {node.name: macro_reads(node) for node in body if isinstance(node, nodes.Macro)}
        for assigned_name in sorted(assigned_names(body) - bound):
            if not may_read_before_assignment(body, assigned_name):
                if macro_called_before_set(body, assigned_name, macros):  # a macro here sees no outer value
                    local = self.assign_name(assigned_name)
                    self.add(ir.Assign(store(local), undefined(assigned_name)))
                continue
            local = self.assign_name(assigned_name)
            parent = self.scope.parent
            outer_local = parent.lookup(assigned_name) if parent else None
            if outer_local is None:
                saved, self.scope = self.scope, parent or self.scope
                outer = self.name_load(assigned_name, body[0]).node
                self.scope = saved
            else:
                outer = name(outer_local)
            self.add(ir.Assign(store(local), outer, note=self.rename_note(nodes.Name(assigned_name, "store"), store(local))))

    def find_markup_names(self, template: nodes.Template) -> None:
        """Names, namespace attributes and macro parameters that may hold a Markup (to a fixed point)."""
        macros = {macro.name: macro for macro in template.find_all(nodes.Macro)}
        calls = [
            call_node
            for call_node in template.find_all(nodes.Call)
            if isinstance(call_node.node, nodes.Name) and call_node.node.name in macros
        ]
        while True:
            known = (set(self.markup_names), set(self.markup_attributes))
            for assign in template.find_all(nodes.Assign):
                if self.markup_node(assign.node):
                    if isinstance(assign.target, nodes.NSRef):
                        self.markup_attributes.add(assign.target.attr)
                    self.markup_names |= target_names(assign.target)
            for loop in template.find_all(nodes.For):
                if self.markup_node(loop.iter):
                    self.markup_names |= target_names(loop.target)
            for call_node in calls:
                arguments = [*call_node.args, *(k.value for k in call_node.kwargs)]
                if any(self.markup_node(argument) for argument in arguments):
                    self.markup_names |= {argument.name for argument in macros[call_node.node.name].args}
            if known == (self.markup_names, self.markup_attributes):
                return

    def markup_node(self, node: nodes.Node) -> bool:
        """Whether ``node`` may evaluate to a Markup: a ``| safe`` result, or what keeps one a Markup."""
        if isinstance(node, nodes.Filter):
            if node.name == "safe":
                return True
            if node.name in PLAIN_RESULT_FILTERS or node.node is None:
                return False
            if node.name in ("d", "default"):
                return any(self.markup_node(part) for part in [node.node, *node.args[:1]])
            return self.markup_node(node.node)
        if isinstance(node, nodes.Name):
            return node.name in self.markup_names
        if isinstance(node, nodes.Getattr):
            if isinstance(node.node, nodes.Name) and node.node.name in self.namespace_names:
                return node.attr in self.markup_attributes
            return self.markup_node(node.node)
        if isinstance(node, nodes.Getitem):
            return self.markup_node(node.node)
        if isinstance(node, nodes.Call):  # a method of a Markup returns a Markup; a macro a plain str
            return isinstance(node.node, nodes.Getattr) and self.markup_node(node.node.node)
        if isinstance(node, nodes.BinExpr):
            return self.markup_node(node.left) or self.markup_node(node.right)
        if isinstance(node, nodes.CondExpr):
            return self.markup_node(node.expr1) or (node.expr2 is not None and self.markup_node(node.expr2))
        if isinstance(node, (nodes.List, nodes.Tuple)):
            return any(self.markup_node(item) for item in node.items)
        if isinstance(node, nodes.Dict):
            return any(self.markup_node(pair.value) for pair in node.items)
        return False

    def is_computed(self, node: nodes.Node) -> bool:
        """Whether ``node`` may be a computed value (a literal, a call's, filter's or operator's result,
        a name or namespace attribute some ``set`` binds to one, a part of one) rather than template data.

        Template data (inputs, knobs and what is read from them) is wrapped so that a missing key
        or index reads as Undefined; computed values are plain Python objects.
        """
        if isinstance(node, nodes.Name):
            return node.name in self.computed_names
        if isinstance(node, nodes.Getattr) and node.attr in self.computed_attributes:
            if isinstance(node.node, nodes.Name) and node.node.name in self.namespace_names:
                return True
        if isinstance(node, (nodes.Getattr, nodes.Getitem)):
            return self.is_computed(node.node)
        return True

    def is_message_source(self, node: nodes.Node) -> bool:
        """Whether ``node`` evaluates to the messages list or a slice / filter of it."""
        while isinstance(node, (nodes.Getitem, nodes.Filter)):
            if isinstance(node, nodes.Getitem) and not isinstance(node.arg, nodes.Slice):
                return False
            node = node.node
        return isinstance(node, nodes.Name) and (self.scope.lookup(node.name) or node.name) in self.message_sources

    # --- expressions --------------------------------------------------------------

    def expr(self, node: nodes.Node) -> PyExpr:
        visitor = getattr(self, f"expr_{type(node).__name__}", None)
        if visitor is None:
            raise self.error(node, f"cannot translate the expression {describe(node)}")
        value = visitor(node)
        if self.markup_possible and not value.markup and self.markup_node(node):
            value.markup = True
        return value

    def expr_Const(self, node: nodes.Const) -> PyExpr:
        return PyExpr(const(node.value), is_str=isinstance(node.value, str))

    def expr_TemplateData(self, node: nodes.TemplateData) -> PyExpr:
        return PyExpr(const(node.data), is_str=True)

    def expr_Name(self, node: nodes.Name) -> PyExpr:
        if node.name == "loop":
            raise self.error(node, "cannot translate `loop` used as a value")
        resolved = self.name_load(node.name, node)
        is_str = isinstance(resolved.node, ast.Name) and resolved.node.id in self.names.special_tokens.values()
        is_str = is_str or node.name in self.known_strings
        return PyExpr(resolved.node, is_str=is_str)

    def name_load(self, template_name: str, node: nodes.Node) -> Resolved:
        local = self.scope.lookup(template_name)
        if local is not None:
            return Resolved(name(local), "local")
        if template_name in self.hoisted:
            return Resolved(attribute(name("self"), self.hoisted[template_name]), "local")
        if template_name in GLOBAL_FUNCTIONS:
            return Resolved(ir.dotted(GLOBAL_FUNCTIONS[template_name]), "global")
        literals = {"true": True, "false": False, "none": None, "True": True, "False": False, "None": None}
        if template_name in literals:
            return Resolved(const(literals[template_name]), "literal")
        self.unresolved.add(template_name)
        return Resolved(undefined(template_name), "unknown")

    def expr_List(self, node: nodes.List) -> PyExpr:
        return PyExpr(ast.List(elts=[self.expr(item).node for item in node.items], ctx=ast.Load()))

    def expr_Tuple(self, node: nodes.Tuple) -> PyExpr:
        return PyExpr(ast.Tuple(elts=[self.expr(item).node for item in node.items], ctx=ast.Load()))

    def expr_Dict(self, node: nodes.Dict) -> PyExpr:
        keys = [self.expr(pair.key).node for pair in node.items]
        values = [self.expr(pair.value).node for pair in node.items]
        return PyExpr(ast.Dict(keys=keys, values=values))

    def expr_CondExpr(self, node: nodes.CondExpr) -> PyExpr:
        then = self.expr(node.expr1)
        otherwise = self.expr(node.expr2) if node.expr2 is not None else PyExpr(call("jinja.Undefined"))
        test = self.expr(node.test)
        return PyExpr(
            ast.IfExp(test=test.node, body=then.node, orelse=otherwise.node),
            is_str=then.is_str and otherwise.is_str,
            markup=then.markup or otherwise.markup,
        )

    def expr_And(self, node: nodes.And) -> PyExpr:
        return PyExpr(bool_op(ast.And, self.expr(node.left).node, self.expr(node.right).node))

    def expr_Or(self, node: nodes.Or) -> PyExpr:
        return PyExpr(bool_op(ast.Or, self.expr(node.left).node, self.expr(node.right).node))

    def expr_Not(self, node: nodes.Not) -> PyExpr:
        inner = node.node
        if isinstance(inner, nodes.Test) and inner.name in ("none", "true", "false") and not inner.args:
            constant = {"none": None, "true": True, "false": False}[inner.name]
            return PyExpr(ast.Compare(left=self.expr(inner.node).node, ops=[ast.IsNot()], comparators=[const(constant)]))
        if isinstance(inner, nodes.Getattr) and isinstance(inner.node, nodes.Name) and inner.node.name == "loop":
            if inner.attr in ("first", "last"):
                return self.loop_attribute(inner, negated=True)
        if isinstance(inner, nodes.Compare) and len(inner.ops) == 1 and inner.ops[0].op in INVERTED_COMPARE:
            inverted = nodes.Compare(inner.expr, [nodes.Operand(INVERTED_COMPARE[inner.ops[0].op], inner.ops[0].expr)])
            return self.expr_Compare(inverted)
        return PyExpr(ast.UnaryOp(op=ast.Not(), operand=self.expr(inner).node))

    def expr_Neg(self, node: nodes.Neg) -> PyExpr:
        return PyExpr(ast.UnaryOp(op=ast.USub(), operand=self.expr(node.node).node))

    def expr_Pos(self, node: nodes.Pos) -> PyExpr:
        return PyExpr(ast.UnaryOp(op=ast.UAdd(), operand=self.expr(node.node).node))

    def binary(self, node: nodes.BinExpr) -> PyExpr:
        operator = BINARY_OPERATORS[type(node)]
        left, right = self.expr(node.left), self.expr(node.right)
        return PyExpr(
            ast.BinOp(left=left.node, op=operator(), right=right.node),
            is_str=operator is ast.Add and (left.is_str or right.is_str),
            markup=left.markup or right.markup,
        )

    expr_Add = expr_Sub = expr_Mul = expr_Div = expr_FloorDiv = expr_Mod = expr_Pow = binary

    def expr_Concat(self, node: nodes.Concat) -> PyExpr:
        pieces = [self.expr(child).as_str() for child in node.nodes]
        value = pieces[0]
        for piece in pieces[1:]:
            value = ast.BinOp(left=value, op=ast.Add(), right=piece)
        return PyExpr(value, is_str=True)

    def expr_Compare(self, node: nodes.Compare) -> PyExpr:
        return PyExpr(
            ast.Compare(
                left=self.expr(node.expr).node,
                ops=[COMPARE_OPERATORS[operand.op]() for operand in node.ops],
                comparators=[self.expr(operand.expr).node for operand in node.ops],
            )
        )

    def expr_Getattr(self, node: nodes.Getattr) -> PyExpr:
        if isinstance(node.node, nodes.Name) and node.node.name == "loop":
            if not self.loops:
                raise self.error(node, "`loop` used outside a {% for %} loop")
            return self.loop_attribute(node)
        target = self.expr(node.node)
        is_namespace = isinstance(target.node, ast.Name) and target.node.id in self.namespaces
        if is_namespace or node.attr in DICT_METHODS:
            return PyExpr(attribute(target.node, node.attr))
        if self.is_computed(node.node):
            # Not template data (a literal, a method's or filter's result): Jinja's lookup rules in full.
            return PyExpr(call("jinja.getattribute", target.node, const(node.attr)))
        return PyExpr(subscript(target.node, const(node.attr)))

    def expr_Getitem(self, node: nodes.Getitem) -> PyExpr:
        value = self.expr(node.node)
        if isinstance(node.arg, nodes.Slice):
            parts = [
                self.expr(part).node if part is not None else None
                for part in (node.arg.start, node.arg.stop, node.arg.step)
            ]
            return PyExpr(subscript(value.node, ast.Slice(lower=parts[0], upper=parts[1], step=parts[2])))
        if self.is_computed(node.node) and not is_split_end(node):
            # An out-of-range index or missing key of a computed value is Undefined in Jinja.
            return PyExpr(call("jinja.getitem", value.node, self.expr(node.arg).node))
        return PyExpr(subscript(value.node, self.expr(node.arg).node))

    def loop_attribute(self, node: nodes.Getattr, *, negated: bool = False) -> PyExpr:
        loop = self.loops[-1]
        index, items = name(loop.index) if loop.index else None, loop.items
        length = call("len", items)
        attr = node.attr

        def compare(left: ast.expr, right: ast.expr) -> PyExpr:
            operator = ast.NotEq() if negated else ast.Eq()
            return PyExpr(ast.Compare(left=left, ops=[operator], comparators=[right]))

        def plus(left: ast.expr, right: ast.expr, op=ast.Add) -> ast.expr:
            return ast.BinOp(left=left, op=op(), right=right)

        if attr == "index0":
            return PyExpr(index)
        if attr == "index":
            return PyExpr(plus(index, const(1)))
        if attr == "first":
            return compare(index, const(0))
        if attr == "last":
            return compare(index, plus(length, const(1), ast.Sub))
        if attr == "length":
            return PyExpr(length)
        if attr == "revindex0":
            return PyExpr(plus(plus(length, index, ast.Sub), const(1), ast.Sub))
        if attr == "revindex":
            return PyExpr(plus(length, index, ast.Sub))
        if attr == "depth":
            return PyExpr(const(1))  # recursive loops are refused, so every loop is at depth 1
        if attr == "depth0":
            return PyExpr(const(0))
        if attr == "previtem":
            test = ast.Compare(left=index, ops=[ast.Gt()], comparators=[const(0)])
            item = subscript(items, plus(index, const(1), ast.Sub))
            return PyExpr(ast.IfExp(test=test, body=item, orelse=undefined("previtem")))
        if attr == "nextitem":
            test = ast.Compare(left=plus(index, const(1)), ops=[ast.Lt()], comparators=[length])
            item = subscript(items, plus(index, const(1)))
            return PyExpr(ast.IfExp(test=test, body=item, orelse=undefined("nextitem")))
        raise self.error(node, f"cannot translate loop.{attr} here")

    def loop_method_call(self, node: nodes.Call) -> PyExpr:
        """``loop.cycle(a, b)`` and ``loop.changed(x)``."""
        loop = self.loops[-1]
        if node.kwargs or node.dyn_args or node.dyn_kwargs:
            raise self.error(node, f"cannot translate loop.{node.node.attr} with keyword or * arguments")
        arguments = [self.expr(argument).node for argument in node.args]
        if node.node.attr == "cycle":
            if not arguments:
                raise self.error(node, "loop.cycle() needs at least one value")
            choices = ast.Tuple(elts=arguments, ctx=ast.Load())
            return PyExpr(subscript(choices, ast.BinOp(left=name(loop.index), op=ast.Mod(), right=const(len(arguments)))))
        if node.node.attr == "changed":
            # True when the arguments differ from those of the previous call (the first call too).
            current = ast.List(elts=arguments, ctx=ast.Load())
            remember = ast.NamedExpr(target=store(loop.changed), value=current)
            return PyExpr(ast.Compare(left=name(loop.changed), ops=[ast.NotEq()], comparators=[remember]))
        raise self.error(node, f"cannot translate loop.{node.node.attr}()")

    def expr_Call(self, node: nodes.Call) -> PyExpr:
        if node.dyn_args is not None or node.dyn_kwargs is not None:
            raise self.error(node, "cannot translate a call with *args or **kwargs")
        function = node.node
        if isinstance(function, nodes.Getattr) and isinstance(function.node, nodes.Name):
            if function.node.name == "loop" and self.loops and function.attr in ("cycle", "changed"):
                return self.loop_method_call(node)
        arguments = [self.expr(argument).node for argument in node.args]
        keywords = [ast.keyword(arg=kw.key, value=self.expr(kw.value).node) for kw in node.kwargs]
        if isinstance(function, nodes.Getattr):
            target = self.expr(function.node)
            return PyExpr(ast.Call(func=attribute(target.node, function.attr), args=arguments, keywords=keywords))
        if isinstance(function, nodes.Name):
            resolved = self.name_load(function.name, node)
            if resolved.kind == "unknown":
                raise self.error(node, f"cannot translate a call to the unknown function {function.name!r}")
            is_str = function.name in self.macros or function.name == "caller"
            return PyExpr(ast.Call(func=resolved.node, args=arguments, keywords=keywords), is_str=is_str)
        raise self.error(node, f"cannot translate a call of {describe(function)}")

    def expr_Test(self, node: nodes.Test) -> PyExpr:
        value = self.expr(node.node)
        arguments = [self.expr(argument).node for argument in node.args]
        keywords = [ast.keyword(arg=kw.key, value=self.expr(kw.value).node) for kw in node.kwargs]
        if node.dyn_args or node.dyn_kwargs:
            raise self.error(node, f"cannot translate the test `is {node.name}` with * arguments")
        test = node.name
        readable = None if keywords else readable_test(test, value.node, arguments)
        if readable is not None:
            return PyExpr(readable)
        helper = template_runtime.TESTS.get(test)
        if helper is None and test not in JINJA_TESTS:
            return PyExpr(call("jinja.missing_filter_or_test", const("test"), const(test), value.node, *arguments))
        if helper is None:
            raise self.error(node, f"cannot translate the test `is {test}`")
        return PyExpr(ast.Call(func=jinja(helper.__name__), args=[value.node, *arguments], keywords=keywords))

    def expr_Filter(self, node: nodes.Filter) -> PyExpr:
        if node.node is None:
            raise self.error(node, "cannot translate a filter without a value")
        return self.filter_expr(node, self.expr(node.node))

    def filter_expr(self, node: nodes.Filter, value: PyExpr) -> PyExpr:
        """``value | <node's filter>(arguments)``."""
        if node.dyn_args or node.dyn_kwargs:
            raise self.error(node, f"cannot translate the filter `{node.name}` with *args or **kwargs")
        arguments = [self.expr(argument).node for argument in node.args]
        keywords = [ast.keyword(arg=kw.key, value=self.expr(kw.value).node) for kw in node.kwargs]
        filter_name = node.name
        plain = not arguments and not keywords
        if filter_name in ("length", "count") and plain:
            return PyExpr(call("len", value.node))
        if filter_name == "string" and plain:
            if value.markup:  # Jinja's soft_str keeps a Markup
                return PyExpr(call("jinja.soft_str", value.node), is_str=True, markup=True)
            return PyExpr(value.as_str(), is_str=True)
        if filter_name in ("list", "abs") and plain:
            return PyExpr(call(filter_name, value.node))
        if filter_name == "safe":
            return PyExpr(call("jinja.mark_safe", value.node), is_str=True, markup=True)
        if filter_name == "map":
            return self.map_filter(node, value, arguments, keywords)
        helper = template_runtime.FILTERS.get(filter_name)
        if helper is None and filter_name not in JINJA_FILTERS:
            # not a filter of transformers' environment: the template compiled, so it sits in an if
            # or an inline if, and Jinja raises only when that branch runs
            missing = call("jinja.missing_filter_or_test", const("filter"), const(filter_name), value.node, *arguments)
            return PyExpr(missing)
        if helper is None:
            raise self.error(node, f"cannot translate the filter `{filter_name}`")
        return PyExpr(
            ast.Call(func=jinja(helper.__name__), args=[value.node, *arguments], keywords=keywords),
            is_str=filter_name in STRING_FILTERS,
            markup=filter_name in SOFT_STR_FILTERS and value.markup,
        )

    def map_filter(self, node: nodes.Filter, value: PyExpr, arguments: list, keywords: list) -> PyExpr:
        by_keyword = {kw.arg: kw.value for kw in keywords}
        if "attribute" in by_keyword and not arguments and set(by_keyword) <= {"attribute", "default"}:
            extra = {"default": by_keyword["default"]} if "default" in by_keyword else {}
            return PyExpr(call("jinja.map_attribute", value.node, by_keyword["attribute"], **extra))
        if arguments and not keywords and isinstance(node.args[0], nodes.Const):
            helper = template_runtime.FILTERS.get(node.args[0].value)
            if helper is not None:
                return PyExpr(call("jinja.map_filter", value.node, jinja(helper.__name__), *arguments[1:]))
        raise self.error(node, "cannot translate this use of the `map` filter")


def readable_test(test: str, value: ast.expr, arguments: list[ast.expr]) -> ast.expr | None:
    """Tests whose plain Python spelling is exactly Jinja's; None for the rest (they call the registry)."""
    if test == "defined" and not arguments:
        return call("jinja.defined", value)
    if test == "undefined" and not arguments:
        return ast.UnaryOp(op=ast.Not(), operand=call("jinja.defined", value))
    if test in ("none", "true", "false") and not arguments:
        constant = {"none": None, "true": True, "false": False}[test]
        return ast.Compare(left=value, ops=[ast.Is()], comparators=[const(constant)])
    if test == "string" and not arguments:
        return call("isinstance", value, name("str"))
    if test == "float" and not arguments:
        return call("isinstance", value, name("float"))
    operators = {"equalto": ast.Eq, "eq": ast.Eq, "==": ast.Eq, "sameas": ast.Is, "ne": ast.NotEq, "!=": ast.NotEq}
    operators |= {"in": ast.In, "lt": ast.Lt, "<": ast.Lt, "le": ast.LtE, "<=": ast.LtE}
    operators |= {"gt": ast.Gt, ">": ast.Gt, "ge": ast.GtE, ">=": ast.GtE, "greaterthan": ast.Gt, "lessthan": ast.Lt}
    if test in operators and len(arguments) == 1:
        return ast.Compare(left=value, ops=[operators[test]()], comparators=arguments)
    if test in ("odd", "even") and not arguments:
        remainder = ast.BinOp(left=value, op=ast.Mod(), right=const(2))
        return ast.Compare(left=remainder, ops=[ast.Eq()], comparators=[const(1 if test == "odd" else 0)])
    if test == "divisibleby" and len(arguments) == 1:
        remainder = ast.BinOp(left=value, op=ast.Mod(), right=arguments[0])
        return ast.Compare(left=remainder, ops=[ast.Eq()], comparators=[const(0)])
    if test in ("lower", "upper") and not arguments:
        return ast.Call(func=attribute(call("str", value), f"is{test}"), args=[], keywords=[])
    return None


def string_checked_name(test: nodes.Node) -> str | None:
    """``x`` when ``test`` is ``x is string`` (alone or as a part of an ``and``)."""
    if isinstance(test, nodes.Test) and test.name == "string" and isinstance(test.node, nodes.Name):
        return test.node.name
    if isinstance(test, nodes.And):
        return string_checked_name(test.left) or string_checked_name(test.right)
    return None


def is_pure_test(node: nodes.Node) -> bool:
    """Whether evaluating a test can neither raise nor do anything: dropping it changes nothing."""
    if isinstance(node, (nodes.Const, nodes.Name)):
        return True
    if isinstance(node, nodes.Getattr) and isinstance(node.node, nodes.Name) and node.node.name == "loop":
        return True
    if isinstance(node, nodes.Compare):
        return all(operand.op in ("eq", "ne") for operand in node.ops) and all(
            is_pure_test(part) for part in [node.expr, *(operand.expr for operand in node.ops)]
        )
    if isinstance(node, (nodes.And, nodes.Or)):
        return is_pure_test(node.left) and is_pure_test(node.right)
    if isinstance(node, nodes.Not):
        return is_pure_test(node.node)
    if isinstance(node, nodes.Test):
        return node.name in ("defined", "undefined", "none") and not node.args and is_pure_test(node.node)
    return False


def add_operands(node: nodes.Node) -> list[nodes.Node]:
    """``a + b + c`` -> ``[a, b, c]``."""
    if isinstance(node, nodes.Add):
        return add_operands(node.left) + add_operands(node.right)
    return [node]


def bool_op(operator: type, left: ast.expr, right: ast.expr) -> ast.BoolOp:
    """``a or b or c`` rather than ``(a or b) or c`` (the same evaluation, left to right)."""
    values = []
    for side in (left, right):
        if isinstance(side, ast.BoolOp) and isinstance(side.op, operator):
            values += side.values
        else:
            values.append(side)
    return ast.BoolOp(op=operator(), values=values)


def undefined(variable: str) -> ast.expr:
    return call("jinja.Undefined", const(variable))


def joined(parts: str) -> ast.expr:
    """``"".join(parts)``."""
    return ast.Call(func=attribute(const(""), "join"), args=[name(parts)], keywords=[])


def is_raise_exception(node: nodes.Node) -> bool:
    return isinstance(node, nodes.Call) and isinstance(node.node, nodes.Name) and node.node.name == "raise_exception"


def free_variables(body: list[ir.Stmt], enclosing: set[str]) -> list[str]:
    """Names of ``enclosing`` that a block reads, in order of first use (from the IR, not from code text)."""
    found: list[str] = []

    def visit_expression(node: ast.AST) -> None:
        if isinstance(node, ast.Name) and node.id in enclosing and node.id not in found:
            found.append(node.id)
        children = list(ast.iter_child_nodes(node))
        if isinstance(node, ast.IfExp):  # printed as `body if test else orelse`
            children = [node.body, node.test, node.orelse]
        for child in children:
            visit_expression(child)

    for statement in ir.walk_statements(body):
        for expression in ir.expressions_of(statement):
            visit_expression(expression)
    return found
