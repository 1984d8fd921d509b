"""Which message loop the bridge may resume, and what it must compare to do so: an IR pass.

The bridge renders a conversation that extends the previous prompt's by a sampled turn and a few
new messages. A message loop can be *resumed* near the end of the shorter conversation (see
:mod:`rllm_renderers.bridging.resume` for the runtime side) when its body provably behaves the same in both
renders for every iteration before that point. That holds when, of the body (with the role
methods it calls):

* **the message lists are read by position near the current one.** A list the body indexes is
  read only as ``xs[i + k]`` (``i`` the loop index, ``k`` a constant; ``k < 0`` only where a test
  on ``i`` keeps the index from wrapping round to the list's end), ``xs[i + a : i + b]`` with
  ``0 <= a``, ``xs[c]`` (a fixed one of the first messages: ``leading``), or in a comparison of
  ``i + c`` with ``len(xs)`` (``loop.last`` lowers to one). Such reads give the same answer in
  both renders for ``i < len(xs) - d``, ``d`` the largest ``k`` or ``c`` (the *lookahead*). One
  read of all later messages is allowed too: a loop ``for x in xs[i + k:]`` whose only effect is
  setting namespace attributes to constants when ``x`` passes a test of ``x`` alone (gpt-oss looks
  for a later final answer); appended messages change nothing as long as none passes the test,
  which the runtime asks of them (``scans``). Any other read of a list (``loop.length``,
  ``xs[-1]``, iterating it, passing it to a filter) makes it a state value, below;
* **everything else it reads from outside is state**, compared equal at the loop's start: values
  bound before the loop (knobs, a system prompt, the tools, ``add_generation_prompt``) and
  namespaces (the only values a template can change; the runtime snapshots them);
* **nothing else carries from one iteration to the next**: no local is read before the iteration
  sets it, none is read after the loop, no namespace is changed through another name, no macro
  that reads the render's own variables (a closure) is called, the clock is not read.

The loop is the last one that marks messages, at the top of the template or under ``{% if %}``s
(not inside another loop or a macro); everything that runs before it is re-run by the resumed
render and compared. Its iterable then becomes ``out.message_loop(items, lookahead=d, leading=c,
lists=(...), state=(...), scans=(...))``; anything else leaves the loop as it is (the bridge
re-runs the whole template) and the class docstring says why. ``verify`` checks every resumed
render against the full one, so a flaw here shows as a verification failure, never as wrong ids.
"""

from __future__ import annotations

import ast
import copy
from collections import defaultdict
from dataclasses import dataclass, field

from . import ir
from .emit_py import unparse

MARK_MESSAGE = "out.mark_message"
#: Calls whose value depends on when the template runs.
CLOCK_CALLS = frozenset({"jinja.strftime_now"})
#: Names a generated render_template reads that are not the template's values.
OWN_NAMES = frozenset({"self", "out", "jinja"})


@dataclass
class Resumption:
    """The pass's verdict on one template, for the class docstring."""

    lookahead: int | None = None  # None: not resumable
    reason: str = ""

    def describe(self) -> str:
        if self.lookahead is None:
            return f"The bridge re-runs the whole template: {self.reason}."
        ahead = {0: "no message ahead", 1: "one message ahead"}.get(self.lookahead, f"{self.lookahead} messages ahead")
        return f"The bridge resumes the message loop near the end of the history (it reads {ahead})."


class NotResumable(Exception):
    """Why the message loop cannot be resumed (the message is the class docstring's reason)."""


def make_resumable(program: ir.Program, bound_names: set[str]) -> Resumption:
    """Rewrite the message loop of ``program`` as a resumable one where that is exact.

    ``bound_names``: names ``render_template`` binds before its first IR statement (template
    inputs, knobs, special tokens read at run time).
    """
    try:
        path = message_loop_path(program.body)
        block, position = path[-1]
        loop = block[position]
        before = [statement for level, at in path for statement in level[:at]]  # what runs before the loop
        after = [statement for level, at in path for statement in level[at + 1 :]]  # (and what may run after)
        reads = LoopReads(loop, program.methods)
        plan = reads.plan(before, after, bound_names)
    except NotResumable as exc:
        return Resumption(reason=str(exc))
    block[position] = resumable_loop(loop, plan, program)
    return Resumption(lookahead=plan.lookahead)


