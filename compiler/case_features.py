"""Name the conversation features of a case, to say where a renderer and an oracle differ.

Verifying against a reference that is not the template (a Python encoder, a Fireworks
renderer) may find whole classes of disagreement. Instead of one shrunk counterexample the
report then tallies, for each feature, how many differing cases have it against how many
checked cases have it: a feature present in every differing case and in few agreeing ones
is the likely cause.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from .conversations import Case

MARKUP = ("<think>", "</think>", "<", "\n")


def case_features(case: Case) -> frozenset[str]:
    """Readable features of one case (roles, tools, tool-call shapes, reasoning, knobs, odd text)."""
    features: set[str] = set()
    messages = [m for m in case.messages if isinstance(m, dict)]
    roles = [m.get("role") for m in messages]
    features |= {f"role {role}" for role in roles if role not in ("user", "assistant")}
    features.add(f"ends with {roles[-1]}" if roles else "no messages")
    if case.tools:
        features.add("tools given")
    if case.add_generation_prompt:
        features.add("add_generation_prompt")
    features |= {f"knob {name}={json.dumps(value, default=repr)}" for name, value in sorted(case.knobs.items())}
    last_user = max((i for i, role in enumerate(roles) if role == "user"), default=-1)
    for index, message in enumerate(messages):
        features |= _message_features(message, before_last_user=index < last_user)
    if roles and roles[0] not in ("system", "developer", "user"):
        features.add(f"starts with {roles[0]}")
    if any(a == b == "user" for a, b in zip(roles, roles[1:])):
        features.add("consecutive user messages")
    features |= _tool_result_order(messages)
    return frozenset(features)


def _message_features(message: dict, *, before_last_user: bool) -> set[str]:
    features = set()
    role = message.get("role")
    content = message.get("content")
    if content is None and "content" in message:
        features.add(f"{role} content None")
    elif isinstance(content, str):
        if content == "":
            features.add(f"{role} content empty")
        for marker in MARKUP:
            if marker in content:
                features.add(f"{role} content contains {marker!r}")
    if role == "assistant":
        if message.get("reasoning_content") is not None:
            features.add("reasoning before the last user" if before_last_user else "reasoning after the last user")
        calls = message.get("tool_calls") or []
        if len(calls) > 1:
            features.add("parallel tool calls")
        elif calls:
            features.add("tool call")
        for call in calls:
            arguments = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except ValueError:
                    features.add("tool-call arguments not JSON")
            if isinstance(arguments, dict):
                kinds = {type(value).__name__ for value in arguments.values()}
                features |= {f"tool-call argument of type {kind}" for kind in kinds}
                if not arguments:
                    features.add("tool call without arguments")
    return features


def _tool_result_order(messages: list[dict]) -> set[str]:
    """Whether a run of tool results answers the preceding calls out of order."""
    features = set()
    call_ids: list[Any] = []
    answered: list[Any] = []
    for message in messages + [{"role": "end"}]:
        if message.get("role") == "tool":
            answered.append(message.get("tool_call_id"))
            continue
        if answered:
            known = [call_id for call_id in answered if call_id in call_ids]
            if known != sorted(known, key=call_ids.index):
                features.add("tool results out of call order")
            if len(known) < len(answered):
                features.add("tool result answering no call")
            answered = []
        if message.get("role") == "assistant" and message.get("tool_calls"):
            call_ids = [call.get("id") for call in message["tool_calls"] if isinstance(call, dict)]
    return features


def disagreement_table(differing: list[Case], checked: Counter[str], total: int) -> list[str]:
    """Lines ``feature: D/N differing (of C cases with it)``, the most telling features first."""
    counts: Counter[str] = Counter()
    for case in differing:
        counts.update(case_features(case))
    rows = sorted(counts.items(), key=lambda item: (-item[1] / max(checked[item[0]], 1), -item[1], item[0]))
    lines = [f"differing cases: {len(differing)}/{total}; features of the differing cases:"]
    for feature, count in rows:
        lines.append(f"  {feature}: in {count}/{len(differing)} differing, {checked[feature]} checked cases have it")
    return lines
