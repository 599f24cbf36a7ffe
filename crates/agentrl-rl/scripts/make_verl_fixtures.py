#!/usr/bin/env python3
"""Fixtures for agentrl-rl made by verl's *own* functions (verl 0.9.1 from PyPI).

Unlike `make_fixtures.py` (an independent re-derivation from ALGORITHMS.md), this script
imports `verl.trainer.ppo.core_algos`, `verl.trainer.ppo.rollout_corr_helper` and
`verl.utils.torch_functional` and records what they return, values *and* gradients, for the
estimators, losses, KL variants, aggregation modes and rollout-correction options of issue 13.
Every JSON written under `crates/agentrl-rl/tests/fixtures/verl_*.json` records the verl,
torch and Python versions it was made with. CI only reads the JSON.

Regenerate (from the workspace root):

    python3 -m venv /work/venv-verl
    /work/venv-verl/bin/pip install torch numpy tensordict omegaconf
    /work/venv-verl/bin/pip install --no-deps verl==0.9.1
    /work/venv-verl/bin/python crates/agentrl-rl/scripts/make_verl_fixtures.py

`ray`, `transformers` and the other heavy imports verl's modules pull in are stubbed (fake
modules in `sys.modules`): none of the functions used here touches them.

Inputs are float32-representable and the references are computed in float64, so the Rust
side (f32) is compared at 1e-5 relative with a small absolute floor.
"""
import importlib.abc
import importlib.machinery
import json
import os
import platform
import sys
import types

# ------------------------------------------------------------------ stub heavy imports
STUB_ROOTS = {
    "ray",
    "transformers",
    "peft",
    "vllm",
    "sglang",
    "codetiming",
    "datasets",
    "pylatexenc",
    "wandb",
    "hydra",
    "accelerate",
    "flash_attn",
    "liger_kernel",
    "torchdata",
    "transfer_queue",
    "pyarrow",
    "pandas",
    "safetensors",
    "huggingface_hub",
    "tokenizers",
    "qwen_vl_utils",
    "mathruler",
    "math_verify",
}


class _Anything:
    """Callable, subscriptable, attribute-rich placeholder (also usable as a base class)."""

    def __init__(self, *a, **k):
        pass

    def __call__(self, *a, **k):
        if len(a) == 1 and callable(a[0]) and not k:
            return a[0]  # used as a decorator
        return _Anything()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __getitem__(self, k):
        return _Anything()

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        # A fresh class per name: works as a decorator, base class, type hint or value.
        return type(name, (_Anything,), {})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in STUB_ROOTS:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _StubModule(spec.name)
        m.__path__ = []
        m.__version__ = "0.0.0-stub"
        return m

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _StubFinder())

import numpy as np  # noqa: E402
import torch  # noqa: E402

REAL = {"torch", "numpy", "tensordict", "omegaconf", "packaging", "yaml", "verl"}


def import_verl():
    """Imports verl's math modules, stubbing any other missing third-party package."""
    import importlib

    for _ in range(50):
        try:
            verl = importlib.import_module("verl")
            ca = importlib.import_module("verl.trainer.ppo.core_algos")
            rc = importlib.import_module("verl.trainer.ppo.rollout_corr_helper")
            vf = importlib.import_module("verl.utils.torch_functional")
            return verl, ca, rc, vf
        except ModuleNotFoundError as e:
            root = (e.name or "").split(".")[0]
            if not root or root in REAL or root in STUB_ROOTS:
                raise
            STUB_ROOTS.add(root)
            for k in [k for k in sys.modules if k == "verl" or k.startswith("verl.")]:
                del sys.modules[k]
    raise SystemExit("too many missing modules")


verl, ca, rc, vF = import_verl()

torch.set_default_dtype(torch.float64)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
GEN = torch.Generator().manual_seed(20260113)
VERSIONS = {
    "verl": getattr(verl, "__version__", "unknown"),
    "torch": torch.__version__,
    "python": platform.python_version(),
    "numpy": np.__version__,
    "stubbed_imports": sorted(STUB_ROOTS),
}


def f32(t):
    return t.to(torch.float32).to(torch.float64)


def randn(*shape, scale=1.0):
    return f32(torch.randn(*shape, generator=GEN) * scale)


