//! Policy losses that bound the update otherwise than by PPO's hard clip: SAPO (a soft,
//! temperature-controlled gate), GMPO (`geo_mean`, a geometric mean of clipped token ratios),
//! DPPO (a trust region on the sampled token's divergence, TV or binary KL), DRO (a quadratic
//! log-ratio penalty) and GPG (no bound at all) (verl `trainer/ppo/core_algos.py`,
//! `register_policy_loss`).
//!
//! Same place in the data flow and same contract as [`super::clip`] ([`super::contract`]):
//! `[B, T]` inputs, a minimised scalar, masked tokens get exactly zero gradient, optional
//! detached `token_weights` (verl `rollout_is_weights`) multiply the per-token loss. Each
//! returns verl's metrics under verl's keys in [`PolicyLossOutput::metrics`]. None of these is
//! in ALGORITHMS.md; each doc comment states its formula and its paper.
//!
//! Degenerate settings (tested as properties): at `π_θ = π_old`, the *gradients* of SAPO,
//! DPPO, GPG and DRO equal vanilla PG's (`−Â ∇log π_θ`, aggregated the same way), and GMPO
//! equals GSPO's sequence loss with a per-token clip that never binds.

use std::collections::BTreeMap;

use candle_core::Tensor;

use super::contract::{
    check, check_clip, finish, host_rows, masked_frac, positive, token_ratio, verl_metrics,
    with_metrics, PolicyLossDiagnostics, PolicyLossInputs, PolicyLossOutput,
};
use crate::aggregation::{AggMode, AggScale};
use crate::checks;
use crate::error::Result;

/// SAPO, soft adaptive policy optimisation (Gao et al. 2025, arXiv:2511.20347; verl
/// `compute_policy_loss_sapo`): a smooth, temperature-controlled gate replaces the hard clip,
///
/// `ℓ = −f(r)·Â`, `f(r) = σ(τ (r − 1))·4/τ`, `τ = τ_pos` if `Â > 0` else `τ_neg`,
/// `r = exp(clamp(log π_θ − log π_old, ±20))`.
///
/// `f'(1) = 1`, so at `r = 1` the gradient is PG's; the gate decays the gradient of tokens far
/// off-policy (faster for negative advantages when `τ_neg > τ_pos`). **The aggregation mode is
/// ignored**: like verl, SAPO always aggregates with `seq-mean-token-mean` (the `scale`'s
/// global-batch counts still apply).
pub fn sapo_loss(
    x: &PolicyLossInputs<'_>,
    tau_pos: f64,
    tau_neg: f64,
    scale: &AggScale,
) -> Result<PolicyLossOutput> {
    const F: &str = "sapo_loss";
    let c = check(F, x)?;
    positive(F, "tau_pos", tau_pos)?;
    positive(F, "tau_neg", tau_neg)?;
    let ratio = token_ratio(x.log_probs, x.old_log_probs)?;
    let adv = x.advantages.detach();
    let pos = adv.gt(0.0)?;
    // σ(τ(r − 1))·4/τ, with σ(x) = 1/(1 + e^{−x}) from differentiable primitives.
    let gate = |tau: f64| -> Result<Tensor> {
        let e = ratio.affine(-tau, tau)?.exp()?;
        Ok(((e + 1.0)?.recip()? * (4.0 / tau))?)
    };
    let gates = pos.where_cond(&gate(tau_pos)?, &gate(tau_neg)?)?;
    let per_token = gates.mul(&adv)?.neg()?;
    let out = finish(
        x,
        &c,
        per_token,
        &ratio,
        PolicyLossDiagnostics::default(),
        AggMode::SeqMeanTokenMean,
        scale,
    )?;
    let kl = out.diagnostics.approx_kl;
    Ok(with_metrics(out, verl_metrics(0.0, kl, 0.0)))
}