def message_loop_path(body: list[ir.Stmt]) -> list[tuple[list[ir.Stmt], int]]:
    """Where the last loop that marks messages is, as (block, index) pairs from ``body`` down: the
    loop is the last block's statement, and every other step is an ``if`` (``{% if messages %}``
    around the loop is common). A loop inside another loop or a macro runs more than once a render."""
    found: list[tuple[list[ir.Stmt], int]] | None = None

    def search(block: list[ir.Stmt], path: list) -> None:
        nonlocal found
        for index, statement in enumerate(block):
            if marks_messages(statement):
                found = [*path, (block, index)]
            elif isinstance(statement, ir.If):
                search(statement.body, [*path, (block, index)])
                search(statement.orelse, [*path, (block, index)])

    search(body, [])
    if found is not None:
        return found
    if any(marks_messages(statement) for statement in ir.walk_statements(body)):
        raise NotResumable("its message loop is inside another loop or a macro")
    raise NotResumable("it has no message loop")


def marks_messages(statement: ir.Stmt) -> bool:
    if not isinstance(statement, ir.For):
        return False
    first = next((inner for inner in statement.body if not isinstance(inner, ir.Comment)), None)
    return isinstance(first, ir.ExprStmt) and isinstance(first.value, ast.Call) and dotted(first.value.func) == MARK_MESSAGE


def dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a chain of names and attributes, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


# --- what the loop body reads -----------------------------------------------------------------


@dataclass
class Plan:
    items: ast.expr
    index: str | None  # the loop index, if the loop has one
    target: ast.expr
    lookahead: int
    leading: int  # the body also reads xs[0] .. xs[leading - 1]
    lists: list[str]
    state: list[str]
    scans: list[tuple[str, ast.Lambda]]  # (xs, test): `for x in xs[i + k:]: if test(x): ns.a = constant`


@dataclass
class NameUse:
    """How the loop body reads one name."""

    positional: list[int] = field(default_factory=list)  # lookahead of each read by position
    other: list[str] = field(default_factory=list)  # each other read, as code (for the reason)


