"""Scripted assistant turns for the engine tests of the streaming parser and the vLLM plugins:
reasoning, content, one call, parallel calls, nested arguments, unicode and JSON-special characters."""

from __future__ import annotations

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": list(properties)},
        },
    }
    for name, description, properties in (
        ("get_weather", "Weather of a city", {"city": {"type": "string"}}),
        ("search", "Search the web", {"search_request": {"type": "object"}}),
        ("write_note", "Write a note", {"text": {"type": "string"}, "priority": {"type": "number"}}),
    )
]

HISTORY = [{"role": "user", "content": "Help me, please."}]


def _call(index: int, name: str, arguments: dict) -> dict:
    return {"id": f"call_{index}", "type": "function", "function": {"name": name, "arguments": arguments}}


#: name -> the assistant message the model is made to write
SCRIPTS = {
    "content": {"role": "assistant", "content": "The answer is 4."},
    "reasoning": {"role": "assistant", "reasoning_content": "Two and two make four.", "content": "It is 4."},
    "single_call": {"role": "assistant", "content": "", "tool_calls": [_call(0, "get_weather", {"city": "Paris"})]},
    "parallel_calls": {
        "role": "assistant",
        "content": "",
        "tool_calls": [_call(0, "get_weather", {"city": "Paris"}), _call(1, "get_weather", {"city": "Tokyo"})],
    },
    "nested_arguments": {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            _call(0, "search", {"search_request": {"query": "rust async", "filters": {"year": 2024, "tags": ["a", "b"]}}})
        ],
    },
    "special_characters": {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            _call(0, "write_note", {"text": 'naïve "quoted" \\ back\\slash, {braces} — 日本語 😀\ttab', "priority": -1.5})
        ],
    },
}
