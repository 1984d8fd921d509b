"""Names for the methods split out of a role dispatch, from what each branch handles.

``{% elif message.role == 'assistant' and message.tool_calls %}`` becomes
``render_assistant_with_tool_calls``: the roles the branch selects, then each other condition it
adds (``with_`` / ``without_`` a message field, ``first`` / ``not_first`` for ``loop.first``, ...).
A name never depends on the branch's position, so a branch moving or a branch added elsewhere leaves
the others' names alone. A branch that writes only fixed text is the role's ``header``. When two
dispatches still give one name, the later branch's loop tells it apart (``in_<list>``, a loop over
another list than ``messages``), failing that a digest of its own code: never a position.
"""

from __future__ import annotations

import hashlib
import re

from jinja2 import nodes

from .scopes import role_accessed

MOST_WORDS = 4  # of one condition, in a name


def conjuncts(test: nodes.Node) -> list[nodes.Node]:
    if isinstance(test, nodes.And):
        return conjuncts(test.left) + conjuncts(test.right)
    return [test]


def selects_role(test: nodes.Node, target: str) -> bool:
    """``message.role == 'user'`` / ``... in [...]`` (and ``or`` of them): the part of a branch the roles name."""
    if isinstance(test, nodes.Or):
        return selects_role(test.left, target) or selects_role(test.right, target)
    if isinstance(test, nodes.Compare):
        return any(role_accessed(operand, target) for operand in [test.expr, *(op.expr for op in test.ops)])
    return False


def message_field(node: nodes.Node, target: str) -> str | None:
    """``message.tool_calls`` / ``message['tool_calls']`` / ``message.get('tool_calls')``: the field's name."""
    if isinstance(node, nodes.Getattr) and isinstance(node.node, nodes.Name) and node.node.name == target:
        return node.attr
    if isinstance(node, nodes.Getitem) and isinstance(node.node, nodes.Name) and node.node.name == target:
        return node.arg.value if isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str) else None
    if (
        isinstance(node, nodes.Call)
        and isinstance(node.node, nodes.Getattr)
        and node.node.attr == "get"
        and isinstance(node.node.node, nodes.Name)
        and node.node.node.name == target
        and node.args
        and isinstance(node.args[0], nodes.Const)
    ):
        return str(node.args[0].value)
    if isinstance(node, nodes.Filter) and node.name == "length" and node.node is not None:
        return message_field(node.node, target)
    return None


def condition_words(test: nodes.Node, target: str) -> list[str]:
    """One condition of a branch, in words: ``with_tool_calls``, ``without_content``, ``first``."""
    negated = False
    while isinstance(test, nodes.Not):
        negated, test = not negated, test.node
    if isinstance(test, nodes.Test) and test.node is not None and message_field(test.node, target) is not None:
        absent = test.name in ("undefined", "none", "false")  # `is defined`, `is iterable`, ...: present
        return field_words(message_field(test.node, target), absent != negated, test)
    if isinstance(test, nodes.Compare) and len(test.ops) == 1:
        operator, operand = test.ops[0].op, test.ops[0].expr
        if operator in ("in", "notin") and isinstance(test.expr, nodes.Const) and isinstance(operand, nodes.Name):
            if operand.name == target:  # `'tool_calls' in message`
                return field_words(str(test.expr.value), (operator == "notin") != negated, test)
        first = loop_position(test.expr, operator, operand)
        if first is not None:
            return ["first" if first != negated else "not_first"]
        if message_field(test.expr, target) is not None:  # `message.tool_calls | length > 0`
            return field_words(message_field(test.expr, target), negated, test)
    field = message_field(test, target)
    if field is not None:
        return field_words(field, negated, test)
    if isinstance(test, nodes.Getattr) and isinstance(test.node, nodes.Name) and test.node.name == "loop":
        return [("not_" if negated else "") + test.attr]
    return [("not_" if negated else "when_") + "_".join(identifier_words(test)[:MOST_WORDS])]


def loop_position(left: nodes.Node, operator: str, right: nodes.Node) -> bool | None:
    """For ``loop.index0 == 0`` / ``loop.index != 1``: True when it selects the first item, False
    when every other one; None for any other comparison."""
    if not (isinstance(left, nodes.Getattr) and isinstance(left.node, nodes.Name) and left.node.name == "loop"):
        return None
    first_value = {"index0": 0, "index": 1}.get(left.attr)
    if first_value is None or not isinstance(right, nodes.Const) or right.value != first_value:
        return None
    return {"eq": True, "ne": False}.get(operator)


def field_words(field: str | None, absent: bool, test: nodes.Node) -> list[str]:
    if field is None:
        return [("without_" if absent else "with_") + "_".join(identifier_words(test)[:MOST_WORDS])]
    return [("without_" if absent else "with_") + field]


def identifier_words(node: nodes.Node) -> list[str]:
    """The names, attributes and string keys a condition reads, in order, as lowercase words."""
    words: list[str] = []
    for child in [node, *node.find_all(nodes.Node)]:
        word = None
        if isinstance(child, nodes.Name):
            word = child.name
        elif isinstance(child, nodes.Getattr):
            word = child.attr
        elif isinstance(child, nodes.Const) and isinstance(child.value, str):
            word = child.value
        if word is not None:
            word = re.sub(r"[^0-9a-z]+", "_", word.lower()).strip("_")
            if word and word not in words:
                words.append(word)
    return words or ["condition"]


def branch_method_name(test: nodes.Node, target: str, topics: list[str]) -> str:
    """``render_<roles>`` and the branch's other conditions (see the module docstring)."""
    words = ["render", "_or_".join(topics)]
    for condition in conjuncts(test):
        if any(role_accessed(node, target) for node in [condition, *condition.find_all(nodes.Node)]):
            continue  # the roles are the topics already
        for word in condition_words(condition, target):
            if word not in words and word.partition("_")[2] not in topics:  # not `tool_calls_with_tool_calls`
                words.append(word)
    name = "_".join(word for word in words if word)
    return re.sub(r"_+", "_", name) if name.isidentifier() else "render_branch"


def header_name(name: str, writes_only_text: bool) -> str:
    """A branch that writes only fixed text renders the role's ``header``."""
    return f"{name}_header" if writes_only_text else name


def loop_name(name: str, loop_iterable: str | None) -> str | None:
    """For a branch whose name another dispatch's branch has: ``in_<list>`` when its loop is over a
    list other than ``messages`` (Kimi's history and suffix loops), else None."""
    return f"{name}_in_{loop_iterable}" if loop_iterable and loop_iterable != "messages" else None


def digest_name(name: str, code: str) -> str:
    """The last resort for two branches alike in every word: a digest of the branch's own code."""
    return f"{name}_{hashlib.sha256(code.encode()).hexdigest()[:6]}"
