"""Run inside vLLM's Python: the ``rllm`` tool and reasoning parsers, as vLLM's serving layer composes
them (``ParserManager.get_parser``), on turns given as JSON; prints what they return as JSON.

Input (a file named by argv[1]): ``{"plugin": path, "families": {name: {"tokenizer": folder,
"renderer": family, "parsers": [[tool, reasoning], ...], "cases": [{"ids": [...], "prompt_ids": [...],
"stop_ids": [...], "tools": [...], "chunks": [k, ...]}]}}}``; each case is read whole (``parse``) and
streamed (``parse_delta``, the completion ids cut at ``chunks``). Output: per family, per parser pair,
per case, ``{"whole": message, "streamed": message}`` (or ``{"error": text}``).
"""

from __future__ import annotations

import json
import os
import sys


def message(reasoning, content, calls) -> dict:
    return {"reasoning": reasoning or "", "content": content or "", "tool_calls": calls}


def run(parser_class, tokenizer, case) -> dict:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    request = ChatCompletionRequest(
        model="m", messages=[{"role": "user", "content": "x"}], tools=case["tools"] or None, skip_special_tokens=False
    )
    ids = case["ids"]
    stops = set(case["stop_ids"])

    def text_of(part: list[int]) -> str:  # as vLLM's output text: without the stop token that ended it
        return tokenizer.decode([token for token in part if token not in stops], skip_special_tokens=False)

    text = text_of(ids)
    parser = parser_class(tokenizer, request.tools)
    request = parser.adjust_request(request)
    reasoning, content, calls = parser.parse(text, request, enable_auto_tools=True)
    whole = message(reasoning, content, [[call.name, call.arguments] for call in calls or []])
    parser = parser_class(tokenizer, request.tools)
    reasoning, content, streamed_calls = "", "", {}
    cuts = [0, *case["chunks"], len(ids)]
    for start, end in zip(cuts, cuts[1:]):
        # the text vLLM's incremental detokenizer would give for these ids
        delta_text = text_of(ids[:end])[len(text_of(ids[:start])) :]
        delta = parser.parse_delta(delta_text, ids[start:end], request, case["prompt_ids"], finished=end == len(ids))
        if delta is None:
            continue
        reasoning += delta.reasoning or ""
        content += delta.content or ""
        for call in delta.tool_calls:
            entry = streamed_calls.setdefault(call.index, ["", ""])
            if call.function is not None:
                entry[0] += call.function.name or ""
                entry[1] += call.function.arguments or ""
    streamed = message(reasoning, content, [streamed_calls[index] for index in sorted(streamed_calls)])
    return {"whole": whole, "streamed": streamed}


def run_family(spec: dict) -> dict:
    from transformers import AutoTokenizer
    from vllm.parser.parser_manager import ParserManager

    os.environ["RLLM_VLLM_RENDERER"] = spec["renderer"]
    tokenizer = AutoTokenizer.from_pretrained(spec["tokenizer"])
    out = {}
    for tool_name, reasoning_name in spec["parsers"]:
        key = f"{tool_name}/{reasoning_name}"
        try:
            parser_class = ParserManager.get_parser(
                tool_parser_name=tool_name, reasoning_parser_name=reasoning_name, enable_auto_tools=True
            )
        except Exception as exc:  # a built-in parser this vLLM does not have
            out[key] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        results = []
        for case in spec["cases"]:
            try:
                results.append(run(parser_class, tokenizer, case))
            except Exception as exc:
                results.append({"error": f"{type(exc).__name__}: {exc}"})
        out[key] = results
    return out


def main() -> None:
    from vllm.reasoning.abs_reasoning_parsers import ReasoningParserManager
    from vllm.tool_parsers.abstract_tool_parser import ToolParserManager

    spec = json.loads(open(sys.argv[1], encoding="utf-8").read())
    ToolParserManager.import_tool_parser(spec["plugin"])  # as --tool-parser-plugin does
    ReasoningParserManager.import_reasoning_parser(spec["plugin"])
    print(json.dumps({name: run_family(family) for name, family in spec["families"].items()}, ensure_ascii=False))


if __name__ == "__main__":
    main()