class LoopReads:
    """Walks the message loop's body, and the role methods it calls, recording how each name is read."""

    def __init__(self, loop: ir.For, methods: list[ir.Method]) -> None:
        self.loop = loop
        self.methods = {method.name: method for method in methods}
        self.index, self.target, self.items = loop_variables(loop)
        self.uses: dict[str, NameUse] = defaultdict(NameUse)
        self.unsafe: list[str] = []  # reads that are never exact to skip (a wrapping index, the clock)
        self.fresh_namespaces: set[str] = set()
        self.visited_methods: set[str] = set()
        self.changed_through: list[str] = []  # names a namespace attribute is set through
        self.leading = 0
        self.scans: dict[str, tuple[str, ast.Lambda]] = {}  # code -> (xs, test)
        self.closures: dict[str, ir.Function] = {}  # macros defined before the loop: they read its variables
        self.closure_reads: set[str] = set()  # what the closures the loop calls read of the render's names
        self.visible: set[str] | None = None  # in a role method: its parameters (the caller's names)

    # --- statements -------------------------------------------------------------------

    def plan(self, before: list[ir.Stmt], after: list[ir.Stmt], bound_names: set[str]) -> Plan:
        self.closures = {s.name: s for s in ir.walk_statements(before) if isinstance(s, ir.Function)}
        self.block(self.loop.body, lower_bound=0)
        carried = carried_locals(self.loop.body)
        if carried:
            raise NotResumable(f"the message loop carries {', '.join(sorted(carried))} from one message to the next")
        local = assigned_names(self.loop.body)
        read_after = {n for s in ir.walk_statements(after) for e in ir.expressions_of(s) for n in ir.names_read(e)}
        if local & read_after:
            raise NotResumable(f"the text after the message loop reads {', '.join(sorted(local & read_after))}, set in it")
        if local & self.closure_reads:
            names = ", ".join(sorted(local & self.closure_reads))
            raise NotResumable(f"a macro the message loop calls reads {names}, which the loop sets")
        if self.unsafe:
            raise NotResumable(self.unsafe[0])
        outside = bound_names | assigned_names(before)
        bound_at_entry = bound_names | definitely_assigned(before)
        loop_locals = local | {self.target} | ({self.index} if self.index else set())
        for changed in self.changed_through:
            if changed not in outside or changed in loop_locals:
                if changed not in self.fresh_namespaces:
                    raise NotResumable(f"the message loop changes a namespace through {changed}")
        lists, state, lookahead = [], [], 0
        for name_, use in self.uses.items():
            if name_ in OWN_NAMES or name_ not in outside or name_ in loop_locals:
                continue
            if name_ in self.closures:
                continue  # (code: what it reads was recorded where the loop calls it)
            if name_ not in bound_at_entry:
                raise NotResumable(f"the message loop reads {name_}, which may be unset when the loop starts")
            if use.other or not use.positional:
                if name_ in ("messages", *self.items_names()):
                    raise NotResumable(f"the message loop reads {name_} beyond a fixed distance: {use.other[0]}")
                state.append(name_)
            else:
                lists.append(name_)
                lookahead = max(lookahead, *use.positional)
        items_name = self.items.id if isinstance(self.items, ast.Name) else None
        lists = [n for n in lists if n != items_name]
        return Plan(self.items, self.index, self.target_node(), lookahead, self.leading, lists, state, [*self.scans.values()])

    def items_names(self) -> tuple[str, ...]:
        return (self.items.id,) if isinstance(self.items, ast.Name) else ()

    def target_node(self) -> ast.expr:
        return self.loop.target.elts[1] if isinstance(self.loop.target, ast.Tuple) else self.loop.target

    def block(self, body: list[ir.Stmt], lower_bound: int) -> None:
        for statement in body:
            self.statement(statement, lower_bound)

    def statement(self, statement: ir.Stmt, lower_bound: int) -> None:
        if isinstance(statement, ir.If):
            self.expression(statement.test, lower_bound)
            self.block(statement.body, max(lower_bound, index_bound(statement.test, True, self.index)))
            self.block(statement.orelse, max(lower_bound, index_bound(statement.test, False, self.index)))
            return
        if isinstance(statement, ir.Assign):
            self.assignment(statement, lower_bound)
            return
        if isinstance(statement, ir.ExprStmt) and self.role_call(statement.value, lower_bound):
            return
        if isinstance(statement, ir.For) and self.existential_scan(statement, lower_bound):
            return
        for expression in ir.expressions_of(statement):
            self.expression(expression, lower_bound)
        if isinstance(statement, (ir.For, ir.Function)):
            self.block(statement.body, lower_bound)

    def assignment(self, statement: ir.Assign, lower_bound: int) -> None:
        target = statement.target
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
            if self.use(target.value.id) is not None:
                self.changed_through.append(target.value.id)
            self.expression(target.value, lower_bound)
        elif isinstance(target, ast.Name) and is_namespace_call(statement.value):
            self.fresh_namespaces.add(target.id)
        self.expression(statement.value, lower_bound)

    def existential_scan(self, loop: ir.For, lower_bound: int) -> bool:
        """``for x in xs[i + k:]: if test(x): ns.a = constant`` (gpt-oss looks for a later final
        answer): it reads the list to its end, but only through ``test``, so an appended message for
        which ``test`` is false changes nothing; the runtime asks ``test`` of each appended message."""
        if self.index is None or not isinstance(loop.target, ast.Name):
            return False
        indexed = subscripted(loop.iter)
        if indexed is None or not isinstance(indexed[1], ast.Slice):
            return False
        sequence, bounds = indexed
        start = linear(bounds.lower, self.index) if bounds.lower is not None else None
        if bounds.upper is not None or bounds.step is not None or start is None:
            return False
        if start.index != 1 or start.lengths or start.constant < 0:
            return False
        body = [statement for statement in loop.body if not isinstance(statement, ir.Comment)]
        if len(body) != 1 or not isinstance(body[0], ir.If) or body[0].orelse:
            return False
        test, effects = body[0].test, body[0].body
        if not all(
            isinstance(effect, ir.Break)
            or (
                isinstance(effect, ir.Assign)
                and isinstance(effect.target, ast.Attribute)
                and isinstance(effect.target.value, ast.Name)
                and isinstance(effect.value, ast.Constant)
            )
            for effect in effects
        ):
            return False
        if ir.names_read(test) - {loop.target.id, "jinja"} or any(
            isinstance(node, ast.Call) and dotted(node.func) in CLOCK_CALLS for node in ast.walk(test)
        ):
            return False  # the test reads more than the later message (or the clock)
        arguments = ast.arguments(
            posonlyargs=[], args=[ast.arg(arg=loop.target.id)], kwonlyargs=[], kw_defaults=[], defaults=[]
        )
        scan_test = ast.Lambda(args=arguments, body=copy.deepcopy(test))
        use = self.use(sequence.id)
        if use is None:
            return False  # a list of the method's own
        self.scans.setdefault(f"{sequence.id}: {unparse(scan_test)}", (sequence.id, scan_test))
        use.positional.append(0)
        for effect in effects:
            if isinstance(effect, ir.Assign):
                self.assignment(effect, lower_bound)
        return True

    def role_call(self, value: ast.expr, lower_bound: int) -> bool:
        """``self.render_<role>(out, ...)``: walk the method's body as part of the loop's."""
        if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Attribute):
            return False
        if dotted(value.func.value) != "self" or value.func.attr not in self.methods:
            return False
        method = self.methods[value.func.attr]
        if not method.role_branch:
            return False
        parameters = [parameter.name for parameter in method.parameters]
        if value.keywords or [unparse(argument) for argument in value.args] != parameters:
            raise NotResumable(f"{method.name} is called with other names than its parameters")
        # (the arguments are the caller's names, read where the method's body reads its parameters;
        # every other name in it is the method's own)
        if method.name not in self.visited_methods:
            self.visited_methods.add(method.name)
            saved, self.visible = self.visible, set(parameters)
            self.block(method.body, lower_bound)
            self.visible = saved
        return True

    def use(self, name_: str) -> NameUse | None:
        """Where to record a read of ``name_``: None for a role method's own local."""
        return self.uses[name_] if self.visible is None or name_ in self.visible else None

    # --- expressions ------------------------------------------------------------------

    def expression(self, node: ast.AST, lower_bound: int) -> None:
        bounded_lengths = self.length_comparisons(node)
        self.visit(node, lower_bound, bounded_lengths)

    def length_comparisons(self, node: ast.AST) -> dict[int, tuple[str, int]]:
        """``len(xs)`` calls compared with the loop index (``i + c <op> len(xs)``): id -> (xs, lookahead)."""
        found: dict[int, tuple[str, int]] = {}
        if self.index is None:
            return found
        for compare in ast.walk(node):
            if not isinstance(compare, ast.Compare):
                continue
            operands = [compare.left, *compare.comparators]
            for left, right in zip(operands, operands[1:]):
                difference = subtract(linear(left, self.index), linear(right, self.index))
                if difference is None or len(difference.lengths) != 1:
                    continue
                (length_call, coefficient), = difference.lengths.items()
                if coefficient != -difference.index or coefficient == 0:
                    continue
                offset = difference.constant if difference.index == 1 else -difference.constant
                found[length_call] = (difference.length_names[length_call], max(offset, 0))
        return found

    def visit(self, node: ast.AST, lower_bound: int, bounded_lengths: dict[int, tuple[str, int]]) -> None:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            use = self.use(node.id)
            if use is not None:
                use.other.append(node.id)
                if node.id in self.closures:
                    self.closure_call(node.id)
            return
        if isinstance(node, ast.Call) and dotted(node.func) in CLOCK_CALLS:
            self.unsafe.append("the message loop reads the clock (strftime_now)")
        if isinstance(node, ast.Call) and id(node) in bounded_lengths:
            list_name, ahead = bounded_lengths[id(node)]
            use = self.use(list_name)
            if use is not None:
                use.positional.append(ahead)
            return
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and dotted(node.func.value) == "self":
            self.macro_call(node.func.attr)
        indexed = subscripted(node)
        if indexed is not None:
            sequence, position = indexed
            ahead = self.position_lookahead(position, lower_bound)
            use = self.use(sequence.id)
            if use is not None and ahead is None:
                use.other.append(unparse(node))
            elif use is not None:
                use.positional.append(ahead)
            self.visit(position, lower_bound, bounded_lengths)
            return
        if isinstance(node, ast.IfExp):
            self.visit(node.test, lower_bound, bounded_lengths)
            self.visit(node.body, max(lower_bound, index_bound(node.test, True, self.index)), bounded_lengths)
            self.visit(node.orelse, max(lower_bound, index_bound(node.test, False, self.index)), bounded_lengths)
            return
        if isinstance(node, ast.BoolOp):  # later operands run only when the earlier ones decided nothing
            bound = lower_bound
            for value in node.values:
                self.visit(value, bound, bounded_lengths)
                bound = max(bound, index_bound(value, isinstance(node.op, ast.And), self.index))
            return
        for child in ast.iter_child_nodes(node):
            self.visit(child, lower_bound, bounded_lengths)

    def position_lookahead(self, position: ast.AST, lower_bound: int) -> int | None:
        """How far ahead of the loop index ``xs[position]`` reads, or None when it is no read by position."""
        if isinstance(position, ast.Slice):
            if self.index is None:
                return None
            if position.step is not None or position.upper is None:
                return None
            upper = linear(position.upper, self.index)
            lower = linear(position.lower, self.index) if position.lower is not None else Linear(0, 0)
            if upper is None or lower is None or upper.lengths or lower.lengths or upper.index != 1:
                return None
            if lower.index not in (0, 1) or lower.constant < 0 or upper.constant < 0:
                return None  # (a negative bound counts from the end)
            return max(upper.constant - 1, 0)
        offset = linear(position, self.index or "")
        if offset is not None and not offset.lengths and offset.index == 0 and offset.constant >= 0:
            self.leading = max(self.leading, offset.constant + 1)  # xs[0]: the same in both renders
            return 0
        if offset is None or offset.lengths or offset.index != 1:
            return None
        if offset.constant < 0 and lower_bound < -offset.constant:
            self.unsafe.append(
                f"the message loop reads {unparse(position)} where the index may wrap round to the list's end"
            )
        return max(offset.constant, 0)

    def closure_call(self, function_name: str) -> None:
        """A macro defined inside the render: what it reads of the render's names when called is read
        by the loop (it sees them as they are at the call)."""
        if function_name in self.visited_methods:
            return
        self.visited_methods.add(function_name)
        function = self.closures[function_name]
        own = {parameter.name for parameter in function.parameters} | assigned_names(function.body)
        own |= {name_ for name_ in (function.varargs, function.kwargs) if name_}
        for statement in ir.walk_statements(function.body):
            if isinstance(statement, ir.Assign) and isinstance(statement.target, ast.Attribute):
                if isinstance(statement.target.value, ast.Name) and statement.target.value.id not in own:
                    self.changed_through.append(statement.target.value.id)
            for expression in ir.expressions_of(statement):
                for node in ast.walk(expression):
                    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in own:
                        self.closure_reads.add(node.id)
                        self.uses[node.id].other.append(f"{node.id} (in {function_name})")
                        if node.id in self.closures:
                            self.closure_call(node.id)
                    elif isinstance(node, ast.Call) and dotted(node.func) in CLOCK_CALLS:
                        self.unsafe.append(f"the message loop calls {function_name}, which reads the clock")
                    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                        if dotted(node.func.value) == "self":
                            self.macro_call(node.func.attr)

    def macro_call(self, method_name: str) -> None:
        """A macro method: it reads only its arguments, but it may read the clock."""
        method = self.methods.get(method_name)
        if method is None or method.role_branch or method_name in self.visited_methods:
            return
        self.visited_methods.add(method_name)
        for statement in ir.walk_statements(method.body):
            for expression in ir.expressions_of(statement):
                for node in ast.walk(expression):
                    if isinstance(node, ast.Call) and dotted(node.func) in CLOCK_CALLS:
                        self.unsafe.append(f"the message loop calls {method_name}, which reads the clock")
                    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                        if dotted(node.func.value) == "self":
                            self.macro_call(node.func.attr)


