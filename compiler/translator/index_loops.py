"""A loop over message positions that reads its message first is a loop over the messages.

Some templates walk the conversation by index (EXAONE-4)::

    {% for i in range(messages | length) %}{% set msg = messages[i] %} ... {% endfor %}

Rewritten as ``{% for msg in messages %} ...`` with ``i`` read as ``loop.index0``, the loop is the
message loop the translator knows: it marks each message's text (attribution, the turn probes) and
can be proved resumable. The two loops run the same iterations over the same values: ``range(n)``
and the messages have the same length, so ``loop.index0``, ``loop.last``, ``loop.length`` and the
others agree, and ``msg`` is ``messages[i]`` throughout. Loops whose body could tell them apart are
left alone: one that reads ``loop.previtem`` / ``loop.nextitem`` / ``loop.changed`` (items, not
positions), one that sets ``i`` or ``msg`` again, a filtered or recursive loop.
"""

from __future__ import annotations

import copy

from jinja2 import nodes
from jinja2.visitor import NodeTransformer

from .scopes import assigned_names

#: Loop attributes that read the items themselves: a loop over positions gives other values.
ITEM_ATTRIBUTES = frozenset({"previtem", "nextitem", "changed"})
#: Nodes whose body has its own ``loop`` (or none): ``i`` read there cannot become ``loop.index0``.
OWN_LOOP_SCOPES = (nodes.For, nodes.Macro, nodes.CallBlock, nodes.FilterBlock)


def positions_of(iterable: nodes.Node) -> nodes.Node | None:
    """``xs`` when ``iterable`` is ``range(xs | length)`` (or ``range(0, xs | length)``, ``| count``)."""
    if not (
        isinstance(iterable, nodes.Call) and isinstance(iterable.node, nodes.Name) and iterable.node.name == "range"
    ):
        return None
    if iterable.kwargs or iterable.dyn_args or iterable.dyn_kwargs:
        return None
    arguments = iterable.args
    if len(arguments) == 2 and isinstance(arguments[0], nodes.Const) and arguments[0].value == 0:
        arguments = arguments[1:]
    if len(arguments) != 1:
        return None
    size = arguments[0]
    if isinstance(size, nodes.Filter) and size.name in ("length", "count") and not size.args and not size.kwargs:
        return size.node
    return None


def as_message_loop(loop: nodes.For, is_message_source) -> nodes.For | None:
    """``loop`` as a loop over the messages it walks by index, or None when it is not one (see the
    module docstring). ``is_message_source(node)``: whether ``node`` holds (a slice of) the messages."""
    if loop.recursive or loop.test is not None or not isinstance(loop.target, nodes.Name) or not loop.body:
        return None
    source = positions_of(loop.iter)
    if not isinstance(source, nodes.Name) or not is_message_source(source):
        return None
    index, first = loop.target.name, loop.body[0]
    if not (
        isinstance(first, nodes.Assign)
        and isinstance(first.target, nodes.Name)
        and isinstance(first.node, nodes.Getitem)
        and isinstance(first.node.node, nodes.Name)
        and first.node.node.name == source.name
        and isinstance(first.node.arg, nodes.Name)
        and first.node.arg.name == index
    ):
        return None
    message, rest = first.target.name, loop.body[1:]
    if message in (index, "loop", source.name) or {index, message} & assigned_names(rest):
        return None
    if any(
        isinstance(node.node, nodes.Name) and node.node.name == "loop" and node.attr in ITEM_ATTRIBUTES
        for statement in rest
        for node in statement.find_all(nodes.Getattr)
    ):
        return None
    if reads_in_own_loop_scope(rest, index):  # there `loop` is another loop's: keep `i` as a name
        index_target = nodes.Name(index, "store", lineno=first.lineno)
        rest = [nodes.Assign(index_target, loop_index0(first.lineno), lineno=first.lineno), *rest]
    else:
        rest = [IndexAsLoopIndex(index).visit(copy.deepcopy(statement)) for statement in rest]
    target = nodes.Name(message, "store", lineno=loop.target.lineno)
    return nodes.For(target, source, rest, loop.else_, None, False, lineno=loop.lineno)


def loop_index0(lineno: int) -> nodes.Getattr:
    return nodes.Getattr(nodes.Name("loop", "load", lineno=lineno), "index0", "load", lineno=lineno)


def reads_in_own_loop_scope(body: list[nodes.Node], name: str) -> bool:
    """Whether ``name`` is read inside a nested loop, macro, call or filter block of ``body``."""
    for statement in body:
        scopes = [statement] if isinstance(statement, OWN_LOOP_SCOPES) else statement.find_all(OWN_LOOP_SCOPES)
        for scope in scopes:
            if any(node.name == name and node.ctx == "load" for node in scope.find_all(nodes.Name)):
                return True
    return False


class IndexAsLoopIndex(NodeTransformer):
    """Reads of the index variable as ``loop.index0`` (outside nested loop scopes: checked before)."""

    def __init__(self, index: str) -> None:
        self.index = index

    def visit_Name(self, node: nodes.Name) -> nodes.Node:
        if node.name == self.index and node.ctx == "load":
            return loop_index0(node.lineno)
        return node
