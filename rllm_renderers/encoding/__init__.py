"""Text to token ids and back, exactly as the tokenizer does, and fast.

``tokenization`` is the encoder a renderer uses (with per-token offsets); ``fast_encoder`` and
``fastokens_spans`` the rank-based BPE engines it may prove equal to the tokenizer, with their
proofs cached by ``proof_cache``; ``detokenize`` ids back to text; ``fingerprint`` and ``loading``
recognise and load tokenizers; ``unencodable`` finds text no tokenizer can encode.
"""
