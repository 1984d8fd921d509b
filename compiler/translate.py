"""Translate a parsed chat template (jinja2 AST) into the body of a Python method.

A visitor with one method per node type, in two sections: statements (which
write lines of Python) and expressions (which return a :class:`PyExpr`). Every
node type the visitor does not know raises :class:`CompileError` naming the
construct and its template line: nothing is skipped silently.

The Python it writes reads like the template: ``{{ x }}`` becomes
``out.append(x)``, ``{% for message in messages %}`` a ``for`` loop,
``message.content`` becomes ``message["content"]``. Where Jinja and Python differ
the code calls a helper from :mod:`rllm_renderers.template_runtime` (imported as
``jinja``), e.g. ``jinja.trim(x)``, ``jinja.defined(x)``, ``jinja.tojson(x)``.

Jinja scoping is kept exact: a loop body is a fresh scope every iteration (a
``set`` inside it is invisible after the loop, and a name read before its ``set``
in an iteration sees the outer value), so names that would leak are renamed.
"""

from __future__ import annotations

import builtins
import keyword
from collections import Counter
from dataclasses import dataclass, field

from jinja2 import nodes

from .errors import CompileError

# Python operator precedence (higher binds tighter), for minimal parentheses.
PREC_CONDITIONAL = 1
PREC_OR = 2
PREC_AND = 3
PREC_NOT = 4
PREC_COMPARE = 5
PREC_ADD = 10
PREC_MUL = 11
PREC_UNARY = 12
PREC_POWER = 13
PREC_ATOM = 16

BINARY_OPERATORS = {
    nodes.Add: ("+", PREC_ADD),
    nodes.Sub: ("-", PREC_ADD),
    nodes.Mul: ("*", PREC_MUL),
    nodes.Div: ("/", PREC_MUL),
    nodes.FloorDiv: ("//", PREC_MUL),
    nodes.Mod: ("%", PREC_MUL),
    nodes.Pow: ("**", PREC_POWER),
}

COMPARE_OPERATORS = {
    "eq": "==",
    "ne": "!=",
    "gt": ">",
    "gteq": ">=",
    "lt": "<",
    "lteq": "<=",
    "in": "in",
    "notin": "not in",
}

INVERTED_COMPARE = {"eq": "ne", "ne": "eq", "in": "notin", "notin": "in"}

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
}

LOOP_ATTRIBUTES = {"index0", "index", "first", "last", "length", "revindex", "revindex0", "previtem", "nextitem"}

RESERVED_NAMES = set(keyword.kwlist) | set(dir(builtins)) | {"jinja", "out", "self", "json", "parts"}


@dataclass
class PyExpr:
    """A Python expression: its code, precedence and whether it is known to be a str."""

    code: str
    precedence: int = PREC_ATOM
    is_str: bool = False
    markup: bool = False  # may be a markupsafe.Markup (from `| safe`), whose `+` escapes


    def at_least(self, precedence: int) -> str:
        return self.code if self.precedence >= precedence else f"({self.code})"

    def as_str(self) -> str:
        """Code producing the Jinja string conversion of this value (``str(x)``)."""
        return self.code if self.is_str and not self.markup else f"str({self.code})"

    def as_output_piece(self) -> str:
        """This value as one operand of a ``+`` chain of plain strings."""
        if self.is_str and not self.markup:
            return self.at_least(PREC_ADD)
        return f"str({self.code})"


@dataclass
class LoopContext:
    """What the body of one ``{% for %}`` needs to translate ``loop.*``."""

    index: str  # Python name of the 0-based index, when loop attributes are used
    items: str  # code of the sequence iterated (for len / neighbours)
    uses: set[str]


@dataclass
class Scope:
    """Template name -> Python name, for one Jinja scope (template, loop body, macro)."""

    names: dict[str, str] = field(default_factory=dict)
    parent: "Scope | None" = None
    helpers: set[str] = field(default_factory=set)  # translator-made names live in this scope

    def visible_python_names(self) -> set[str]:
        names: set[str] = set()
        scope: Scope | None = self
        while scope is not None:
            names |= set(scope.names.values()) | scope.helpers
            scope = scope.parent
        return names

    def lookup(self, name: str) -> str | None:
        scope: Scope | None = self
        while scope is not None:
            if name in scope.names:
                return scope.names[name]
            scope = scope.parent
        return None


@dataclass
class TemplateNames:
    """How the template's free variables map to Python."""

    knobs: dict[str, str]  # knob name -> Python local name
    special_tokens: dict[str, str]  # special-token variable (bos_token) -> constant name (BOS_TOKEN)