/// GMPO, geometric-mean policy optimisation (Zhao et al. 2025, arXiv:2507.20673; verl
/// `compute_policy_loss_geo_mean`, loss mode `geo_mean`): per-token log-ratios clipped on the
/// side the advantage pushes, then one geometric-mean ratio per sequence,
///
/// `d_t = log π_θ − log π_old` (no ±20 clamp, as in verl), `d̃_t = min(d_t, ε_high)` if
/// `Â_t > 0`, `max(d_t, −ε_low)` if `Â_t < 0`, `0` if `Â_t = 0` (verl's `sgn·min(sgn·d,
/// sgn·clamp(d))`); `s_i = exp(Σ_t m d̃ / (|o_i| + 1e-8))`, `Â_i = Σ_t m Â / (|o_i| + 1e-8)`,
/// `ℓ_i = −Â_i s_i · w_i` with `w_i = exp(Σ_t m log(w_t + 1e-10) / (|o_i| + 1e-8))` the
/// geometric mean of `token_weights`, and `loss = (1/B) Σ_i ℓ_i` over **all** `B` rows.
///
/// **The aggregation mode and `AggScale` are ignored**, as in verl (a plain mean over the
/// batch's sequences, fully masked rows included). `per_token` holds `ℓ_i` on every valid
/// token. verl's `pg_clipfrac` counts clipped tokens with `Â > 0`, `pg_clipfrac_lower` those
/// with `Â < 0`.
pub fn geo_mean_loss(
    x: &PolicyLossInputs<'_>,
    clip_low: f64,
    clip_high: f64,
) -> Result<PolicyLossOutput> {
    const F: &str = "geo_mean_loss";
    let c = check(F, x)?;
    check_clip(F, clip_low, clip_high)?;
    let (lp, old, a) = host_rows(x)?;
    let (b, n) = x.log_probs.dims2()?;
    let d = x.log_probs.sub(&x.old_log_probs.detach())?;
    let mut up = vec![vec![0.0f32; n]; b];
    let mut down = vec![vec![0.0f32; n]; b];
    let mut zero = vec![vec![0.0f32; n]; b];
    for i in 0..b {
        for t in 0..n {
            let dv = f64::from(lp[i][t]) - f64::from(old[i][t]);
            let valid = c.mask_rows[i][t] > 0.0;
            up[i][t] = f32::from(u8::from(valid && a[i][t] > 0.0 && dv > clip_high));
            down[i][t] = f32::from(u8::from(valid && a[i][t] < 0.0 && dv < -clip_low));
            zero[i][t] = f32::from(u8::from(a[i][t] == 0.0 || c.mask_rows[i][t] == 0.0));
        }
    }
    let cond = |r: &[Vec<f32>]| -> Result<Tensor> { Ok(checks::from_rows(r, &d)?.ne(0.0)?) };
    let hi = d.ones_like()?.affine(clip_high, 0.0)?;
    let lo = d.ones_like()?.affine(-clip_low, 0.0)?;
    let d_used = cond(&zero)?.where_cond(&d.zeros_like()?, &d)?;
    let d_used = cond(&up)?.where_cond(&hi, &d_used)?;
    let d_used = cond(&down)?.where_cond(&lo, &d_used)?;
    let inv: Vec<f32> = c
        .mask_rows
        .iter()
        .map(|r| (1.0 / (f64::from(r.iter().sum::<f32>()) + 1e-8)) as f32)
        .collect();
    let inv_col = checks::column(&inv, &d)?;
    let seq_ratio = d_used.sum_keepdim(1)?.mul(&inv_col)?.exp()?;
    let mut seq_adv = vec![0.0f32; b];
    let mut seq_w = vec![1.0f32; b];
    let w_rows = match x.token_weights {
        Some(w) => Some(checks::rows(w)?),
        None => None,
    };
    for i in 0..b {
        let len: f64 = c.mask_rows[i].iter().map(|&m| f64::from(m)).sum();
        let s: f64 = (0..n)
            .map(|t| f64::from(a[i][t]) * f64::from(c.mask_rows[i][t]))
            .sum();
        seq_adv[i] = (s / (len + 1e-8)) as f32;
        if let Some(w) = &w_rows {
            let lw: f64 = (0..n)
                .map(|t| (f64::from(w[i][t]) + 1e-10).ln() * f64::from(c.mask_rows[i][t]))
                .sum();
            seq_w[i] = (lw / (len + 1e-8)).exp() as f32;
        }
    }
    let seq_loss = seq_ratio
        .mul(&checks::column(&seq_adv, &d)?)?
        .neg()?
        .mul(&checks::column(&seq_w, &d)?)?;
    let loss = (seq_loss.sum_all()? / b.max(1) as f64)?;
    let per_token = x.mask.broadcast_mul(&seq_loss)?;
    let clipped = |i: usize, t: usize| {
        let dv = f64::from(lp[i][t]) - f64::from(old[i][t]);
        dv > clip_high || dv < -clip_low
    };
    let upper = masked_frac(&c.mask_rows, |i, t| clipped(i, t) && a[i][t] > 0.0);
    let lower = masked_frac(&c.mask_rows, |i, t| clipped(i, t) && a[i][t] < 0.0);
    let ratio = token_ratio(x.log_probs, x.old_log_probs)?;
    // `finish` aggregates `per_token`; replace its loss with GMPO's own mean.
    let mut out = finish(
        &PolicyLossInputs {
            token_weights: None,
            ..*x
        },
        &c,
        per_token,
        &ratio,
        PolicyLossDiagnostics {
            clipfrac: upper + lower,
            clipfrac_upper: upper,
            clipfrac_lower: lower,
            ..Default::default()
        },
        AggMode::TokenMean,
        &AggScale::default(),
    )?;
    out.loss = loss;
    let kl = out.diagnostics.approx_kl;
    Ok(with_metrics(out, verl_metrics(upper, kl, lower)))
}

