"""scripts/heldout.py reads each verified class back: a wrong turn fact shows in its table."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# ChatML-like, with tool calls and a closing marker: every fact is learnable.
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{\"name\": \"{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}}</tool_call>{% endfor %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def load_script():
    spec = importlib.util.spec_from_file_location("heldout_script", ROOT / "scripts" / "heldout.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def compiled_by_the_script(tmp_path: Path, stem: str = "chatml_tools", source: str = TEMPLATE):
    """(the script, the template file) after the script compiled ``source``, verified and read back clean."""
    heldout = load_script()
    template = tmp_path / f"{stem}.jinja"
    template.write_text(source, encoding="utf-8")
    outcome = heldout.compile_one(template, tmp_path / "out", cases=10, timeout=600)
    assert outcome.result == "verified" and "round trip" not in outcome.detail, outcome.detail
    return heldout, template


def test_a_file_name_that_is_no_module_name_is_still_read_back(tmp_path, monkeypatch):
    """generate normalizes the model id to a module name (``Chat-ML.Tools`` -> ``chat_ml_tools``):
    the read-back must find that module, not skip the template silently."""
    heldout = load_script()
    seen = []
    monkeypatch.setattr(heldout.subprocess, "run", spy_on_run(heldout.subprocess.run, seen))
    compiled_by_the_script(tmp_path, stem="Chat-ML.Tools")
    read_back = [command for command in seen if "--round-trip" in command]
    assert len(read_back) == 1, seen
    module = Path(read_back[0][-1])
    assert module.is_file() and module.name != "Chat-ML.Tools.py", module


def spy_on_run(run, seen: list):
    def spy(command, *args, **kwargs):
        seen.append(list(command))
        return run(command, *args, **kwargs)

    return spy


def test_a_verified_class_is_read_back_and_a_wrong_stop_shows(tmp_path):
    heldout, template = compiled_by_the_script(tmp_path)
    module = tmp_path / "out" / "chatml_tools" / "chatml_tools.py"
    assert heldout.round_trip(template, module) == []
    # a stop that also starts ordinary text (what Apertus's bare '[' header once became) cuts the content
    code = module.read_text(encoding="utf-8")
    broken = code.replace('stop_tokens=("<|im_end|>",)', 'stop_tokens=("<|im_end|>", "[")')
    assert broken != code
    module.write_text(broken, encoding="utf-8")
    # (in a fresh process, as compile_one reads a class back: this one already imported the module)
    command = [sys.executable, str(ROOT / "scripts" / "heldout.py"), "--round-trip", str(template), str(module)]
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600, check=True)
    assert done.stdout.startswith("plain: content 'Fine, see '"), done.stdout


def test_the_bridge_from_each_read_back_turn_is_checked_against_the_full_render(tmp_path):
    """A bridge that returns None where the template extends the sample, or other tokens, shows."""
    heldout, template = compiled_by_the_script(tmp_path)
    from compiler.pipeline import load_generated_file, prepare_source
    from compiler.source import resolve_source

    prepared = prepare_source(resolve_source("heldout/chatml_tools", template=template, allow_hub=False))
    renderer_class = load_generated_file(tmp_path / "out" / "chatml_tools" / "chatml_tools.py")
    renderer = renderer_class(prepared.check_tokenizer, special_tokens=prepared.placeholders)
    history, turn = [{"role": "user", "content": "hi"}], {"role": "assistant", "content": "Fine."}
    follower = {"role": "user", "content": "ok"}
    check = lambda: heldout.bridge_problems(renderer, history, turn, follower, None, "Fine.<|im_end|>")  # noqa: E731
    assert check() == []
    exact = renderer.bridge_to_next_turn
    renderer.bridge_to_next_turn = lambda *args, **kwargs: None
    assert check() == ["bridge: None where the full render extends the sample"]

    def one_token_off(*args, **kwargs):
        result = exact(*args, **kwargs)
        result.token_ids = result.token_ids[:-1]
        return result

    renderer.bridge_to_next_turn = one_token_off
    assert check() == ["bridge: WRONG tokens"]


def test_a_template_that_writes_only_the_first_call_is_read_back_as_it_writes_it(tmp_path):
    """GigaChat-3.1 writes ``tool_calls[0]`` only: the read-back expects the calls the render holds."""
    first_call_only = TEMPLATE.replace("m.tool_calls or []", "(m.tool_calls or [])[:1]")
    assert first_call_only != TEMPLATE
    compiled_by_the_script(tmp_path, stem="first_call_only", source=first_call_only)


def test_a_bridge_that_needs_the_call_ids_is_not_counted_a_miss(tmp_path):
    """A template that finds a tool result's name through the call id cannot be bridged from tokens
    that carry no id: None is the right answer there, and the table does not count it as a miss."""
    from tests.test_fact_proof import NAME_BY_CALL_ID

    heldout, template = compiled_by_the_script(tmp_path, "name_by_call_id", NAME_BY_CALL_ID)
    module = tmp_path / "out" / "name_by_call_id" / "name_by_call_id.py"
    assert module.is_file() and heldout.round_trip(template, module) == []


def test_unproven_templates_are_tabled_apart():
    heldout = load_script()
    stdout = "out/x.py\nverified: text: 5/5 match, read-back: 0/0 exact"
    stderr = "warning: x.py: unproven: turn: no turn of the template's history continues its generation prompt\n"
    result, detail = heldout.classify(0, stdout, stderr)
    assert result == "unproven" and "unproven: turn" in detail
    assert heldout.classify(0, stdout, "")[0] == "verified"
    outcomes = [heldout.Outcome("a", "verified", 1.0, ""), heldout.Outcome("b", "unproven", 1.0, detail)]
    assert "verified: 1/2, unproven: 1/2" in heldout.table(outcomes)


def test_a_template_that_verified_and_is_now_unproven_is_no_regression():
    """"unproven" verified too (a fact nothing could prove, reported apart); a crash after it is a
    regression."""
    heldout = load_script()
    Outcome, compare = heldout.Outcome, heldout.compare
    previous = {"a": {"result": "verified", "detail": "x"}, "b": {"result": "unproven", "detail": "y"}}
    outcomes = [Outcome("a", "unproven", 1.0, "x"), Outcome("b", "crash", 1.0, "SyntaxError")]
    regressions, changes = compare(previous, outcomes)
    assert [line.split(":")[1].split()[0] for line in regressions] == ["b"]
    assert changes == ["changed: a verified -> unproven"]
