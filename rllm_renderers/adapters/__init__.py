"""Backends that ``rllm_renderers.resolve`` falls back to when no generated renderer fits.

- :mod:`.prime`: PrimeIntellect's ``renderers`` package (the ``prime`` extra), plus the shim that
  lets prime-rl's ``custom`` renderer config load a generated renderer by import path;
- :mod:`.tinker`: tinker-cookbook renderers (and Fireworks' cookbook, when importable) behind an
  adapter to our protocol (the ``tinker`` extra);
- :mod:`.chat_template`: ``tokenizer.apply_chat_template`` behind the same adapter;
- :mod:`.bridge`: what the two adapters share: a guarded ``bridge_to_next_turn`` built from the
  backend's own render and parse, and per-message token attribution.

Importing this package imports none of the backends; each module imports its library lazily.
"""
