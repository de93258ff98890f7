"""One vLLM run in a fresh process, with LMCache and Aerospike as its remote tier,
reported as JSON: what tests/vllm runs before and after a restart.

    python -m lmcache_aerospike.vllm_run --surface remote --hosts 127.0.0.1:3000 \\
        --set kv_vllm --out result.json --log result.log

Surfaces:
- remote: vLLM's LMCacheConnectorV1, LMCache's engine inside vLLM, our
  RemoteConnector plugin (`remote_storage_plugins`) as its only store;
- storage: the same with our storage plugin (`storage_plugins`);
- mp: vLLM's LMCacheMPConnector to an `lmcache server` on 127.0.0.1:--mp-port whose
  L2 adapter is ours (`plugin` or `native_plugin`, lmcache_aerospike.mp_server), or
  any other (then --wait none: the caller waits for the server's stores);
- none: no KV connector, every prompt recomputed (a benchmark's baseline).
The in-process surfaces need a KV connector for the CPU, which LMCache lacks:
lmcache_aerospike.vllm_cpu, installed by its vllm.general_plugins entry point.

For each of --prompt-tokens (a length or a list of them), --prompts prompts of
that length (token ids drawn from --seed), each one generate() call, greedy, with
the logprob of every output token; --warmup first generates a prompt shorter than
a chunk, of its own, so that vLLM's one-time set-up is not counted in the first
prompt's times. After each prompt the run waits until the set holds every full
chunk of the prompts so far that was not there when the run began (a chunk vLLM
took from the tier is not stored again): LMCache stores
after the forward pass, asynchronously, and a process that ends first loses what
is in flight. The JSON has, per prompt: the output token ids
and logprobs, vLLM's num_cached_tokens, the time of generate() and to the first
token, vLLM's prefix-cache counters (external_hits: tokens the connector gave),
and the chunk keys that came new in the set (named when the surfaces run with
send_key, which this module's LMCache config sets); and the hits LMCache's
scheduler logged (in-process surfaces; with mp the server logs them, read by
mp_server.MPServer.prefetches); and the loads LMCache logged as short
(load_shortfalls: tokens retrieved of those expected), whose blocks vLLM then
computed again.

The model is a tiny Llama written by `write_tiny_llama`: a config and weights drawn
from a seed, float32. Weights, not vLLM's `load_format="dummy"`: the dummy loader
fills every tensor with uniform noise of +-1e-3 (model_loader/weight_utils.py:
1544-1596), which makes every logprob -log(vocab) and leaves little for a changed
KV cache to change. float32, not bfloat16: on a CPU without AVX512-BF16 vLLM's
bf16 matmuls are about ten times slower.

Bit for bit: a run that finds the prompt's full chunks cached loads them and
computes the rest of the prompt, its tail, in one step. A run that computes the
whole prompt in one step computes the tail's tokens within a batch of the whole
prompt, by other kernels (attention over more queries, matrix products of more
rows), and its logprobs differ in the last bits (about 1e-6) from the cached run's
even when every cached byte is right. So a prompt with a tail is prefilled in two
steps (`max_num_batched_tokens` = its full chunks' tokens): the chunks, then the
tail, the same arithmetic whether the chunks were computed or loaded, and the
outputs of a cold and of a cached run are equal to the bit exactly when the
cached KV is. (A prompt of whole chunks cannot be split so: vLLM always computes
a prompt's last token, so a cached run computes it alone, and a cold run whose
last step is that one token does not store the last chunk, since LMCache takes a
one-token step for decoding, vllm_v1_adapter.py:263-267 and 335-340.)

`run()` starts such a process from Python and returns its JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Optional

SURFACES = ("remote", "storage", "mp", "none")
WAITS = ("aerospike", "none")
CHUNK_SIZE = 256
PROMPT_TOKENS = 4 * CHUNK_SIZE + 32
MAX_TOKENS = 8
STORE_TIMEOUT_S = 120.0
RUN_TIMEOUT_S = 600.0

TINY_LLAMA = {
    # vLLM-CPU's attention takes head sizes 32 to 512 (cpu_attn.py:69-70): 256 / 4 = 64.
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 2048,
    "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "hidden_act": "silu", "tie_word_embeddings": False, "dtype": "float32",
    "bos_token_id": 1, "eos_token_id": 2,
}
# The weights' standard deviation (the norms' weights are ones). Queries and keys
# get more, so that attention picks a few tokens rather than averaging the whole
# context: then the output depends on which KV the context holds, and a wrong KV
# shows in it.
INIT_STD = 0.05
QK_STD = 0.15

# LMCache's scheduler, per request (lmcache/integration/vllm/vllm_v1_adapter.py:1476-1484).
_LMCACHE_HITS = re.compile(r"LMCache hit tokens: (\d+), need to load: (\d+)")
# A load that came back short: LMCache reports the missing blocks to vLLM, which
# computes them again (vllm_v1_adapter.py:870-896), so the prompt's tokens still
# count as external hits though their KV was computed.
_LMCACHE_SHORT = re.compile(r"Num retrieved tokens: (\d+), num expected tokens: (\d+)")


# -- the model ------------------------------------------------------------------------


def _llama_shapes(c: dict) -> list[tuple[str, tuple[int, ...]]]:
    """Hugging Face's tensor names and shapes of a Llama checkpoint."""
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    head = h // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * head, c["num_key_value_heads"] * head
    shapes = [("model.embed_tokens.weight", (v, h))]
    for n in range(c["num_hidden_layers"]):
        p = f"model.layers.{n}."
        shapes += [(p + "input_layernorm.weight", (h,)),
                   (p + "self_attn.q_proj.weight", (q, h)),
                   (p + "self_attn.k_proj.weight", (kv, h)),
                   (p + "self_attn.v_proj.weight", (kv, h)),
                   (p + "self_attn.o_proj.weight", (h, q)),
                   (p + "post_attention_layernorm.weight", (h,)),
                   (p + "mlp.gate_proj.weight", (i, h)),
                   (p + "mlp.up_proj.weight", (i, h)),
                   (p + "mlp.down_proj.weight", (h, i))]
    return shapes + [("model.norm.weight", (h,)), ("lm_head.weight", (v, h))]