class Translator:
    """Writes Python statements for a template body; see the module docstring."""

    def __init__(self, template_name: str, names: TemplateNames, *, indent: int = 2) -> None:
        self.template_name = template_name
        self.names = names
        self.lines: list[str] = []
        self.depth = indent
        self.scope = Scope()
        self.loops: list[LoopContext] = []
        self.namespaces: set[str] = set()
        self.macros: dict[str, str] = {}
        self.used_names: set[str] = set(RESERVED_NAMES) | set(TEMPLATE_INPUTS)
        self.used_names |= set(names.knobs.values()) | set(names.special_tokens.values())
        self.output = "out"  # the list-like object `{{ }}` appends to
        self.function_reads: Counter[str] = Counter()
        self.message_sources = {"messages"}  # names holding (slices of) the messages list
        self.unresolved: set[str] = set()  # free names that are not inputs: the template's knobs
        self.marking_messages = False  # inside the message loop (only the outermost one marks)
        self.methods: list[list[str]] = []  # role methods split out of the message loop
        self.method_names: set[str] = set()
        self.markup_possible = False  # the template uses `| safe`, the one source of Markup values
        self.markup_names: set[str] = set()  # template names that may hold a Markup
        self.markup_attributes: set[str] = set()  # namespace attributes that may hold one
        self.computed_names: set[str] = set()  # template names some `set` binds to a computed value
        self.computed_attributes: set[str] = set()  # namespace attributes some `set` binds to one
        self.namespace_names: set[str] = set()  # template names bound to a namespace()

    # --- writing -------------------------------------------------------------------

    def error(self, node: nodes.Node, what: str) -> CompileError:
        return CompileError(what, template=self.template_name, line=getattr(node, "lineno", None))

    def write(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def comment(self, node: nodes.Node, text: str) -> None:
        self.write(f"# L{node.lineno}: {text}")

    def fresh_name(self, wanted: str) -> str:
        """A Python name for ``wanted`` that collides with nothing visible here.

        Names of scopes that have ended may be reused: Jinja has forgotten them too.
        """
        base = wanted if wanted.isidentifier() else "value"
        if base in RESERVED_NAMES:
            base += "_"
        taken = self.used_names | self.scope.visible_python_names()
        name, counter = base, 1
        while name in taken:
            counter += 1
            name = f"{base}_{counter}"
        self.scope.helpers.add(name)
        return name

    # --- entry point --------------------------------------------------------------

    def translate_template(self, template: nodes.Template) -> list[str]:
        self.function_reads = count_reads(template.body)
        for name in TEMPLATE_INPUTS:
            self.scope.names[name] = name
        for name, local in self.names.knobs.items():
            self.scope.names[name] = local
        for name, constant in self.names.special_tokens.items():
            self.scope.names[name] = constant
        self.find_value_kinds(template)
        self.bind_template_names(template)
        self.block(template.body)
        return self.lines

    def find_value_kinds(self, template: nodes.Template) -> None:
        """Which names hold namespaces, computed values (not wrapped template data) or Markups."""
        assignments = list(template.find_all((nodes.Assign, nodes.AssignBlock)))
        self.namespace_names = {
            assign.target.name
            for assign in assignments
            if isinstance(assign, nodes.Assign) and isinstance(assign.target, nodes.Name)
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

    def bind_template_names(self, template: nodes.Template) -> None:
        """Bind, before the first statement, the top-level names something may read before their ``set``.

        A macro may call one defined after it (Jinja looks it up at call time). A loop, macro or set
        block that reads a top-level variable sees the template's own variable, never the context's:
        Undefined until its set runs (`{% if c %}{% set x = 1 %}{% endif %}{{ x }}` too). A name
        the top level itself reads before any set is a knob instead (the read leaves it unresolved).
        """
        macros = {macro.name: macro_reads(macro) for macro in template.find_all(nodes.Macro)}
        body = template.body
        for node in body:
            if isinstance(node, nodes.Macro) and node.name not in self.macros and self.scope.lookup(node.name) is None:
                function = self.fresh_name(f"macro_{node.name}")
                self.macros[node.name] = self.scope.names[node.name] = function
                if may_read_before_assignment(body, node.name) or macro_called_before_set(body, node.name, macros):
                    self.write(f"{function} = jinja.Undefined({node.name!r})")
        for name in sorted(assigned_names(body) - set(macros)):
            first = first_use(body, name)
            if self.scope.lookup(name) is not None or first == "read":
                continue
            early = may_read_before_assignment(body, name) or macro_called_before_set(body, name, macros)
            if first == "inner read" or early:
                local = self.assign_target(nodes.Name(name, "store"))
                if early:
                    self.write(f"{local} = jinja.Undefined({name!r})")

    def block(self, body: list[nodes.Node]) -> None:
        start = len(self.lines)
        for node in body:
            self.statement(node)
        if len(self.lines) == start:
            self.write("pass")

    def statement(self, node: nodes.Node) -> None:
        visitor = getattr(self, f"stmt_{type(node).__name__}", None)
        if visitor is None:
            raise self.error(node, f"cannot translate the statement {describe(node)}")
        visitor(node)

    # --- statements ---------------------------------------------------------------

    def stmt_Output(self, node: nodes.Output) -> None:
        children = [child for child in node.nodes if not (isinstance(child, nodes.TemplateData) and not child.data)]
        if len(children) == 1 and not isinstance(children[0], nodes.TemplateData):
            value = self.expr(children[0])
            # A lone string piece needs no str() even when it may be a Markup: there is nothing to escape.
            if value.code != repr(""):
                piece = value.at_least(PREC_ADD) if value.is_str else value.as_output_piece()
                self.write(f"{self.output}.append({piece})")
            return
        pieces = [self.output_piece(child) for child in node.nodes]
        pieces = [piece for piece in pieces if piece != repr("")]
        if pieces:
            self.write(f"{self.output}.append({' + '.join(pieces)})")

    def output_piece(self, node: nodes.Node) -> str:
        if isinstance(node, nodes.TemplateData):
            return repr(node.data)
        return self.expr(node).as_output_piece()

    def stmt_If(self, node: nodes.If) -> None:
        self.comment(node, "{% if %}")
        self.write(f"if {self.expr(node.test).code}:")
        self.indented_block(node.body)
        for elif_node in node.elif_:
            self.write(f"elif {self.expr(elif_node.test).code}:")
            self.indented_block(elif_node.body)
        if node.else_:
            self.write("else:")
            self.indented_block(node.else_)

    def indented_block(self, body: list[nodes.Node]) -> None:
        self.depth += 1
        self.block(body)
        self.depth -= 1

    def stmt_Assign(self, node: nodes.Assign) -> None:
        value = self.expr(node.node)
        if isinstance(node.target, nodes.NSRef):
            namespace = self.name_load(node.target.name, node.target)
            self.write(f"{namespace}.{node.target.attr} = {value.code}")
            return
        target = self.assign_target(node.target)
        if is_namespace_call(node.node) and isinstance(node.target, nodes.Name):
            self.namespaces.add(target)
        if isinstance(node.target, nodes.Name) and self.is_message_source(node.node):
            self.message_sources.add(target)
        self.write(f"{target} = {value.code}")

    def stmt_AssignBlock(self, node: nodes.AssignBlock) -> None:
        if node.filter is not None:
            raise self.error(node, "cannot translate a filtered {% set %} block")
        if not isinstance(node.target, nodes.Name):
            raise self.error(node, "cannot translate a {% set %} block with a non-name target")
        self.comment(node, "{% set " + node.target.name + " %} ... {% endset %}")
        parts = self.fresh_name(f"{node.target.name}_parts")
        self.write(f"{parts} = []")
        saved = self.output
        self.output = parts
        self.block(node.body)
        self.output = saved
        target = self.assign_target(node.target)
        self.write(f'{target} = "".join({parts})')

    def assign_target(self, target: nodes.Node) -> str:
        if isinstance(target, nodes.Name):
            existing = self.scope.names.get(target.name)
            if existing is None:
                existing = self.fresh_name(target.name)
                self.scope.names[target.name] = existing
            return existing
        if isinstance(target, nodes.Tuple):
            return ", ".join(self.assign_target(item) for item in target.items)
        raise self.error(target, f"cannot assign to {describe(target)}")

    def stmt_For(self, node: nodes.For) -> None:
        if node.recursive:
            raise self.error(node, "cannot translate a recursive {% for %} loop")
        uses = loop_attributes_used(node.body, self)
        if node.else_ or node.test is not None:
            uses = set(uses)
        self.comment(node, "{% for %}")
        iterable = self.expr(node.iter)
        items_code = iterable.code
        if node.test is not None:
            # `{% for x in xs if test %}`: loop attributes count the filtered items only.
            filtered = self.fresh_name("filtered")
            self.enter_scope(node, loop_target_only=True)
            target = self.assign_target(node.target)
            condition = self.expr(node.test).code
            self.leave_scope()
            element = f"({target})" if isinstance(node.target, nodes.Tuple) else target
            self.write(f"{filtered} = [{element} for {target} in {iterable.code} if {condition}]")
            items_code = filtered
        completed = ""
        if node.else_ and contains_loop_control(node.body):
            # Jinja runs `else` when no iteration reached the end of the body (`break`/`continue` skip it).
            completed = self.fresh_name("completed_iteration")
            self.write(f"{completed} = False")
        needs_sequence = uses & {"last", "length", "revindex", "revindex0", "nextitem"}
        needs_sequence = needs_sequence or (node.else_ and not completed)
        if needs_sequence and not items_code.isidentifier():
            sequence = self.fresh_name("items")
            self.write(f"{sequence} = list({items_code})")
            items_code = sequence
        marks_messages = (
            self.output == "out"
            and not self.marking_messages
            and isinstance(node.target, nodes.Name)
            and self.is_message_source(node.iter)
            and contains_output(node.body)
        )
        self.enter_scope(node)
        target = self.assign_target(node.target)
        if uses:
            if isinstance(node.target, nodes.Name):
                index = self.fresh_name(f"{target}_index")
                self.write(f"for {index}, {target} in enumerate({items_code}):")
            else:
                index = self.fresh_name("index")
                self.write(f"for {index}, ({target}) in enumerate({items_code}):")
        else:
            index = ""
            self.write(f"for {target} in {items_code}:")
        self.loops.append(LoopContext(index=index, items=items_code, uses=uses))
        self.depth += 1
        if marks_messages:
            self.write(f"out.mark_message({target})")
        self.initialise_scope_reads(node.body, target_names(node.target))
        if marks_messages:
            self.marking_messages = True
            self.message_loop_body(node)
            self.marking_messages = False
        else:
            self.block(node.body)
        if completed:
            self.write(f"{completed} = True")
        self.depth -= 1
        self.loops.pop()
        self.leave_scope()
        if marks_messages:
            self.write("out.mark_scaffold()")
        if node.else_:
            self.write(f"if not {completed or items_code}:")
            self.indented_block(node.else_)

    # --- role methods -------------------------------------------------------------------

    def message_loop_body(self, loop: nodes.For) -> None:
        """The message loop's body; a role dispatch in it becomes one method per role."""
        start = len(self.lines)
        for position, statement in enumerate(loop.body):
            rest = loop.body[position + 1 :]
            if isinstance(statement, nodes.If) and dispatched_roles(statement, loop.target.name):
                self.role_dispatch(statement, loop, rest)
            else:
                self.statement(statement)
        if len(self.lines) == start:
            self.write("pass")

    def role_dispatch(self, node: nodes.If, loop: nodes.For, rest: list[nodes.Node]) -> None:
        """``if role == 'user' ... elif role == 'assistant' ...`` with each branch in its own method."""
        self.comment(node, "{% if %} on the message's role")
        branches = [(node.test, node.body)] + [(elif_node.test, elif_node.body) for elif_node in node.elif_]
        keyword = "if"
        for test, body in branches:
            self.write(f"{keyword} {self.expr(test).code}:")
            self.depth += 1
            roles = branch_topics(test, loop.target.name)
            if not self.extract_branch(body, roles, loop, rest, test.lineno):
                self.block(body)
            self.depth -= 1
            keyword = "elif"
        if node.else_:
            self.write("else:")
            self.indented_block(node.else_)

    def extract_branch(self, body: list[nodes.Node], roles: list[str], loop, rest, line: int) -> bool:
        """Write ``body`` as a method and a call to it; False (nothing written) when that is unsafe."""
        if not roles or not body or contains_loop_control_here(body):
            return False
        if any(isinstance(node, nodes.Macro) for node in body):
            return False
        later_reads = count_reads(rest)
        if any(later_reads[name] for name in assigned_names(body)):
            return False  # the branch sets something the rest of the iteration reads
        name = self.fresh_method_name("render_" + "_or_".join(roles))
        enclosing = self.scope.visible_python_names() | self.bound_locals()  # before the body adds its own
        saved_lines, saved_depth = self.lines, self.depth
        self.lines, self.depth = [], 2
        self.block(body)
        method_body = self.lines
        self.lines, self.depth = saved_lines, saved_depth
        # names the branch sets before any read are the method's own locals; everything else it reads
        # (the message, loop index, namespaces, knobs, values set earlier in the iteration) is passed in
        own = {
            self.scope.lookup(name) or name
            for name in assigned_names(body)
            if not may_read_before_assignment(body, name)
        }
        parameters = method_parameters(method_body, enclosing - own)
        if parameters is not None:
            # the message and its loop index first, then the rest in order of first use
            leading = [self.scope.lookup(loop.target.name), self.loops[-1].index]
            parameters = [name for name in leading if name in parameters] + [
                name for name in parameters if name not in leading
            ]
        if parameters is None:
            return False
        call = ", ".join(["out", *parameters])
        self.write(f"self.{name}({call})")
        end_line = max(
            [statement.lineno for statement in body]
            + [n.lineno for statement in body for n in statement.find_all(nodes.Node) if n.lineno]
        )
        self.methods.append(
            [
                f"    def {name}(self, {call}):",
                f'        """The template\'s {" / ".join(roles)} branch of the message loop (lines {line}-{end_line})."""',
                *method_body,
            ]
        )
        return True

    def fresh_method_name(self, wanted: str) -> str:
        name, counter = wanted, 1
        while name in self.method_names:
            counter += 1
            name = f"{wanted}_{counter}"
        self.method_names.add(name)
        return name

    def bound_locals(self) -> set[str]:
        """Python names render_template binds besides template names (inputs, knobs, loop helpers)."""
        return set(TEMPLATE_INPUTS) | set(self.names.knobs.values()) | set(self.macros.values())

    def stmt_Macro(self, node: nodes.Macro) -> None:
        reads = count_reads(node.body)
        for forbidden in ("caller", "varargs", "kwargs"):
            if reads[forbidden]:
                raise self.error(node, f"cannot translate macro {node.name!r}: it uses {forbidden!r}")
        reserved = self.macros.get(node.name)  # by bind_template_names
        if reserved and self.scope.names.get(node.name) == reserved:
            function = reserved
        else:
            function = self.fresh_name(f"macro_{node.name}")
        self.macros[node.name] = function
        self.scope.names[node.name] = function
        self.comment(node, f"{{% macro {node.name} %}}")
        saved_reads, saved_output, saved_loops = self.function_reads, self.output, self.loops
        self.function_reads, self.loops = reads, []
        self.enter_scope(node)
        parameters, late_defaults = [], []
        defaults = [None] * (len(node.args) - len(node.defaults)) + list(node.defaults)
        for argument, default_node in zip(node.args, defaults):
            name = self.assign_target(argument)
            if default_node is None:
                parameters.append(f"{name}=jinja.Undefined({argument.name!r})")
            elif isinstance(default_node, nodes.Name) or any(True for _ in default_node.find_all(nodes.Name)):
                # Jinja evaluates a default at call time, where it sees the earlier arguments.
                parameters.append(f"{name}=jinja.MISSING")
                late_defaults.append((name, default_node))
            else:
                parameters.append(f"{name}={self.expr(default_node).code}")
        self.write(f"def {function}({', '.join(parameters)}):")
        self.depth += 1
        for name, default_node in late_defaults:
            self.write(f"if {name} is jinja.MISSING:")
            self.write(f"    {name} = {self.expr(default_node).code}")
        parts = self.fresh_name("parts")
        self.output = parts
        self.write(f"{parts} = []")
        self.initialise_scope_reads(node.body, {argument.name for argument in node.args})
        self.block(node.body)
        self.write(f'return "".join({parts})')
        self.depth -= 1
        self.leave_scope()
        self.function_reads, self.output, self.loops = saved_reads, saved_output, saved_loops

    def stmt_CallBlock(self, node: nodes.CallBlock) -> None:
        call = node.call
        if isinstance(call, nodes.Call) and isinstance(call.node, nodes.ExtensionAttribute):
            if call.node.name == "_generation_support":
                # transformers' {% generation %} marks the assistant's own tokens; it renders its body.
                self.comment(node, "{% generation %}: the assistant's sampled tokens")
                self.block(node.body)
                return
        raise self.error(node, "cannot translate a {% call %} block")

    def stmt_ExprStmt(self, node: nodes.ExprStmt) -> None:
        self.write(self.expr(node.node).code)

    def stmt_Break(self, node: nodes.Break) -> None:
        self.write("break")

    def stmt_Continue(self, node: nodes.Continue) -> None:
        self.write("continue")

    # --- scopes -------------------------------------------------------------------

    def enter_scope(self, node: nodes.Node, *, loop_target_only: bool = False) -> None:
        """Open a Jinja scope (loop body or macro) and rename names that would leak."""
        scope = Scope(parent=self.scope)
        if isinstance(node, nodes.For):
            assigned = target_names(node.target)
            if not loop_target_only:
                assigned |= assigned_names(node.body)
            body_reads = count_reads(node.body)
            for name in target_names(node.target):
                body_reads[name] = 0  # reads of the loop variable outside this loop are all outside
        else:
            assigned = {argument.name for argument in node.args} | assigned_names(node.body)
            body_reads = Counter()
        for name in sorted(assigned):
            outer = self.scope.lookup(name)
            read_outside = self.function_reads[name] > body_reads[name]
            if outer is None and not read_outside:
                continue  # the name is new and never read elsewhere: no rename needed
            scope.names[name] = self.fresh_name(name)
        self.scope = scope

    def leave_scope(self) -> None:
        assert self.scope.parent is not None
        self.scope = self.scope.parent

    def initialise_scope_reads(self, body: list[nodes.Node], bound: set[str]) -> None:
        """A name read before its ``set`` in this scope sees the outer value (or Undefined)."""
        macros = {node.name: macro_reads(node) for node in body if isinstance(node, nodes.Macro)}
        for name in sorted(assigned_names(body) - bound):
            if not may_read_before_assignment(body, name):
                if macro_called_before_set(body, name, macros):  # a macro of this scope sees no outer value
                    local = self.scope.names.get(name) or self.assign_target(nodes.Name(name, "store"))
                    self.write(f"{local} = jinja.Undefined({name!r})")
                continue
            local = self.scope.names.get(name) or self.assign_target(nodes.Name(name, "store"))
            parent = self.scope.parent
            outer = parent.lookup(name) if parent else None
            if outer is None:
                saved, self.scope = self.scope, parent or self.scope
                outer = self.name_load(name, body[0])
                self.scope = saved
            self.write(f"{local} = {outer}")

    def find_markup_names(self, template: nodes.Template) -> None:
        """Names, namespace attributes and macro parameters that may hold a Markup (to a fixed point)."""
        macros = {macro.name: macro for macro in template.find_all(nodes.Macro)}
        calls = [
            call
            for call in template.find_all(nodes.Call)
            if isinstance(call.node, nodes.Name) and call.node.name in macros
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
            for call in calls:
                if any(self.markup_node(argument) for argument in [*call.args, *(k.value for k in call.kwargs)]):
                    self.markup_names |= {argument.name for argument in macros[call.node.name].args}
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
        return PyExpr(repr(node.value), is_str=isinstance(node.value, str))

    def expr_TemplateData(self, node: nodes.TemplateData) -> PyExpr:
        return PyExpr(repr(node.data), is_str=True)

    def expr_Name(self, node: nodes.Name) -> PyExpr:
        if node.name == "loop":
            raise self.error(node, "cannot translate `loop` used as a value")
        code = self.name_load(node.name, node)
        return PyExpr(code, is_str=code in self.names.special_tokens.values())

    def name_load(self, name: str, node: nodes.Node) -> str:
        local = self.scope.lookup(name)
        if local is not None:
            return local
        if name in GLOBAL_FUNCTIONS:
            return GLOBAL_FUNCTIONS[name]
        if name in ("true", "false", "none", "True", "False", "None"):
            return {"true": "True", "false": "False", "none": "None"}.get(name, name)
        self.unresolved.add(name)
        return f"jinja.Undefined({name!r})"

    def expr_List(self, node: nodes.List) -> PyExpr:
        return PyExpr("[" + ", ".join(self.expr(item).code for item in node.items) + "]")

    def expr_Tuple(self, node: nodes.Tuple) -> PyExpr:
        items = [self.expr(item).code for item in node.items]
        return PyExpr("(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")")

    def expr_Dict(self, node: nodes.Dict) -> PyExpr:
        pairs = [f"{self.expr(pair.key).code}: {self.expr(pair.value).code}" for pair in node.items]
        return PyExpr("{" + ", ".join(pairs) + "}")

    def expr_CondExpr(self, node: nodes.CondExpr) -> PyExpr:
        then = self.expr(node.expr1)
        otherwise = self.expr(node.expr2) if node.expr2 is not None else PyExpr("jinja.Undefined()")
        test = self.expr(node.test)
        code = f"{then.at_least(PREC_OR)} if {test.at_least(PREC_OR)} else {otherwise.at_least(PREC_CONDITIONAL)}"
        return PyExpr(
            code, PREC_CONDITIONAL, is_str=then.is_str and otherwise.is_str, markup=then.markup or otherwise.markup
        )

    def expr_And(self, node: nodes.And) -> PyExpr:
        return PyExpr(f"{self.expr(node.left).at_least(PREC_AND)} and {self.expr(node.right).at_least(PREC_AND + 1)}", PREC_AND)

    def expr_Or(self, node: nodes.Or) -> PyExpr:
        # `a or (b and c)`: parentheses Python does not need but a reader does.
        left, right = self.expr(node.left), self.expr(node.right)
        return PyExpr(f"{left.at_least(PREC_OR + 2)} or {right.at_least(PREC_OR + 2)}", PREC_OR)

    def expr_Not(self, node: nodes.Not) -> PyExpr:
        inner = node.node
        if isinstance(inner, nodes.Test) and inner.name == "none" and not inner.args:
            return PyExpr(f"{self.expr(inner.node).at_least(PREC_COMPARE + 1)} is not None", PREC_COMPARE)
        if isinstance(inner, nodes.Test) and inner.name in ("true", "false") and not inner.args:
            return PyExpr(f"{self.expr(inner.node).at_least(PREC_COMPARE + 1)} is not {inner.name.title()}", PREC_COMPARE)
        if isinstance(inner, nodes.Getattr) and isinstance(inner.node, nodes.Name) and inner.node.name == "loop":
            if inner.attr in ("first", "last"):
                positive = self.loop_attribute(inner)
                return PyExpr(positive.code.replace(" == ", " != ", 1), PREC_COMPARE)
        if isinstance(inner, nodes.Compare) and len(inner.ops) == 1 and inner.ops[0].op in INVERTED_COMPARE:
            inverted = nodes.Compare(inner.expr, [nodes.Operand(INVERTED_COMPARE[inner.ops[0].op], inner.ops[0].expr)])
            return self.expr_Compare(inverted)
        return PyExpr(f"not {self.expr(inner).at_least(PREC_NOT)}", PREC_NOT)

    def expr_Neg(self, node: nodes.Neg) -> PyExpr:
        return PyExpr(f"-{self.expr(node.node).at_least(PREC_UNARY)}", PREC_UNARY)

    def expr_Pos(self, node: nodes.Pos) -> PyExpr:
        return PyExpr(f"+{self.expr(node.node).at_least(PREC_UNARY)}", PREC_UNARY)

    def binary(self, node: nodes.BinExpr) -> PyExpr:
        operator, precedence = BINARY_OPERATORS[type(node)]
        left, right = self.expr(node.left), self.expr(node.right)
        if operator == "**":  # right-associative
            code = f"{left.at_least(precedence + 1)} ** {right.at_least(precedence)}"
        else:
            code = f"{left.at_least(precedence)} {operator} {right.at_least(precedence + 1)}"
        return PyExpr(
            code,
            precedence,
            is_str=operator == "+" and (left.is_str or right.is_str),
            markup=left.markup or right.markup,
        )

    expr_Add = expr_Sub = expr_Mul = expr_Div = expr_FloorDiv = expr_Mod = expr_Pow = binary

    def expr_Concat(self, node: nodes.Concat) -> PyExpr:
        pieces = []
        for child in node.nodes:
            value = self.expr(child)
            pieces.append(value.as_output_piece())
        return PyExpr(" + ".join(pieces), PREC_ADD, is_str=True)

    def expr_Compare(self, node: nodes.Compare) -> PyExpr:
        parts = [self.expr(node.expr).at_least(PREC_COMPARE + 1)]
        for operand in node.ops:
            parts.append(COMPARE_OPERATORS[operand.op])
            parts.append(self.expr(operand.expr).at_least(PREC_COMPARE + 1))
        return PyExpr(" ".join(parts), PREC_COMPARE)

    def expr_Getattr(self, node: nodes.Getattr) -> PyExpr:
        if isinstance(node.node, nodes.Name) and node.node.name == "loop":
            return self.loop_attribute(node)
        target = self.expr(node.node)
        if target.code in self.namespaces or node.attr in DICT_METHODS:
            return PyExpr(f"{target.at_least(PREC_ATOM)}.{node.attr}")
        if self.is_computed(node.node):
            # Not template data (a literal, a method's or filter's result): Jinja's lookup rules in full.
            return PyExpr(f"jinja.getattribute({target.code}, {node.attr!r})")
        return PyExpr(f"{target.at_least(PREC_ATOM)}[{node.attr!r}]")

    def expr_Getitem(self, node: nodes.Getitem) -> PyExpr:
        value = self.expr(node.node)
        target = value.at_least(PREC_ATOM)
        if isinstance(node.arg, nodes.Slice):
            parts = [self.expr(part).code if part is not None else "" for part in (node.arg.start, node.arg.stop)]
            code = ":".join(parts)
            if node.arg.step is not None:
                code += ":" + self.expr(node.arg.step).code
            return PyExpr(f"{target}[{code}]")
        if self.is_computed(node.node) and not is_split_end(node):
            # An out-of-range index or missing key of a computed value is Undefined in Jinja.
            return PyExpr(f"jinja.getitem({value.code}, {self.expr(node.arg).code})")
        return PyExpr(f"{target}[{self.expr(node.arg).code}]")

    def loop_attribute(self, node: nodes.Getattr) -> PyExpr:
        if not self.loops:
            raise self.error(node, "`loop` used outside a {% for %} loop")
        loop = self.loops[-1]
        index, items = loop.index, loop.items
        attribute = node.attr
        if attribute == "index0":
            return PyExpr(index)
        if attribute == "index":
            return PyExpr(f"{index} + 1", PREC_ADD)
        if attribute == "first":
            return PyExpr(f"{index} == 0", PREC_COMPARE)
        if attribute == "last":
            return PyExpr(f"{index} == len({items}) - 1", PREC_COMPARE)
        if attribute == "length":
            return PyExpr(f"len({items})")
        if attribute == "revindex0":
            return PyExpr(f"len({items}) - {index} - 1", PREC_ADD)
        if attribute == "revindex":
            return PyExpr(f"len({items}) - {index}", PREC_ADD)
        if attribute == "previtem":
            return PyExpr(f"{items}[{index} - 1] if {index} > 0 else jinja.Undefined('previtem')", PREC_CONDITIONAL)
        if attribute == "nextitem":
            return PyExpr(
                f"{items}[{index} + 1] if {index} + 1 < len({items}) else jinja.Undefined('nextitem')",
                PREC_CONDITIONAL,
            )
        raise self.error(node, f"cannot translate loop.{attribute}")

    def expr_Call(self, node: nodes.Call) -> PyExpr:
        if node.dyn_args is not None or node.dyn_kwargs is not None:
            raise self.error(node, "cannot translate a call with *args or **kwargs")
        arguments = [self.expr(argument).code for argument in node.args]
        arguments += [f"{keyword.key}={self.expr(keyword.value).code}" for keyword in node.kwargs]
        joined = ", ".join(arguments)
        if isinstance(node.node, nodes.Getattr) and not (
            isinstance(node.node.node, nodes.Name) and node.node.node.name == "loop"
        ):
            target = self.expr(node.node.node)
            return PyExpr(f"{target.at_least(PREC_ATOM)}.{node.node.attr}({joined})")
        if isinstance(node.node, nodes.Name):
            name = node.node.name
            function = self.name_load(name, node)
            if function.startswith("jinja.Undefined("):
                raise self.error(node, f"cannot translate a call to the unknown function {name!r}")
            is_str = name in self.macros
            return PyExpr(f"{function}({joined})", is_str=is_str)
        raise self.error(node, f"cannot translate a call of {describe(node.node)}")

    def expr_Test(self, node: nodes.Test) -> PyExpr:
        value = self.expr(node.node)
        arguments = [self.expr(argument) for argument in node.args]
        if node.kwargs or node.dyn_args or node.dyn_kwargs:
            raise self.error(node, f"cannot translate the test `is {node.name}` with keyword arguments")
        name = node.name
        operand = value.at_least(PREC_COMPARE + 1)
        if name == "defined":
            return PyExpr(f"jinja.defined({value.code})")
        if name == "undefined":
            return PyExpr(f"not jinja.defined({value.code})", PREC_NOT)
        if name == "none":
            return PyExpr(f"{operand} is None", PREC_COMPARE)
        if name in ("true", "false"):
            return PyExpr(f"{operand} is {name.title()}", PREC_COMPARE)
        if name == "string":
            return PyExpr(f"isinstance({value.code}, str)")
        if name == "mapping":
            return PyExpr(f"isinstance({value.code}, dict)")
        if name == "float":
            return PyExpr(f"isinstance({value.code}, float)")
        if name in ("sequence", "iterable", "number", "boolean", "integer"):
            return PyExpr(f"jinja.is_{name}({value.code})")
        if name in ("equalto", "eq", "==", "sameas", "ne", "!=", "in") and len(arguments) == 1:
            operator = {"sameas": "is", "ne": "!=", "!=": "!=", "in": "in"}.get(name, "==")
            return PyExpr(f"{operand} {operator} {arguments[0].at_least(PREC_COMPARE + 1)}", PREC_COMPARE)
        if name in ("odd", "even") and not arguments:
            return PyExpr(f"{value.at_least(PREC_MUL + 1)} % 2 == {1 if name == 'odd' else 0}", PREC_COMPARE)
        if name == "divisibleby" and len(arguments) == 1:
            return PyExpr(f"{value.at_least(PREC_MUL + 1)} % {arguments[0].at_least(PREC_MUL + 1)} == 0", PREC_COMPARE)
        if name in ("lower", "upper") and not arguments:
            return PyExpr(f"str({value.code}).is{name}()")
        raise self.error(node, f"cannot translate the test `is {name}`")

    def expr_Filter(self, node: nodes.Filter) -> PyExpr:
        if node.node is None:
            raise self.error(node, "cannot translate a {% filter %} block")
        if node.dyn_args or node.dyn_kwargs:
            raise self.error(node, f"cannot translate the filter `{node.name}` with *args or **kwargs")
        value = self.expr(node.node)
        arguments = [self.expr(argument).code for argument in node.args]
        keywords = {keyword.key: self.expr(keyword.value).code for keyword in node.kwargs}
        name = node.name
        extra = "".join(f", {argument}" for argument in arguments) + "".join(
            f", {key}={code}" for key, code in keywords.items()
        )
        if name in ("length", "count") and not arguments:
            return PyExpr(f"len({value.code})")
        if name == "string":
            if value.markup:  # Jinja's soft_str keeps a Markup
                return PyExpr(f"jinja.soft_str({value.code})", is_str=True, markup=True)
            return PyExpr(value.as_str(), is_str=True) if value.is_str else PyExpr(f"str({value.code})", is_str=True)
        if name == "list":
            return PyExpr(f"list({value.code})")
        if name == "abs":
            return PyExpr(f"abs({value.code})")
        if name == "safe":
            return PyExpr(f"jinja.mark_safe({value.code})", is_str=True, markup=True)
        if name in ("int", "float"):
            return PyExpr(f"jinja.to_{name}({value.code}{extra})")
        if name in ("d", "default"):
            return PyExpr(f"jinja.default({value.code}{extra})")
        if name == "selectattr":
            return PyExpr(f"jinja.select_attr({value.code}{extra})")
        if name == "rejectattr":
            return PyExpr(f"jinja.reject_attr({value.code}{extra})")
        if name == "map":
            return self.map_filter(node, value, arguments, keywords)
        if name in SIMPLE_FILTERS:
            markup = name in SOFT_STR_FILTERS and value.markup
            return PyExpr(f"jinja.{name}({value.code}{extra})", is_str=name in STRING_FILTERS, markup=markup)
        raise self.error(node, f"cannot translate the filter `{name}`")

    def map_filter(self, node: nodes.Filter, value: PyExpr, arguments: list[str], keywords: dict) -> PyExpr:
        if "attribute" in keywords and not arguments:
            extra = f", default={keywords['default']}" if "default" in keywords else ""
            return PyExpr(f"jinja.map_attribute({value.code}, {keywords['attribute']}{extra})")
        if arguments and not keywords and isinstance(node.args[0], nodes.Const):
            filter_name = node.args[0].value
            if filter_name in SIMPLE_FILTERS:
                rest = "".join(f", {argument}" for argument in arguments[1:])
                return PyExpr(f"jinja.map_filter({value.code}, jinja.{filter_name}{rest})")
        raise self.error(node, "cannot translate this use of the `map` filter")


# Filters implemented by a same-named helper in template_runtime.
SIMPLE_FILTERS = {
    "tojson",
    "trim",
    "upper",
    "lower",
    "capitalize",
    "title",
    "items",
    "dictsort",
    "join",
    "replace",
    "first",
    "last",
    "sort",
    "unique",
    "select",
    "reject",
}

# Filters whose result is never a Markup, whatever their input.
PLAIN_RESULT_FILTERS = {"tojson", "join", "replace", "title", "length", "count", "int", "float", "abs", "items"}

# Filters that keep a Markup a Markup (Jinja's ``soft_str``).
SOFT_STR_FILTERS = {"trim", "upper", "lower", "capitalize"}

DICT_METHODS = {name for name in dir(dict) if not name.startswith("_")}


# --- AST queries -----------------------------------------------------------------------


def role_accessed(node: nodes.Node, target: str) -> bool:
    """Whether ``node`` is ``<target>.role`` or ``<target>['role']``."""
    if isinstance(node, nodes.Getattr) and node.attr == "role":
        return isinstance(node.node, nodes.Name) and node.node.name == target
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) and node.arg.value == "role":
        return isinstance(node.node, nodes.Name) and node.node.name == target
    return False


def positive_compares(test: nodes.Node) -> list[nodes.Compare]:
    """``==`` / ``in`` comparisons that make ``test`` true (not those under ``not``)."""
    if isinstance(test, nodes.Compare):
        return [test] if all(operand.op in ("eq", "in") for operand in test.ops) else []
    if isinstance(test, (nodes.And, nodes.Or)):
        return positive_compares(test.left) + positive_compares(test.right)
    return []


def roles_in_test(test: nodes.Node, target: str) -> list[str]:
    """Role names a test selects the loop message by (``role == 'user' or ...``), in order."""
    roles: list[str] = []
    for compare in positive_compares(test):
        operands = [compare.expr] + [operand.expr for operand in compare.ops]
        if any(role_accessed(operand, target) for operand in operands):
            for operand in operands:
                if isinstance(operand, nodes.Const) and isinstance(operand.value, str) and operand.value.isidentifier():
                    if operand.value not in roles:
                        roles.append(operand.value)
    return roles


def branch_topics(test: nodes.Node, target: str) -> list[str]:
    """What a branch of the role dispatch handles, for its method name.

    The roles it selects; else ``tool_calls`` when it tests the message's tool calls; else
    ``other`` when it is the negation of role tests (Llama's "everything but tool messages").
    """
    roles = roles_in_test(test, target)
    if roles:
        return roles
    if isinstance(test, nodes.Not) and any(role_accessed(node, target) for node in test.find_all(nodes.Node)):
        return ["other"]
    for node in [test, *test.find_all(nodes.Node)]:
        if isinstance(node, nodes.Const) and node.value == "tool_calls":
            return ["tool_calls"]
        if isinstance(node, nodes.Getattr) and node.attr == "tool_calls":
            return ["tool_calls"]
    return []


def dispatched_roles(node: nodes.If, target: str) -> bool:
    """Whether an ``{% if %}`` chain dispatches on the loop message's role (two branches or more)."""
    tests = [node.test] + [elif_node.test for elif_node in node.elif_]
    with_roles = sum(1 for test in tests if roles_in_test(test, target))
    return len(tests) >= 2 and with_roles >= 1 and sum(1 for test in tests if branch_topics(test, target)) >= 2


def contains_loop_control_here(body: list[nodes.Node]) -> bool:
    """``break`` / ``continue`` of the enclosing loop (not of loops nested in ``body``)."""

    def visit(node: nodes.Node) -> bool:
        if isinstance(node, (nodes.Break, nodes.Continue)):
            return True
        if isinstance(node, (nodes.For, nodes.Macro)):
            return False
        return any(visit(child) for child in node.iter_child_nodes())

    return any(visit(statement) for statement in body)


def method_parameters(body_lines: list[str], enclosing: set[str]) -> list[str] | None:
    """Names a method body reads that render_template binds, in order of first use.

    None when the body cannot stand alone (it assigns a name it must hand back).
    """
    import ast as python_ast
    import textwrap

    tree = python_ast.parse(textwrap.dedent("\n".join(body_lines)))
    parameters: list[str] = []
    for node in python_ast.walk(tree):
        if isinstance(node, python_ast.Name) and node.id in enclosing and node.id != "out" and node.id not in parameters:
            parameters.append(node.id)
        if isinstance(node, (python_ast.Nonlocal, python_ast.Global)):
            return None
    positions = {}
    for node in python_ast.walk(tree):
        if isinstance(node, python_ast.Name) and node.id in parameters:
            positions.setdefault(node.id, (node.lineno, node.col_offset))
    return sorted(parameters, key=lambda name: positions[name])


def describe(node: nodes.Node) -> str:
    """A short human name for a node, for error messages."""
    names = {
        "For": "{% for %}",
        "If": "{% if %}",
        "Macro": "{% macro %}",
        "CallBlock": "{% call %}",
        "FilterBlock": "{% filter %}",
        "With": "{% with %}",
        "Include": "{% include %}",
        "Import": "{% import %}",
        "FromImport": "{% from ... import %}",
        "Extends": "{% extends %}",
        "Block": "{% block %}",
        "Scope": "{% scope %}",
    }
    return names.get(type(node).__name__, type(node).__name__)


def is_namespace_call(node: nodes.Node) -> bool:
    return isinstance(node, nodes.Call) and isinstance(node.node, nodes.Name) and node.node.name == "namespace"


def target_names(target: nodes.Node) -> set[str]:
    if isinstance(target, nodes.Name):
        return {target.name}
    if isinstance(target, nodes.Tuple):
        return set().union(*(target_names(item) for item in target.items))
    return set()


def assigned_names(body: list[nodes.Node]) -> set[str]:
    """Names a scope's own statements assign (not those of nested loops or macros)."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, (nodes.Assign, nodes.AssignBlock)):
            names |= target_names(node.target)
        elif isinstance(node, nodes.If):
            names |= assigned_names(node.body) | assigned_names(node.else_)
            for elif_node in node.elif_:
                names |= assigned_names(elif_node.body)
        elif isinstance(node, nodes.CallBlock):
            names |= assigned_names(node.body)
        elif isinstance(node, nodes.Macro):
            names.add(node.name)
    return names


def count_reads(body: list[nodes.Node]) -> Counter[str]:
    """How often each name is read under ``body``, not counting reads inside a nested
    ``{% for %}`` whose loop variable has that name (those read the loop variable)."""
    reads: Counter[str] = Counter()

    def visit(node: nodes.Node, bound: frozenset[str]) -> None:
        if isinstance(node, nodes.Name) and node.ctx == "load" and node.name not in bound:
            reads[node.name] += 1
        elif isinstance(node, nodes.NSRef) and node.name not in bound:
            reads[node.name] += 1
        if isinstance(node, nodes.For):
            visit(node.iter, bound)
            inner = bound | target_names(node.target)
            for child in [*node.body, *node.else_] + ([node.test] if node.test is not None else []):
                visit(child, inner)
            return
        for child in node.iter_child_nodes():
            visit(child, bound)

    for statement in body:
        visit(statement, frozenset())
    return reads


def is_split_end(node: nodes.Getitem) -> bool:
    """``s.split(sep)[0]`` or ``[-1]``: always present (split never returns an empty list)."""
    call, index = node.node, node.arg
    if isinstance(index, nodes.Neg) and isinstance(index.node, nodes.Const) and index.node.value == 1:
        index = nodes.Const(-1)
    return (
        isinstance(call, nodes.Call)
        and isinstance(call.node, nodes.Getattr)
        and call.node.attr in ("split", "rsplit")
        and len(call.args) >= 1
        and not (isinstance(call.args[0], nodes.Const) and call.args[0].value is None)
        and isinstance(index, nodes.Const)
        and index.value in (0, -1)
    )


def contains_loop_control(body: list[nodes.Node]) -> bool:
    """Whether a ``{% break %}`` or ``{% continue %}`` of this loop (not of a nested one) is in ``body``."""

    def visit(node: nodes.Node) -> bool:
        if isinstance(node, (nodes.Break, nodes.Continue)):
            return True
        if isinstance(node, nodes.For):  # its body's controls are its own; its else block's are ours
            return any(visit(child) for child in node.else_)
        return any(visit(child) for child in node.iter_child_nodes())

    return any(visit(node) for node in body)


def contains_output(body: list[nodes.Node]) -> bool:
    return any(isinstance(node, nodes.Output) or any(True for _ in node.find_all(nodes.Output)) for node in body)


def loop_attributes_used(body: list[nodes.Node], translator: Translator) -> set[str]:
    """``loop.*`` attributes read by this loop's body (not by nested loops)."""
    used: set[str] = set()

    def visit(node: nodes.Node) -> None:
        if isinstance(node, nodes.Getattr) and isinstance(node.node, nodes.Name) and node.node.name == "loop":
            if node.attr not in LOOP_ATTRIBUTES:
                raise translator.error(node, f"cannot translate loop.{node.attr}")
            used.add(node.attr)
            return
        if isinstance(node, nodes.For):
            visit(node.iter)
            return
        for child in node.iter_child_nodes():
            visit(child)

    for statement in body:
        visit(statement)
    return used


def _reads(node: nodes.Node, name: str) -> bool:
    if isinstance(node, nodes.Name):
        return node.name == name and node.ctx == "load"
    return any(n.name == name and n.ctx == "load" for n in node.find_all(nodes.Name)) or any(
        ref.name == name for ref in node.find_all(nodes.NSRef)
    )


def macro_reads(macro: nodes.Macro) -> Counter[str]:
    """Names a macro reads from outside: not its parameters."""
    reads = count_reads([*macro.defaults, *macro.body])
    for argument in macro.args:
        del reads[argument.name]
    return reads


def macro_called_before_set(body: list[nodes.Node], name: str, macros: dict[str, Counter[str]]) -> bool:
    """Whether a macro reading ``name`` (directly or through another macro) may be called before
    the first unconditional ``set`` (or macro definition) of ``name`` in ``body``."""
    readers = {macro for macro, reads in macros.items() if reads[name]}
    while True:
        more = {macro for macro, reads in macros.items() if any(reads[reader] for reader in readers)} - readers
        if not more:
            break
        readers |= more
    if not readers:
        return False
    for node in body:
        if isinstance(node, nodes.Macro):  # defining a macro calls nothing
            if node.name == name:
                return False
            continue
        if any(isinstance(call.node, nodes.Name) and call.node.name in readers for call in node.find_all(nodes.Call)):
            return True
        if isinstance(node, (nodes.Assign, nodes.AssignBlock)) and name in target_names(node.target):
            return False
    return False


def first_use(body: list[nodes.Node], name: str) -> str | None:
    """In template order, the first use of ``name`` in ``body``: "read" (in the frame of ``body``
    itself: Jinja then looks the name up in the context), "inner read" (in a loop, macro or set
    block: Jinja does not), "set", or None."""

    def visit(node: nodes.Node, inner: bool) -> str | None:
        if isinstance(node, (nodes.Name, nodes.NSRef)) and node.name == name:
            if isinstance(node, nodes.Name) and node.ctx != "load":
                return "set"
            return "inner read" if inner else "read"
        if isinstance(node, nodes.Assign):  # the value is evaluated before the target is bound
            return visit(node.node, inner) or visit(node.target, inner)
        if isinstance(node, nodes.Macro):
            if node.name == name:
                return "set"
            if name in {argument.name for argument in node.args}:
                return None
            return first_of([*node.defaults, *node.body], True)
        if isinstance(node, nodes.For):
            if name in target_names(node.target):
                return visit(node.iter, inner)
            return visit(node.iter, inner) or first_of([*([node.test] if node.test else []), *node.body], True)
        if isinstance(node, (nodes.AssignBlock, nodes.CallBlock)):
            event = first_of(node.body, True)
            if event is None and isinstance(node, nodes.AssignBlock):
                return visit(node.target, inner)
            return event
        return first_of(list(node.iter_child_nodes()), inner)

    def first_of(children: list[nodes.Node], inner: bool) -> str | None:
        for child in children:
            event = visit(child, inner)
            if event:
                return event
        return None

    return first_of(body, False)


def may_read_before_assignment(body: list[nodes.Node], name: str) -> bool:
    """Whether some path through ``body`` reads ``name`` before assigning it."""

    def scan(statements: list[nodes.Node], assigned: bool) -> tuple[bool, bool]:
        for node in statements:
            if isinstance(node, nodes.If):
                if not assigned and _reads(node.test, name):
                    return True, assigned
                branches = [node.body] + [elif_node.body for elif_node in node.elif_] + [node.else_]
                if not assigned and any(_reads(elif_node.test, name) for elif_node in node.elif_):
                    return True, assigned
                results = [scan(branch, assigned) for branch in branches]
                if any(bad for bad, _ in results):
                    return True, assigned
                assigned = all(done for _, done in results)
            elif isinstance(node, nodes.Assign):
                if not assigned and _reads(node.node, name):
                    return True, assigned
                if isinstance(node.target, nodes.NSRef) and node.target.name == name and not assigned:
                    return True, assigned
                assigned = assigned or name in target_names(node.target)
            elif isinstance(node, nodes.AssignBlock):
                bad, _ = scan(node.body, assigned)
                if bad:
                    return True, assigned
                assigned = assigned or name in target_names(node.target)
            elif isinstance(node, nodes.Macro):  # its body runs when called; its definition binds its name
                assigned = assigned or node.name == name
            elif isinstance(node, nodes.For):
                # The body reads the outer value only before its own set (a loop's sets stay inside it).
                reads = _reads(node.iter, name) or any(_reads(child, name) for child in node.else_)
                if name not in target_names(node.target):
                    reads = reads or (node.test is not None and _reads(node.test, name))
                    reads = reads or may_read_before_assignment(node.body, name)
                if not assigned and reads:
                    return True, assigned
            elif not assigned and _reads(node, name):
                return True, assigned
        return False, assigned

    return scan(body, False)[0]
