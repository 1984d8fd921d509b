"""Extending a sampled turn with the next messages, token-exactly, and what that needs to remember.

``bridge`` is the contract (``bridge_to_next_turn``); ``memory`` the prompts a renderer produced;
``recovery`` the conversation behind a prompt it did not produce; ``resume`` restarts a template's
message loop near the end of a conversation.
"""
