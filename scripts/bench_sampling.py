#!/usr/bin/env python3
"""PyTorch eager CPU baseline for `agentrl bench sampling`.

The TinyAgent model of `bench_train_step.py` (imported from it, so both benches time one
architecture), decoded the way an eager PyTorch rollout loop does it: one batched prefill of
the prompts that fills a per-layer key/value cache, then one batched forward per new token
over the cached keys and values, sampling each row's next token from the softmax at
temperature 1 with `torch.multinomial`. Under `torch.inference_mode()` (no autograd). The
shapes come as one JSON argument from the Rust side; prints one JSON line:
{"torch_ms": median ms per generate call at `threads` threads, "torch_1thread_ms": ...,
"torch_version": ..., "threads": ...}.
"""
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_train_step import TinyAgent  # noqa: E402


def block_step(block, x, cache):
    """One block over the new positions `x [B, n, D]`, appending their keys and values to
    `cache` (a dict holding `k`, `v` of shape [B, H, T, Dh])."""
    b, n, d = x.shape
    h = block.heads
    qkv = block.qkv(block.norm_attn(x)).view(b, n, 3, h, d // h).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    if "k" in cache:
        k = torch.cat([cache["k"], k], dim=2)
        v = torch.cat([cache["v"], v], dim=2)
    cache["k"], cache["v"] = k, v
    # Prefill is causal among the new positions; a one-token step sees every cached key.
    ctx = F.scaled_dot_product_attention(q, k, v, is_causal=n > 1)
    x = x + block.out(ctx.transpose(1, 2).reshape(b, n, d))
    return x + block.down(F.gelu(block.up(block.norm_mlp(x)), approximate="tanh"))


def step(model, ids, start, caches):
    t = ids.shape[1]
    x = model.tok_emb(ids) + model.pos_emb.weight[start:start + t]
    for block, cache in zip(model.blocks, caches):
        x = block_step(block, x, cache)
    return model.lm_head(model.norm_final(x[:, -1]))


def generate(model, prompts, new_tokens, generator):
    caches = [{} for _ in model.blocks]
    logits = step(model, prompts, 0, caches)
    pos = prompts.shape[1]
    out = []
    for _ in range(new_tokens):
        token = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)
        out.append(token)
        if len(out) == new_tokens:
            break
        logits = step(model, token, pos, caches)
        pos += 1
    return torch.cat(out, 1)


def time_calls(s, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = TinyAgent(s).eval()
    prompts = torch.randint(0, s["vocab"], (s["rows"], s["prompt_len"]))
    generator = torch.Generator().manual_seed(0)
    times = []
    with torch.inference_mode():
        for call in range(s["warmup"] + s["calls"]):
            start = time.perf_counter()
            tokens = generate(model, prompts, s["new_tokens"], generator)
            assert tokens.shape == (s["rows"], s["new_tokens"])
            if call >= s["warmup"]:
                times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main():
    s = json.loads(sys.argv[1])
    # As in bench_train_step.py: 1 thread too, since on a busy 2-core machine a second
    # thread can cost more in synchronisation than it gains.
    one_thread = time_calls(s, 1)
    threads = time_calls(s, s["threads"])
    print(json.dumps({
        "torch_ms": threads,
        "torch_1thread_ms": one_thread,
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
    }))


if __name__ == "__main__":
    main()
