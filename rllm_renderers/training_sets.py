"""Supervised training sets at data-set scale: one batched function for Hugging Face ``datasets``
(``Dataset.map(..., batched=True, num_proc=N)``) and Ray Data (``Dataset.map_batches``).

::

    from rllm_renderers.training_sets import SupervisedBatches

    tokenize = SupervisedBatches("Qwen/Qwen3-8B", "path/to/tokenizer", train_on="all_assistant")
    train = dataset.map(tokenize, batched=True, num_proc=8, remove_columns=dataset.column_names)
    # Ray Data: ray_dataset.map_batches(tokenize, batch_format="pyarrow")

Each row's conversation (column ``messages``; its tools, if any, in ``tools_column``) becomes the
renderer's :func:`~rllm_renderers.supervised.build_supervised_example` of it, as three columns:

* ``input_ids``: the token ids;
* ``labels``: the id where the token is trained, ``-100`` elsewhere (what a causal LM's loss in
  transformers / TRL ignores; the model shifts the labels itself);
* ``loss_mask``: 1 where the token is trained, else 0 (TRL's ``assistant_masks`` / ``completion_mask``;
  tinker and Fireworks take it as the ``weights`` of the same tokens, shifted with them: model input
  ``input_ids[:-1]``, targets ``input_ids[1:]``, weights ``loss_mask[1:]``).

The function pickles as its recipe (model name, tokenizer folder, options: a few hundred bytes), and
a worker process builds the tokenizer and renderer on its first batch; a worker forked from a
process that built them keeps them.  Arrow stores a list of messages as structs whose fields are
the union over all rows, so a message read back carries ``None`` for the keys other messages had:
those are dropped here (a message, a tool call and its function; never inside the arguments) as
transformers drops ``None`` keys before rendering.  Keep tool-call arguments and tool schemas as
JSON strings in a data set (Arrow would pad differing argument dicts with ``None`` values too): a
``tools`` value may be a JSON string, and a whole conversation may be one as well.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

from .supervised import TRAIN_ON, build_supervised_example

__all__ = ["IGNORE_INDEX", "SupervisedBatches", "supervised_columns"]

#: The label of a token the loss ignores (transformers' ``CrossEntropyLoss`` default ``ignore_index``).
IGNORE_INDEX = -100


def supervised_columns(renderer: Any, conversations: Iterable[Any], tools: Iterable[Any] | None = None,
                       *, train_on: str = "last_assistant") -> dict[str, list[list[int]]]:  # fmt: skip
    """``input_ids``, ``labels`` and ``loss_mask`` of each conversation (see the module docstring)."""
    columns: dict[str, list[list[int]]] = {"input_ids": [], "labels": [], "loss_mask": []}
    conversations = list(conversations)
    tool_lists = None if tools is None else list(tools)
    if tool_lists is not None and len(tool_lists) != len(conversations):
        raise ValueError(f"{len(conversations)} conversations but {len(tool_lists)} tool lists")
    for row, conversation in enumerate(conversations):
        messages = _messages(conversation, row)
        row_tools = None if tool_lists is None else _tools(tool_lists[row], row)
        example = build_supervised_example(renderer, messages, tools=row_tools, train_on=train_on)
        ids = example.token_ids
        mask = [1 if weight > 0 else 0 for weight in example.weights]
        columns["input_ids"].append(ids)
        columns["labels"].append([token if trained else IGNORE_INDEX for token, trained in zip(ids, mask)])
        columns["loss_mask"].append(mask)
    return columns


class SupervisedBatches:
    """A batched map function (a batch is a mapping of column name -> values) that returns the
    ``input_ids``, ``labels`` and ``loss_mask`` columns of its conversations.

    ``model``: the name :func:`~rllm_renderers.get_renderer` resolves (``"Qwen/Qwen3-8B"``);
    ``tokenizer``: the folder of the tokenizer (loaded with
    :func:`~rllm_renderers.encoding.loading.load_tokenizer`, never from the network);
    ``messages_column`` / ``tools_column``: where a row's conversation and tools are (no tools column:
    none); ``train_on``: as :func:`~rllm_renderers.supervised.build_supervised_example`;
    ``renderer_options``: keyword arguments of ``get_renderer`` (template knobs such as
    ``enable_thinking=False``, ``renderer=``, ``allow_fallback=``).
    """

    def __init__(self, model: str, tokenizer: str, *, messages_column: str = "messages",
                 tools_column: str | None = None, train_on: str = "last_assistant",
                 **renderer_options: Any) -> None:  # fmt: skip
        if train_on not in TRAIN_ON:
            raise ValueError(f"train_on must be one of {', '.join(map(repr, TRAIN_ON))}; got {train_on!r}")
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a model name (a non-empty string); got {model!r}")
        self.model = model
        self.tokenizer_folder = str(tokenizer)
        self.messages_column = messages_column
        self.tools_column = tools_column
        self.train_on = train_on
        self.renderer_options = dict(renderer_options)
        self._renderer: Any = None

    @property
    def renderer(self) -> Any:
        """The renderer, built on first use in this process."""
        if self._renderer is None:
            from .core.registry import get_renderer
            from .encoding.loading import load_tokenizer

            self._renderer = get_renderer(self.model, load_tokenizer(self.tokenizer_folder), **self.renderer_options)
        return self._renderer

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, list[list[int]]]:
        if hasattr(batch, "to_pydict"):  # a pyarrow Table (Ray's batch_format="pyarrow")
            batch = batch.to_pydict()
        if self.messages_column not in batch:
            raise ValueError(f"the batch has no column {self.messages_column!r} (its columns: {', '.join(batch)})")
        if self.tools_column is not None and self.tools_column not in batch:
            raise ValueError(f"the batch has no column {self.tools_column!r} (its columns: {', '.join(batch)})")
        tools = None if self.tools_column is None else batch[self.tools_column]
        return supervised_columns(self.renderer, batch[self.messages_column], tools, train_on=self.train_on)

    def __getstate__(self) -> dict[str, Any]:
        """The recipe only: a worker builds its own renderer (and tokenizer) from it."""
        state = self.__dict__.copy()
        state["_renderer"] = None
        return state


def _plain(value: Any) -> Any:
    """A value read back from Arrow as Python data: numpy arrays (Ray's numpy batches) as lists."""
    tolist = getattr(value, "tolist", None)
    return tolist() if tolist is not None and not isinstance(value, (str, bytes)) else value


def _messages(conversation: Any, row: int) -> list[dict]:
    conversation = _plain(conversation)
    if isinstance(conversation, str):
        conversation = json.loads(conversation)
    if not isinstance(conversation, list):
        raise ValueError(f"row {row}: the messages must be a list of messages (or its JSON), got {type(conversation).__name__}")
    return [_without_none(_plain(message)) for message in conversation]


def _tools(tools: Any, row: int) -> list[dict] | None:
    tools = _plain(tools)
    if isinstance(tools, str):
        tools = json.loads(tools)
    if tools is not None and not isinstance(tools, list):
        raise ValueError(f"row {row}: the tools must be a list of tool schemas (or its JSON), got {type(tools).__name__}")
    return tools or None


def _without_none(message: Any) -> Any:
    """A message without the keys Arrow filled with None: at its top level, in each tool call and in
    the call's ``function`` (never inside ``arguments``, whose None values are the caller's)."""
    if not isinstance(message, dict):
        return message
    kept = {key: value for key, value in message.items() if value is not None}
    calls = _plain(kept.get("tool_calls"))
    if isinstance(calls, list):
        kept["tool_calls"] = [_call_without_none(_plain(call)) for call in calls]
    return kept


def _call_without_none(call: Any) -> Any:
    if not isinstance(call, dict):
        return call
    kept = {key: value for key, value in call.items() if value is not None}
    function = kept.get("function")
    if isinstance(function, dict):
        kept["function"] = {key: value for key, value in function.items() if value is not None}
    return kept
