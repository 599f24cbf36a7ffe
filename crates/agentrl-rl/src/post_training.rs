//! Post-training losses, the ones that are not RL: masked SFT negative log-likelihood (SFT,
//! and RFT/RAFT/STaR on kept samples), DPO, GKD's full-vocabulary generalized JSD, and the
//! per-token reverse KL of on-policy distillation (ALGORITHMS.md §14–§15). The train crate's
//! `sft`, `rft`, `dpo` and `distill` recipes end here instead of in [`crate::policy_loss`].
//!
//! Data flow: token log-probs `[B, T]` from [`crate::entropy::token_log_probs`] plus the
//! assistant-token mask → [`sft_nll_loss`] (SFT, RFT/RAFT/STaR on kept samples); summed
//! sequence log-probs from [`sequence_log_probs`] for policy and reference on chosen/rejected
//! responses → [`dpo_loss`]; student and teacher log-probs of the student's sampled tokens →
//! [`distill_advantages`] → any policy loss of [`crate::policy_loss`]; student and teacher
//! logits `[B, T, V]` at the same positions → [`gkd_loss`].

use candle_core::Tensor;

use crate::aggregation::{aggregate, AggMode, AggScale};
use crate::checks;
use crate::error::{Result, RlError};

/// Masked SFT NLL `−Σ_t m_t log π(x_t) / Σ_t m_t` with `token-mean` (ALGORITHMS.md §14, "SFT
/// restricted to assistant tokens"); other aggregation modes are allowed.
pub fn sft_nll_loss(
    log_probs: &Tensor,
    mask: &Tensor,
    agg: AggMode,
    scale: &AggScale,
) -> Result<Tensor> {
    checks::dims2("sft_nll_loss", "log_probs", log_probs)?;
    aggregate(&log_probs.neg()?, mask, agg, scale)
}

/// `log π(y|x) = Σ_t m_t log π(y_t|…)`: `[B, T]` → `[B]`, differentiable.
pub fn sequence_log_probs(log_probs: &Tensor, mask: &Tensor) -> Result<Tensor> {
    const F: &str = "sequence_log_probs";
    let (b, n) = checks::dims2(F, "log_probs", log_probs)?;
    checks::mask_rows(F, mask, b, n)?;
    let zeros = log_probs.zeros_like()?;
    Ok(mask.ne(0.0)?.where_cond(log_probs, &zeros)?.sum(1)?)
}

/// DPO loss and its diagnostics.
#[derive(Debug, Clone)]
pub struct DpoOutput {
    /// Scalar loss, mean over pairs.
    pub loss: Tensor,
    /// Share of pairs whose implicit reward prefers the chosen response.
    pub reward_accuracy: f32,
    /// Mean implicit reward `β(log π − log π_ref)` of the chosen responses.
    pub chosen_reward: f32,
    /// Mean implicit reward of the rejected responses.
    pub rejected_reward: f32,
    /// Mean reward margin (chosen − rejected).
    pub margin: f32,
}

/// `softplus(x) = log(1 + e^x)`, stable and differentiable: `max(x, 0) + log(1 + e^{−|x|})`.
fn softplus(x: &Tensor) -> Result<Tensor> {
    Ok(x.relu()?.add(&(x.abs()?.neg()?.exp()? + 1.0)?.log()?)?)
}

