#!/usr/bin/env python3
"""Reference fixtures for agentrl-rl, computed with PyTorch straight from ALGORITHMS.md.

Every quantity of the RL math core is recomputed here independently of the Rust code, in
float64 from float32-representable seeded random inputs (padding, observation holes inside
responses, a fully masked row, groups of unequal size incl. a singleton and a zero-variance
group, extreme ratios up to e^±6). Values *and* gradients are written to
`crates/agentrl-rl/tests/fixtures/*.json`, which are committed; CI only reads them.

Regenerate (needs torch; CI never does):

    /work/pyenv/bin/python crates/agentrl-rl/scripts/make_fixtures.py

(from the workspace root; any Python >= 3.9 with torch >= 2 works). Every file records the
script and the Python and torch versions that made it under `generated_by`.
"""
import json
import math
import os
import platform

import torch

torch.set_default_dtype(torch.float64)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
GEN = torch.Generator().manual_seed(20250601)
GENERATED_BY = {
    "script": "crates/agentrl-rl/scripts/make_fixtures.py",
    "python": platform.python_version(),
    "torch": torch.__version__,
}


def f32(t):
    """Round to float32-representable values, keep float64 for the reference arithmetic."""
    return t.to(torch.float32).to(torch.float64)


def randn(*shape, scale=1.0):
    return f32(torch.randn(*shape, generator=GEN) * scale)


def tolist(t):
    return t.detach().tolist()


# ---------------------------------------------------------------- shared per-token inputs
B, T = 8, 10
# 1 = policy action token; zeros = padding (tail), observation holes (inside), a fully masked row.
MASK = torch.tensor(
    [
        [1, 1, 1, 0, 0, 1, 1, 1, 0, 0],  # hole at 3-4, padding 8-9
        [1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
        [1, 1, 0, 0, 0, 1, 0, 0, 0, 0],
        [1, 0, 0, 0, 0, 0, 0, 0, 0, 0],  # single token
        [1, 1, 1, 1, 0, 0, 0, 1, 1, 0],
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0],  # fully masked (e.g. overlong-filtered)
        [1, 1, 1, 1, 1, 1, 0, 0, 0, 0],
        [1, 0, 1, 0, 1, 0, 1, 0, 1, 0],
    ],
    dtype=torch.float64,
)
OLD = f32(-torch.rand(B, T, generator=GEN) * 3.0 - 0.05)
DELTA = randn(B, T, scale=0.3)
# extreme ratios
DELTA[0, 1], DELTA[1, 4], DELTA[2, 5], DELTA[4, 7], DELTA[6, 2], DELTA[7, 4] = 6.0, -6.0, 2.5, -3.0, 1.2, -0.9
DELTA[1, 0] = 0.0
LOGP = f32(OLD + DELTA)
ADV = randn(B, T)
# sequence-constant advantages on half the rows, like outcome advantages
for i in (0, 2, 4, 6):
    ADV[i, :] = ADV[i, 0]
TOKEN_WEIGHTS = f32(torch.rand(B, T, generator=GEN) * 2.0) * MASK
MAX_LEN = 16.0


def agg(loss, mask, mode, max_len=MAX_LEN):
    """ALGORITHMS.md §0. Fully masked rows are excluded from the sequence count."""
    tok = mask.sum()
    seq_counts = mask.sum(-1)
    nseq = (seq_counts > 0).sum()
    masked = loss * mask
    if mode == "token-mean":
        return masked.sum() / tok
    if mode == "seq-mean-token-sum":
        return masked.sum() / nseq
    if mode == "seq-mean-token-mean":
        per = masked.sum(-1) / seq_counts.clamp(min=1)
        return per.sum() / nseq
    if mode == "seq-mean-token-sum-norm":
        return masked.sum() / (nseq * max_len)
    raise ValueError(mode)


def mmean(x, mask):
    return ((x * mask).sum() / mask.sum()).item()