def L(t):
    if isinstance(t, torch.Tensor):
        return t.detach().tolist()
    return t


def write(name, payload):
    payload = {"versions": VERSIONS, **payload}
    path = os.path.join(OUT, f"{name}.json")
    with open(path, "w") as fh:
        json.dump(payload, fh, separators=(",", ":"))
    print(f"wrote {path}")


class Cfg(dict):
    """Attribute + `.get` access, like verl's dataclass configs / DictConfig."""

    def __getattr__(self, k):
        try:
            return self[k]
        except KeyError as e:
            raise AttributeError(k) from e


# verl asserts isinstance(config, ActorConfig) / not isinstance(config, AlgoConfig).
ca.ActorConfig = Cfg


class _NotAlgo:
    pass


ca.AlgoConfig = _NotAlgo


def actor_cfg(**kw):
    base = dict(
        clip_ratio=0.2,
        clip_ratio_low=None,
        clip_ratio_high=None,
        clip_ratio_c=3.0,
        global_batch_info={},
        tau_pos=1.0,
        tau_neg=1.05,
        policy_loss=Cfg(dro_beta=None),
    )
    base.update(kw)
    return Cfg(base)


# ------------------------------------------------------------------ shared inputs
B, T = 8, 10
MASK = torch.tensor(
    [
        [1, 1, 1, 0, 0, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
        [1, 1, 0, 0, 0, 1, 0, 0, 0, 0],
        [1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0, 1, 1, 0],
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 1, 0, 0, 0, 0],
        [1, 0, 1, 0, 1, 0, 1, 0, 1, 0],
    ],
    dtype=torch.float64,
)
OLD = f32(-torch.rand(B, T, generator=GEN) * 3.0 - 0.05)
DELTA = randn(B, T, scale=0.25)
DELTA[0, 1], DELTA[1, 4], DELTA[2, 5], DELTA[4, 7], DELTA[6, 2], DELTA[7, 4] = 1.5, -1.2, 0.9, -0.8, 0.6, -0.45
LOGP = f32(torch.clamp(OLD + DELTA, max=-1e-3))
ADV = randn(B, T)
ADV[1, 3] = 0.0
WEIGHTS = f32(torch.rand(B, T, generator=GEN) * 1.5 + 0.25)
ROLLOUT = f32(OLD + randn(B, T, scale=0.2))
ROLLOUT[1, 2] = OLD[1, 2] - 1.0
ROLLOUT[4, 1] = OLD[4, 1] + 0.9


def grad_of(fn, x):
    x = x.clone().requires_grad_(True)
    out = fn(x)
    loss = out[0] if isinstance(out, tuple) else out
    loss.backward()
    return out, x.grad


# ------------------------------------------------------------------ aggregation + value loss
def aggregation():
    loss_mat = randn(B, T)
    settings = [
        dict(dp_size=1),
        dict(dp_size=1, batch_num_tokens=71, global_batch_size=13, loss_scale_factor=24),
        dict(dp_size=4, batch_num_tokens=230, global_batch_size=29, loss_scale_factor=16),
    ]
    modes = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
    cases = []
    for s in settings:
        for mode in modes:
            out, g = grad_of(lambda x: ca.agg_loss(x, MASK, mode, **s), loss_mat)
            cases.append({"mode": mode, "global": s, "value": out.item(), "grad": L(g)})
    values = randn(B, T)
    old_values = f32(values + randn(B, T, scale=0.6))
    returns = randn(B, T)
    vcases = []
    for s in settings:
        for mode in modes:
            def vl(v):
                return ca.compute_value_loss(v, returns, old_values, MASK, 0.5, mode, **s)

            (loss, clipfrac), g = grad_of(vl, values)
            vcases.append(
                {"mode": mode, "global": s, "value": loss.item(), "clipfrac": clipfrac.item(), "grad": L(g)}
            )
    var_in = randn(B, T, scale=2.0)
    write(
        "verl_aggregation",
        {
            "mask": L(MASK),
            "loss_mat": L(loss_mat),
            "cases": cases,
            "values": L(values),
            "old_values": L(old_values),
            "returns": L(returns),
            "value_cases": vcases,
            "masked_var_input": L(var_in),
            "masked_var_unbiased": vF.masked_var(var_in, MASK, unbiased=True).item(),
            "masked_var_biased": vF.masked_var(var_in, MASK, unbiased=False).item(),
        },
    )


