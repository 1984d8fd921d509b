"""Jinja's semantics without jinja2: values, filters, tests and the runtime generated code calls.

``runtime`` is what a generated renderer knows as ``jinja``; ``values``, ``filters`` and ``tests``
are its building blocks, ``builtins`` the tables that look filters and tests up by name;
``caller_text`` marks the strings that came from the caller; ``frozen_inputs`` converts tool
schemas once.
"""