def write_tiny_llama(directory: Path, seed: int = 0) -> Path:
    """A Llama checkpoint in `directory` (config.json, model.safetensors) whose
    weights are drawn from `seed`: the same bytes on every call, so two processes
    given one directory run one model. vLLM names the model, and LMCache keys its
    chunks, by the directory's path. Kept when already there with this seed."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    directory = Path(directory)
    config, weights = directory / "config.json", directory / "model.safetensors"
    tag = {"seed": str(seed), "init_std": str(INIT_STD), "qk_std": str(QK_STD)}
    if config.exists() and weights.exists():
        with safe_open(str(weights), "pt") as f:
            if json.loads(config.read_text()) == TINY_LLAMA and f.metadata() == tag:
                return directory
    directory.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    tensors = {name: torch.ones(shape) if name.endswith("norm.weight")
               else torch.randn(shape, generator=gen) * _std(name)
               for name, shape in _llama_shapes(TINY_LLAMA)}
    # Renamed into place: a reader never sees half a file.
    save_file(tensors, str(weights) + ".tmp", metadata=tag)
    os.replace(str(weights) + ".tmp", weights)
    config.with_suffix(".tmp").write_text(json.dumps(TINY_LLAMA, indent=1))
    os.replace(config.with_suffix(".tmp"), config)
    return directory


def default_model(seed: int) -> Path:
    """Where the model goes when no directory is given: one path per seed, so that
    every run finds the chunks of the ones before (their keys hold the path)."""
    return Path(tempfile.gettempdir()) / f"lmcache-aerospike-tiny-llama-{seed}"


def _std(name: str) -> float:
    return QK_STD if name.endswith(("q_proj.weight", "k_proj.weight")) else INIT_STD


def prompt(index: int, tokens: int, seed: int) -> list[int]:
    """Prompt `index`: token ids 3.. (0 to 2 are the special ids), the same in every
    process. Distinct prompts share no prefix."""
    rng = random.Random(f"{seed}:{index}")
    return [rng.randrange(3, TINY_LLAMA["vocab_size"]) for _ in range(tokens)]


# -- LMCache's config -------------------------------------------------------------------


def lmcache_config(surface: str, hosts: str, namespace: str, setname: str,
                   chunk_size: int, settings: Optional[dict] = None) -> dict:
    """LMCache's config for an in-process surface, with our plugin as the only
    store (local_cpu false: LocalCPUBackend is only the allocator, so a hit can
    only come from Aerospike). `settings`: more of our settings (they win)."""
    settings = {"send_key": True, "default_ttl_seconds": 3600, **(settings or {}),
                "hosts": hosts, "namespace": namespace, "set": setname}
    if surface == "remote":
        prefix = "remote_storage_plugin.aerospike."
        plugin = {"remote_storage_plugins": ["aerospike"],
                  "extra_config": {prefix + "module_path": "lmcache_aerospike.adapter",
                                   prefix + "class_name": "AerospikeConnectorAdapter"}}
    elif surface == "storage":
        prefix = "storage_plugin.aerospike."
        plugin = {"storage_plugins": ["aerospike"],
                  "extra_config": {prefix + "module_path": "lmcache_aerospike.storage",
                                   prefix + "class_name": "AerospikeStoragePlugin"}}
    else:
        raise ValueError(f"surface {surface!r} has no in-process LMCache config")
    plugin["extra_config"].update({prefix + k: v for k, v in settings.items()})
    return {"chunk_size": chunk_size, "local_cpu": False, "max_local_cpu_size": 0.25,
            **plugin}


def kv_transfer_config(surface: str, mp_port: Optional[int]) -> Optional[dict]:
    if surface == "none":
        return None
    if surface == "mp":
        if mp_port is None:
            raise ValueError("surface mp needs the lmcache server's port (--mp-port)")
        # Keys of vLLM's LMCacheMPConnector (lmcache_mp_connector.py:481-492); a
        # server that is not there fails the run in a minute, not in 300 s.
        return {"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
                "kv_connector_extra_config": {"lmcache.mp.host": "tcp://127.0.0.1",
                                              "lmcache.mp.port": mp_port,
                                              "lmcache.mp.mq_timeout": 60}}
    return {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}


def environment(surface: str, config_file: Optional[Path]) -> dict:
    """What the run sets before vLLM starts; the processes it spawns inherit it."""
    env = {"LMCACHE_TRACK_USAGE": "false", "DO_NOT_TRACK": "1", "VLLM_NO_USAGE_STATS": "1",
           "PYTHONUNBUFFERED": "1",
           "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB; vLLM-CPU's default takes far more
           # In-process surfaces: engine core and worker in this process (vLLM-CPU
           # runs a worker process of its own otherwise, cpu.py:334-341), which
           # saves two starts of vLLM. Not for mp: vLLM imports its
           # LMCacheMPConnector, and LMCache with it, before the worker starts;
           # LMCache imports numba (v1/multiprocess/token_hasher.py:19), and the
           # CPU worker's scan of the loaded modules then fails on an llvmlite
           # object (AttributeError at vllm/triton_utils/dispatcher.py:139).
           "VLLM_ENABLE_V1_MULTIPROCESSING": "1" if surface == "mp" else "0"}
    if config_file is not None:
        env["LMCACHE_CONFIG_FILE"] = str(config_file)
    return env


# -- the run ------------------------------------------------------------------------------


def main(argv: Optional[list[str]] = None) -> None:
    args = _parser().parse_args(argv)
    if os.environ.get("PYTHONHASHSEED") != "0":
        # LMCache's in-process chunk keys are Python's hash() of the tokens and of
        # vLLM's NONE_HASH (lmcache/v1/token_database.py:160-175, 263-294; vLLM's
        # kv_cache_utils.py:160-172): the same in two processes only under one
        # PYTHONHASHSEED, which takes effect when the interpreter starts.
        os.execve(sys.executable, [sys.executable, "-m", __spec__.name, *sys.argv[1:]],
                  {**os.environ, "PYTHONHASHSEED": "0"})
    if args.log:
        _log_to(args.log)
    model = write_tiny_llama(args.model or default_model(args.seed), args.seed)
    config_file = None
    if args.surface in ("remote", "storage"):
        import yaml  # LMCache's own dependency

        config_file = Path(args.out).with_suffix(".lmcache.yaml")
        config_file.write_text(yaml.safe_dump(lmcache_config(
            args.surface, args.hosts, args.namespace, args.set, args.chunk_size,
            args.settings_json)))
    os.environ.update(environment(args.surface, config_file))
    code = 0
    try:
        result = _generate(args, model)
        Path(args.out).write_text(json.dumps(result, indent=1))
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # vLLM and LMCache leave non-daemon threads behind, which would keep the
    # process alive after the engine core has shut down (or failed).
    os._exit(code)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m lmcache_aerospike.vllm_run",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--surface", choices=SURFACES, required=True)
    p.add_argument("--hosts", required=True, help="Aerospike seeds, host:port[,...]")
    p.add_argument("--namespace", default="lmcache")
    p.add_argument("--set", required=True, help="the set the chunks go to (start empty)")
    p.add_argument("--mp-port", type=int, help="the lmcache server's port (surface mp)")
    p.add_argument("--model", type=Path,
                   help="directory of the tiny model, written when missing (default: "
                        "lmcache-aerospike-tiny-llama-SEED in the temporary directory)")
    p.add_argument("--prompts", type=int, default=1, help="prompts of each length (1)")
    p.add_argument("--prompt-tokens", type=lengths_arg, default=[PROMPT_TOKENS],
                   help="a length or a comma-separated list of them; 4 chunks and a "
                        "tail by default: see the module's docstring")
    p.add_argument("--warmup", action="store_true",
                   help="generate a short prompt of its own first")
    p.add_argument("--wait", choices=WAITS, default="aerospike",
                   help="wait for each prompt's chunks in the set (default), or not")
    p.add_argument("--settings-json", type=_settings_arg, default={},
                   help="more of our settings for the in-process surfaces, as JSON")
    p.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    p.add_argument("--chunk-size", type=int, default=CHUNK_SIZE,
                   help="LMCache's chunk size (surface mp: the server's --chunk-size)")
    p.add_argument("--seed", type=int, default=0, help="of the weights and the prompts")
    p.add_argument("--out", type=Path, required=True, help="the JSON result")
    p.add_argument("--log", type=Path, help="this run's output, vLLM's and LMCache's "
                                            "logs included (needed for LMCache's hits)")
    return p


def lengths_arg(text: str) -> list[int]:
    """"1024,4096": prompt lengths (argparse type; bench/engines/vllm_ttft.py uses it too)."""
    try:
        lengths = [int(x) for x in text.split(",")]
    except ValueError:
        lengths = []
    if not lengths or min(lengths) < 1:
        raise argparse.ArgumentTypeError(f"expected positive token counts, got {text!r}")
    return lengths


def _settings_arg(text: str) -> dict:
    try:
        settings = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON ({e}): {text!r}") from None
    if not isinstance(settings, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object of settings, got {text!r}")
    return settings


def _log_to(path: Path) -> None:
    """stdout and stderr into `path`, for this process and the engine core it
    spawns (which inherits them): LMCache reports its hits only in its log."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _generate(args: argparse.Namespace, model: Path) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig

    from lmcache_aerospike import _native

    lengths = args.prompt_tokens
    transfer = kv_transfer_config(args.surface, args.mp_port)
    started = time.perf_counter()
    llm = LLM(model=str(model), skip_tokenizer_init=True, enforce_eager=True,
              seed=args.seed, dtype="float32",
              max_model_len=max(lengths) + args.max_tokens,
              # The prompt's tail in a step of its own, after its full chunks, as
              # when they come from a cache (the module's docstring says why).
              max_num_batched_tokens=_step_tokens(lengths, args.chunk_size),
              # The worker in the engine core, which is in this process for the
              # in-process surfaces (see environment()); vLLM-CPU makes it "mp"
              # when the engine core has a process of its own (cpu.py:334-341).
              distributed_executor_backend="uni",
              disable_log_stats=False,  # the prefix-cache counters
              kv_transfer_config=None if transfer is None else KVTransferConfig(**transfer))
    startup_s = time.perf_counter() - started
    sampling = SamplingParams(max_tokens=args.max_tokens, temperature=0.0, logprobs=0,
                              ignore_eos=True, detokenize=False)
    if args.warmup:  # fewer tokens than a chunk: nothing is stored
        warmup = prompt(-1, max(1, args.chunk_size // 2), args.seed)
        llm.generate([{"prompt_token_ids": warmup}], sampling, use_tqdm=False)
    waiting = args.surface != "none" and args.wait == "aerospike"
    store = _native.Connector(hosts=args.hosts, namespace=args.namespace,
                              set=args.set) if waiting else None
    prompts, stored, no_chunks = [], 0, ([], 0)
    try:
        # The set's chunks (keys of those stored with one, count of the rest): at
        # the start, and after each prompt, which is the next one's before.
        before = had = store.list_keys() if store else no_chunks
        for i, length in enumerate(n for n in lengths for _ in range(args.prompts)):
            counters = _counters(llm)
            t0 = time.perf_counter()
            out = llm.generate([{"prompt_token_ids": prompt(i, length, args.seed)}],
                               sampling, use_tqdm=False)[0]
            generate_s = time.perf_counter() - t0
            counted = _counters(llm, counters)
            # LMCache stores the full chunks the tier did not have: those past the
            # tokens vLLM took from it (the last token, which vLLM always
            # computes, may end a chunk the tier had).
            taken = -(-counted["external_hits"] // args.chunk_size)
            stored += max(0, length // args.chunk_size - taken)
            after = _wait_for_chunks(store, had, stored) if store else no_chunks
            new_keys = sorted(set(after[0]) - set(before[0]))
            new_chunks = len(new_keys) + max(0, after[1] - before[1]) if store else None
            prompts.append(_report(out, generate_s, counted, new_keys, new_chunks,
                                   length // args.chunk_size))
            before = after
    finally:
        if store:
            store.close()
    llm.llm_engine.engine_core.shutdown()
    return {"surface": args.surface, "model": str(model), "pid": os.getpid(),
            "chunk_size": args.chunk_size, "full_chunks": lengths[0] // args.chunk_size,
            "startup_s": startup_s, "prompts": prompts,
            "lmcache_hits": _lmcache_hits(args.log),
            "load_shortfalls": _load_shortfalls(args.log)}


def _step_tokens(lengths: list[int], chunk_size: int) -> Optional[int]:
    """The prefill budget per step: a prompt's full chunks when the prompts have
    one length, with a tail; vLLM's default otherwise."""
    if len(set(lengths)) != 1:
        return None
    full = lengths[0] // chunk_size * chunk_size
    return full if 0 < full < lengths[0] else None


def _report(out: Any, generate_s: float, counters: dict, new_keys: list[str],
            new_chunks: Optional[int], full_chunks: int) -> dict:
    completion = out.outputs[0]
    ids = list(completion.token_ids)
    metrics = getattr(out, "metrics", None)
    return {"prompt_tokens": len(out.prompt_token_ids), "output_token_ids": ids,
            # logprobs=0: the sampled token's own logprob only.
            "logprobs": [step[t].logprob for step, t in zip(completion.logprobs, ids)],
            "num_cached_tokens": out.num_cached_tokens, "generate_s": generate_s,
            "ttft_s": getattr(metrics, "first_token_latency", None),
            "prefix_cache": counters, "new_keys": new_keys, "new_chunks": new_chunks,
            "full_chunks": full_chunks}


# vLLM's counters of prefix-cache lookups (vllm/v1/metrics/loggers.py:660-710):
# "external" are the tokens the KV connector said it has.
_COUNTERS = {"vllm:prefix_cache_queries": "queries", "vllm:prefix_cache_hits": "hits",
             "vllm:external_prefix_cache_queries": "external_queries",
             "vllm:external_prefix_cache_hits": "external_hits"}


def _counters(llm: Any, since: Optional[dict] = None) -> dict:
    """vLLM's prefix-cache counters, less `since`."""
    now = dict.fromkeys(_COUNTERS.values(), 0)
    for m in llm.get_metrics():
        if m.name in _COUNTERS:
            now[_COUNTERS[m.name]] += int(m.value)
    return {k: v - (since or {}).get(k, 0) for k, v in now.items()}


def _wait_for_chunks(store: Any, had: tuple, count: int) -> tuple[list[str], int]:
    """Waits until the set holds `count` chunks more than `had`; its chunks then."""
    deadline = time.monotonic() + STORE_TIMEOUT_S
    while True:
        named, unnamed = store.list_keys()
        new = len(set(named) - set(had[0])) + max(0, unnamed - had[1])
        if new >= count:
            return named, unnamed
        if time.monotonic() > deadline:
            raise TimeoutError(f"{new} of {count} chunks in the set after "
                               f"{STORE_TIMEOUT_S:.0f} s: the stores did not land")
        time.sleep(0.2)


def _log_numbers(log: Optional[Path], pattern: re.Pattern, names: tuple[str, str]) -> list[dict]:
    """Each match of `pattern` in the run's log, its two numbers under `names`."""
    if log is None:
        return []
    text = Path(log).read_text(errors="replace")
    return [{names[0]: int(a), names[1]: int(b)} for a, b in pattern.findall(text)]


def _load_shortfalls(log: Optional[Path]) -> list[dict]:
    return _log_numbers(log, _LMCACHE_SHORT, ("retrieved", "expected"))


def _lmcache_hits(log: Optional[Path]) -> list[dict]:
    return _log_numbers(log, _LMCACHE_HITS, ("hit_tokens", "need_to_load"))


# -- from Python ----------------------------------------------------------------------------


def run(surface: str, *, hosts: str, setname: str, out: Path, model: Optional[Path] = None,
        namespace: str = "lmcache", mp_port: Optional[int] = None, prompts: int = 1,
        prompt_tokens: int | list[int] = PROMPT_TOKENS, chunk_size: int = CHUNK_SIZE,
        max_tokens: int = MAX_TOKENS, seed: int = 0, warmup: bool = False,
        wait: str = "aerospike", settings: Optional[dict] = None,
        timeout_s: float = RUN_TIMEOUT_S) -> dict:
    """Runs `python -m lmcache_aerospike.vllm_run` to the end and returns its JSON,
    with "log" (the run's output, beside `out`). A run that fails or outlives
    `timeout_s` raises RunError with the tail of that output."""
    out = Path(out)
    log = out.with_suffix(".log")
    lengths = [prompt_tokens] if isinstance(prompt_tokens, int) else list(prompt_tokens)
    cmd = [sys.executable, "-m", __spec__.name, "--surface", surface, "--hosts", hosts,
           "--namespace", namespace, "--set", setname, "--prompts", str(prompts),
           "--prompt-tokens", ",".join(map(str, lengths)), "--chunk-size", str(chunk_size),
           "--max-tokens", str(max_tokens), "--seed", str(seed), "--wait", wait,
           "--out", str(out), "--log", str(log)]
    if warmup:
        cmd += ["--warmup"]
    if settings:
        cmd += ["--settings-json", json.dumps(settings)]
    if model is not None:
        cmd += ["--model", str(model)]
    if mp_port is not None:
        cmd += ["--mp-port", str(mp_port)]
    out.unlink(missing_ok=True)
    log.write_text("$ " + " ".join(cmd) + "\n")
    with open(log, "a") as f:
        proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONHASHSEED": "0"},
                                stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        rc = None
    finally:
        # The process group: the engine core too, whatever became of the run.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
    if rc != 0 or not out.exists():
        what = f"timed out after {timeout_s:.0f} s" if rc is None else f"exited with {rc}"
        raise RunError(f"vllm_run --surface {surface} {what}\n{tail(log)}")
    return {**json.loads(out.read_text()), "log": str(log)}


class RunError(RuntimeError):
    """A vLLM run that failed; the text ends with its output's tail."""


def tail(log: Path, lines: int = 60) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", Path(log).read_text(errors="replace"))
    return f"--- last {lines} lines of {log} ---\n" + "\n".join(text.splitlines()[-lines:])


if __name__ == "__main__":
    main()