/// DPO (ALGORITHMS.md §14; Rafailov et al. 2023, arXiv:2305.18290):
/// `−log σ(β[(log π_w − log π_ref,w) − (log π_l − log π_ref,l)])`, mean over pairs. Inputs are
/// `[P]` summed sequence log-probs ([`sequence_log_probs`]); the reference ones are constants.
pub fn dpo_loss(
    policy_chosen: &Tensor,
    policy_rejected: &Tensor,
    ref_chosen: &Tensor,
    ref_rejected: &Tensor,
    beta: f64,
) -> Result<DpoOutput> {
    const F: &str = "dpo_loss";
    if !(beta > 0.0 && beta.is_finite()) {
        return Err(RlError::invalid(
            F,
            "beta",
            format!("must be finite and > 0, got {beta}"),
        ));
    }
    let p = match policy_chosen.dims() {
        [p] if *p > 0 => *p,
        other => {
            return Err(RlError::Shape {
                func: F,
                arg: "policy_chosen",
                got: other.to_vec(),
                expected: "[P] with P > 0 pairs".into(),
            })
        }
    };
    checks::same1(F, "policy_rejected", policy_rejected, p)?;
    checks::same1(F, "ref_chosen", ref_chosen, p)?;
    checks::same1(F, "ref_rejected", ref_rejected, p)?;
    let chosen = (policy_chosen.sub(&ref_chosen.detach())? * beta)?;
    let rejected = (policy_rejected.sub(&ref_rejected.detach())? * beta)?;
    let margin = chosen.sub(&rejected)?;
    let loss = softplus(&margin.neg()?)?.mean_all()?;
    let c: Vec<f32> = chosen.to_dtype(candle_core::DType::F32)?.to_vec1()?;
    let r: Vec<f32> = rejected.to_dtype(candle_core::DType::F32)?.to_vec1()?;
    let mean = |v: &[f32]| v.iter().map(|&x| f64::from(x)).sum::<f64>() as f32 / p as f32;
    let acc = c.iter().zip(&r).filter(|(a, b)| a > b).count() as f32 / p as f32;
    let margins: Vec<f32> = c.iter().zip(&r).map(|(a, b)| a - b).collect();
    Ok(DpoOutput {
        loss,
        reward_accuracy: acc,
        chosen_reward: mean(&c),
        rejected_reward: mean(&r),
        margin: mean(&margins),
    })
}

/// Per-token reverse KL estimate on the student's sampled tokens, `log π_S − log π_T`
/// (ALGORITHMS.md §15), `[B, T]`, differentiable in `student_log_probs`.
pub fn reverse_kl_per_token(
    student_log_probs: &Tensor,
    teacher_log_probs: &Tensor,
) -> Result<Tensor> {
    const F: &str = "reverse_kl_per_token";
    let (b, n) = checks::dims2(F, "student_log_probs", student_log_probs)?;
    checks::same2(F, "teacher_log_probs", teacher_log_probs, b, n)?;
    Ok(student_log_probs.sub(&teacher_log_probs.detach())?)
}

/// On-policy distillation advantages (ALGORITHMS.md §15; Thinking Machines 2025, tinker-cookbook
/// `incorporate_kl_penalty`): `A_t = −c · (log π_S − log π_T)` on valid tokens, detached, no
/// future sum (`kl_discount_factor = 0`). Feed them to a policy loss.
pub fn distill_advantages(
    student_log_probs: &Tensor,
    teacher_log_probs: &Tensor,
    mask: &Tensor,
    coef: f64,
) -> Result<Tensor> {
    const F: &str = "distill_advantages";
    if !coef.is_finite() {
        return Err(RlError::invalid(
            F,
            "coef",
            format!("must be finite, got {coef}"),
        ));
    }
    let kl = reverse_kl_per_token(&student_log_probs.detach(), teacher_log_probs)?;
    let (b, n) = kl.dims2()?;
    checks::mask_rows(F, mask, b, n)?;
    let zeros = kl.zeros_like()?;
    Ok((mask.ne(0.0)?.where_cond(&kl, &zeros)? * (-coef))?.detach())
}