# ------------------------------------------------------------------ advantages
def advantages():
    ids = np.array([5, 2, 5, 9, 2, 5, 7, 7])
    # Row 5 has no valid token; its reward is 0 (agentrl reads outcomes as the *masked* sum of
    # the token rewards, verl sums every position: a documented difference).
    outcome = torch.tensor([1.0, 0.0, 0.3, 0.7, 1.0, 0.0, 0.25, -0.5])
    outcome = f32(outcome)
    last = [int(torch.nonzero(MASK[i]).max()) if MASK[i].sum() > 0 else T - 1 for i in range(B)]
    tok_rewards = torch.zeros(B, T)
    for i in range(B):
        tok_rewards[i, last[i]] = outcome[i]
    dense = f32(randn(B, T, scale=0.1) * MASK)
    for i in range(B):
        dense[i, last[i]] += outcome[i]
    dense = f32(dense)
    out = {"mask": L(MASK), "group_ids": ids.tolist(), "token_rewards": L(tok_rewards), "dense_rewards": L(dense)}
    out["opo"] = L(ca.compute_opo_outcome_advantage(tok_rewards, MASK, ids)[0])
    out["gpg"] = L(ca.compute_gpg_outcome_advantage(tok_rewards, MASK, ids)[0])
    out["gpg_f_norm"] = 2.5
    out["gpg_f2"] = L(ca.compute_gpg_outcome_advantage(tok_rewards, MASK, ids, f_norm=2.5)[0])
    baselines = f32(torch.tensor([0.5, 0.1, 0.2, 0.0, 0.9, -0.2, 0.3, 0.05]))
    adv, ret = ca.compute_remax_outcome_advantage(dense, baselines, MASK)
    out["remax_baselines"] = L(baselines)
    out["remax_advantages"] = L(adv)
    out["remax_returns"] = L(ret)
    # GDPO: two components placed by verl's own code path (gdpo_reward_keys).
    comp_a = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0], dtype=np.float32)
    comp_b = np.array([0.2, 0.9, 0.4, 0.1, 0.5, 0.75, 0.6, 0.3], dtype=np.float32)
    P = 3
    attn = torch.zeros(B, P + T, dtype=torch.long)
    attn[:, :P] = 1
    for i in range(B):
        attn[i, P : P + last[i] + 1] = 1
    batch = {"prompts": torch.zeros(B, P), "attention_mask": attn}
    ntb = {"format_reward": comp_a, "accuracy_reward": comp_b}
    gd = {}
    for norm in (True, False):
        for weights in (None, [1.0, 0.5]):
            cfg = Cfg(gdpo_reward_keys=["format_reward", "accuracy_reward"])
            if weights is not None:
                cfg["gdpo_reward_weights"] = weights
            a, _ = ca.compute_gdpo_outcome_advantage(
                tok_rewards, MASK, ids, norm_adv_by_std_in_grpo=norm, config=cfg, non_tensor_batch=ntb, batch=batch
            )
            gd[f"{norm}_{weights is not None}"] = L(a)
    out["gdpo_components"] = [comp_a.tolist(), comp_b.tolist()]
    out["gdpo_weights"] = [1.0, 0.5]
    out["gdpo"] = gd
    # pass@k: every group needs >= 2 members, no ties at the top.
    pk_ids = np.array([0, 0, 1, 1, 1, 2, 2, 2])
    pk_rewards = torch.zeros(B, T)
    pk_out = f32(torch.tensor([1.0, 0.2, 0.4, 0.9, 0.1, 0.0, 0.8, 0.7]))  # row 5: no valid token
    for i in range(B):
        pk_rewards[i, last[i]] = pk_out[i]
    out["passk_group_ids"] = pk_ids.tolist()
    out["passk_token_rewards"] = L(pk_rewards)
    out["passk"] = {
        str(norm): L(
            ca.compute_grpo_passk_outcome_advantage(
                pk_rewards, MASK, pk_ids, config=Cfg(norm_adv_by_std_in_grpo=norm)
            )[0]
        )
        for norm in (True, False)
    }
    # OTB / TIR-OTB on dense rewards, Σπ² from random logits.
    logits = randn(B, T, 6, scale=1.5)
    spi2 = vF.calculate_sum_pi_squared_from_logits(logits)
    otb_old = torch.log_softmax(logits, dim=-1)[..., 0]
    otb_ids = np.array([1, 1, 1, 2, 2, 3, 1, 2])
    is_w = f32(torch.rand(B, T, generator=GEN) * 1.5 + 0.3)
    otb = {}
    for name, fn in (
        ("otb", ca.compute_optimal_token_baseline_advantage),
        ("tir", ca.compute_multi_turn_optimal_token_baseline_advantage),
    ):
        for tail in (True, False):
            for use_is in (False, True):
                a, r = fn(
                    dense, MASK, otb_ids, otb_old, spi2, rollout_is_weights=is_w if use_is else None,
                    handle_zero_tail=tail,
                )
                otb[f"{name}_{tail}_{use_is}"] = {"advantages": L(a), "returns": L(r)}
    out["otb_logits"] = L(logits)
    out["sum_pi_squared"] = L(spi2)
    out["otb_old_log_probs"] = L(otb_old)
    out["otb_group_ids"] = otb_ids.tolist()
    out["otb_is_weights"] = L(is_w)
    out["otb"] = otb
    write("verl_advantages", out)


