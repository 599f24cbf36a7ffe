#!/usr/bin/env python3
"""PyTorch eager CPU baseline for `agentrl bench train-step`.

The same TinyAgent model (token + learned position embeddings, pre-norm blocks with RMSNorm,
causal multi-head attention, tanh-GELU MLP, final RMSNorm, LM head, value head) and the same
update as agentrl's trainer runs for the default GRPO preset: group advantages
(R - mean) / (std + 1e-6), the PPO clipped surrogate, the entropy bonus, seq-mean-token-mean
aggregation, gradient-norm clipping and AdamW, at the shapes given as one JSON argument by the
Rust side. Attention uses `F.scaled_dot_product_attention(is_causal=True)`,
the idiomatic (and fastest) eager PyTorch path. Runs on 2 threads (and, for reference, 1 thread) and prints one JSON line:
{"torch_ms": median ms per step at 2 threads, "torch_1thread_ms": ..., "torch_version": ...,
"threads": 2}.
"""
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F



class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, d, heads, mlp_ratio):
        super().__init__()
        self.heads = heads
        self.norm_attn = RMSNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        self.norm_mlp = RMSNorm(d)
        self.up = nn.Linear(d, mlp_ratio * d, bias=False)
        self.down = nn.Linear(mlp_ratio * d, d, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        qkv = self.qkv(self.norm_attn(x)).view(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
        ctx = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        x = x + self.out(ctx.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.norm_mlp(x)), approximate="tanh"))


class TinyAgent(nn.Module):
    def __init__(self, s):
        super().__init__()
        d = s["d_model"]
        self.tok_emb = nn.Embedding(s["vocab"], d)
        self.pos_emb = nn.Embedding(s["max_seq"], d)
        self.blocks = nn.ModuleList(
            [Block(d, s["n_heads"], s["mlp_ratio"]) for _ in range(s["n_layers"])]
        )
        self.norm_final = RMSNorm(d)
        self.lm_head = nn.Linear(d, s["vocab"], bias=False)
        self.value_head = nn.Linear(d, 1)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.tok_emb(ids) + self.pos_emb.weight[:t]
        for block in self.blocks:
            x = block(x)
        h = self.norm_final(x)
        return self.lm_head(h), self.value_head(h).squeeze(-1)


def grpo_advantages(rewards, group_size):
    grouped = rewards.view(-1, group_size)
    adv = (grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-6)
    return adv.reshape(-1, 1)


def policy_loss(s, model, ids, targets, mask, old_logp, rewards):
    adv = grpo_advantages(rewards, s["group_size"])
    logits, _ = model(ids)
    logp_all = torch.log_softmax(logits, -1)
    logp = logp_all.gather(2, targets.unsqueeze(2)).squeeze(2)
    ratio = torch.exp(logp - old_logp)
    eps = s["clip_eps"]
    per_token = -torch.minimum(ratio * adv, ratio.clamp(1 - eps, 1 + eps) * adv)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    per_token = per_token - s["entropy_coef"] * entropy
    # seq-mean-token-mean: the masked mean of each row, then the mean over rows.
    counts = mask.sum(1)
    rows = (per_token * mask).sum(1) / counts.clamp(min=1)
    return rows[counts > 0].mean()


def time_steps(s, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    b, t, v = s["batch"], s["seq_len"], s["vocab"]
    model = TinyAgent(s)
    opt = torch.optim.AdamW(
        model.parameters(), lr=s["lr"], betas=(0.9, 0.99), eps=1e-8, weight_decay=0.0
    )
    seq = torch.randint(0, v, (b, t + 1))
    ids, targets = seq[:, :t].contiguous(), seq[:, 1:].contiguous()
    mask = (torch.rand(b, t) < 1 / 3).float()
    old_logp = torch.full((b, t), -math.log(v))
    rewards = (torch.rand(b) < 0.5).float()
    times = []
    for step in range(s["warmup"] + s["steps"]):
        start = time.perf_counter()
        loss = policy_loss(s, model, ids, targets, mask, old_logp, rewards)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), s["grad_clip"])
        opt.step()
        loss.item()
        if step >= s["warmup"]:
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main():
    s = json.loads(sys.argv[1])
    # The required figure is at 2 threads; 1 thread is reported too, since on a busy 2-core
    # machine a second thread can cost more in synchronisation than it gains.
    one_thread = time_steps(s, 1)
    two_threads = time_steps(s, 2)
    print(json.dumps({
        "torch_ms": two_threads,
        "torch_1thread_ms": one_thread,
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
    }))


if __name__ == "__main__":
    main()