/// Which divergence bounds the DPPO trust region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DppoDivergence {
    /// Total variation of the sampled token's probability: `π_θ − π_old` (verl `dppo_tv`).
    Tv,
    /// Binary KL of the sampled token's Bernoulli: `p_old log(p_old/p) + (1 − p_old)
    /// log((1 − p_old + 1e-8)/(1 − p + 1e-8))` (verl `dppo_kl`).
    BinaryKl,
}

/// DPPO, divergence-based PPO (arXiv:2602.04879, "DPPO-Binary-TV / -KL"; verl
/// `compute_policy_loss_dppo_tv` / `compute_policy_loss_dppo_kl`): a token keeps its
/// gradient only while the divergence between `π_θ` and `π_old` *on the sampled token*
/// stays inside the trust region on the side its advantage pushes; the PG term uses a
/// detached, truncated IS ratio (TIS instead of dual clip, paper §5.4):
///
/// `ℓ = −Â · sg(min(r, c)) · log π_θ · sg(valid)`, `r = exp(clamp(log π_θ − log π_old, ±20))`,
/// - TV: `valid = (p − p_old ≤ δ_high)` if `Â > 0`, else `(p − p_old ≥ −δ_low)`;
/// - binary KL: `valid = (KL_b ≤ δ_high ∨ p ≤ p_old)` if `Â > 0`, else `(KL_b ≤ δ_low ∨ p ≥ p_old)`,
///
/// `p = π_θ(a_t)`, `p_old = π_old(a_t)`. `clip_low`/`clip_high` are the divergence thresholds
/// δ (verl reads them from `clip_ratio_low/high`), `clip_ratio_c` is `c` (verl default 20).
/// Metrics: `pg_clipfrac = mean(1 − valid)`, `pg_clipfrac_lower = mean(1[r > c]·valid)`.
pub fn dppo_loss(
    x: &PolicyLossInputs<'_>,
    divergence: DppoDivergence,
    clip_low: f64,
    clip_high: f64,
    clip_ratio_c: f64,
    agg: AggMode,
    scale: &AggScale,
) -> Result<PolicyLossOutput> {
    const F: &str = "dppo_loss";
    let c = check(F, x)?;
    check_clip(F, clip_low, clip_high)?;
    positive(F, "clip_ratio_c", clip_ratio_c)?;
    let (lp, old, a) = host_rows(x)?;
    let (b, n) = x.log_probs.dims2()?;
    let ratio = token_ratio(x.log_probs, x.old_log_probs)?;
    let r = checks::rows(&ratio)?;
    let mut valid = vec![vec![0.0f32; n]; b];
    for i in 0..b {
        for t in 0..n {
            let (l, o) = (f64::from(lp[i][t]), f64::from(old[i][t]));
            let (p, po) = (l.exp(), o.exp());
            let ok = match divergence {
                DppoDivergence::Tv => {
                    if a[i][t] > 0.0 {
                        p - po <= clip_high
                    } else {
                        p - po >= -clip_low
                    }
                }
                DppoDivergence::BinaryKl => {
                    let kl =
                        po * (o - l) + (1.0 - po) * ((1.0 - po + 1e-8) / (1.0 - p + 1e-8)).ln();
                    if a[i][t] > 0.0 {
                        kl <= clip_high || p <= po
                    } else {
                        kl <= clip_low || p >= po
                    }
                }
            };
            valid[i][t] = f32::from(u8::from(ok));
        }
    }
    let valid_t = checks::from_rows(&valid, x.log_probs)?;
    let truncated = ratio.minimum(clip_ratio_c)?.detach();
    let per_token = x
        .advantages
        .detach()
        .mul(&truncated)?
        .mul(x.log_probs)?
        .mul(&valid_t)?
        .neg()?;
    let clipfrac = masked_frac(&c.mask_rows, |i, t| valid[i][t] == 0.0);
    let lower = masked_frac(&c.mask_rows, |i, t| {
        f64::from(r[i][t]) > clip_ratio_c && valid[i][t] > 0.0
    });
    let out = finish(
        x,
        &c,
        per_token,
        &ratio,
        PolicyLossDiagnostics {
            clipfrac,
            ..Default::default()
        },
        agg,
        scale,
    )?;
    let kl = out.diagnostics.approx_kl;
    Ok(with_metrics(out, verl_metrics(clipfrac, kl, lower)))
}