# ------------------------------------------------------------------ policy losses
MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "token-sum"]


def policy_losses():
    gb = dict(dp_size=2, batch_num_tokens=80, global_batch_size=12, loss_scale_factor=16)
    losses = [
        ("sapo", dict(tau_pos=1.0, tau_neg=1.05), {"kind": "sapo", "tau_pos": 1.0, "tau_neg": 1.05}),
        ("sapo", dict(tau_pos=2.0, tau_neg=4.0), {"kind": "sapo", "tau_pos": 2.0, "tau_neg": 4.0}),
        ("geo_mean", dict(clip_ratio=0.4, clip_ratio_low=0.4, clip_ratio_high=0.4), {"kind": "geo_mean", "clip_low": 0.4, "clip_high": 0.4}),
        ("geo_mean", dict(clip_ratio=0.2, clip_ratio_low=0.1, clip_ratio_high=0.3), {"kind": "geo_mean", "clip_low": 0.1, "clip_high": 0.3}),
        ("dppo_tv", dict(clip_ratio=0.05, clip_ratio_low=0.05, clip_ratio_high=0.08, clip_ratio_c=2.0), {"kind": "dppo_tv", "clip_low": 0.05, "clip_high": 0.08, "clip_ratio_c": 2.0}),
        ("dppo_kl", dict(clip_ratio=0.02, clip_ratio_low=0.02, clip_ratio_high=0.03, clip_ratio_c=20.0), {"kind": "dppo_kl", "clip_low": 0.02, "clip_high": 0.03, "clip_ratio_c": 20.0}),
        ("gpg", dict(), {"kind": "gpg"}),
        ("dro", dict(policy_loss=Cfg(dro_beta=0.7)), {"kind": "dro", "dro_beta": 0.7}),
    ]
    cases = []
    for name, kw, rust in losses:
        fn = ca.get_policy_loss_fn(name)
        modes = ["token-mean"] if name in ("sapo", "geo_mean") else MODES
        for mode in modes:
            for weighted in (False, True):
                for glob in (False, True):
                    if glob and weighted:
                        continue
                    cfg = actor_cfg(**kw)
                    cfg["global_batch_info"] = dict(gb) if glob else {}

                    def run(lp):
                        return fn(OLD, lp, ADV, MASK, mode, cfg, WEIGHTS if weighted else None)

                    (loss, metrics), g = grad_of(run, LOGP)
                    cases.append(
                        {
                            "loss": rust,
                            "agg": mode,
                            "weighted": weighted,
                            "global": cfg["global_batch_info"],
                            "value": loss.item(),
                            "grad": L(g),
                            "metrics": metrics,
                        }
                    )
    # losses agentrl already had, now in every mode (token-sum included) and with verl's
    # global-batch info: verl `vanilla` is PPO clip with dual clip, verl `gspo` is GSPO-token.
    existing = [
        ("vanilla", dict(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0), {"kind": "ppo-clip", "clip_low": 0.2, "clip_high": 0.28, "dual_clip": 3.0}),
        ("gspo", dict(clip_ratio_low=0.03, clip_ratio_high=0.04), {"kind": "gspo-token", "clip_low": 0.03, "clip_high": 0.04}),
        ("cispo", dict(clip_ratio_low=0.9, clip_ratio_high=0.28), {"kind": "cispo", "clip_low": 0.9, "clip_high": 0.28}),
    ]
    for name, kw, rust in existing:
        fn = ca.get_policy_loss_fn(name)
        for mode in MODES:
            for weighted, glob in ((False, False), (True, False), (False, True)):
                cfg = actor_cfg(**kw)
                cfg["global_batch_info"] = dict(gb) if glob else {}

                def run(lp):
                    return fn(OLD, lp, ADV, MASK, mode, cfg, WEIGHTS if weighted else None)

                (loss, metrics), g = grad_of(run, LOGP)
                cases.append(
                    {
                        "loss": rust,
                        "agg": mode,
                        "weighted": weighted,
                        "global": cfg["global_batch_info"],
                        "value": loss.item(),
                        "grad": L(g),
                        "metrics": None,
                    }
                )
    # bypass mode: old_log_probs are the rollout log-probs.
    bypass = []
    rcs = [
        dict(rollout_is="token", rollout_is_threshold=2.0),
        dict(rollout_is="sequence", rollout_is_threshold=5.0, rollout_rs="seq_mean_k3", rollout_rs_threshold=0.05),
        dict(rollout_is="token", rollout_is_threshold="0.5_2.0", rollout_rs="token_k1,seq_max_k2", rollout_rs_threshold="0.6_1.5,0.3"),
        dict(rollout_is=None, rollout_rs="token_k2", rollout_rs_threshold=0.08),
    ]
    for loss_type in ("ppo_clip", "reinforce"):
        for rcfg in rcs:
            for mode in ("token-mean", "seq-mean-token-sum"):
                full = dict(loss_type=loss_type, rollout_is_batch_normalize=False)
                full.update(rcfg)
                cfg = actor_cfg(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)
                cfg["policy_loss"] = Cfg(rollout_correction=Cfg(full))

                def run(lp):
                    return ca.compute_policy_loss_bypass_mode(ROLLOUT, lp, ADV, MASK, mode, cfg, None)

                (loss, metrics), g = grad_of(run, LOGP)
                rust_rc = {k: v for k, v in rcfg.items() if v is not None}
                bypass.append(
                    {
                        "loss": {
                            "kind": "bypass_mode",
                            "loss_type": loss_type,
                            "clip_low": 0.2,
                            "clip_high": 0.28,
                            "clip_ratio_c": 3.0,
                            "rollout_correction": rust_rc,
                        },
                        "agg": mode,
                        "value": loss.item(),
                        "grad": L(g),
                        "metrics": {k: float(v) for k, v in metrics.items()},
                    }
                )
    write(
        "verl_policy_losses",
        {
            "log_probs": L(LOGP),
            "old_log_probs": L(OLD),
            "rollout_log_probs": L(ROLLOUT),
            "advantages": L(ADV),
            "mask": L(MASK),
            "token_weights": L(WEIGHTS),
            "cases": cases,
            "bypass": bypass,
        },
    )