def loop_variables(loop: ir.For) -> tuple[str | None, str, ast.expr]:
    """(the index name or None, the message name, the iterated list's expression)."""
    target, iterable = loop.target, loop.iter
    if isinstance(target, ast.Name):
        return None, target.id, iterable
    if (
        isinstance(target, ast.Tuple)
        and len(target.elts) == 2
        and all(isinstance(element, ast.Name) for element in target.elts)
        and isinstance(iterable, ast.Call)
        and dotted(iterable.func) == "enumerate"
        and len(iterable.args) == 1
        and not iterable.keywords
    ):
        return target.elts[0].id, target.elts[1].id, iterable.args[0]
    raise NotResumable(f"its message loop iterates {unparse(iterable)} in a form the bridge cannot resume")


def subscripted(node: ast.AST) -> tuple[ast.Name, ast.AST] | None:
    """``xs[position]`` or ``jinja.getitem(xs, position)`` with ``xs`` a name: (xs, position)."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        return node.value, node.slice
    if (
        isinstance(node, ast.Call)
        and dotted(node.func) == "jinja.getitem"
        and len(node.args) == 2
        and isinstance(node.args[0], ast.Name)
    ):
        return node.args[0], node.args[1]
    return None


def is_namespace_call(value: ast.expr) -> bool:
    return isinstance(value, ast.Call) and dotted(value.func) == "jinja.Namespace"


# --- linear forms of the loop index ---------------------------------------------------------


@dataclass
class Linear:
    """``index * index_coefficient + sum(len(xs) * coefficient) + constant``."""

    index: int
    constant: int
    lengths: dict[int, int] = field(default_factory=dict)  # id of the len() call -> coefficient
    length_names: dict[int, str] = field(default_factory=dict)  # id of the len() call -> xs


def linear(node: ast.AST | None, index: str) -> Linear | None:
    """``node`` as a linear form of the loop index and list lengths, or None."""
    if isinstance(node, ast.Name) and node.id == index:
        return Linear(1, 0)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return Linear(0, node.value)
    if (
        isinstance(node, ast.Call)
        and dotted(node.func) in ("len", "jinja.length")
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Name)
    ):
        return Linear(0, 0, {id(node): 1}, {id(node): node.args[0].id})
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = linear(node.operand, index)
        return None if inner is None else scale(inner, -1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        left, right = linear(node.left, index), linear(node.right, index)
        if left is None or right is None:
            return None
        return add(left, right) if isinstance(node.op, ast.Add) else subtract(left, right)
    return None


def scale(form: Linear, factor: int) -> Linear:
    return Linear(
        form.index * factor,
        form.constant * factor,
        {key: value * factor for key, value in form.lengths.items()},
        dict(form.length_names),
    )


def add(left: Linear, right: Linear) -> Linear:
    lengths = dict(left.lengths)
    for key, value in right.lengths.items():
        lengths[key] = lengths.get(key, 0) + value
    return Linear(
        left.index + right.index,
        left.constant + right.constant,
        {key: value for key, value in lengths.items() if value},
        {**left.length_names, **right.length_names},
    )


def subtract(left: Linear | None, right: Linear | None) -> Linear | None:
    if left is None or right is None:
        return None
    return add(left, scale(right, -1))


def index_bound(test: ast.AST, truth: bool, index: str | None) -> int:
    """The least value of the loop index wherever ``test`` is ``truth`` (0 when nothing is known)."""
    if index is None:
        return 0
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return index_bound(test.operand, not truth, index)
    if isinstance(test, ast.BoolOp):
        if isinstance(test.op, ast.And) == truth:  # all operands hold this way
            return max(index_bound(value, truth, index) for value in test.values)
        return min(index_bound(value, truth, index) for value in test.values)
    if isinstance(test, ast.Name) and test.id == index:
        return 1 if truth else 0
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right, operator = test.left, test.comparators[0], test.ops[0]
        if isinstance(right, ast.Name) and right.id == index and isinstance(left, ast.Constant):
            left, right = right, left
            operator = {ast.Lt: ast.Gt(), ast.Gt: ast.Lt(), ast.LtE: ast.GtE(), ast.GtE: ast.LtE()}.get(
                type(operator), operator
            )
        if not (isinstance(left, ast.Name) and left.id == index):
            return 0
        if not (isinstance(right, ast.Constant) and type(right.value) is int):
            return 0
        bound = right.value
        holds = {  # the least index where `index <op> bound` has this truth value
            (ast.Gt, True): bound + 1,
            (ast.GtE, True): bound,
            (ast.Lt, False): bound,
            (ast.LtE, False): bound + 1,
            (ast.NotEq, True): 1 if bound == 0 else 0,
            (ast.Eq, False): 1 if bound == 0 else 0,
        }
        return max(holds.get((type(operator), truth), 0), 0)
    return 0


# --- locals set in the loop body -------------------------------------------------------------


def assigned_names(body: list[ir.Stmt]) -> set[str]:
    """Plain names the statements (not the role methods they call) assign, ``:=`` included
    (``loop.changed()`` keeps its last arguments that way)."""
    found: set[str] = set()
    for statement in ir.walk_statements(body):
        if isinstance(statement, ir.Assign):
            found |= store_names(statement.target)
        elif isinstance(statement, ir.For):
            found |= store_names(statement.target)
        elif isinstance(statement, ir.Function):
            found.add(statement.name)
        for expression in ir.expressions_of(statement):
            found |= {node.target.id for node in ast.walk(expression) if isinstance(node, ast.NamedExpr)}
    return found


def store_names(target: ast.expr) -> set[str]:
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return {name_ for element in target.elts for name_ in store_names(element)}
    return set()


def carried_locals(body: list[ir.Stmt]) -> set[str]:
    """Names the loop body sets and may read before setting them in the same iteration: their value
    would come from the previous iteration."""
    assigned_somewhere = assigned_names(body)
    carried: set[str] = set()

    def reads(expression: ast.AST, known: set[str]) -> None:
        carried.update((ir.names_read(expression) & assigned_somewhere) - known)

    definitely_assigned(body, reads)
    return carried


def definitely_assigned(body: list[ir.Stmt], reads=lambda expression, known: None) -> set[str]:
    """Names every run through ``body`` sets (a loop's body may not run; both branches of an ``if``
    must set a name). ``reads(expression, known)`` is told of each expression read and what is
    set by then."""

    def walk(statements: list[ir.Stmt], known: set[str]) -> set[str]:
        known = set(known)
        for statement in statements:
            if isinstance(statement, ir.Assign):
                reads(statement.value, known)
                if isinstance(statement.target, ast.Attribute):
                    reads(statement.target, known)
                known |= store_names(statement.target)
            elif isinstance(statement, ir.If):
                reads(statement.test, known)
                known |= walk(statement.body, known) & walk(statement.orelse, known)
            elif isinstance(statement, ir.For):
                reads(statement.iter, known)
                walk(statement.body, known | store_names(statement.target))
            elif isinstance(statement, ir.Function):
                parameters = {parameter.name for parameter in statement.parameters}
                walk(statement.body, known | parameters | {statement.name})
                known.add(statement.name)
            else:
                for expression in ir.expressions_of(statement):
                    reads(expression, known)
        return known

    return walk(body, set())


# --- the rewrite -------------------------------------------------------------------------------


def resumable_loop(loop: ir.For, plan: Plan, program: ir.Program) -> ir.For:
    """``loop`` iterating ``out.message_loop(...)`` (pairs of index and message)."""
    index = plan.index or fresh_index_name(program, plan.target)
    keywords = {}
    if plan.lookahead:
        keywords["lookahead"] = ir.const(plan.lookahead)
    if plan.leading:
        keywords["leading"] = ir.const(plan.leading)
    if plan.lists:
        keywords["lists"] = ast.Tuple(elts=[ir.name(n) for n in plan.lists], ctx=ast.Load())
    if plan.state:
        keywords["state"] = ast.Tuple(elts=[ir.name(n) for n in plan.state], ctx=ast.Load())
    if plan.scans:
        pairs = [ast.Tuple(elts=[ir.name(sequence), test], ctx=ast.Load()) for sequence, test in plan.scans]
        keywords["scans"] = ast.Tuple(elts=pairs, ctx=ast.Load())
    loop.iter = ir.call("out.message_loop", plan.items, **keywords)
    loop.target = ast.Tuple(elts=[ir.store(index), plan.target], ctx=ast.Store())
    return loop


def fresh_index_name(program: ir.Program, target: ast.expr) -> str:
    taken = set()
    for body in [program.body, *(method.body for method in program.methods)]:
        for statement in ir.walk_statements(body):
            for expression in ir.expressions_of(statement):
                taken |= {node.id for node in ast.walk(expression) if isinstance(node, ast.Name)}
    base = f"{target.id}_index" if isinstance(target, ast.Name) else "index"
    candidate, counter = base, 1
    while candidate in taken:
        counter += 1
        candidate = f"{base}_{counter}"
    return candidate
