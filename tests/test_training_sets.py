"""The data-set path (rllm_renderers/training_sets.py): every example a batched map produces, through
HF ``datasets`` with two worker processes and Ray Data on a local cluster, equals
``build_supervised_example`` on the same conversation; the map function pickles as its recipe."""

from __future__ import annotations

import copy
import json
import pickle

import pytest

from rllm_renderers import get_renderer
from rllm_renderers.encoding.loading import load_tokenizer
from rllm_renderers.training_sets import IGNORE_INDEX, SupervisedBatches, supervised_columns
from tests.families import CORPUS

MODEL = "Qwen/Qwen2.5-7B-Instruct"
TOKENIZER = CORPUS / "tokenizers" / "qwen25"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a word up.",
            "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
        },
    }
]


def conversations(count: int) -> list[list[dict]]:
    """Conversations of 1-3 rounds; every third round calls the tool (arguments as a JSON string)."""
    result = []
    for index in range(count):
        messages = [{"role": "system", "content": f"You answer in {index % 5 + 1} words."}]
        for round_ in range(index % 3 + 1):
            messages.append({"role": "user", "content": f"Question {index}.{round_}: what is ünïcode {index * 7}?"})
            if (index + round_) % 3 == 0:
                call = {"type": "function", "function": {"name": "lookup", "arguments": json.dumps({"word": f"w{index}"})}}
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
                messages.append({"role": "tool", "content": f"definition {index}"})
            messages.append({"role": "assistant", "content": f"Answer {index}.{round_}: it is {'x' * (index % 11)}."})
        result.append(messages)
    return result


@pytest.fixture(scope="module")
def renderer():
    return get_renderer(MODEL, load_tokenizer(TOKENIZER))


def expected(renderer, messages, train_on="all_assistant") -> tuple[list[int], list[int], list[int]]:
    example = renderer.build_supervised_example(messages, tools=TOOLS, train_on=train_on)
    mask = [1 if weight else 0 for weight in example.weights]
    labels = [token if flag else IGNORE_INDEX for token, flag in zip(example.token_ids, mask)]
    return example.token_ids, labels, mask


def assert_rows_equal(rows, conversations_, renderer, train_on="all_assistant"):
    assert len(rows) == len(conversations_)
    for row, messages in zip(rows, conversations_):
        ids, labels, mask = expected(renderer, messages, train_on)
        assert list(row["input_ids"]) == ids
        assert list(row["labels"]) == labels
        assert list(row["loss_mask"]) == mask


@pytest.mark.parametrize("train_on", ["last_assistant", "all_assistant", "all"])
def test_columns_are_build_supervised_example(renderer, train_on):
    """In process: the three columns of each conversation, for each policy, with the tools given as a
    JSON string or as a list, and messages padded with the None keys Arrow adds."""
    items = conversations(12)
    padded = copy.deepcopy(items)
    for messages in padded:
        for message in messages:
            message.setdefault("tool_calls", None)
            message.setdefault("name", None)
            for call in message["tool_calls"] or ():
                call["id"] = None
    tools_json = [json.dumps(TOOLS)] * len(items)
    columns = supervised_columns(renderer, padded, tools_json, train_on=train_on)
    rows = [dict(zip(columns, values)) for values in zip(*columns.values())]
    assert_rows_equal(rows, items, renderer, train_on)
    assert supervised_columns(renderer, items, [TOOLS] * len(items), train_on=train_on) == columns
    assert any(IGNORE_INDEX in labels for labels in columns["labels"]) == (train_on != "all")


def test_pickles_as_its_recipe_and_rebuilds(renderer):
    """The function pickles without its renderer or tokenizer (a few hundred bytes, where the
    tokenizer alone pickles to megabytes) and, unpickled, builds both and gives the same columns."""
    function = SupervisedBatches(MODEL, str(TOKENIZER), tools_column="tools", train_on="all_assistant")
    batch = {"messages": conversations(4), "tools": [TOOLS] * 4}
    before = function(batch)
    data = pickle.dumps(function)
    assert len(data) < 1024, len(data)
    assert len(pickle.dumps(renderer.tokenizer)) > 1_000_000  # what the recipe leaves out
    rebuilt = pickle.loads(data)
    assert rebuilt._renderer is None
    assert rebuilt(batch) == before


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="train_on"):
        SupervisedBatches(MODEL, str(TOKENIZER), train_on="assistant")
    function = SupervisedBatches(MODEL, str(TOKENIZER), messages_column="conversation")
    with pytest.raises(ValueError, match="no column 'conversation'"):
        function({"messages": conversations(1)})
    with pytest.raises(ValueError, match="row 0: the messages must be a list"):
        function({"conversation": [{"role": "user"}]})


def test_datasets_map_with_two_processes(renderer):
    """HF datasets, batched, two worker processes: every row equals build_supervised_example."""
    datasets = pytest.importorskip("datasets", reason="the 'datasets' extra (scripts/setup.sh installs it)")
    items = conversations(24)
    dataset = datasets.Dataset.from_dict({"messages": items, "tools": [json.dumps(TOOLS)] * len(items)})
    function = SupervisedBatches(MODEL, str(TOKENIZER), tools_column="tools", train_on="all_assistant")
    mapped = dataset.map(function, batched=True, batch_size=4, num_proc=2, remove_columns=dataset.column_names)
    assert mapped.column_names == ["input_ids", "labels", "loss_mask"]
    assert_rows_equal(list(mapped), items, renderer)


def test_ray_data_map_batches_on_a_local_cluster(renderer):
    """Ray Data on a local cluster of this machine (127.0.0.1, two CPUs, a small object store): every
    row equals build_supervised_example, in order."""
    ray = pytest.importorskip("ray", reason="the 'datasets' extra (scripts/setup.sh installs ray)")
    items = conversations(16)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        object_store_memory=80 * 2**20,
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        context = ray.data.DataContext.get_current()
        context.execution_options.preserve_order = True
        context.enable_progress_bars = False
        rows = ray.data.from_items([{"messages": json.dumps(m), "tools": json.dumps(TOOLS)} for m in items])
        function = SupervisedBatches(MODEL, str(TOKENIZER), tools_column="tools", train_on="all_assistant")
        mapped = rows.map_batches(function, batch_size=4, batch_format="pyarrow").take_all()
    finally:
        ray.shutdown()
    assert_rows_equal(mapped, items, renderer)
