"""Benchmark: what building a renderer costs, against loading its tokenizer.

Per corpus tokenizer (``<corpus>/tokenizers``, every folder with a ``tokenizer.json``), each figure in
a fresh Python process (imports of transformers and rllm_renderers done first, not timed):

* **load**: ``AutoTokenizer.from_pretrained(<folder>)``, its time and the RSS it adds;
* **build**: with the tokenizer loaded (not timed), ``resolve(model, tokenizer)`` + the first
  ``render_ids`` + the first ``bridge_to_next_turn`` (ids only, a sampled reply and a user message;
  the reply's ids are the worker's, encoded before the clock starts), its time and the RSS it adds (resident set after minus before, from ``/proc/self/statm``).

Reported (wall time; beside it the ratio of the fastest runs and the ratio of CPU times,
``time.process_time``, which a machine busy with other processes does not inflate: there a
process timed in milliseconds waits a scheduler tick of ~4 ms now and then): medians over ``--repeats`` processes (at least 15 for a tokenizer that loads in under
0.1 s: its figures are milliseconds), the ratio build / load (target: at most 1.5) and the
RSS delta (target: at most +100 MB).  Bytecode is compiled once beforehand (as an installed package
has it).  The proof cache is warm (a first process fills it, as the
first process on a machine does once); ``--cold`` also times a build with an empty cache folder
(a new machine): there the rank-BPE proof runs in a background process (once per tokenizer content
per machine) while the HF backend serves, and the time until its verdict is reported beside.

Run from the project root:
    .venv/bin/python benchmarks/bench_construction.py --corpus ../shared/corpus [--repeats 3] [--cold]
``RLLM_RENDERERS_ENCODER`` is passed on to the measured processes (``fastokens`` to measure that engine).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Tokenizer folder -> (model id for resolve(), or a renderer module name given as ``renderer=``).
MODELS = {
    "qwen3": ("Qwen/Qwen3-8B", None),
    "qwen25": ("Qwen/Qwen2.5-7B-Instruct", None),
    "qwen35": ("Qwen/Qwen3.5-4B", None),
    "dsv3": ("deepseek-ai/DeepSeek-V3", None),
    "dsv4": ("deepseek-ai/DeepSeek-V4-Flash", None),
    "gemma3": ("google/gemma-3-27b-it", None),
    "gptoss": ("openai/gpt-oss-20b", None),
    "llama31": ("meta-llama/Llama-3.1-8B-Instruct", None),
    # synthetic tokenizers (the family's special strings as added tokens): the renderer by name
    "synthetic/minimax_m3": ("MiniMaxAI/MiniMax-M3", None),
    "synthetic/gemma4": ("google/gemma-4-31B-it", None),
    "synthetic/glm5": ("zai-org/GLM-5", "glm_4_7_flash"),
    "synthetic/kimi_k27_code": ("moonshotai/Kimi-K2.7-Code", "kimi_k2_thinking"),
}

CHILD = r"""
import gc, json, os, sys, time
sys.path.insert(0, sys.argv[1])
folder, mode, model, renderer_name = sys.argv[2:6]

def rss():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

from transformers import AutoTokenizer
import rllm_renderers, rllm_renderers.core.registry, rllm_renderers.core.base, rllm_renderers.encoding.tokenization, rllm_renderers.encoding.fast_encoder
import rllm_renderers.encoding.detokenize, rllm_renderers.bridging.bridge, tokenizers, tiktoken

if mode == "load":
    gc.collect(); before, start, cpu = rss(), time.perf_counter(), time.process_time()
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(json.dumps({"seconds": seconds, "cpu": cpu, "rss": rss() - before}))
    sys.exit(0)

tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
messages = [{"role": "system", "content": "You are a careful assistant."},
            {"role": "user", "content": "What does setup.py hold? One sentence, please."}]
sampled = tokenizer.encode("It holds the build settings.", add_special_tokens=False)  # the worker's, not timed
gc.collect(); before, start, cpu = rss(), time.perf_counter(), time.process_time()
resolution = rllm_renderers.core.registry.resolve(model, tokenizer, renderer=renderer_name or None)
renderer = resolution.renderer
prompt = renderer.render_ids(messages, add_generation_prompt=True)
completion = sampled + renderer.get_stop_token_ids()[:1]
bridged = renderer.bridge_to_next_turn(prompt, completion, [{"role": "user", "content": "And README.md?"}])
seconds, cpu, rss_delta, backend = time.perf_counter() - start, time.process_time() - cpu, rss() - before, renderer.encoder.backend
from rllm_renderers.encoding import background_proof
for process in background_proof._started:  # a first build on this machine: its proof, in the background
    process.wait()
