"""Lower a parsed chat template (jinja2 AST) to the translator's IR (:mod:`.ir`).

A visitor with one method per node type: statements here (they add IR statements to the
current block), expressions in :mod:`.expressions` (they return a :class:`PyExpr`, a
Python ``ast`` expression with what is known about its value), value kinds (Markup,
computed data, message text) in :mod:`.values`. Every node type the visitor does not
know raises :class:`CompileError` naming the construct and its template line: nothing is
skipped silently.

The result reads like the template: ``{{ x }}`` becomes ``out.append(x)``,
``{% for message in messages %}`` a ``for`` loop, ``message.content`` becomes
``message["content"]``. Where Jinja and Python differ the code calls a helper from
:mod:`rllm_renderers.jinja.runtime` (imported as ``jinja``): the filters and tests
of its ``FILTERS`` / ``TESTS`` / ``GLOBALS`` registry (``jinja.is_defined(x)``, ...).

Jinja scoping is kept exact: a loop body is a fresh scope every iteration (a ``set``
inside it is invisible after the loop, and a name read before its ``set`` in an
iteration sees the outer value), so names that would leak are renamed.
"""

from __future__ import annotations

import ast
import builtins
import keyword
from collections import Counter
from typing import Callable

from jinja2 import nodes

from ..errors import CompileError
from . import ir
from .expressions import (
    GLOBAL_FUNCTIONS,
    ExpressionLowering,
    LoopContext,
    PyExpr,
    TemplateNames,
    add_operands,
    is_pure_test,
    is_raise_exception,
    joined,
    string_checked_name,
    undefined,
)
from .branch_names import branch_method_name, digest_name, header_name, loop_name
from .emit_py import statement_lines
from .index_loops import as_message_loop
from .ir import Piece, attribute, call, const, jinja, name, store
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
    loop_attributes_used,
    loop_control_of_this_loop,
    macro_called_before_set,
    macro_reads,
    may_read_before_assignment,
    statements_mentioning,
    scope_macros,
    target_names,
)
from .values import ValueKinds

# Template inputs that apply_chat_template passes besides knobs and special tokens.
TEMPLATE_INPUTS = ("messages", "tools", "documents", "add_generation_prompt")

RESERVED_NAMES = set(keyword.kwlist) | set(dir(builtins)) | {"jinja", "out", "self", "json", "parts"}


# Globals whose value is not a function of the arguments: a macro calling one is not memoized.
IMPURE_READS = frozenset({"strftime_now", "caller"})


def pure_macros(hoisted: dict[str, str], macros: dict[str, Counter[str]]) -> set[str]:
    """Hoisted macros whose text is a function of their arguments alone: they read no
    ``strftime_now`` (the clock) and no ``caller`` (the call block's body), and call only macros
    like them.  Their methods are ``@jinja.memoized_macro`` (:mod:`rllm_renderers.jinja.frozen_inputs`)."""
    pure = {name_ for name_ in hoisted if not IMPURE_READS & set(+macros[name_])}
    while True:
        keep = {name_ for name_ in pure if all(other in pure for other in +macros[name_] if other in macros)}
        if keep == pure:
            return pure
        pure = keep


