"""Lowering of Jinja expressions to Python ``ast`` expressions (a mixin of the lowering pass).

Each ``expr_<Node>`` returns a :class:`PyExpr`: the expression and what is known about its
value (a str, a possible Markup). Filters and tests call the helpers of
``template_runtime``'s ``FILTERS`` / ``TESTS`` registry, except where a plain Python spelling
is exactly Jinja's (``x is none`` -> ``x is None``, ``| length`` -> ``len(x)``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from jinja2 import nodes
from jinja2.defaults import DEFAULT_FILTERS, DEFAULT_TESTS

from rllm_renderers.jinja import runtime as template_runtime
from rllm_renderers.jinja.values import sandbox_may_refuse

from . import ir
from .ir import attribute, call, const, jinja, name, store, subscript
from .scopes import describe, is_split_end

# The filters and tests transformers' chat-template environment has (jinja2's plus ``tojson``).
JINJA_FILTERS = frozenset(DEFAULT_FILTERS) | {"tojson"}
JINJA_TESTS = frozenset(DEFAULT_TESTS)

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

# Globals of transformers' chat-template environment: ``name`` -> ``jinja.<helper>``.
GLOBAL_FUNCTIONS = {name_: f"jinja.{helper.__name__}" for name_, helper in template_runtime.GLOBALS.items()}

DICT_METHODS = {attr for attr in dir(dict) if not attr.startswith("_")}


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
    function: str = ""  # a recursive loop: the function loop(...) calls
    depth: str = ""  # a recursive loop: the Python name of its depth (1 at the top)


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


class ExpressionLowering:
    """``expr_<Node>`` visitors; the state they read (scopes, loops, value kinds) is the lowering's."""

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
        if template_name in template_runtime.REFUSED_GLOBALS:
            raise self.error(node, f"cannot translate `{template_name}`: {template_runtime.REFUSED_GLOBALS[template_name]}")
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
        if sandbox_may_refuse(node.attr):
            return PyExpr(call("jinja.getattribute", target.node, const(node.attr)))
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
        if attr == "depth":  # 1 unless the loop is recursive
            return PyExpr(name(loop.depth) if loop.depth else const(1))
        if attr == "depth0":
            return PyExpr(plus(name(loop.depth), const(1), ast.Sub) if loop.depth else const(0))
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
        function = node.node
        starred = node.dyn_args is not None or node.dyn_kwargs is not None
        if isinstance(function, nodes.Name) and function.name == "loop" and self.loops and self.loops[-1].function:
            loop = self.loops[-1]
            if len(node.args) != 1 or node.kwargs or starred:
                raise self.error(node, "loop(...) of a recursive loop takes exactly one argument")
            deeper = ast.BinOp(left=name(loop.depth), op=ast.Add(), right=const(1))
            return PyExpr(call(name(loop.function), self.expr(node.args[0]).node, deeper), is_str=True)
        if isinstance(function, nodes.Getattr) and isinstance(function.node, nodes.Name):
            if function.node.name == "loop" and self.loops and function.attr in ("cycle", "changed"):
                return self.loop_method_call(node)
        arguments = [self.expr(argument).node for argument in node.args]
        is_macro = isinstance(function, nodes.Name) and function.name in self.macro_names
        keywords = [
            ast.keyword(arg=self.keyword_name(kw.key) if is_macro else kw.key, value=self.expr(kw.value).node)
            for kw in node.kwargs
        ]
        arguments, keywords = self.star_arguments(node, arguments, keywords)
        if isinstance(function, nodes.Getattr):
            target = self.expr(function.node)
            method = attribute(target.node, function.attr)
            if sandbox_may_refuse(function.attr):
                # `context.update(...)`: the sandbox refuses a mutating method (the call raises), it never
                # runs; `"{0.x}".format(v)`: the sandbox's formatter looks the fields up
                method = call("jinja.getattribute", target.node, const(function.attr))
            return PyExpr(ast.Call(func=method, args=arguments, keywords=keywords))
        if isinstance(function, nodes.Name):
            resolved = self.name_load(function.name, node)
            if resolved.kind == "unknown":
                raise self.error(node, f"cannot translate a call to the unknown function {function.name!r}")
            is_str = function.name in self.macros or function.name == "caller"
            return PyExpr(ast.Call(func=resolved.node, args=arguments, keywords=keywords), is_str=is_str)
        if isinstance(function, (nodes.Getitem, nodes.Call, nodes.Filter)):
            # a macro held in a list or dict (`macros[i](*params[i])`), one a call returns, a method
            # `| attr(name)` read (the sandbox's lookup: `str.format` comes back sandboxed)
            return PyExpr(ast.Call(func=self.expr(function).node, args=arguments, keywords=keywords))
        raise self.error(node, f"cannot translate a call of {describe(function)}")

    def star_arguments(
        self, node: nodes.Call, arguments: list[ast.expr], keywords: list[ast.keyword]
    ) -> tuple[list[ast.expr], list[ast.keyword]]:
        """``f(*args, **kwargs)``: Python's own unpacking, which is what Jinja's call does. ``**`` passes
        Jinja's names as they are, so it is refused where the translator renames a macro parameter."""
        if node.dyn_args is not None:
            arguments = [*arguments, ast.Starred(value=self.expr(node.dyn_args).node, ctx=ast.Load())]
        if node.dyn_kwargs is not None:
            renamed = sorted(name_ for name_ in self.macro_parameters if self.keyword_name(name_) != name_)
            if renamed:
                raise self.error(
                    node, f"cannot translate a call with **kwargs: the macro parameter {renamed[0]!r} has another name in Python"
                )
            keywords = [*keywords, ast.keyword(arg=None, value=self.expr(node.dyn_kwargs).node)]
        return arguments, keywords

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
        if filter_name in ("length", "count") and plain and not self.is_computed(node.node):
            # template data (an input list, dict or string, or Undefined) has a length: `len()` is exact
            return PyExpr(call("len", value.node))
        if filter_name == "string" and plain:
            if value.markup:  # Jinja's soft_str keeps a Markup
                return PyExpr(call("jinja.soft_str", value.node), is_str=True, markup=True)
            return PyExpr(value.as_str(), is_str=True)
        if filter_name in template_runtime.REFUSED_FILTERS:
            raise self.error(node, f"cannot translate the filter `{filter_name}`: {template_runtime.REFUSED_FILTERS[filter_name]}")
        helper = template_runtime.FILTERS.get(filter_name)
        if helper is None and filter_name not in JINJA_FILTERS:
            # not a filter of transformers' environment: the template compiled, so it sits in an if
            # or an inline if, and Jinja raises only when that branch runs
            missing = call("jinja.missing_filter_or_test", const("filter"), const(filter_name), value.node, *arguments)
            return PyExpr(missing)
        if helper is None:
            raise self.error(node, f"cannot translate the filter `{filter_name}`")
        markup = filter_name in template_runtime.MARKUP_FILTERS or (
            filter_name in template_runtime.MARKUP_KEEPING_FILTERS and value.markup
        )
        return PyExpr(
            ast.Call(func=jinja(helper.__name__), args=[value.node, *arguments], keywords=keywords),
            is_str=filter_name in template_runtime.STR_FILTERS,
            markup=markup,
        )


def readable_test(test: str, value: ast.expr, arguments: list[ast.expr]) -> ast.expr | None:
    """Tests whose plain Python spelling is exactly Jinja's; None for the rest (they call the registry)."""
    if test == "defined" and not arguments:
        return call(jinja(template_runtime.TESTS["defined"].__name__), value)
    if test == "undefined" and not arguments:
        return ast.UnaryOp(op=ast.Not(), operand=call(jinja(template_runtime.TESTS["defined"].__name__), value))
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
    """``jinja.concat(parts)``: ``"".join(parts)`` keeping the marks of caller text in them."""
    return call("jinja.concat", name(parts))


def is_raise_exception(node: nodes.Node) -> bool:
    return isinstance(node, nodes.Call) and isinstance(node.node, nodes.Name) and node.node.name == "raise_exception"