/// GPG loss (Chu et al. 2025, arXiv:2504.02546; verl `compute_policy_loss_gpg`): plain
/// REINFORCE on the log-prob, `ℓ = −Â · log π_θ`, no ratio and no clip. Pair it with
/// [`crate::advantages::group::gpg_advantages`]. verl returns no metrics for it; neither does this.
pub fn gpg_loss(
    x: &PolicyLossInputs<'_>,
    agg: AggMode,
    scale: &AggScale,
) -> Result<PolicyLossOutput> {
    let c = check("gpg_loss", x)?;
    let ratio = token_ratio(x.log_probs, x.old_log_probs)?;
    let per_token = x.log_probs.mul(&x.advantages.detach())?.neg()?;
    finish(
        x,
        &c,
        per_token,
        &ratio,
        PolicyLossDiagnostics::default(),
        agg,
        scale,
    )
}

/// DRO, direct reward optimisation (Richemond et al. 2024, "Offline Regularised
/// Reinforcement Learning for LLM Alignment", arXiv:2405.19107; verl
/// `compute_policy_loss_dro`): PG on the log-prob with a quadratic penalty on the log-ratio,
/// `ℓ = −(Â · log π_θ − ½ β (log π_θ − log π_old)²)`, β = `dro_beta` > 0. Metric: `ppo_kl`.
pub fn dro_loss(
    x: &PolicyLossInputs<'_>,
    dro_beta: f64,
    agg: AggMode,
    scale: &AggScale,
) -> Result<PolicyLossOutput> {
    const F: &str = "dro_loss";
    let c = check(F, x)?;
    positive(F, "dro_beta", dro_beta)?;
    let ratio = token_ratio(x.log_probs, x.old_log_probs)?;
    let log_ratio = x.log_probs.sub(&x.old_log_probs.detach())?;
    let per_token = x
        .log_probs
        .mul(&x.advantages.detach())?
        .sub(&(log_ratio.sqr()? * (0.5 * dro_beta))?)?
        .neg()?;
    let out = finish(
        x,
        &c,
        per_token,
        &ratio,
        PolicyLossDiagnostics::default(),
        agg,
        scale,
    )?;
    let kl = out.diagnostics.approx_kl;
    Ok(with_metrics(
        out,
        BTreeMap::from([("actor/ppo_kl".to_string(), f64::from(kl))]),
    ))
}
