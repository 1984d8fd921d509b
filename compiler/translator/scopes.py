"""Names and scopes: which template names a Jinja scope binds, reads and may read before its set.

Jinja's own code generator answers these questions with its ``Frame`` and
``jinja2.idtracking`` symbols; the translator needs the same answers per name, to decide
where a Python local must be renamed (a loop body is a fresh scope every iteration) or
initialised (a name read before its ``set`` sees the outer value). The queries here are
plain functions over the jinja2 AST.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from jinja2 import nodes


LOOP_ATTRIBUTES = {
    "index0",
    "index",
    "first",
    "last",
    "length",
    "revindex",
    "revindex0",
    "previtem",
    "nextitem",
    "cycle",
    "depth",
    "depth0",
    "changed",
}


class NameTable(dict):
    """Template name -> Python name, counting its Python names, so that whether a Python name is
    taken is one look-up (a loop body's scope holds a name per ``set`` of a long template)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.python_names: Counter[str] = Counter(self.values())

    def __setitem__(self, template_name: str, python_name: str) -> None:
        if template_name in self:
            replaced = self[template_name]
            self.python_names[replaced] -= 1
            if not self.python_names[replaced]:
                del self.python_names[replaced]
        super().__setitem__(template_name, python_name)
        self.python_names[python_name] += 1

    def setdefault(self, template_name: str, python_name: str) -> str:  # type: ignore[override]
        if template_name not in self:
            self[template_name] = python_name
        return self[template_name]

    def _refused(self, *args, **kwargs):
        raise TypeError("a NameTable is changed by item assignment or setdefault only (it counts its Python names)")

    __delitem__ = pop = popitem = clear = update = _refused  # type: ignore[assignment]


@dataclass
class Scope:
    """Template name -> Python name, for one Jinja scope (template, loop body, macro)."""

    names: NameTable = field(default_factory=NameTable)
    parent: "Scope | None" = None
    helpers: set[str] = field(default_factory=set)  # translator-made names live in this scope

    def __post_init__(self) -> None:
        if not isinstance(self.names, NameTable):
            self.names = NameTable(self.names)

    def chain(self) -> list["Scope"]:
        scopes, scope = [], self
        while scope is not None:
            scopes.append(scope)
            scope = scope.parent
        return scopes

    def visible_python_names(self) -> set[str]:
        return set().union(*(names for scope in self.chain() for names in (scope.names.python_names, scope.helpers)))

    def shows_python_name(self, python_name: str) -> bool:
        """Whether ``python_name`` is in :meth:`visible_python_names` (without building the set)."""
        return any(python_name in scope.names.python_names or python_name in scope.helpers for scope in self.chain())

    def lookup(self, name: str) -> str | None:
        scope: Scope | None = self
        while scope is not None:
            if name in scope.names:
                return scope.names[name]
            scope = scope.parent
        return None


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


def loop_control_of_this_loop(body: list[nodes.Node]) -> bool:
    """Whether a ``{% break %}`` or ``{% continue %}`` of the enclosing loop is in ``body``.

    Controls inside a nested loop's body are that loop's (its ``else`` block's are ours); a macro,
    ``call`` or ``filter`` body cannot break out of the loop around it.
    """

    def visit(node: nodes.Node) -> bool:
        if isinstance(node, (nodes.Break, nodes.Continue)):
            return True
        if isinstance(node, nodes.For):
            return any(visit(child) for child in node.else_)
        if isinstance(node, (nodes.Macro, nodes.CallBlock, nodes.FilterBlock)):
            return False
        return any(visit(child) for child in node.iter_child_nodes())

    return any(visit(node) for node in body)


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
        "ScopedEvalContextModifier": "{% autoescape %}",
        "EvalContextModifier": "{% autoescape %}",
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


def scope_macros(body: list[nodes.Node]) -> list[nodes.Macro]:
    """The macros ``body`` defines in its own scope, in template order: its own statements and those
    of its ``{% if %}`` branches (an ``if`` opens no scope; a loop, macro or block does)."""
    found = []
    for node in body:
        if isinstance(node, nodes.Macro):
            found.append(node)
        elif isinstance(node, nodes.If):
            for branch in [node.body, *(elif_node.body for elif_node in node.elif_), node.else_]:
                found += scope_macros(branch)
    return found


#: Statements whose own scope jinja2's symbol tracking (``idtracking.FrameSymbolVisitor``) does not
#: enter, with the fields it does visit in the enclosing scope (a loop's iterable, a call block's call...).
SCOPE_OPENERS: dict[type, tuple[str, ...]] = {
    nodes.For: ("iter",),
    nodes.CallBlock: ("call",),
    nodes.FilterBlock: ("filter",),
    nodes.With: ("values",),
    nodes.AssignBlock: ("target",),
    nodes.Scope: (),
    nodes.Block: (),
    nodes.OverlayScope: (),
    nodes.Macro: (),
}


def assigned_names(body: list[nodes.Node]) -> set[str]:
    """Names a scope's own statements assign, as jinja2's own symbol tracking (``idtracking``) counts
    its ``stores``: nested loops, macros, ``call`` and ``filter`` bodies keep their sets, ``if``
    branches do not. (One walk over the statements: jinja2's tracker copies its symbol table at every
    ``if``, which grows with the square of the template on a long chain of branches.)"""
    stores: set[str] = set()
    pending: list[nodes.Node] = list(body)
    while pending:
        node = pending.pop()
        kind = type(node)
        if kind is nodes.Name:
            if node.ctx in ("store", "param"):
                stores.add(node.name)
        elif kind is nodes.Macro:
            stores.add(node.name)
        elif kind is nodes.Import:
            stores.add(node.target)
        elif kind is nodes.FromImport:
            stores.update(name[1] if isinstance(name, tuple) else name for name in node.names)
        if kind in SCOPE_OPENERS:
            for field_name in SCOPE_OPENERS[kind]:
                value = getattr(node, field_name)
                pending.extend(value if isinstance(value, list) else [value])
        else:
            pending.extend(node.iter_child_nodes())
    return stores


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


def contains_output(body: list[nodes.Node]) -> bool:
    return any(isinstance(node, nodes.Output) or any(True for _ in node.find_all(nodes.Output)) for node in body)


def loop_attributes_used(body: list[nodes.Node], refuse) -> set[str]:
    """``loop.*`` attributes read by this loop's body (not by nested loops)."""
    used: set[str] = set()

    def visit(node: nodes.Node) -> None:
        if isinstance(node, nodes.Getattr) and isinstance(node.node, nodes.Name) and node.node.name == "loop":
            if node.attr not in LOOP_ATTRIBUTES:
                raise refuse(node, f"cannot translate loop.{node.attr}")
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


#: The attribute caching names_read on a node: computed once per node (the translator never changes
#: a parsed node), as may_read_before_assignment asks about the same statements for every name a
#: scope sets.
NAMES_READ_ATTRIBUTE = "_rllm_names_read"


def names_read(node: nodes.Node) -> frozenset[str]:
    """The names read (loaded, or used as a namespace) by ``node``'s descendants and, for a
    ``Name``, by itself."""
    cached = node.__dict__.get(NAMES_READ_ATTRIBUTE)
    if cached is None:
        found: set[str] = set()
        for child in node.iter_child_nodes():
            if isinstance(child, nodes.NSRef):
                found.add(child.name)
            found |= names_read(child)
        if isinstance(node, nodes.Name) and node.ctx == "load":
            found.add(node.name)
        cached = node.__dict__[NAMES_READ_ATTRIBUTE] = frozenset(found)
    return cached


NAMES_MENTIONED_ATTRIBUTE = "_rllm_names_mentioned"


def names_mentioned(node: nodes.Node) -> frozenset[str]:
    """Every name ``node`` or a descendant reads, sets, binds or defines (as a macro): a statement
    not mentioning a name cannot change whether it is read before it is set."""
    cached = node.__dict__.get(NAMES_MENTIONED_ATTRIBUTE)
    if cached is None:
        found: set[str] = set()
        for child in node.iter_child_nodes():
            found |= names_mentioned(child)
        if isinstance(node, (nodes.Name, nodes.NSRef, nodes.Macro)):
            found.add(node.name)
        cached = node.__dict__[NAMES_MENTIONED_ATTRIBUTE] = frozenset(found)
    return cached


def statements_mentioning(body: list[nodes.Node]) -> dict[str, list[nodes.Node]]:
    """Name -> the statements of ``body`` mentioning it, in order: a scope's statements indexed once,
    so each name it sets is checked against its own statements only (see may_read_before_assignment)."""
    index: dict[str, list[nodes.Node]] = {}
    for node in body:
        for mentioned in names_mentioned(node):
            index.setdefault(mentioned, []).append(node)
    return index


def _reads(node: nodes.Node, name: str) -> bool:
    if isinstance(node, nodes.Name):
        return node.name == name and node.ctx == "load"
    return name in names_read(node)


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
    if not any(_reads(node, name) or isinstance(node, nodes.NSRef) and node.name == name for node in body):
        return False  # never read at all (the common case, answered from the cached names_read)

    def scan(statements: list[nodes.Node], assigned: bool) -> tuple[bool, bool]:
        for node in statements:
            if name not in names_mentioned(node):
                continue  # it neither reads nor sets the name
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
                if assigned:
                    continue  # nothing it reads can come before the assignment
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

