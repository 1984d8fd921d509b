"""A real vLLM server on a toy model, for tests that put an engine in the loop.

vLLM runs in its own virtual environment (it pins its own transformers): ``RLLM_VLLM_PYTHON``
names its interpreter, by default ``<repo>/.venv-vllm/bin/python`` (``scripts/setup.sh`` makes
it). The model is a toy: the family's corpus tokenizer and chat template beside a ``config.json``
for its architecture at toy size, served with random weights (``--load-format dummy``), one
process, CPU only. What the model samples is forced (:func:`forced_sampling`), so the weights
never matter; what matters is the server's own chat rendering and token handling.

- :func:`vllm_available`: None, or why vLLM cannot run here (the tests skip with it);
- :func:`write_toy_model`: the model folder for a family;
- :class:`VllmServer`: a context manager that starts the server, waits for ``/health`` and stops
  it (its whole process group), keeping its log;
- :func:`forced_sampling`: the request fields that make the model sample a given text as given ids.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.families import ALL_FAMILIES, REPO, corpus_path

#: Modules imported by the server itself (the logits processor that forces sampled ids).
SERVER_SIDE = Path(__file__).resolve().parent / "server_side"

#: How long a server may take to answer /health: ~75 s on an idle 2-core machine, more when loaded.
START_TIMEOUT = float(os.environ.get("RLLM_VLLM_START_TIMEOUT", "900"))


def vllm_python() -> Path:
    return Path(os.environ.get("RLLM_VLLM_PYTHON", REPO / ".venv-vllm" / "bin" / "python"))


@functools.lru_cache(maxsize=None)
def vllm_available(with_project: bool = False) -> str | None:
    """None when vLLM imports in its virtual environment (and, ``with_project``, this project's
    runtime too, as a vLLM plugin needs); else the reason, for a skip."""
    python = vllm_python()
    if not python.exists():
        return f"no vLLM virtual environment at {python} (scripts/setup.sh makes it; or set RLLM_VLLM_PYTHON)"
    check = "import vllm.entrypoints.openai.api_server" + (", rllm_renderers" if with_project else "")
    try:
        done = subprocess.run(
            [str(python), "-c", check], capture_output=True, text=True, timeout=300, env=server_environment()
        )
    except subprocess.TimeoutExpired:
        return f"importing vLLM with {python} took more than 300 s"
    if done.returncode != 0:
        return f"vLLM does not import with {python}: {done.stderr.strip().splitlines()[-1:]}"
    return None


def server_environment(extra: dict | None = None) -> dict:
    """One process, one thread per op, offline, no usage reports."""
    env = dict(os.environ)
    env.update(
        VLLM_ENABLE_V1_MULTIPROCESSING="0",
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
    )
    extra = dict(extra or {})
    # the caller's PYTHONPATH must not leak into vLLM's venv; the server's holds the forcing
    # processor, after any the caller passes in ``extra``
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [extra.pop("PYTHONPATH", None), str(SERVER_SIDE)]))
    env.update(extra)
    return env


# --- the toy model ----------------------------------------------------------------------------

_SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "max_position_embeddings": 16384}

#: config.json per corpus tokenizer: the architecture of the family at toy size.
TOY_CONFIGS = {
    "qwen3": {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        **_SMALL,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "vocab_size": 151936,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": True,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
    },
    # DeepSeek-V3's MLA: vLLM's CPU kernel takes only a 512-wide latent and 64 rope dims
    "dsv3": {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        **_SMALL,
        "moe_intermediate_size": 32,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "n_group": 1,
        "topk_group": 1,
        "routed_scaling_factor": 1.0,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc",
        "norm_topk_prob": True,
        "kv_lora_rank": 512,
        "q_lora_rank": None,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 64,
        "v_head_dim": 32,
        "hidden_act": "silu",
        "vocab_size": 129280,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "bos_token_id": 0,
        "eos_token_id": 1,
    },
    # Qwen3.5's own architecture (Qwen3_5ForCausalLM) does not load here: vLLM's qwen3_5 module
    # imports torchvision, whose CUDA-only build breaks `import vllm` and is removed by
    # scripts/setup_vllm.sh. Its tokenizer and template on Qwen3's architecture render the same
    # prompts (the chat path reads only the tokenizer and the template; the weights are forced).
    "qwen35": {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        **_SMALL,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "vocab_size": 248320,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000000.0,
        "tie_word_embeddings": True,
        "eos_token_id": 248046,
    },
    "gptoss": {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        **_SMALL,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "experts_per_token": 2,
        "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"],
        "vocab_size": 201088,
        "rms_norm_eps": 1e-5,
        "rope_theta": 150000.0,
        "tie_word_embeddings": False,
        "eos_token_id": 200002,
        "pad_token_id": 199999,
    },
    "llama31": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        **_SMALL,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "vocab_size": 128256,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "tie_word_embeddings": True,
        "bos_token_id": 128000,
        "eos_token_id": [128001, 128008, 128009],
    },
}


def family_named(module: str):
    for family in ALL_FAMILIES:
        if family.module == module:
            return family
    raise KeyError(f"no checked-in renderer named {module!r}")


def write_toy_model(family: str, folder: Path) -> Path:
    """``folder`` made a model folder for the family (a generated module's name, e.g. "qwen3"): its
    corpus tokenizer, its chat template (in tokenizer_config.json, as a Hub checkpoint has it) and a
    toy-size config.json for its architecture. Returns the folder."""
    chosen = family_named(family)
    if chosen.tokenizer not in TOY_CONFIGS:
        raise KeyError(
            f"no toy architecture for {family!r} (tokenizer {chosen.tokenizer!r}); known: {sorted(TOY_CONFIGS)}"
        )
    source = corpus_path("tokenizers", chosen.tokenizer)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_bytes((source / "tokenizer.json").read_bytes())
    tokenizer_config = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8"))
    tokenizer_config["chat_template"] = chosen.template_source()
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=1), encoding="utf-8")
    config = {**TOY_CONFIGS[chosen.tokenizer], "torch_dtype": "float32"}
    (folder / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    return folder


# --- the server -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class VllmServer:
    """``with VllmServer(model_dir) as server:`` vLLM's OpenAI server on ``server.base_url``
    serving ``server.model``; ``extra_args`` go on its command line (tool and reasoning parsers),
    ``env`` into its environment. Its log is ``server.log_path``; a start that fails or times out
    raises with the log's tail."""

    def __init__(self, model_dir: Path, *, extra_args=(), env: dict | None = None, timeout: float = START_TIMEOUT):
        self.model_dir = Path(model_dir)
        self.model = str(self.model_dir)  # (served under its path, the name rLLM's gateway sends)
        self.extra_args = list(extra_args)
        self.env = env
        self.timeout = timeout
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.model_dir.parent / f"{self.model_dir.name}.vllm.log"
        self.process: subprocess.Popen | None = None
        self.start_seconds: float | None = None

    def command(self) -> list[str]:
        return [
            str(vllm_python()),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--load-format",
            "dummy",
            "--dtype",
            "float32",
            "--enforce-eager",
            "--distributed-executor-backend",
            "uni",
            "--kv-cache-memory-bytes",
            "134217728",
            "--logits-processors",
            "rllm_forced_tokens:ForcedTokens",
            *self.extra_args,
        ]

    def __enter__(self) -> "VllmServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        started = time.monotonic()
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=server_environment(self.env),
                start_new_session=True,  # (its own process group: stop() ends every child with it)
            )
        try:
            self._wait_healthy(started)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started

    def _wait_healthy(self, started: float) -> None:
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.process.returncode} while starting:\n{self.log_tail()}")
            if time.monotonic() - started > self.timeout:
                raise TimeoutError(f"vLLM did not answer /health within {self.timeout:.0f} s:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/health", timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(1)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        for sig, grace in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(timeout=grace)
                return
            except subprocess.TimeoutExpired:
                continue

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return f"(no log at {self.log_path})"
        return "\n".join(text.splitlines()[-lines:])


# --- forcing what the model samples -----------------------------------------------------------


def forced_sampling(text: str, token_ids: list[int], stop_id: int) -> dict:
    """Request fields that make the model sample exactly ``token_ids`` (the encoding of ``text``,
    without the stop) and then ``stop_id``, and return the prompt's and the completion's ids.

    The ids are forced by the server's ``ForcedTokens`` logits processor (server_side/); the
    allowed ids say the same at the sampler. (A ``structured_outputs`` regex of ``text`` is not
    sent: it fixes the text but not the ids, see server_side/rllm_forced_tokens.py.)"""
    forced = [*token_ids, stop_id]
    return {
        "vllm_xargs": {"forced_token_ids": forced},
        "allowed_token_ids": sorted(set(forced)),
        "stop_token_ids": [stop_id],
        "skip_special_tokens": False,
        "return_token_ids": True,
        "max_tokens": len(forced),
        "temperature": 0.0,
    }