/// Per-position generalized Jensen–Shannon divergence of GKD (ALGORITHMS.md §15; Agarwal et
/// al. 2024, arXiv:2306.13649), over the full vocabulary, as TRL `GKDTrainer.generalized_jsd_loss`
/// computes it: logits `[B, T, V]` are divided by `temperature`, `P = softmax(teacher)`,
/// `Q = softmax(student)`,
/// `JSD(β) = β·KL(P ‖ M) + (1−β)·KL(Q ‖ M)` with `M = βP + (1−β)Q` mixed in log space
/// (`log M = logsumexp(log P + ln β, log Q + ln(1−β))`). TRL special-cases the ends, and so does
/// this: `β = 0` is the forward KL `KL(P ‖ Q)` and `β = 1` the reverse KL `KL(Q ‖ P)` (the
/// general formula would give 0 there). Returns `[B, T]`; the teacher is detached, so gradient
/// flows to the student only.
pub fn gkd_jsd_per_token(
    student_logits: &Tensor,
    teacher_logits: &Tensor,
    beta: f64,
    temperature: f64,
) -> Result<Tensor> {
    const F: &str = "gkd_jsd_per_token";
    let dims = student_logits.dims();
    if dims.len() != 3 {
        return Err(RlError::Shape {
            func: F,
            arg: "student_logits",
            got: dims.to_vec(),
            expected: "[B, T, V]".into(),
        });
    }
    if teacher_logits.dims() != dims {
        return Err(RlError::Shape {
            func: F,
            arg: "teacher_logits",
            got: teacher_logits.dims().to_vec(),
            expected: format!("{dims:?} (the student's shape)"),
        });
    }
    if !(0.0..=1.0).contains(&beta) {
        return Err(RlError::invalid(
            F,
            "beta",
            format!("must be in [0, 1], got {beta}"),
        ));
    }
    if !(temperature > 0.0 && temperature.is_finite()) {
        return Err(RlError::invalid(
            F,
            "temperature",
            format!("must be a finite value > 0, got {temperature}"),
        ));
    }
    let last = candle_core::D::Minus1;
    let log_q = candle_nn::ops::log_softmax(&student_logits.affine(1.0 / temperature, 0.0)?, last)?;
    let log_p = candle_nn::ops::log_softmax(
        &teacher_logits.detach().affine(1.0 / temperature, 0.0)?,
        last,
    )?;
    // KL(target ‖ input) = Σ_v exp(target)·(target − input)  (torch `kl_div(input, target, log_target=True)`).
    let kl = |target: &Tensor, input: &Tensor| -> Result<Tensor> {
        Ok(target.exp()?.mul(&target.sub(input)?)?.sum(last)?)
    };
    if beta == 0.0 {
        return kl(&log_p, &log_q);
    }
    if beta == 1.0 {
        return kl(&log_q, &log_p);
    }
    let a = log_p.affine(1.0, beta.ln())?;
    let b = log_q.affine(1.0, (1.0 - beta).ln())?;
    let hi = a.maximum(&b)?.detach();
    let log_m = a
        .sub(&hi)?
        .exp()?
        .add(&b.sub(&hi)?.exp()?)?
        .log()?
        .add(&hi)?;
    Ok(kl(&log_p, &log_m)?
        .affine(beta, 0.0)?
        .add(&kl(&log_q, &log_m)?.affine(1.0 - beta, 0.0)?)?)
}

/// GKD loss (ALGORITHMS.md §15): [`gkd_jsd_per_token`] on the masked positions, aggregated
/// with `agg` (TRL's `batchmean` over labelled tokens is `token-mean`). TRL `GKDConfig`
/// defaults: `beta = 0.5`, `temperature = 0.9` (`lmbda`, the on-policy share, is a
/// data-sampling choice of the trainer, not part of the loss).
pub fn gkd_loss(
    student_logits: &Tensor,
    teacher_logits: &Tensor,
    mask: &Tensor,
    beta: f64,
    temperature: f64,
    agg: AggMode,
    scale: &AggScale,
) -> Result<Tensor> {
    let per_token = gkd_jsd_per_token(student_logits, teacher_logits, beta, temperature)?;
    let (b, n) = per_token.dims2()?;
    checks::mask_rows("gkd_loss", mask, b, n)?;
    aggregate(&per_token, mask, agg, scale)
}
