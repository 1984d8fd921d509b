"""Hypothesis strategies drawing chat conversations for differential testing.

A generated renderer is checked against the oracle (transformers) on many
:class:`Case`s: a conversation, an optional tool list, the generation-prompt
flag and template knobs. :func:`conversation_cases` draws them; most are
well-formed OpenAI-style conversations, about one in ten is structurally odd
(consecutive users, a system message in the middle, assistant first, roles in
random order) so that templates which reject input get exercised.
:func:`fixed_edge_cases` gives a handful of deterministic cases to run first.

Every choice is arranged to shrink toward the simple side (no system message,
no tools, no tool calls, empty strings, knobs unset, well-formed), so a failing
case shrinks to a small readable conversation.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import string
from dataclasses import asdict, dataclass, field
from itertools import islice
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

# Text fragments that look like the markup chat templates emit or parse.
TRICKY_FRAGMENTS: tuple[str, ...] = (
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "<|im_start|>",
    "<|im_end|>",
    "<|eot_id|>",
    "<|start_header_id|>",
    "<|endoftext|>",
    "<s>",
    "</s>",
    "[INST]",
    "[TOOL_CALLS]",
    "<start_of_turn>",
    "<end_of_turn>",
    "<|channel|>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜Assistant｜>",
    "<｜User｜>",
    '<｜DSML｜invoke name="f">',
    "<tool_result>",
    "{{",
    "}}",
    "{%",
    "%}",
    "{#",
    '{"name": "f", "arguments": {}}',
    '{"a": [1, 2.5, null, true]}',
    "[]",
    "\n",
    "\n\n",
    " ",
    "  ",
    "\t",
    "\r\n",
    "😀",
    "👩‍💻",
    "你好，世界",
    "é",
    "Hello",
    "What is the weather in Paris?",
)

# A strategy: a string made of a few pieces, each plain st.text() or a tricky fragment.
# Shrinks toward "" and then toward short plain text.
TEXT = st.lists(
    st.one_of(st.text(max_size=8), st.sampled_from(TRICKY_FRAGMENTS)),
    max_size=4,
).map("".join)

IDENTIFIER = st.text(string.ascii_lowercase + "_" + string.digits, min_size=1, max_size=12)  # cheaper than from_regex
TOOL_NAME = st.one_of(st.sampled_from(("get_weather", "search", "python", "f")), IDENTIFIER, TEXT)

_UNSET = object()  # a knob left out of Case.knobs


@dataclass(frozen=True)
class ConversationFeatures:
    """What a template can take, so the strategy draws only what matters for it."""

    # Roles to draw; must include "user". Other roles than these four appear only in odd conversations.
    roles: tuple[str, ...] = ("system", "user", "assistant", "tool")
    knobs: tuple[tuple[str, tuple], ...] = ()  # (knob name, candidate values); the knob may also be left unset
    # knob values every case starts from: empty, unless the template renders nothing with its knobs
    # unset (firefunction-v2 concatenates its `functions` knob unguarded)
    base_knobs: tuple[tuple[str, Any], ...] = ()
    arguments_form: str = "dict"  # tool-call `arguments` as "dict" (HF convention) or "string" (OpenAI JSON string)
    max_messages: int = 10
    reasoning: bool = True  # draw `reasoning_content` on assistant messages
    tool_calls: bool = True
    max_tool_calls: int = 3  # calls per assistant turn (Llama 3.x templates allow only one)
    tools: bool = True  # draw a `tools` list (or None)
    # messages the template requires before the first user message, after any system message
    # (firefunction-v1 refuses a conversation without a `functions` message); each is in `roles`
    lead_roles: tuple[str, ...] = ()

    def __post_init__(self):
        if self.arguments_form not in ("dict", "string"):
            raise ValueError(f"arguments_form must be 'dict' or 'string', not {self.arguments_form!r}")
        if self.max_messages < 1:
            raise ValueError("max_messages must be at least 1")
        if "user" not in self.roles:
            raise ValueError("roles must include 'user'")
        if not set(self.lead_roles) <= set(self.roles):
            raise ValueError(f"lead roles {self.lead_roles} must be among the roles {self.roles}")


#: What a required lead message says (see ``ConversationFeatures.lead_roles``).
LEAD_CONTENT = "Context."


def with_lead(messages: list[dict], lead: tuple[str, ...]) -> list[dict]:
    """``messages`` with the ``lead`` messages first (after a first system message, unless the lead
    starts with one); a lead message already there is not repeated."""
    out = list(messages)
    start = 1 if out and out[0].get("role") == "system" and lead[:1] != ("system",) else 0
    for role in lead:
        if not (start < len(out) and out[start].get("role") == role):
            out.insert(start, {"role": role, "content": LEAD_CONTENT})
        start += 1
    return out


@dataclass(frozen=True)
class Case:
    """One input to render: what apply_chat_template would be called with."""

    messages: list[dict]
    tools: list[dict] | None = None
    add_generation_prompt: bool = False
    knobs: dict = field(default_factory=dict)

    def describe(self) -> str:
        """A readable JSON dump for error reports."""
        return json.dumps(asdict(self), ensure_ascii=False, indent=2, default=repr)


# ---------------------------------------------------------------- JSON values


_JSON_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
)
_JSON_KEY = st.one_of(IDENTIFIER, TEXT)
JSON_VALUE = st.recursive(
    _JSON_SCALAR,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(_JSON_KEY, children, max_size=3),
    ),
    max_leaves=6,
)
ARGUMENTS = st.dictionaries(_JSON_KEY, JSON_VALUE, max_size=3)  # includes {}


# ---------------------------------------------------------------- tools


@st.composite
def _tool_spec(draw, name: str) -> dict:
    """An OpenAI/HF function spec with a small JSON-schema parameter object."""
    properties = {}
    for prop in draw(st.lists(IDENTIFIER, max_size=3, unique=True)):
        schema: dict[str, Any] = {
            "type": draw(st.sampled_from(("string", "integer", "number", "boolean", "array", "object"))),
            "description": draw(TEXT),
        }
        if schema["type"] == "string" and draw(st.booleans()):
            schema["enum"] = draw(st.lists(TEXT, min_size=1, max_size=3, unique=True))
        if schema["type"] == "array":
            schema["items"] = {"type": "string"}
        properties[prop] = schema
    required = [prop for prop in properties if draw(st.booleans())]
    parameters = {"type": "object", "properties": properties, "required": required}
    return {"type": "function", "function": {"name": name, "description": draw(TEXT), "parameters": parameters}}


@st.composite
def _tools(draw) -> list[dict] | None:
    if not draw(st.booleans()):
        return None
    names = draw(st.lists(TOOL_NAME, min_size=1, max_size=3, unique=True))
    return [draw(_tool_spec(name)) for name in names]


# ---------------------------------------------------------------- messages


_CALL_ID = st.one_of(
    st.text(string.ascii_letters + string.digits, min_size=9, max_size=9),  # Mistral wants 9 alphanumerics
    st.text(string.ascii_letters + string.digits, min_size=1, max_size=8).map(lambda s: "call_" + s),
)


@st.composite
def _tool_call(draw, features: ConversationFeatures, tool_names: list[str]) -> dict:
    """An OpenAI-shaped tool call; usually names one of the declared tools."""
    name = draw(st.sampled_from(tool_names) if tool_names and draw(st.booleans()) else TOOL_NAME)
    arguments = draw(ARGUMENTS)
    if features.arguments_form == "string":
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {"id": draw(_CALL_ID), "type": "function", "function": {"name": name, "arguments": arguments}}


@st.composite
def _assistant(draw, features: ConversationFeatures, tool_names: list[str], *, calls: bool) -> dict:
    """An assistant message, with tool calls when `calls` (content may then be None or absent)."""
    message: dict[str, Any] = {"role": "assistant"}
    if calls and draw(st.sampled_from((False, False, False, True))):  # 1 in 4: no content beside tool calls
        if draw(st.booleans()):
            message["content"] = None  # else the key is left out
    else:
        message["content"] = draw(TEXT)
    if features.reasoning and draw(st.booleans()):
        message["reasoning_content"] = draw(TEXT)
    if calls:
        message["tool_calls"] = draw(
            st.lists(_tool_call(features, tool_names), min_size=1, max_size=features.max_tool_calls)
        )
    return message


@st.composite
def _tool_result(draw, call: dict | None) -> dict:
    """A tool message answering `call` (or a made-up call), sometimes carrying the tool's name."""
    call_id = call["id"] if call is not None else draw(_CALL_ID)
    message = {"role": "tool", "tool_call_id": call_id, "content": draw(TEXT)}
    if draw(st.booleans()):
        message["name"] = call["function"]["name"] if call is not None else draw(TOOL_NAME)
    return message


