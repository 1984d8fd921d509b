"""Settings every test process starts with."""

import os

# The tests check the encoder that serves, so a tokenizer new to the proof cache is proved in the
# test's own process, not in the background (rllm_renderers.encoding.background_proof); the tests of
# the background mode set it themselves.
os.environ.setdefault("RLLM_RENDERERS_PROOF", "inline")