class Lowering(ExpressionLowering, ValueKinds):
    """Builds the IR of a template body; see the module docstring."""

    def __init__(self, template_name: str, names: TemplateNames, tags: dict[int, str] | None = None) -> None:
        ValueKinds.__init__(self)
        self.template_name = template_name
        self.tags = tags or {}  # id(node) -> the statement's own text (see compiler.template_tags)
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
        self.known_strings: set[str] = set()  # template names an enclosing `is string` test checked
        self.noted_renames: set[str] = set()  # renamed locals whose reason a comment already gave
        self.hoisted: dict[str, str] = {}  # top-level macro -> the method it becomes

    # --- building -----------------------------------------------------------------

    def error(self, node: nodes.Node, what: str) -> CompileError:
        return CompileError(what, template=self.template_name, line=getattr(node, "lineno", None))

    def add(self, statement: ir.Stmt) -> None:
        self.body.append(statement)

    def comment(self, node: nodes.Node, text: str) -> None:
        self.add(ir.Comment(node.lineno, text))

    def tag(self, node: nodes.Node, generic: str) -> str:
        """The statement's own text (``{% if tools %}``), or ``generic`` (``{% if %}``) without it."""
        return self.tags.get(id(node), generic)

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
        candidate, counter = base, 1
        while candidate in self.used_names or self.scope.shows_python_name(candidate):
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
        self.pure_macros = pure_macros(self.hoisted, macros)
        for macro_name in sorted(self.hoisted):
            method = self.fresh_method_name(f"macro_{macro_name}")
            self.hoisted[macro_name] = self.macros[macro_name] = method
        for node in scope_macros(body):  # (one defined under an {% if %} is unbound when the test fails)
            if node.name in self.hoisted:
                continue
            if node.name not in self.macros and self.scope.lookup(node.name) is None:
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
            content = self.output == "out" and self.is_content_node(child)
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
            # a chain led by content is a string concatenation too (inputs are validated strings)
            if (starts_with_text or content[0]) and any(content):
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

    def if_chain(self, node: nodes.If, lower_body, label: str | None = None) -> ir.If:
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
                chain.line, chain.label = node.lineno, label or self.tag(node, "{% if %}")
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
            if isinstance(namespace, ast.Name) and namespace.id in self.namespaces:
                self.add(ir.Assign(ast.Attribute(value=namespace, attr=node.target.attr, ctx=ast.Store()), value.node))
            else:  # (a macro argument, a message dict): Jinja checks that it is a namespace
                self.add(ir.ExprStmt(call("jinja.set_attribute", namespace, const(node.target.attr), value.node)))
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
            self.recursive_loop(node)
            return
        by_message = as_message_loop(node, self.is_message_source)
        if by_message is not None:
            index = node.target.name
            tag = self.tag(node, "{% for %}")
            self.comment(node, f"{tag}: over the positions of the messages, each read first: a loop over them ({index} is its index)")
            # the sandbox's range() still runs first: it refuses more than MAX_RANGE positions
            self.add(ir.ExprStmt(self.expr(node.iter).node))
            node = by_message
        else:
            self.comment(node, self.tag(node, "{% for %}"))
        self.lower_for(node, self.expr(node.iter))

    def recursive_loop(self, node: nodes.For) -> None:
        """``{% for x in xs recursive %}...{{ loop(x.children) }}...{% endfor %}``: the loop is a
        function of its items and depth, and ``loop(...)`` calls it again one level deeper."""
        self.comment(node, f"{self.tag(node, '{% for ... recursive %}')}: loop(...) renders its items one level deeper")
        function = self.fresh_name("render_loop")
        items, depth = self.fresh_name("loop_items"), self.fresh_name("depth")
        parts = self.fresh_name("parts")
        saved_body, saved_output, saved_marking = self.body, self.output, self.marking_messages
        self.body, self.output, self.marking_messages = [], parts, False
        self.add(ir.Assign(store(parts), ast.List(elts=[], ctx=ast.Load())))
        self.lower_for(node, PyExpr(name(items)), recursion=(function, depth))
        self.add(ir.Return(joined(parts)))
        body = self.body
        self.body, self.output, self.marking_messages = saved_body, saved_output, saved_marking
        self.add(ir.Function(function, [ir.Parameter(items), ir.Parameter(depth)], body))
        self.add(ir.Append(self.output, [Piece(call(name(function), self.expr(node.iter).node, const(1)))]))

    def lower_for(self, node: nodes.For, iterable: PyExpr, recursion: tuple[str, str] | None = None) -> None:
        uses = loop_attributes_used(node.body, self.error)
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
        # a computed value may be a generator (`| select(...)`): no len(), always truthy
        if needs_sequence and (not isinstance(items, ast.Name) or (node.test is None and self.is_computed(node.iter))):
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
        loop_context = LoopContext(index=index, items=items, uses=uses, changed=changed)
        if recursion:
            loop_context.function, loop_context.depth = recursion
        self.loops.append(loop_context)
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
        last_read: dict[str, int] = {}  # name -> the last statement of the body reading it
        for position, statement in enumerate(loop.body):
            for read in count_reads([statement]):
                last_read[read] = position
        for position, statement in enumerate(loop.body):
            if isinstance(statement, nodes.If) and dispatched_roles(statement, loop.target.name):
                # (a test per name, not a set per dispatch: a long role chain has a dispatch per branch)
                self.role_dispatch(statement, loop, lambda name_, here=position: last_read.get(name_, -1) > here)
            else:
                self.statement(statement)

    def role_dispatch(self, node: nodes.If, loop: nodes.For, read_later: Callable[[str], bool]) -> None:
        """``if role == 'user' ... elif role == 'assistant' ...`` with each branch in its own method."""

        def branch(body: list[nodes.Node], test: nodes.Node) -> list[ir.Stmt]:
            roles = branch_topics(test, loop.target.name)
            extracted = self.extract_branch(body, roles, loop, read_later, test)
            return extracted if extracted is not None else self.lower_block(body)

        self.add(self.if_chain(node, branch, label=f"{self.tag(node, '{% if %}')} (the role dispatch)"))

    def extract_branch(
        self, body, roles: list[str], loop, read_later: Callable[[str], bool], test: nodes.Node
    ) -> list[ir.Stmt] | None:
        """``body`` as a method, and the block calling it; None when that is unsafe.

        ``read_later``: whether a statement after this one in the loop body reads a name."""
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
        if any(read_later(assigned) for assigned in assigned_names(body)):
            return None  # the branch sets something the rest of the iteration reads
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
        writes_only_text = not parameters and all(
            isinstance(statement, ir.Comment)
            or (isinstance(statement, ir.Append) and all(isinstance(piece.value, ast.Constant) for piece in statement.pieces))
            for statement in method_body
        )
        wanted = header_name(branch_method_name(test, loop.target.name, roles), writes_only_text)
        if wanted in self.method_names:  # a second dispatch over the role: its loop's list tells it apart
            wanted = loop_name(wanted, loop.iter.name if isinstance(loop.iter, nodes.Name) else None) or wanted
        method_name = self.fresh_method_name(wanted, method_body)
        self.methods.append(
            ir.Method(
                method_name,
                [ir.Parameter("out"), *(ir.Parameter(p) for p in parameters)],
                method_body,
                f"The template's {' / '.join(roles)} branch of the message loop.",
                role_branch=True,
            )
        )
        arguments = [name("out"), *(name(p) for p in parameters)]
        return [ir.ExprStmt(call(attribute(name("self"), method_name), *arguments))]

    def fresh_method_name(self, wanted: str, body: list[ir.Stmt] | None = None) -> str:
        """``wanted``, or when a method has it already, ``wanted`` and a digest of ``body`` (never a
        position: a name must not move when another branch does)."""
        candidate, code = wanted, "\n".join(statement_lines(body or [], 0))
        while candidate in self.method_names:
            candidate = digest_name(candidate, code)
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
            self.methods.append(
                ir.Method(
                    method,
                    function.parameters,
                    function.body,
                    f"The template's macro {node.name}.",
                    varargs=function.varargs,
                    kwargs=function.kwargs,
                    memoized=node.name in self.pure_macros,
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
        self.add(self.function(node, function, self.tag(node, f"{{% macro {node.name} %}}")))

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
                self.inner_block(node.body)  # its body is a caller macro: its sets stay inside
                return
        if not isinstance(call_node, nodes.Call) or call_node.dyn_args or call_node.dyn_kwargs:
            raise self.error(node, "cannot translate this {% call %} block")
        caller = self.fresh_name("caller")
        self.add(self.function(node, caller, f"{self.tag(node, '{% call %}')}: its body is the macro's caller()"))
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
        self.inner_block(node.body)
        self.output, self.marking_messages = saved_output, saved_marking
        value = self.filter_expr(node.filter, PyExpr(joined(parts), is_str=True))
        self.add(ir.Append(self.output, [Piece(value.as_str())]))

    def keyword_name(self, key: str) -> str:
        """The Python keyword of a macro call's ``key=`` argument (see :func:`parameter_name`)."""
        return parameter_name(key)

    def inner_block(self, body: list[nodes.Node]) -> None:
        """``body`` in a scope of its own, as Jinja runs a ``filter`` or ``call`` body: a name it
        reads before its ``set`` sees the outer value, and its sets do not leak out."""
        scope = Scope(parent=self.scope)
        self.scope = scope
        self.rename_scope_locals(scope, assigned_names(body), count_reads(body))
        self.initialise_scope_reads(body, set())
        self.block(body)
        self.leave_scope()

    def stmt_With(self, node: nodes.With) -> None:
        """``{% with a = x, b = y %}body{% endwith %}``: values evaluated outside, names bound inside."""
        self.comment(node, "{% with %}")
        values = [self.expr(value).node for value in node.values]
        targets = set().union(*(target_names(target) for target in node.targets))
        scope = Scope(parent=self.scope)
        self.scope = scope
        self.rename_scope_locals(scope, targets | assigned_names(node.body), count_reads(node.body))
        for target, value in zip(node.targets, values):
            python_target = self.assign_target(target)
            self.add(ir.Assign(python_target, value, note=self.rename_note(target, python_target)))
        self.initialise_scope_reads(node.body, targets)
        self.block(node.body)
        self.leave_scope()

    def stmt_Scope(self, node: nodes.Scope) -> None:
        """A bare scope (Jinja wraps ``{% autoescape %}`` in one): its body in a scope of its own."""
        self.inner_block(node.body)

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
            # a parameter keeps its name (a Python parameter shadows the outer name, as in Jinja), so
            # that keyword calls `m(name=...)` reach it; only a Python keyword or builtin gets a `_`
            arguments = {argument.name for argument in node.args}
            for argument in sorted(arguments):
                scope.names[argument] = parameter_name(argument)
                scope.helpers.add(parameter_name(argument))
            assigned = assigned_names(node.body) - arguments
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
        mentioning = statements_mentioning(body)  # the other statements cannot change the answer
        for assigned_name in sorted(assigned_names(body) - bound):
            if not may_read_before_assignment(mentioning.get(assigned_name, []), assigned_name):
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

    def is_message_source(self, node: nodes.Node) -> bool:
        """Whether ``node`` evaluates to the messages list or a slice / filter of it."""
        while isinstance(node, (nodes.Getitem, nodes.Filter)):
            if isinstance(node, nodes.Getitem) and not isinstance(node.arg, nodes.Slice):
                return False
            node = node.node
        return isinstance(node, nodes.Name) and (self.scope.lookup(node.name) or node.name) in self.message_sources


def parameter_name(argument: str) -> str:
    """The Python name of a macro parameter (the same at the definition and in keyword calls)."""
    return argument + "_" if argument in RESERVED_NAMES or not argument.isidentifier() else argument


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