proved = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "cpu": cpu, "rss": rss_delta, "renderer": type(renderer).__name__,
                  "backend": backend, "bridged": bridged is not None,
                  "proved": proved if background_proof._started else None,
                  "backend_after_proof": renderer.encoder.backend}))
"""


# Compiled bytecode is kept (outside the repository), as an installed package has it: a first
# process writes it, the measured ones read it (PYTHONDONTWRITEBYTECODE would compile every
# generated module again in every process).
BYTECODE = tempfile.mkdtemp(prefix="rllm-bench-pycache-")


def measure(folder: Path, mode: str, model: str, renderer: str | None, cache: str) -> dict:
    environment = {**os.environ, "RLLM_RENDERERS_CACHE": cache, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error",
                   "PYTHONPYCACHEPREFIX": BYTECODE}  # fmt: skip
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(REPO), str(folder), mode, model, renderer or ""],
        capture_output=True, text=True, env=environment, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"{folder} {mode}: {result.stderr.strip().splitlines()[-1:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=str(REPO.parent / "shared" / "corpus"))
    parser.add_argument("--tokenizers", default=",".join(MODELS), help="comma-separated tokenizer folders")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="also time a build with an empty proof cache")
    args = parser.parse_args()
    root = Path(args.corpus) / "tokenizers"
    cache = tempfile.mkdtemp(prefix="rllm-bench-proofs-")
    print(f"encoder backend: {os.environ.get('RLLM_RENDERERS_ENCODER') or 'auto'}; {args.repeats} processes per figure "
          "(at least 15 where the tokenizer loads in under 0.1 s)")
    print("| tokenizer | renderer (backend) | load s | load MB | build s | build / load | build MB | min: build / load | CPU: build / load | first build on a new machine s |")
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for name in args.tokenizers.split(","):
        folder = root / name
        if not (folder / "tokenizer.json").exists():
            print(f"| {name} | not in the corpus | | | | | | | | |")
            continue
        model, renderer = MODELS[name]
        measure(folder, "build", model, renderer, cache)  # fills the proof cache and the bytecode
        loads, builds = [], []
        # a tokenizer loaded in milliseconds is timed in milliseconds: more processes for the same noise
        repeats = args.repeats if measure(folder, "load", model, renderer, cache)["seconds"] > 0.1 else max(args.repeats, 15)
        for _ in range(repeats):  # interleaved: load from other processes hits both alike
            loads.append(measure(folder, "load", model, renderer, cache))
            builds.append(measure(folder, "build", model, renderer, cache))
        load_s = statistics.median(run["seconds"] for run in loads)
        build_s = statistics.median(run["seconds"] for run in builds)
        load_mb = statistics.median(run["rss"] for run in loads) / 1e6
        build_mb = statistics.median(run["rss"] for run in builds) / 1e6
        min_ratio = min(run["seconds"] for run in builds) / min(run["seconds"] for run in loads)
        cpu_ratio = statistics.median(run["cpu"] for run in builds) / statistics.median(run["cpu"] for run in loads)
        # a first build on a new machine: an empty proof cache (bytecode compiled, as installed)
        first = measure(folder, "build", model, renderer, tempfile.mkdtemp(prefix="rllm-cold-")) if args.cold else None
        what = f"{builds[0]['renderer']} ({builds[0]['backend']})"
        cold = ""
        if first is not None:
            load_cpu = statistics.median(run["cpu"] for run in loads)
            cold = f"{first['seconds']:.3g} (**{first['seconds'] / load_s:.2f}** x load, CPU {first['cpu'] / load_cpu:.2f}; {first['backend']}"
            if first["proved"] is not None:
                cold += f"; proved in the background after {first['proved']:.3g} s, then {first['backend_after_proof']}"
            cold += ")"
        print(f"| {name} | {what} | {load_s:.3g} | {load_mb:.0f} | {build_s:.3g} | **{build_s / load_s:.2f}** | "
              f"**{build_mb:+.0f}** | {min_ratio:.2f} | {cpu_ratio:.2f} | {cold} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
