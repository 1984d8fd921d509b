"""What kind of value a template expression may hold: a namespace, computed data, a Markup, message text.

Lowering asks these questions while it translates: computed values (not wrapped template
data) need Jinja's full lookup rules, a possible Markup must keep its escaping ``+``, and
message text is appended with ``out.append_content`` so that attribution comes from the
translator. The answers are fixed points over every ``set`` of the template.
"""

from __future__ import annotations

from jinja2 import nodes

from rllm_renderers.jinja import runtime as template_runtime

from .scopes import is_namespace_call, target_names

# Filters whose result is never a Markup, whatever their input (the others hand a Markup on: an
# item of a list of Markups, or template_runtime.MARKUP_KEEPING_FILTERS).
PLAIN_RESULT_FILTERS = {"tojson", "join", "replace", "title", "length", "count", "int", "float", "abs", "items"}

# Message fields whose text is the message's own body (attributed as content).
CONTENT_FIELDS = {"content", "reasoning_content", "thinking"}
# Fields of a tool call the model writes (attributed as content of the assistant message).
TOOL_CALL_FIELDS = {"name", "arguments", "function"}
# Filters and methods that keep a content value content (trimmed, converted, split).
CONTENT_PRESERVING_FILTERS = {"trim", "string", "safe", "d", "default", "tojson", "replace"}
CONTENT_PRESERVING_METHODS = {"strip", "lstrip", "rstrip", "split", "rsplit", "replace"}


class ValueKinds:
    """The value-kind analyses, mixed into :class:`~compiler.translator.lower.Lowering`."""

    def __init__(self) -> None:
        self.markup_possible = False  # the template uses `| safe`, the one source of Markup values
        self.markup_names: set[str] = set()  # template names that may hold a Markup
        self.markup_attributes: set[str] = set()  # namespace attributes that may hold one
        self.computed_names: set[str] = set()  # template names some `set` binds to a computed value
        self.computed_attributes: set[str] = set()  # namespace attributes some `set` binds to one
        self.namespace_names: set[str] = set()  # template names bound to a namespace()
        self.content_names: set[str] = set()  # template names some `set` binds to message content
        self.content_attributes: set[str] = set()  # namespace attributes some `set` binds to content
        self.tool_call_names: set[str] = set()  # template names bound to a tool call
        self.macro_names: set[str] = set()  # every macro the template defines
        self.macro_parameters: set[str] = set()  # the parameter names of every macro

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
        macros = {macro.name: macro for macro in template.find_all(nodes.Macro)}
        macro_calls = [
            call
            for call in template.find_all(nodes.Call)
            if isinstance(call.node, nodes.Name) and call.node.name in macros
        ]
        loops = list(template.find_all(nodes.For))
        while True:  # to a fixed point: `{% set a = [1] %}{% set b = a %}` makes both computed
            known = (set(self.computed_names), set(self.computed_attributes))
            for assign in assignments:
                if isinstance(assign, nodes.AssignBlock) or self.is_computed(assign.node):
                    if isinstance(assign.target, nodes.NSRef):
                        self.computed_attributes.add(assign.target.attr)
                    self.computed_names |= target_names(assign.target)
            for loop in loops:
                # an item of a computed sequence is computed (`{% for x in [{'a': 1}] %}{{ x.b }}`)
                if self.is_computed(loop.iter):
                    self.computed_names |= target_names(loop.target)
            for call in macro_calls:
                # a parameter some call passes a computed value (`f(spec | items)`, `f({"type": t})`)
                parameters = [parameter.name for parameter in macros[call.node.name].args]
                passed = list(zip(parameters, call.args)) + [(keyword.key, keyword.value) for keyword in call.kwargs]
                self.computed_names |= {name for name, value in passed if self.is_computed(value)}
            if known == (self.computed_names, self.computed_attributes):
                break
        filters = template.find_all(nodes.Filter)
        self.markup_possible = any(node.name in template_runtime.MARKUP_FILTERS for node in filters)
        if self.markup_possible:
            self.find_markup_names(template)
        self.find_content_names(template)

    def find_content_names(self, template: nodes.Template) -> None:
        """Names a ``set`` binds to message content, and loop variables over tool calls."""
        self.macro_names = {macro.name for macro in template.find_all(nodes.Macro)}
        self.macro_parameters = {argument.name for macro in template.find_all(nodes.Macro) for argument in macro.args}
        while True:
            known = (set(self.content_names), set(self.tool_call_names), set(self.content_attributes))
            for assign in template.find_all(nodes.Assign):
                if isinstance(assign.target, nodes.NSRef) and self.is_content_node(assign.node):
                    self.content_attributes.add(assign.target.attr)  # `{% set parts.visible = content %}`
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
            if known == (self.content_names, self.tool_call_names, self.content_attributes):
                return

    def is_tool_call_node(self, node: nodes.Node) -> bool:
        if isinstance(node, nodes.Name):
            return node.name in self.tool_call_names
        if isinstance(node, (nodes.Getattr, nodes.Getitem)):
            key = node.attr if isinstance(node, nodes.Getattr) else getattr(node.arg, "value", None)
            return key == "function" and self.is_tool_call_node(node.node)
        return False

    def content_owner(self, node: nodes.Node) -> nodes.Node | None:
        """``messages[k]`` when ``node`` writes the content of that message by constant index
        (``messages[0].content``, trimmed or split), else None."""
        while True:
            if isinstance(node, nodes.Filter) and node.name in CONTENT_PRESERVING_FILTERS and node.node is not None:
                node = node.node
            elif isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr):
                if node.node.attr not in CONTENT_PRESERVING_METHODS:
                    return None
                node = node.node.node
            elif isinstance(node, nodes.Getitem) and isinstance(node.node, nodes.Call):
                node = node.node  # content.split(...)[-1]
            else:
                break
        if not isinstance(node, (nodes.Getattr, nodes.Getitem)):
            return None
        key = node.attr if isinstance(node, nodes.Getattr) else getattr(node.arg, "value", None)
        message = node.node
        if (
            key in CONTENT_FIELDS
            and isinstance(message, nodes.Getitem)
            and isinstance(message.node, nodes.Name)
            and message.node.name == "messages"
            and isinstance(message.arg, nodes.Const)
            and isinstance(message.arg.value, int)
        ):
            return message
        return None

    def is_content_node(self, node: nodes.Node) -> bool:
        """Whether ``node`` writes a message's own text: its content or reasoning (trimmed, split,
        converted), or a field of one of its tool calls."""
        if isinstance(node, nodes.Name):
            return node.name in self.content_names
        if self.content_owner(node) is not None:
            return True
        if isinstance(node, nodes.Or):  # `message.content or ''`
            return self.is_content_node(node.left) and isinstance(node.right, nodes.Const) and not node.right.value
        if isinstance(node, nodes.Getattr) and node.attr in self.content_attributes and isinstance(node.node, nodes.Name):
            return True  # a namespace attribute holding content (`parts.visible`)
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
            if node.name in template_runtime.MARKUP_FILTERS:
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
        if isinstance(node, nodes.Name):  # (a global, `raise_exception` or `namespace`, is a Python object)
            return node.name in self.computed_names or node.name in template_runtime.GLOBALS
        if isinstance(node, nodes.Getattr) and node.attr in self.computed_attributes:
            if isinstance(node.node, nodes.Name) and node.node.name in self.namespace_names:
                return True
        if isinstance(node, (nodes.Getattr, nodes.Getitem)):
            return self.is_computed(node.node)
        return True
