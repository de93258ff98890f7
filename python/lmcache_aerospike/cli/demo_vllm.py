"""`lmcache-aerospike demo --engine vllm`: vLLM takes a prompt's KV from Aerospike
after a restart.

Two vLLM processes in a row (lmcache_aerospike.vllm_run), each running a tiny
Llama on the CPU with LMCache's in-process engine and our RemoteConnector plugin
as its only store. Run 1 prefills a prompt cold and stores its chunks; it ends.
Run 2, a fresh process, prefills the same prompt: LMCache finds the prompt's full
chunks in Aerospike and vLLM computes only the tail. The demo prints both prefill
times, how many prompt tokens vLLM took from the cache, and whether run 2's output
tokens and logprobs equal run 1's.

Each run first generates a short prompt of its own (fewer tokens than a chunk, so
nothing is stored): vLLM's first step in a process pays for one-time set-up, which
would otherwise be counted as prefill.

The model's directory is new for every demo, and LMCache's keys name it, so no
chunk of an earlier demo (or of a real model) can be hit; the demo removes its
chunks on the way out.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any

from lmcache_aerospike.vllm_run import RunError  # noqa: F401 (demo.py catches it)

MAX_TOKENS = 8


def store_restart_load(plugin_settings: dict, *, tokens: int, chunk: int) -> dict:
    """Run 1 and run 2 in fresh processes; their results and what the demo checks.
    Raises vllm_run.RunError when a run fails (its text ends with the run's log)."""
    from lmcache_aerospike import _native, vllm_run

    with tempfile.TemporaryDirectory(prefix="lmca-demo-vllm-") as tmp:
        tmp_path = Path(tmp)
        model = vllm_run.write_tiny_llama(tmp_path / "tiny-llama")
        kw: dict[str, Any] = dict(hosts=plugin_settings["hosts"],
                                  namespace=plugin_settings["namespace"],
                                  setname=plugin_settings["set"], model=model,
                                  prompt_tokens=tokens, chunk_size=chunk,
                                  max_tokens=MAX_TOKENS, warmup=True,
                                  # Keys on the records, so that the demo can
                                  # remove its chunks by them.
                                  settings={**plugin_settings, "send_key": True})
        cold = warm = None
        try:
            cold = vllm_run.run("remote", out=tmp_path / "cold.json", **kw)
            warm = vllm_run.run("remote", out=tmp_path / "warm.json", **kw)
        finally:
            if cold is not None:
                _remove(_native, plugin_settings, cold["prompts"][0]["new_keys"])
    c, w = cold["prompts"][0], warm["prompts"][0]
    short = sum(s["expected"] - s["retrieved"] for s in warm["load_shortfalls"])
    return {"tokens": tokens, "chunk_size": chunk, "full_chunks": cold["full_chunks"],
            # vLLM computes a prompt's last token whatever the cache holds.
            "cached_tokens": min(cold["full_chunks"] * chunk, tokens - 1),
            "stored_chunks": c["new_chunks"],
            "cold_prefill_s": _prefill(c), "warm_prefill_s": _prefill(w),
            # Tokens vLLM scheduled as hits, less those whose load came back
            # short (vLLM computed their blocks again).
            "retrieved_tokens": w["prefix_cache"]["external_hits"] - short,
            "load_shortfalls": warm["load_shortfalls"],
            "num_cached_tokens": w["num_cached_tokens"],
            "same_tokens": c["output_token_ids"] == w["output_token_ids"],
            "outputs_identical": (c["output_token_ids"], c["logprobs"])
                                 == (w["output_token_ids"], w["logprobs"]),
            "max_logprob_diff": max((abs(a - b) for a, b in zip(c["logprobs"], w["logprobs"])),
                                    default=0.0),
            "output_tokens": len(c["output_token_ids"]),
            "pids": [cold["pid"], warm["pid"]]}


def _prefill(p: dict) -> float:
    """Time to the first token (vLLM's metrics), else the whole generate()."""
    return p["ttft_s"] if p["ttft_s"] is not None else p["generate_s"]


def _remove(native: Any, settings: dict, keys: list[str]) -> None:
    """The demo's chunks, meta records and segments (best effort: a failure here
    must not hide the demo's own outcome; their TTL ends them anyway)."""
    with contextlib.suppress(Exception):
        conn = native.Connector(hosts=settings["hosts"], namespace=settings["namespace"],
                                set=settings["set"])
        try:
            for key in keys:
                with contextlib.suppress(Exception):
                    conn.remove(key)
        finally:
            conn.close()


def report(r: dict) -> None:
    size = r["tokens"]
    print(f"vLLM on the CPU, a tiny Llama, LMCache in-process with the Aerospike "
          f"RemoteConnector; a prompt of {size} tokens, chunks of {r['chunk_size']} "
          f"({r['full_chunks']} full)")
    print(f"run 1 (cold, pid {r['pids'][0]}): prefill {r['cold_prefill_s']:.3f} s, "
          f"stored {r['stored_chunks']} chunks in Aerospike")
    print(f"restarted vLLM: run 2 in a fresh process (pid {r['pids'][1]})")
    print(f"run 2: prefill {r['warm_prefill_s']:.3f} s; retrieved {r['retrieved_tokens']} "
          f"of {size} prompt tokens from the cache")
    speedup = r["cold_prefill_s"] / max(r["warm_prefill_s"], 1e-9)
    print(f"prefill {speedup:.1f}x faster; outputs {_sameness(r)}")


def _sameness(r: dict) -> str:
    n = r["output_tokens"]
    if r["outputs_identical"]:
        return f"identical ({n} tokens and their logprobs, to the bit)"
    if r["same_tokens"]:
        # A prompt of whole chunks: run 2 computes its last token alone, by other
        # kernels than run 1's batch (vllm_run's docstring).
        return f"the same {n} tokens, logprobs within {r['max_logprob_diff']:.1e}"
    return "DIFFER"


def ok(r: dict) -> bool:
    return r["retrieved_tokens"] == r["cached_tokens"] and r["same_tokens"]


def complaint(r: dict) -> str:
    return (f"retrieved {r['retrieved_tokens']} of the {r['cached_tokens']} prompt tokens "
            f"the cache should give; outputs {_sameness(r)}")



def bad_tokens(tokens: int, chunk: int) -> str | None:
    """Why the tiny model cannot take this prompt, or None."""
    from lmcache_aerospike.vllm_run import TINY_LLAMA

    most = TINY_LLAMA["max_position_embeddings"] - MAX_TOKENS
    if tokens > most:
        return f"--tokens {tokens}: the demo's model takes at most {most} prompt tokens"
    if tokens < chunk:
        return (f"--tokens {tokens}: fewer than a chunk ({chunk}), so nothing would be "
                "stored (--chunk-size sets it)")
    return None