# ------------------------------------------------------------------ KL
def kl():
    ref = f32(LOGP + randn(B, T, scale=0.5))
    ref[0, 0] = LOGP[0, 0]  # log-ratio exactly 0: abs subgradient 0
    names = ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "k1+", "kl+", "abs+", "k2+", "k3+", "low_var_kl+"]
    cases = []
    for name in names:
        def run(lp):
            per = ca.kl_penalty(lp, ref, name)
            return ca.agg_loss(per, MASK, "token-mean"), per

        (loss, per), g = grad_of(run, LOGP)
        cases.append({"name": name, "per_token": L(per), "loss": loss.item(), "grad": L(g)})
    write("verl_kl", {"log_probs": L(LOGP), "ref_log_probs": L(ref), "mask": L(MASK), "cases": cases})


# ------------------------------------------------------------------ rollout correction
def rollout_correction():
    configs = [
        dict(rollout_is="token", rollout_is_threshold=2.0),
        dict(rollout_is="token", rollout_is_threshold=1.3, rollout_is_batch_normalize=True),
        dict(rollout_is="token", rollout_is_threshold="0.7_1.4"),
        dict(rollout_is="sequence", rollout_is_threshold=2.0),
        dict(rollout_is="sequence", rollout_is_threshold=3.0, rollout_is_batch_normalize=True),
        dict(rollout_is="sequence", rollout_is_threshold="0.3_3.0"),
    ]
    rs = [
        ("token_k1", "0.5_1.5"),
        ("token_k1", 1.6),
        ("token_k2", 0.05),
        ("token_k3", 0.04),
        ("seq_sum_k1", "0.5_1.5"),
        ("seq_sum_k2", 0.2),
        ("seq_sum_k3", 0.15),
        ("seq_mean_k1", "0.9_1.1"),
        ("seq_mean_k2", 0.03),
        ("seq_mean_k3", 0.02),
        ("seq_max_k2", 0.1),
        ("seq_max_k3", 0.08),
        ("token_k1,seq_mean_k3", "0.5_1.5,0.02"),
        ("token_k2,seq_max_k3,seq_sum_k1", 1.5),
        ("token_k3,token_k3,seq_mean_k1", "0.05,0.8_1.25"),
    ]
    for opt, th in rs:
        configs.append(dict(rollout_rs=opt, rollout_rs_threshold=th))
    configs.append(
        dict(rollout_is="sequence", rollout_is_threshold=2.0, rollout_rs="token_k1,seq_mean_k3", rollout_rs_threshold="0.5_1.5,0.02")
    )
    configs.append(dict(rollout_is="token", rollout_is_threshold="0.5_2.0", rollout_is_batch_normalize=True, rollout_rs="seq_max_k2", rollout_rs_threshold=0.1))
    cases = []
    for cfg in configs:
        full = dict(rollout_is=None, rollout_is_threshold=2.0, rollout_is_batch_normalize=False, rollout_rs=None, rollout_rs_threshold=None)
        full.update(cfg)
        proto, mask, metrics = rc.compute_rollout_correction_and_rejection_mask(
            old_log_prob=OLD, rollout_log_prob=ROLLOUT, response_mask=MASK, **full
        )
        w = proto.batch["rollout_is_weights"] if proto is not None else None
        cases.append(
            {
                "config": cfg,
                "weights": L(w) if w is not None else None,
                "mask": L(mask),
                "metrics": {k: float(v) for k, v in metrics.items()},
            }
        )
    bad = []
    for cfg in [
        dict(rollout_rs="token_k9", rollout_rs_threshold=1.0),
        dict(rollout_rs="token_k2", rollout_rs_threshold="0.1_0.2"),
        dict(rollout_rs="token_k1,seq_mean_k3", rollout_rs_threshold="0.5_1.5,0.02,0.3"),
        dict(rollout_rs="token_k1", rollout_rs_threshold="1.5_0.5"),
        dict(rollout_rs="token_k2", rollout_rs_threshold=None),
        dict(rollout_is="token", rollout_is_threshold="2.0_1.0"),
    ]:
        full = dict(rollout_is=None, rollout_is_threshold=2.0, rollout_is_batch_normalize=False, rollout_rs=None, rollout_rs_threshold=None)
        full.update(cfg)
        try:
            rc.compute_rollout_correction_and_rejection_mask(OLD, ROLLOUT, MASK, **full)
            raise SystemExit(f"verl accepted {cfg}")
        except (ValueError, TypeError):
            bad.append(cfg)
    write(
        "verl_rollout_corr",
        {
            "train_log_probs": L(OLD),
            "rollout_log_probs": L(ROLLOUT),
            "mask": L(MASK),
            "cases": cases,
            "rejected_configs": bad,
        },
    )


if __name__ == "__main__":
    aggregation()
    advantages()
    policy_losses()
    kl()
    rollout_correction()