def _endless_conversation(draw, features: ConversationFeatures, tool_names: list[str], with_system: bool):
    """Yield a well-formed conversation one message at a time, drawing each only when it is asked for.

    Turns are a user message (sometimes after a developer message, when the template
    has that role), zero to two tool-call rounds (an assistant message with tool calls,
    then one tool result per call, sometimes out of call order) and a final assistant reply.
    """
    if with_system:
        yield {"role": "system", "content": draw(TEXT)}
    for role in features.lead_roles:
        if not (role == "system" and with_system):
            yield {"role": role, "content": draw(TEXT)}
    while True:
        if "developer" in features.roles and draw(st.sampled_from((False, False, False, True))):
            yield {"role": "developer", "content": draw(TEXT)}
        yield {"role": "user", "content": draw(TEXT)}
        for _ in range(draw(st.integers(0, 2)) if features.tool_calls else 0):
            assistant = draw(_assistant(features, tool_names, calls=True))
            yield assistant
            calls = assistant["tool_calls"]
            if len(calls) > 1 and draw(st.booleans()):
                calls = draw(st.permutations(calls))  # results may come back in any order
            for call in calls:
                yield draw(_tool_result(call))
        yield draw(_assistant(features, tool_names, calls=False))


@st.composite
def _well_formed(draw, features: ConversationFeatures, tool_names: list[str]) -> list[dict]:
    """The first `budget` messages of a well-formed conversation, so it may end on any role.

    The budget is drawn first (uniformly: integers() would favour the bounds):
    shrinking it drops the messages after it along with the draws that made
    them, which is what makes failing cases shrink short.
    """
    budget = draw(st.sampled_from(range(1, features.max_messages + 1)))
    with_system = "system" in features.roles and budget > 1 and draw(st.booleans())
    stream = _endless_conversation(draw, features, tool_names, with_system)
    return list(islice((m for m in stream if m["role"] in features.roles), budget))


