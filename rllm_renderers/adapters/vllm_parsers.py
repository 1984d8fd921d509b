"""vLLM tool-call and reasoning parsers for any model with a generated renderer (plugin file).

Served with::

    vllm serve MODEL --enable-auto-tool-choice \\
        --tool-parser-plugin $(python -m rllm_renderers.adapters.vllm_parsers) --tool-call-parser rllm \\
        --reasoning-parser-plugin $(python -m rllm_renderers.adapters.vllm_parsers) --reasoning-parser rllm

(``python -m rllm_renderers.adapters.vllm_parsers`` prints this file's path.) Both parsers resolve the
renderer from the served model's tokenizer (``rllm_renderers.resolve``; ``RLLM_VLLM_RENDERER`` names
one explicitly, as ``renderer=`` does) and read the completion with its learned turn syntax, through
:class:`~rllm_renderers.turns.streaming.StreamingParser`: non-streaming is ``parse_response`` of the
text; streaming never sends text it must take back and ends with exactly that. vLLM gives its tool
parser the text after the reasoning block, which is what the reasoning parser here hands on.

Importing this module needs vLLM; nothing else in the package imports it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from vllm.entrypoints.generate.base.protocol import (
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    ExtractedToolCallInformation,
    FunctionCall,
    ToolCall,
)
from vllm.reasoning.abs_reasoning_parsers import ReasoningParser, ReasoningParserManager
from vllm.tool_parsers.abstract_tool_parser import ToolParser, ToolParserManager

from rllm_renderers.turns.messages import RENDERABLE_CALLS
from rllm_renderers.turns.streaming import Delta, StreamingParser, arguments_text

#: The name both parsers are registered by (``--tool-call-parser rllm --reasoning-parser rllm``).
NAME = "rllm"

_RENDERERS: dict[int, Any] = {}


def renderer_for(tokenizer) -> Any:
    """The generated renderer of the served model's tokenizer (one per tokenizer object)."""
    renderer = _RENDERERS.get(id(tokenizer))
    if renderer is None:
        from rllm_renderers import resolve

        model = getattr(tokenizer, "name_or_path", "") or ""
        resolution = resolve(model, tokenizer, renderer=os.environ.get("RLLM_VLLM_RENDERER") or None)
        if resolution.source != "generated":
            raise ValueError(
                f"the {NAME!r} vLLM parsers need a generated renderer; {model!r} resolves to "
                f"{resolution.source}:{resolution.name} (name one with RLLM_VLLM_RENDERER=<family>)"
            )
        renderer = _RENDERERS[id(tokenizer)] = resolution.renderer
    return renderer


def _tools(request) -> list[dict] | None:
    tools = getattr(request, "tools", None)
    if not tools:
        return None
    return [tool.model_dump(exclude_none=True) if hasattr(tool, "model_dump") else dict(tool) for tool in tools]


def _ends_turn(renderer, token_ids: Sequence[int]) -> bool:
    stops = renderer._parse_facts().stop_texts
    return any(token in stops for token in token_ids)


def _delta_message(delta: Delta, with_reasoning: bool) -> DeltaMessage | None:
    if not delta:
        return None
    return DeltaMessage(
        reasoning=(delta.reasoning or None) if with_reasoning else None,
        content=delta.content or None,
        tool_calls=[
            DeltaToolCall(
                index=call.index,
                id=call.id,
                type="function" if call.id is not None else None,
                function=DeltaFunctionCall(name=call.name, arguments=call.arguments),
            )
            for call in delta.tool_calls
        ],
    )


