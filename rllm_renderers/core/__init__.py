"""The renderer core and the registry engines call.

``base`` is the class every generated renderer extends, ``output`` the buffer it writes into;
``registry`` (``resolve``) and ``factory`` (``create_renderer``) pick a renderer, from the names
(``names``) and templates (``named_templates``) a model and its tokenizer carry.
"""