@st.composite
def _random_roles(draw, features: ConversationFeatures, tool_names: list[str]) -> list[dict]:
    """Messages with roles in random order."""
    messages = []
    for role in draw(st.lists(st.sampled_from(features.roles), min_size=1, max_size=features.max_messages)):
        if role == "assistant":
            calls = features.tool_calls and draw(st.booleans())
            messages.append(draw(_assistant(features, tool_names, calls=calls)))
        elif role == "tool":
            messages.append(draw(_tool_result(None)))
        else:
            messages.append({"role": role, "content": draw(TEXT)})
    return messages


@st.composite
def _odd(draw, features: ConversationFeatures, tool_names: list[str]) -> list[dict]:
    """A structurally odd conversation: a well-formed one with one defect, or random roles.

    Defects: two users in a row, a system message in the middle, an assistant
    (or a tool result) first, a tool result whose id answers no call. Templates that
    check structure reject these.
    """
    defects = ["random_roles", "consecutive_users"]
    defects += [role for role in ("system", "assistant", "tool") if role in features.roles]
    if "tool" in features.roles and features.tool_calls:
        defects.append("unknown_tool_call_id")
    defect = draw(st.sampled_from(defects))
    if defect == "random_roles":
        return draw(_random_roles(features, tool_names))
    messages = draw(_well_formed(features, tool_names))
    results = [i for i, m in enumerate(messages) if m["role"] == "tool"]
    if defect == "unknown_tool_call_id" and results:
        messages[draw(st.sampled_from(results))]["tool_call_id"] = draw(_CALL_ID)
    elif defect == "consecutive_users":
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        after = draw(st.sampled_from(users)) if users else -1  # a lone developer message has no user yet
        messages.insert(after + 1, {"role": "user", "content": draw(TEXT)})
    elif defect == "system":  # anywhere but first
        messages.insert(draw(st.integers(1, len(messages))), {"role": "system", "content": draw(TEXT)})
    elif defect == "assistant":
        messages.insert(0, draw(_assistant(features, tool_names, calls=False)))
    else:  # a tool result answering no call, first
        messages.insert(0, draw(_tool_result(None)))
    return messages[: features.max_messages]