def pg_diag(ratio, adv, mask, low, high, unclipped=None, clipped=None, per_token=None, bound=None):
    d = {}
    valid = mask > 0
    r = ratio[valid]
    d["ratio_mean"] = r.mean().item()
    d["ratio_min"] = r.min().item()
    d["ratio_max"] = r.max().item()
    d["approx_kl"] = mmean(OLD - LOGP, mask)
    if low is not None:
        d["clipfrac_upper"] = mmean(((adv > 0) & (ratio > 1 + high)).double(), mask)
        d["clipfrac_lower"] = mmean(((adv < 0) & (ratio < 1 - low)).double(), mask)
    if clipped is not None:
        d["clipfrac"] = mmean((clipped > unclipped).double(), mask)
    if bound is not None:
        d["dual_clipfrac"] = mmean(((adv < 0) & (bound < per_token)).double(), mask)
    return d


def policy_loss(kind, cfg, logp, weights):
    """Per-token losses of ALGORITHMS.md §1, §3, §6, §9, §10 (minimised)."""
    adv = ADV
    if kind == "vanilla":
        ratio = torch.exp(torch.clamp(logp - OLD, -20, 20))
        return -adv * ratio, pg_diag(ratio.detach(), adv, MASK, None, None)
    if kind in ("ppo-clip",):
        low, high, c = cfg["clip_low"], cfg["clip_high"], cfg["dual_clip"]
        ratio = torch.exp(torch.clamp(logp - OLD, -20, 20))
        l1 = -adv * ratio
        l2 = -adv * torch.clamp(ratio, 1 - low, 1 + high)
        pt = torch.maximum(l1, l2)
        bound = None
        pre = pt
        if c is not None:
            bound = -adv * c
            pt = torch.where(adv < 0, torch.minimum(pt, bound), pt)
        d = pg_diag(ratio.detach(), adv, MASK, low, high, l1.detach(), l2.detach(), pre.detach(), bound)
        return pt, d
    if kind in ("gspo", "gspo-token"):
        low, high = cfg["clip_low"], cfg["clip_high"]
        lens = MASK.sum(-1).clamp(min=1)
        seq = ((logp - OLD) * MASK).sum(-1, keepdim=True) / lens[:, None]
        if kind == "gspo":
            log_s = torch.clamp(seq, max=10.0).expand(B, T)
        else:
            log_s = torch.clamp(logp - logp.detach() + seq.detach(), max=10.0)
        s = torch.exp(log_s)
        l1 = -adv * s
        l2 = -adv * torch.clamp(s, 1 - low, 1 + high)
        pt = torch.maximum(l1, l2)
        return pt, pg_diag(s.detach(), adv, MASK, low, high, l1.detach(), l2.detach())
    if kind == "cispo":
        low, high = cfg["clip_low"], cfg["clip_high"]
        ratio = torch.exp(torch.clamp(logp - OLD, -20, 20)).detach()
        w = torch.clamp(ratio, 1 - low, 1 + high)
        pt = -w * adv * logp
        d = pg_diag(ratio, adv, MASK, None, None)
        d["clipfrac_upper"] = mmean((ratio > 1 + high).double(), MASK)
        d["clipfrac_lower"] = mmean((ratio < 1 - low).double(), MASK)
        d["clipfrac"] = d["clipfrac_upper"] + d["clipfrac_lower"]
        return pt, d
    raise ValueError(kind)


def policy_fixture():
    configs = [
        {"kind": "vanilla"},
        {"kind": "ppo-clip", "clip_low": 0.2, "clip_high": 0.2, "dual_clip": None},
        {"kind": "ppo-clip", "clip_low": 0.2, "clip_high": 0.28, "dual_clip": 3.0},
        {"kind": "gspo", "clip_low": 0.2, "clip_high": 0.28},
        {"kind": "gspo-token", "clip_low": 0.2, "clip_high": 0.28},
        {"kind": "cispo", "clip_low": 10.0, "clip_high": 0.28},
    ]
    cases = []
    for cfg in configs:
        for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
            for weighted in (False, True):
                logp = LOGP.clone().requires_grad_(True)
                pt, diag = policy_loss(cfg["kind"], cfg, logp, None)
                if weighted:
                    pt = pt * TOKEN_WEIGHTS
                loss = agg(pt, MASK, mode)
                loss.backward()
                cases.append(
                    {
                        "loss": cfg,
                        "agg": mode,
                        "weighted": weighted,
                        "value": loss.item(),
                        "grad": tolist(logp.grad),
                        "diagnostics": diag,
                    }
                )
    return {
        "max_len": MAX_LEN,
        "log_probs": tolist(LOGP),
        "old_log_probs": tolist(OLD),
        "advantages": tolist(ADV),
        "mask": tolist(MASK),
        "token_weights": tolist(TOKEN_WEIGHTS),
        "cases": cases,
    }