@ToolParserManager.register_module(NAME)
class RllmToolParser(ToolParser):
    """Tool calls (and the content beside them) as the template writes them."""

    def __init__(self, tokenizer, tools=None) -> None:
        super().__init__(tokenizer, tools)
        self.renderer = renderer_for(tokenizer)
        self._stream: StreamingParser | None = None

    def adjust_request(self, request):
        request = super().adjust_request(request)
        request.skip_special_tokens = False  # the markers may be special tokens: the parser reads them
        return request

    def extract_tool_calls(self, model_output: str, request) -> ExtractedToolCallInformation:
        result = StreamingParser(self.renderer, tools=_tools(request), with_reasoning=False).read(model_output)
        calls = [call for call in result.tool_calls if getattr(call.status, "value", call.status) in RENDERABLE_CALLS]
        tool_calls = [
            ToolCall(
                id=call.id or f"call_{index}",
                function=FunctionCall(name=call.name or "", arguments=arguments_text(call.arguments)),
            )
            for index, call in enumerate(calls)
        ]
        return ExtractedToolCallInformation(
            tools_called=bool(tool_calls), tool_calls=tool_calls, content=result.content or None
        )

    def extract_tool_calls_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
        request,
    ) -> DeltaMessage | None:
        if self._stream is None:
            self._stream = StreamingParser(self.renderer, tools=_tools(request), with_reasoning=False)
        if self._stream._finished:
            return None
        delta = self._stream.feed_text(delta_text)
        if _ends_turn(self.renderer, delta_token_ids):
            last, _ = self._stream.finish()
            delta = Delta(delta.reasoning, delta.content + last.content, delta.tool_calls + last.tool_calls)
        for call in delta.tool_calls:  # what vLLM checks at the end of the stream (nothing left to send)
            self.prev_tool_call_arr.append({"name": call.name, "arguments": call.arguments})
            self.streamed_args_for_tool.append(call.arguments)
            self.current_tool_id = call.index
        return _delta_message(delta, with_reasoning=False)


@ReasoningParserManager.register_module(NAME)
class RllmReasoningParser(ReasoningParser):
    """The reasoning block as the template writes it; the text after it goes on to the tool parser."""

    def __init__(self, tokenizer, *args, **kwargs) -> None:
        super().__init__(tokenizer, *args, **kwargs)
        self.renderer = renderer_for(tokenizer)
        self._stream: StreamingParser | None = None
        self._prompt_ids: list[int] | None = None
        self._handed_on = False

    @property
    def reasoning_start_str(self) -> str | None:
        return self.renderer.REASONING.open if self.renderer.REASONING is not None else None

    @property
    def reasoning_end_str(self) -> str | None:
        return self.renderer.REASONING.close if self.renderer.REASONING is not None else None

    def adjust_request(self, request):
        request.skip_special_tokens = False
        return request

    def adjust_initial_state_from_prompt(self, prompt_token_ids: Sequence[int]) -> None:
        self._prompt_ids = list(prompt_token_ids)

    def is_reasoning_end(self, input_ids: Sequence[int]) -> bool:
        """Asked first of the prompt: False while the model may still write a reasoning block (the
        completion says; the prompt is kept, whether it left a block open is read from it)."""
        if self.renderer.REASONING is None:
            return True
        if self._stream is not None:
            return self._stream.reasoning_ended
        if self._prompt_ids is None:
            self._prompt_ids = list(input_ids)
        return False

    def is_reasoning_end_streaming(self, input_ids: Sequence[int], delta_ids) -> bool:
        """Whether the reasoning block of the completion so far is over. The serving path asks after
        each delta it streamed; the structured-output backend (a parser of its own, no stream) asks
        with the prompt and completion ids, which are read whole."""
        if self.renderer.REASONING is None:
            return True
        if self._stream is not None:
            return self._stream.reasoning_ended
        prompt = self._prompt_ids or []
        parser = StreamingParser(self.renderer, prompt_ids=prompt)
        parser.feed_ids(list(input_ids)[len(prompt) :])
        return parser.reasoning_ended

    def extract_content_ids(self, input_ids: list[int]) -> list[int]:
        return list(input_ids)

    def extract_reasoning(self, model_output: str, request) -> tuple[str | None, str | None]:
        if self.renderer.REASONING is None:
            return None, model_output
        reasoning, body_at = StreamingParser(self.renderer, tools=_tools(request)).split_reasoning(model_output)
        return reasoning, model_output[body_at:] or None

    def extract_reasoning_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
    ) -> DeltaMessage | None:
        if self._stream is None:
            self._stream = StreamingParser(self.renderer, prompt_ids=self._prompt_ids)
        if self._handed_on:
            return None
        delta = self._stream.feed_text(delta_text)
        message = DeltaMessage(reasoning=delta.reasoning or None)
        if self._stream.reasoning_ended:  # the text after the block so far goes on to the tool parser
            self._handed_on = True
            message.content = self._stream.text_after_reasoning() or None
        elif _ends_turn(self.renderer, delta_token_ids):  # the turn ended inside its reasoning
            last, _ = self._stream.finish()
            message.reasoning = (delta.reasoning + last.reasoning) or None
        return message if (message.reasoning or message.content) else None


if __name__ == "__main__":
    print(os.path.abspath(__file__))