# ---------------------------------------------------------------- cases


def _knobs(features: ConversationFeatures) -> st.SearchStrategy[dict]:
    """Each knob unset (the shrink target) or one of its candidate values."""
    per_knob = [st.sampled_from((_UNSET, *values)).map(lambda v, n=name: (n, v)) for name, values in features.knobs]
    base = dict(features.base_knobs)
    return st.tuples(*per_knob).map(lambda pairs: {**base, **{n: v for n, v in pairs if v is not _UNSET}})


@st.composite
def _case(draw, features: ConversationFeatures) -> Case:
    tools = draw(_tools()) if features.tools else None
    tool_names = [tool["function"]["name"] for tool in tools or ()]
    odd = draw(st.sampled_from((False,) * 9 + (True,)))  # ~10% odd; shrinks to well-formed
    messages = draw((_odd if odd else _well_formed)(features, tool_names))
    return Case(
        messages=messages,
        tools=tools,
        add_generation_prompt=draw(st.booleans()),
        knobs=draw(_knobs(features)),
    )


def conversation_cases(features: ConversationFeatures = ConversationFeatures()) -> st.SearchStrategy[Case]:
    """Cases for differential testing of a template with these features."""
    return _case(features)


def fixed_edge_cases(features: ConversationFeatures = ConversationFeatures()) -> list[Case]:
    """A few deterministic cases to try before the random ones.

    Cases using a role outside ``features.roles`` (or tool calls when the
    features exclude them) are left out; each knob value gets one case of its own.
    """
    args: Any = {"city": "Paris", "days": 2}
    if features.arguments_form == "string":
        args = json.dumps(args)
    call_a = {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": args}}
    call_b = {"id": "call00002", "type": "function", "function": {"name": "get_time", "arguments": args}}
    tools = None
    if features.tools:
        params = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
        tools = [
            {"type": "function", "function": {"name": name, "description": "Look it up.", "parameters": params}}
            for name in ("get_weather", "get_time")
        ]
    user = {"role": "user", "content": "What is the weather in Paris?"}
    answer = {"role": "assistant", "content": "It is sunny."}
    if features.reasoning:
        answer = {**answer, "reasoning_content": "The tool said sunny."}

    plain = [
        Case([{"role": "user", "content": "Hello"}]),
        Case([{"role": "user", "content": "Hello"}], add_generation_prompt=True),
        Case([{"role": "system", "content": "You are terse."}, user], add_generation_prompt=True),
        Case([user, answer, {"role": "user", "content": "Thanks"}], add_generation_prompt=True),
        Case([{"role": "user", "content": ""}, {"role": "assistant", "content": ""}]),
    ]
    with_tools = [
        Case(
            [
                user,
                {"role": "assistant", "content": None, "tool_calls": [call_a]},
                {"role": "tool", "tool_call_id": "call00001", "content": '{"sky": "sunny"}'},
                answer,
            ],
            tools=tools,
        ),
        Case(
            [
                user,
                {"role": "assistant", "content": "", "tool_calls": [call_a, call_b]},
                {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "sunny"},
                {"role": "tool", "tool_call_id": "call00002", "name": "get_time", "content": "noon"},
            ],
            tools=tools,
            add_generation_prompt=True,
        ),
    ]
    cases = plain + (with_tools if features.tool_calls else [])
    base = [user, answer]
    cases += [Case(base, knobs={name: value}) for name, values in features.knobs for value in values]
    cases = [dataclasses.replace(case, messages=with_lead(case.messages, features.lead_roles)) for case in cases]
    cases = [case for case in cases if all(m["role"] in features.roles for m in case.messages)]
    cases = [dataclasses.replace(case, knobs={**dict(features.base_knobs), **case.knobs}) for case in cases]
    return copy.deepcopy(cases)  # no message dict shared between cases


def drawn_cases(features: ConversationFeatures, cases: int, seed_value: int) -> list[Case]:
    """``cases`` conversations drawn from :func:`conversation_cases`, the same ones for the same seed
    (for a comparison that looks at every case rather than stopping at the first failure)."""
    drawn: list[Case] = []

    @settings(
        max_examples=cases,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate],
        print_blob=False,
    )
    @seed(seed_value)
    @given(conversation_cases(features))
    def collect(case: Case) -> None:
        drawn.append(case)

    collect()
    return drawn