# ---------------------------------------------------------------- returns, GAE, value loss
def discounted(rew, mask, gamma):
    out = torch.zeros_like(rew)
    for i in range(rew.shape[0]):
        running = 0.0
        for t in reversed(range(rew.shape[1])):
            if mask[i, t] > 0:
                running = rew[i, t].item() + gamma * running
                out[i, t] = running
    return out


def gae_ref(rew, values, mask, gamma, lam):
    """verl compute_gae_advantage_return (bridges observation tokens), outputs zeroed on masked."""
    adv = torch.zeros_like(rew)
    nextvalues = torch.zeros(rew.shape[0])
    lastgaelam = torch.zeros(rew.shape[0])
    for t in reversed(range(rew.shape[1])):
        delta = rew[:, t] + gamma * nextvalues - values[:, t]
        lastgaelam_ = delta + gamma * lam * lastgaelam
        nextvalues = values[:, t] * mask[:, t] + (1 - mask[:, t]) * nextvalues
        lastgaelam = lastgaelam_ * mask[:, t] + (1 - mask[:, t]) * lastgaelam
        adv[:, t] = lastgaelam
    returns = (adv + values) * mask
    return adv * mask, returns


def whiten(x, mask, shift_mean=True):
    mean = (x * mask).sum() / mask.sum()
    var = (((x - mean) ** 2) * mask).sum() / mask.sum()
    var = var * mask.sum() / (mask.sum() - 1)
    w = (x - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        w = w + mean
    return w * mask


def returns_fixture():
    rew = randn(B, T, scale=0.5) * 0
    # outcome on the last action token, small shaping elsewhere
    for i in range(B):
        idx = (MASK[i] > 0).nonzero()
        if len(idx):
            rew[i, idx[-1]] = f32(torch.tensor(float(i % 3) - 0.5))
    rew = f32(rew + randn(B, T, scale=0.05))
    values = randn(B, T, scale=0.7)
    old_values = f32(values + randn(B, T, scale=0.6))
    cases = {"discounted": [], "gae": []}
    for gamma in (1.0, 0.9):
        cases["discounted"].append({"gamma": gamma, "returns": tolist(discounted(rew, MASK, gamma))})
    for gamma, lam in ((1.0, 1.0), (0.99, 0.95), (0.9, 0.0)):
        a, r = gae_ref(rew, values, MASK, gamma, lam)
        cases["gae"].append({"gamma": gamma, "lambda": lam, "advantages": tolist(a), "returns": tolist(r)})
    a, r = gae_ref(rew, values, MASK, 1.0, 1.0)
    whitened = whiten(a, MASK)
    scaled = whiten(a, MASK, shift_mean=False)
    targets = r
    vcases = []
    for mode in ("token-mean", "seq-mean-token-mean"):
        v = values.clone().requires_grad_(True)
        vclip = torch.clamp(v, old_values - 0.5, old_values + 0.5)
        e1 = (v - targets) ** 2
        e2 = (vclip - targets) ** 2
        loss = 0.5 * agg(torch.maximum(e1, e2), MASK, mode)
        loss.backward()
        vcases.append(
            {
                "agg": mode,
                "value": loss.item(),
                "grad": tolist(v.grad),
                "clipfrac": mmean((e2 > e1).double(), MASK),
            }
        )
    return {
        "mask": tolist(MASK),
        "token_rewards": tolist(rew),
        "values": tolist(values),
        "old_values": tolist(old_values),
        "cases": cases,
        "whiten_input": tolist(a),
        "whitened": tolist(whitened),
        "whitened_no_shift": tolist(scaled),
        "value_loss_clip": 0.5,
        "value_loss_returns": tolist(targets),
        "value_loss": vcases,
    }


# ---------------------------------------------------------------- group advantages
def group_adv(rewards, ids, mode):
    out = [0.0] * len(rewards)
    groups = {}
    for i, g in enumerate(ids):
        groups.setdefault(g, []).append(i)
    for members in groups.values():
        r = torch.tensor([rewards[i] for i in members])
        k = len(members)
        if k == 1:
            out[members[0]] = rewards[members[0]]
            continue
        if bool((r == r[0]).all()):
            continue
        mean = r.mean()
        for j, i in enumerate(members):
            if mode == "grpo":
                out[i] = ((r[j] - mean) / (r.std(unbiased=True) + 1e-6)).item()
            elif mode == "mean":
                out[i] = (r[j] - mean).item()
            elif mode == "rloo":
                loo = (r.sum() - r[j]) / (k - 1)
                out[i] = (r[j] - loo).item()
    return out


def advantages_fixture():
    ids = [5, 2, 5, 9, 2, 5, 7, 7, 3, 3, 3, 3]
    rewards = [float(f32(torch.tensor(x))) for x in [1.0, 0.0, 0.3, 0.7, 1.0, -0.5, 0.25, 0.25, 1.0, 0.0, 0.0, 1.0]]
    n = len(ids)
    mask = torch.ones(n, 6)
    mask[:, 4:] = 0
    mask[1, 1] = 0
    mask[3, 2:] = 0
    seq = torch.tensor(group_adv(rewards, ids, "mean"))
    rpp_base = whiten(seq[:, None] * mask, mask)
    tok = randn(n, 6, scale=0.1) * mask
    rpp = whiten(discounted(tok, mask, 1.0), mask)
    return {
        "group_ids": ids,
        "rewards": rewards,
        "grpo": group_adv(rewards, ids, "grpo"),
        "mean_only": group_adv(rewards, ids, "mean"),
        "rloo": group_adv(rewards, ids, "rloo"),
        "num_groups": 5,
        "zero_variance_groups": 1,
        "singleton_groups": 1,
        "dynamic_sampling_kept": [i for i, g in enumerate(ids) if g != 7],
        "mask": tolist(mask),
        "reinforce_pp_baseline": tolist(rpp_base),
        "token_rewards": tolist(tok),
        "reinforce_pp": tolist(rpp),
    }


# ---------------------------------------------------------------- KL, entropy
def kl_ref(logp, ref, est):
    log_r = ref - logp
    if est == "k1":
        return -log_r
    if est == "k2":
        return 0.5 * log_r**2
    log_r = torch.clamp(log_r, -20, 20)
    return torch.clamp(torch.exp(log_r) - 1 - log_r, -10, 10)


def kl_entropy_fixture():
    ref = f32(LOGP + randn(B, T, scale=0.8))
    ref[0, 0] = LOGP[0, 0] + 12.0  # exercises the k3 clamp
    ref = f32(ref)
    kl = {}
    for est in ("k1", "k2", "k3"):
        logp = LOGP.clone().requires_grad_(True)
        per = kl_ref(logp, ref, est)
        loss = 0.04 * agg(per, MASK, "seq-mean-token-mean")
        loss.backward()
        rew = randn(B, T) * MASK
        kl[est] = {
            "per_token": tolist(per),
            "loss_beta": 0.04,
            "loss": loss.item(),
            "grad": tolist(logp.grad),
            "mean_kl": mmean(per.detach(), MASK),
            "rewards": tolist(rew),
            "shaped_beta": 0.1,
            "shaped": tolist(rew - 0.1 * per.detach() * MASK),
        }
    V = 7
    logits = randn(B, T, V, scale=2.0)
    logits[1, 2, 3] = 30.0  # near-deterministic position
    targets = torch.randint(0, V, (B, T), generator=GEN)
    lg = logits.clone().requires_grad_(True)
    logsm = torch.log_softmax(lg, -1)
    ent = -(logsm.exp() * logsm).sum(-1)
    tok_lp = logsm.gather(-1, targets[..., None]).squeeze(-1)
    bonus = -0.01 * agg(ent, MASK, "token-mean")
    (bonus + agg(-tok_lp, MASK, "token-mean")).backward()
    ctrl = []
    beta = 0.2
    for kl_value in (0.05, 0.3, 0.11, 0.0):
        err = max(-0.2, min(0.2, kl_value / 0.1 - 1))
        beta = beta * (1 + err * 64 / 10000)
        ctrl.append({"kl": kl_value, "n_steps": 64, "beta": beta})
    return {
        "log_probs": tolist(LOGP),
        "ref_log_probs": tolist(ref),
        "mask": tolist(MASK),
        "kl": kl,
        "logits": tolist(logits),
        "targets": tolist(targets),
        "entropy": tolist(ent),
        "token_log_probs": tolist(tok_lp),
        "entropy_coef": 0.01,
        "entropy_plus_sft_grad": tolist(lg.grad),
        "adaptive": {"init": 0.2, "target": 0.1, "horizon": 10000.0, "steps": ctrl},
    }


# ---------------------------------------------------------------- off-policy correction
def offpolicy_fixture():
    train = OLD
    rollout = f32(OLD + randn(B, T, scale=0.15))
    rollout[0, 1] = OLD[0, 1] + 2.0
    rollout[6, 0] = OLD[6, 0] - 1.5
    rollout[7, 6] = OLD[7, 6] + 10.0  # veto candidate: rho ~ 4.5e-5
    rollout = f32(rollout)
    log_rho = (train - rollout) * MASK
    rho = torch.exp(torch.clamp(log_rho, -20, 20))
    tis = torch.clamp(rho, max=2.0) * MASK
    lo, hi = 0.5, 2.0
    inb = (rho >= lo) & (rho <= hi)
    mis_tok = torch.where(inb, rho, torch.zeros_like(rho)) * MASK
    seq_log = log_rho.sum(-1)
    lens = MASK.sum(-1)
    seq_ok = (seq_log >= math.log(lo)) & (seq_log <= math.log(hi)) & (lens > 0)
    mis_seq = torch.where(seq_ok[:, None], torch.exp(seq_log)[:, None].expand(B, T), torch.zeros(B, T)) * MASK
    glo, ghi = 0.9, 1.1
    geo = seq_log / lens.clamp(min=1)
    geo_ok = (geo >= math.log(glo)) & (geo <= math.log(ghi)) & (lens > 0)
    mis_geo = geo_ok[:, None].double().expand(B, T) * MASK
    veto = ((rho < 1e-4) & (MASK > 0)).any(-1)
    mis_tok_veto = mis_tok * (~veto)[:, None].double()
    valid = MASK > 0
    lr = log_rho[valid]
    pt, pr = train[valid].exp(), rollout[valid].exp()
    corr = torch.corrcoef(torch.stack([pt, pr]))[0, 1].item()
    metrics = {
        "mean_abs_log_prob_diff": lr.abs().mean().item(),
        "max_abs_log_prob_diff": lr.abs().max().item(),
        "kl_k1": (-lr).mean().item(),
        "kl_k3": (lr.exp() - lr - 1).mean().item(),
        "ppl_ratio": math.exp(-lr.mean().item()),
        "chi2_token": (lr.exp() ** 2).mean().item() - 1,
        "frac_outside_bounds": ((lr.exp() < lo) | (lr.exp() > hi)).double().mean().item(),
        "prob_correlation": corr,
        "num_tokens": float(valid.sum().item()),
    }
    return {
        "train_log_probs": tolist(train),
        "rollout_log_probs": tolist(rollout),
        "mask": tolist(MASK),
        "tis_cap": 2.0,
        "tis": tolist(tis),
        "bounds": [lo, hi],
        "mis_token": tolist(mis_tok),
        "mis_sequence": tolist(mis_seq),
        "geo_bounds": [glo, ghi],
        "mis_geometric": tolist(mis_geo),
        "veto": 1e-4,
        "mis_token_veto": tolist(mis_tok_veto),
        "metrics": metrics,
    }


# ---------------------------------------------------------------- beyond RL, overlong, eval
def beyond_fixture():
    logp = LOGP.clone().requires_grad_(True)
    sft = agg(-logp, MASK, "token-mean")
    sft.backward()
    P = 5
    pc, pr = randn(P, scale=4.0) - 20, randn(P, scale=4.0) - 22
    rc, rr = f32(pc + randn(P)), f32(pr + randn(P))
    pc[0], rc[0] = -10.0, -60.0  # large margin: exercises the stable softplus
    a = pc.clone().requires_grad_(True)
    b = pr.clone().requires_grad_(True)
    beta = 0.1
    chosen = beta * (a - rc)
    rejected = beta * (b - rr)
    dpo = -torch.nn.functional.logsigmoid(chosen - rejected).mean()
    dpo.backward()
    teacher = f32(LOGP + randn(B, T, scale=0.5))
    distill = -1.0 * (LOGP - teacher) * MASK
    return {
        "log_probs": tolist(LOGP),
        "mask": tolist(MASK),
        "sft_loss": sft.item(),
        "sft_grad": tolist(logp.grad),
        "sequence_log_probs": tolist((LOGP * MASK).sum(-1)),
        "dpo": {
            "beta": beta,
            "policy_chosen": tolist(pc),
            "policy_rejected": tolist(pr),
            "ref_chosen": tolist(rc),
            "ref_rejected": tolist(rr),
            "loss": dpo.item(),
            "grad_chosen": tolist(a.grad),
            "grad_rejected": tolist(b.grad),
            "reward_accuracy": (chosen > rejected).double().mean().item(),
            "margin": (chosen - rejected).mean().item(),
        },
        "teacher_log_probs": tolist(teacher),
        "distill_coef": 1.0,
        "distill_advantages": tolist(distill),
    }


def eval_fixture():
    cases = []
    for n, c, k in [(1, 0, 1), (1, 1, 1), (5, 2, 1), (5, 2, 3), (10, 3, 8), (10, 0, 5), (200, 13, 1), (200, 13, 10),
                    (200, 13, 100), (200, 199, 150), (20, 20, 7), (50, 1, 50), (7, 4, 4)]:
        at = 1.0 - math.comb(n - c, k) / math.comb(n, k)
        hat = math.comb(c, k) / math.comb(n, k)
        cases.append({"n": n, "c": c, "k": k, "pass_at_k": at, "pass_hat_k": hat})
    overlong = []
    for length in (0, 100, 128, 129, 150, 160, 161, 1000):
        L, cache = 160, 32
        if length <= L - cache:
            v = 0.0
        elif length <= L:
            v = ((L - cache) - length) / cache
        else:
            v = -1.0
        overlong.append({"len": length, "max_len": L, "cache_len": cache, "penalty": v})
    return {"pass": cases, "overlong": overlong}


# ---------------------------------------------------------------- Clip-Cov, KL-Cov, GKD
# Own generator, so adding these leaves every other fixture byte-identical.
GEN_COV = torch.Generator().manual_seed(20251130)


def token_cov(logp, adv, mask):
    """ALGORITHMS.md §12 token covariance, means over valid tokens of the batch (verl)."""
    valid = mask > 0
    lp = logp.detach()
    return (lp - lp[valid].mean()) * (adv - adv[valid].mean())


def clip_cov_per_token(logp, cfg):
    """Clip-Cov with r·N >= #candidates, so every in-range unclipped token is dropped."""
    low, high = cfg["clip_low"], cfg["clip_high"]
    ratio = torch.exp(torch.clamp(logp - OLD, -20, 20))
    l1 = -ADV * ratio
    l2 = -ADV * torch.clamp(ratio, 1 - low, 1 + high)
    pt = torch.maximum(l1, l2)
    cov = token_cov(logp, ADV, MASK)
    cand = (MASK > 0) & (cov >= cfg["cov_low"]) & (cov <= cfg["cov_high"]) & ~(l2 > l1)
    take = math.floor(cfg["clip_cov_ratio"] * MASK.sum().item())
    assert take >= int(cand.sum()) or take == 0, "fixture must select every candidate"
    if take == 0:
        cand = torch.zeros_like(cand)
    d = pg_diag(ratio.detach(), ADV, MASK, low, high, l1.detach(), l2.detach())
    d["cov_selected"] = float(cand.sum())
    return pt * (~cand).double(), d


def kl_cov_per_token(logp, cfg):
    ratio = torch.exp(torch.clamp(logp - OLD, -20, 20))
    pt = -ADV * ratio
    cov = token_cov(logp, ADV, MASK)
    valid = (MASK > 0).flatten()
    idx = torch.nonzero(valid).flatten()
    take = math.floor(cfg["kl_cov_ratio"] * len(idx))
    top = idx[torch.topk(cov.flatten()[idx], take).indices] if take > 0 else idx[:0]
    sel = torch.zeros(B * T)
    sel[top] = 1.0
    sel = sel.view(B, T)
    pt = pt + cfg["kl_coef"] * (logp - OLD).abs() * sel
    d = pg_diag(ratio.detach(), ADV, MASK, None, None)
    d["cov_selected"] = float(take)
    return pt, d


def gkd_jsd(student, teacher, beta, temperature):
    """TRL GKDTrainer.generalized_jsd_loss, per position (no reduction)."""
    F = torch.nn.functional
    s = F.log_softmax(student / temperature, dim=-1)
    t = F.log_softmax(teacher / temperature, dim=-1)
    if beta == 0:
        jsd = F.kl_div(s, t, reduction="none", log_target=True)
    elif beta == 1:
        jsd = F.kl_div(t, s, reduction="none", log_target=True)
    else:
        b = torch.tensor(beta)
        m = torch.logsumexp(torch.stack([s + torch.log(1 - b), t + torch.log(b)]), dim=0)
        jsd = b * F.kl_div(m, t, reduction="none", log_target=True) + (1 - b) * F.kl_div(
            m, s, reduction="none", log_target=True
        )
    return jsd.sum(-1)


def cov_gkd_fixture():
    cases = []
    configs = [
        {"kind": "clip-cov", "clip_low": 0.2, "clip_high": 0.28, "clip_cov_ratio": 1.0, "cov_low": 0.3,
         "cov_high": 5.0, "seed": 7},
        {"kind": "clip-cov", "clip_low": 0.2, "clip_high": 0.2, "clip_cov_ratio": 0.0, "cov_low": 1.0,
         "cov_high": 5.0, "seed": 0},
        {"kind": "kl-cov", "kl_cov_ratio": 0.2, "kl_coef": 1.0},
        {"kind": "kl-cov", "kl_cov_ratio": 0.002, "kl_coef": 1.0},
    ]
    for cfg in configs:
        for mode in ("token-mean", "seq-mean-token-mean"):
            logp = LOGP.clone().requires_grad_(True)
            fn = clip_cov_per_token if cfg["kind"] == "clip-cov" else kl_cov_per_token
            pt, diag = fn(logp, cfg)
            loss = agg(pt, MASK, mode)
            loss.backward()
            cases.append({"loss": cfg, "agg": mode, "value": loss.item(), "grad": tolist(logp.grad),
                          "diagnostics": diag})
    gb, gt, gv = 3, 4, 7
    student = f32(torch.randn(gb, gt, gv, generator=GEN_COV) * 2.0)
    teacher = f32(student + torch.randn(gb, gt, gv, generator=GEN_COV) * 1.5)
    gmask = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 0, 0]], dtype=torch.float64)
    gkd = []
    for beta in (0.0, 0.1, 0.5, 1.0):
        for temperature in (1.0, 0.9):
            for mode in ("token-mean", "seq-mean-token-mean"):
                st = student.clone().requires_grad_(True)
                per = gkd_jsd(st, teacher, beta, temperature)
                loss = agg(per, gmask, mode)
                loss.backward()
                gkd.append({"beta": beta, "temperature": temperature, "agg": mode, "per_token": tolist(per),
                            "value": loss.item(), "grad": tolist(st.grad)})
    return {
        "log_probs": tolist(LOGP),
        "old_log_probs": tolist(OLD),
        "advantages": tolist(ADV),
        "mask": tolist(MASK),
        "cases": cases,
        "gkd": {"student_logits": tolist(student), "teacher_logits": tolist(teacher), "mask": tolist(gmask),
                "cases": gkd},
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    fixtures = {
        "policy_loss": policy_fixture(),
        "returns": returns_fixture(),
        "advantages": advantages_fixture(),
        "kl_entropy": kl_entropy_fixture(),
        "offpolicy": offpolicy_fixture(),
        "beyond": beyond_fixture(),
        "eval": eval_fixture(),
        "cov_gkd": cov_gkd_fixture(),
    }
    for name, data in fixtures.items():
        path = os.path.join(OUT, f"{name}.json")
        with open(path, "w") as f:
            json.dump({"generated_by": GENERATED_BY, **data}, f, separators=(",", ":"))
        print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
