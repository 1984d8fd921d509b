"""Whether a template reads message content as a string or as a list of OpenAI content parts.

Modelled on vLLM's chat-template content-format detection: a template that loops over a
message's ``content`` (directly, through a variable set from it, or through a macro parameter it
is passed as) consumes a list of parts (``"parts"``); any other template consumes a string
(``"string"``). The generated class records the answer as ``CONTENT_FORMAT``, and the renderer
joins the text parts of list content for a ``"string"`` template (see
``GeneratedRenderer.normalize_messages``).
"""

from __future__ import annotations

from jinja2 import nodes

CONTENT_FIELD = "content"


def is_content_access(node: nodes.Node) -> bool:
    """``x.content`` or ``x['content']``."""
    if isinstance(node, nodes.Getattr):
        return node.attr == CONTENT_FIELD
    if isinstance(node, nodes.Getitem):
        return isinstance(node.arg, nodes.Const) and node.arg.value == CONTENT_FIELD
    return False


def content_names(ast: nodes.Template) -> set[str]:
    """Names that hold a message's content: ``{% set c = m.content %}`` targets and macro parameters
    some call passes ``m.content`` to."""
    names = set()
    for assign in ast.find_all(nodes.Assign):
        if isinstance(assign.target, nodes.Name) and is_content_access(assign.node):
            names.add(assign.target.name)
    macros = {macro.name: [argument.name for argument in macro.args] for macro in ast.find_all(nodes.Macro)}
    for call in ast.find_all(nodes.Call):
        if not isinstance(call.node, nodes.Name) or call.node.name not in macros:
            continue
        parameters = macros[call.node.name]
        for position, argument in enumerate(call.args[: len(parameters)]):
            if is_content_access(argument):
                names.add(parameters[position])
        for keyword in call.kwargs:
            if keyword.key in parameters and is_content_access(keyword.value):
                names.add(keyword.key)
    return names


def detect_content_format(ast: nodes.Template) -> str:
    """``"parts"`` when the template iterates over message content, else ``"string"``."""
    names = content_names(ast)
    for loop in ast.find_all(nodes.For):
        iterated = loop.iter
        while isinstance(iterated, nodes.Filter) and iterated.node is not None:  # e.g. `content | list`
            iterated = iterated.node
        if is_content_access(iterated) or (isinstance(iterated, nodes.Name) and iterated.name in names):
            return "parts"
    return "string"
