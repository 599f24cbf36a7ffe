//! # agentrl-rl: the RL math core
//!
//! Pure functions over `candle_core::Tensor` (any device; f32 in tests): returns and critics,
//! group advantages, policy losses, loss aggregation, KL and entropy, off-policy correction for
//! engine/trainer mismatch, DAPO's overlong shaping, SFT/DPO/distillation losses, and the
//! evaluation estimators. Every formula lives in exactly one function whose doc comment cites
//! its section of `ALGORITHMS.md` (the project's formula reference) and the original paper.
//!
//! This crate knows nothing about models, tokenizers, the gym or the training loop: it sits
//! between the batch (`[B, T]` log-probs, rewards, loss mask, group ids) and the optimizer
//! step. Choices a trainer makes from TOML are closed enums with verl's kebab-case names
//! ([`AggMode`], [`AdvantageEstimator`], [`PolicyLoss`], [`KlEstimator`], [`KlController`],
//! [`RolloutCorrection`]).
//!
//! Conventions: per-token tensors are `[B, T]` with a 0/1 f32 `mask` (1 = policy action token;
//! prompt, padding and tool-output tokens are 0), outcome rewards are `[B]` host slices with
//! `group_ids: &[usize]`. Losses are minimised, return a differentiable scalar plus plain-f32
//! diagnostics, and give masked tokens exactly zero gradient. Bad inputs return [`RlError`].
//!
//! Where it sits in task → episode → batch → loss → update: between the batch and the update.
//! Everything a user needs is re-exported at the crate root; the modules group it by concept.
//!
//! ```rust
//! use agentrl_rl::{
//!     broadcast_to_tokens, group_advantages, pass_at_k, ppo_clip_loss, AggMode, AggScale,
//!     GroupBaseline, PolicyLossInputs,
//! };
//! use candle_core::{Device, Tensor};
//!
//! // Two tasks, two episodes each: GRPO advantages from each task's group of rewards.
//! let adv = group_advantages(&[1.0, 0.0, 1.0, 1.0], &[0, 0, 1, 1], GroupBaseline::GrpoStd)?;
//! assert!(adv.per_sequence[0] > 0.0 && adv.per_sequence[1] < 0.0);
//! assert_eq!(adv.zero_variance_groups, 1); // the second task's group teaches nothing
//!
//! // On the episodes' action tokens ([B, T] = [4, 3], the last token of each not an action):
//! let dev = Device::Cpu;
//! let mask = Tensor::new(&[[1f32, 1., 0.]; 4], &dev)?;
//! let advantages = broadcast_to_tokens(&adv.per_sequence, &mask)?;
//! let log_probs = Tensor::full(-1f32, (4, 3), &dev)?; // the policy being trained
//! let old_log_probs = Tensor::full(-1.1f32, (4, 3), &dev)?; // the policy that sampled
//! let inputs = PolicyLossInputs {
//!     log_probs: &log_probs,
//!     old_log_probs: &old_log_probs,
//!     advantages: &advantages,
//!     mask: &mask,
//!     token_weights: None,
//! };
//! let out = ppo_clip_loss(&inputs, 0.2, 0.2, None, AggMode::TokenMean, &AggScale::default())?;
//! assert_eq!(out.loss.dims(), &[] as &[usize]); // a scalar to minimise
//!
//! // pass@k from n samples with c correct (the unbiased estimator).
//! assert_eq!(pass_at_k(4, 1, 4)?, 1.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Where each concept lives (data-flow order: batch → advantages → loss → update)
//!
//! | module | what it holds |
//! |---|---|
//! | [`returns`] | reward-to-go, GAE and the critic's value loss (§1–§2) |
//! | [`advantages`] | the estimators behind [`compute_advantages`]: [`advantages::group`] (one advantage per sequence from its prompt group, §4–§7 and verl's OPO, GPG, GDPO, pass@k), [`advantages::token`] (per-token: REINFORCE++ §8, ReMax, OTB) |
//! | [`kl`], [`overlong`] | reward shaping before the advantages (KL in reward §11, DAPO's overlong penalty §6) |
//! | [`rollout_correction`] | engine/trainer mismatch (§13): [`rollout_correction::weights`] (TIS/MIS/IcePop), [`rollout_correction::config`] (verl's strings), [`rollout_correction::apply`] (IS, rejection, metrics) |
//! | [`policy_loss`] | the losses behind [`compute_policy_loss`]: [`policy_loss::clip`] (PPO family), [`policy_loss::trust_region`] (SAPO, GMPO, DPPO, DRO, GPG), [`policy_loss::bypass`] |
//! | [`entropy`], [`aggregation`] | log-probs and entropy from logits; the `[B, T]` → scalar reduction every loss ends with (§0) |
//! | [`post_training`] | the losses that are not RL: SFT, DPO, distillation (§14–§15) |
//! | [`eval`] | pass@k, pass^k, bootstrap intervals (§16) |
//!
//! ## Algorithms as compositions (ALGORITHMS.md "Summary table")
//!
//! `agg(...)` is [`aggregate`]; "policy loss" is [`compute_policy_loss`] with that
//! [`PolicyLoss`]; the KL pieces are [`kl_loss`] (in loss) and [`apply_kl_to_rewards`] (in
//! reward, before advantages).
//!
//! | algorithm | composition |
//! |---|---|
//! | REINFORCE + baseline (§1) | `apply_kl_to_rewards(k1, β)` (optional) → [`discounted_returns`] − baseline → [`vanilla_pg_loss`] with `old = sg(logp)` → `seq-mean-token-sum` |
//! | PPO, RLHF (§2–3) | `apply_kl_to_rewards(k1, β` from [`KlController`]`)` → [`gae`]`(γ, λ)` → [`masked_whiten`] → [`ppo_clip_loss`]`(0.2, 0.2, dual_clip: Some(3.0) optional)` → `token-mean` (or `seq-mean-token-mean`); critic: [`value_loss`]`(ε_v = 0.5)` |
//! | GRPO (§4) | [`group_advantages`]`(GrpoStd)` → [`broadcast_to_tokens`] → [`ppo_clip_loss`]`(ε)` + [`kl_loss`]`(k3, β = 0.04)` → `seq-mean-token-mean` |
//! | Dr. GRPO (§5) | [`group_advantages`]`(MeanOnly)` → [`ppo_clip_loss`]`(0.2)` → `seq-mean-token-sum-norm` with `AggScale.max_len = L_max`; no KL |
//! | DAPO (§6) | [`soft_overlong_penalty`] added to `R` and [`overlong_filter_mask`] → [`dynamic_sampling_filter`] → [`group_advantages`]`(GrpoStd)` → [`ppo_clip_loss`]`(0.2, 0.28)` → `token-mean`; no KL |
//! | RLOO (§7) | `apply_kl_to_rewards(k1, β = 0.03–0.1)` → [`group_advantages`]`(LeaveOneOut)` → [`vanilla_pg_loss`] → `seq-mean-token-sum` |
//! | REINFORCE++ (§8) | `apply_kl_to_rewards(k1, β)` → [`reinforce_pp_advantages`]`(γ = 1)` (global whitening) → [`ppo_clip_loss`]`(0.2)` → `token-mean`; `-baseline` variant: [`reinforce_pp_baseline_advantages`] |
//! | GSPO (§9) | [`group_advantages`]`(GrpoStd)` → [`gspo_loss`]`(3e-4, 4e-4)` → `seq-mean-token-mean` (per-token advantages: [`gspo_token_loss`]) |
//! | CISPO (§10) | [`group_advantages`]`(GrpoStd)` → [`cispo_loss`]`(ε_low large, ε_high)` → `token-mean`; no KL |
//! | TIS / MIS / IcePop (§13) | [`tis_weights`]`(C = 2)` / [`mis_weights`]`(token \| sequence \| geometric)` / [`icepop_weights`] → `PolicyLossInputs.token_weights` of the base loss; log [`mismatch_metrics`] |
//! | Decoupled PPO (§13) | `token_weights = min(π_prox/π_behav, C)` via [`tis_weights`]`(train = prox, rollout = behav)` → [`ppo_clip_loss`] with `old = log π_prox` |
//! | Clip-Cov / KL-Cov (§12) | [`group_advantages`]`(GrpoStd)` → [`clip_cov_loss`]`(ε = 0.2, r = 2e-4, ω = [1, 5])` or [`kl_cov_loss`]`(k = 2e-3, β = 1)` (`PolicyLoss::ClipCov` / `KlCov`) → `token-mean`; no KL loss; monitor [`entropy_from_logits`] |
//! | DPO (§14) | [`sequence_log_probs`] for policy and reference, chosen and rejected → [`dpo_loss`]`(β = 0.1)` |
//! | RFT / RAFT / STaR (§14) | keep passing samples (e.g. [`dynamic_sampling_filter`]-style selection by reward) → [`sft_nll_loss`] → `token-mean` |
//! | GKD (§15) | mix data (share `λ = 0.5` sampled from the student) → student and teacher logits `[B, T, V]` → [`gkd_loss`]`(β = 0.5, τ = 0.9)` = [`gkd_jsd_per_token`] → `token-mean`. No RL preset: it needs a teacher's full-vocabulary logits and no reward, so it belongs to distillation (issue 15) |
//! | On-policy distillation (§15) | [`distill_advantages`]`(c = 1)` → [`vanilla_pg_loss`] (importance-sampling PG) or [`ppo_clip_loss`] → `token-mean` |
//! | MT-GRPO / GiGPO (§17) | turn-level rewards → [`group_advantages`] per turn group, added to the episode advantage → [`ppo_clip_loss`] → `token-mean` |
//! | any | + [`entropy_bonus_loss`]`(c_H)` on [`entropy_from_logits`]; evaluation: [`pass_at_k`], [`pass_hat_k`], [`bootstrap_ci`] |
//!
//! ## The rest of verl's registry (no ALGORITHMS.md section: paper and formula here)
//!
//! Config names are verl's, exactly as verl's YAML spells them (`adv_estimator`,
//! `policy_loss.loss_mode`, `kl_loss_type`, `loss_agg_mode`, `rollout_correction.*`).
//! `R_i` outcome, `g` its prompt group, `r = π_θ/π_old`, `m` the mask.
//!
//! | algorithm (verl name) | composition and formula |
//! |---|---|
//! | aggregation `token-sum` (§0 table) | [`aggregate`]`(TokenSum)`: `Σ_i Σ_t m ℓ` |
//! | verl global-batch normalisation (§0 "gradient accumulation") | [`AggScale::verl`]`(dp_size, batch_num_tokens, global_batch_size, loss_scale_factor)` in every loss, [`value_loss`] included: each mode's loss × `dp_size`, with the global counts as denominators |
//! | OPO `opo` (Hao et al., arXiv:2505.23585) | [`opo_advantages`]: `A_i = R_i − Σ_g L_j R_j / Σ_g L_j`, `L_j = Σ_t m` (response length) → [`ppo_clip_loss`] → `token-mean` |
//! | GPG `gpg` (Chu et al., arXiv:2504.02546) | [`gpg_advantages`]: `A_i = α (R_i − mean_g R)/f_norm`, `α = B/#{R ≠ 0}` → [`gpg_loss`]: `ℓ = −Â log π_θ` → `token-mean` |
//! | ReMax `remax` (Li et al., arXiv:2310.10505) | greedy rollout per prompt → [`remax_advantages`]: `A_t = Σ_{k≥t} m r_k − R(greedy)` → [`vanilla_pg_loss`] / [`ppo_clip_loss`] |
//! | GDPO `gdpo` (arXiv:2601.05242) | reward components `R_k` (verl `gdpo_reward_keys`, weights `w_k`) → [`gdpo_advantages`]: `whiten(Σ_k w_k (R_k − mean_g R_k)/(std_g R_k + ε))` → [`ppo_clip_loss`] |
//! | pass@k `grpo_passk` (arXiv:2503.19595 as cited by verl) | [`grpo_passk_advantages`]: best of the group `A = (R_max − R_2nd)/(std_g R + ε)`, others 0 → [`ppo_clip_loss`] |
//! | OTB `optimal_token_baseline` (verl `docs/algo/otb.md`; richardli.xyz/optimal-token-baseline) | [`sum_pi_squared`] of the old logits → [`optimal_token_baseline_advantages`]: `w_t = 1 − 2π_t + Σπ²` (× ρ̄² with IS), `W_t = Σ_{j≤t} m w_j`, `B_t = Σ_g G_t W_t / Σ_g W_t`, `A_t = G_t − B_t` |
//! | TIR-OTB `tir_optimal_token_baseline` | as OTB, positions counted in policy tokens across tool-output holes: [`tir_optimal_token_baseline_advantages`] |
//! | SAPO `sapo` (Gao et al., arXiv:2511.20347) | [`group_advantages`] → [`sapo_loss`]: `ℓ = −σ(τ(r − 1))·(4/τ)·Â`, `τ = τ_pos` if `Â > 0` else `τ_neg`; always `seq-mean-token-mean` (verl ignores `loss_agg_mode`) |
//! | GMPO `geo_mean` (Zhao et al., arXiv:2507.20673) | [`group_advantages`] → [`geo_mean_loss`]: `ℓ_i = −Â_i exp(mean_t clip_sgn(Â)(log r_t, −ε_low, ε_high))`, plain mean over the batch's sequences (verl ignores `loss_agg_mode`) |
//! | DPPO `dppo_tv`, `dppo_kl` (arXiv:2602.04879) | [`dppo_loss`]: `ℓ = −Â sg(min(r, c)) log π_θ · sg(1[divergence of the sampled token within δ on the side Â pushes])`, TV `π_θ − π_old` or binary KL |
//! | DRO `dro` (Richemond et al., arXiv:2405.19107) | [`dro_loss`]: `ℓ = −(Â log π_θ − ½β (log π_θ − log π_old)²)` |
//! | bypass mode `bypass_mode` (§13 "bypass"; verl `rollout_corr_math.md`) | `old = log π_rollout` → [`bypass_mode_loss`]: [`rollout_correction_and_rejection`]`(sg(π_θ), π_rollout)` inside the loss → `ppo_clip` (no IS weights) or `reinforce` `−Â sg(w) log π_θ`, on the rejection-modified mask |
//! | KL `abs`, straight-through `k1+`/`k3+`/`low_var_kl+`/`abs+` (§11 "gradient caveat") | [`kl_estimate`]: `abs(log π_θ − log π_ref)`; `k+ = k2 − sg(k2) + sg(k)`: value of `k`, gradient of `k2 = ½(log π_θ − log π_ref)²` |
//! | verl rollout correction (§13 TIS/MIS/IcePop) | [`RolloutCorrectionConfig`] (verl's strings) → [`RolloutCorrectionSpec`] → [`rollout_correction_and_rejection`]: token/sequence IS (truncated, `"lo_hi"` IcePop, batch-normalised), rejection `token_k1..3`, `seq_sum_k1..3`, `seq_mean_k1..3`, `seq_max_k2/3`, comma-combined; `rollout_corr/…` metrics |
//! | `masked_var` (verl `torch_functional`) | [`masked_var`]`(unbiased)`: `Σ m (x − μ)²/Σ m`, × `n/(n − 1)` |
//!
//! ## Every option by verl's name
//!
//! The trainer (`agentrl-train`, `[algorithm]`) selects each of these by verl's name on any
//! preset, with the knob named as verl names it (`agentrl_train::algo::registry` maps names to
//! the variants below with the knobs' parameters). `§` is ALGORITHMS.md's section; where it has
//! none, the paper, and the formula is in the table above.
//!
//! | config field (verl) | verl name | here | reference |
//! |---|---|---|---|
//! | `adv_estimator` | `gae` | [`AdvantageEstimator::Gae`]: [`gae`] → [`masked_whiten`] | §2 |
//! | | `grpo` (`grpo_vectorized`) | [`AdvantageEstimator::Grpo`]: [`group_advantages`]`(GrpoStd \| MeanOnly)` | §4, §5 |
//! | | `rloo` | [`AdvantageEstimator::Rloo`]: [`group_advantages`]`(LeaveOneOut)` | §7 |
//! | | `reinforce_plus_plus` | [`AdvantageEstimator::ReinforcePlusPlus`]: [`reinforce_pp_advantages`] | §8 |
//! | | `reinforce_plus_plus_baseline` | [`AdvantageEstimator::ReinforcePlusPlusBaseline`]: [`reinforce_pp_baseline_advantages`] | §8 |
//! | | `remax` | [`AdvantageEstimator::Remax`]: [`remax_advantages`] | arXiv:2310.10505 |
//! | | `opo` | [`AdvantageEstimator::Opo`]: [`opo_advantages`] | arXiv:2505.23585 |
//! | | `gpg` | [`AdvantageEstimator::Gpg`]: [`gpg_advantages`] | arXiv:2504.02546 |
//! | | `grpo_passk` | [`AdvantageEstimator::GrpoPassk`]: [`grpo_passk_advantages`] | arXiv:2503.19595 |
//! | | `gdpo` | [`AdvantageEstimator::Gdpo`]: [`gdpo_advantages`] | arXiv:2601.05242 |
//! | | `optimal_token_baseline` | [`AdvantageEstimator::OptimalTokenBaseline`]: [`sum_pi_squared`] → [`optimal_token_baseline_advantages`] | verl `docs/algo/otb.md` |
//! | | `tir_optimal_token_baseline` | [`AdvantageEstimator::TirOptimalTokenBaseline`]: [`tir_optimal_token_baseline_advantages`] | verl `docs/algo/otb.md` |
//! | `policy_loss` (verl `policy_loss.loss_mode`) | `vanilla` | [`PolicyLoss::PpoClip`]: [`ppo_clip_loss`] (dual clip with `dual_clip_c`) | §3, §6 |
//! | | `gspo` | [`PolicyLoss::GspoToken`]: [`gspo_token_loss`] | §9 |
//! | | `cispo` | [`PolicyLoss::Cispo`]: [`cispo_loss`] | §10 |
//! | | `clip_cov` | [`PolicyLoss::ClipCov`]: [`clip_cov_loss`] | §12 |
//! | | `kl_cov` | [`PolicyLoss::KlCov`]: [`kl_cov_loss`] | §12 |
//! | | `sapo` | [`PolicyLoss::Sapo`]: [`sapo_loss`] | arXiv:2511.20347 |
//! | | `geo_mean` | [`PolicyLoss::GeoMean`]: [`geo_mean_loss`] | arXiv:2507.20673 |
//! | | `gpg` | [`PolicyLoss::Gpg`]: [`gpg_loss`] | arXiv:2504.02546 |
//! | | `dppo_tv`, `dppo_kl` | [`PolicyLoss::DppoTv`], [`PolicyLoss::DppoKl`]: [`dppo_loss`] | arXiv:2602.04879 |
//! | | `dro` | [`PolicyLoss::Dro`]: [`dro_loss`] | arXiv:2405.19107 |
//! | | `bypass_mode` (set by `bypass_mode = true`, as in verl) | [`PolicyLoss::BypassMode`]: [`bypass_mode_loss`] | §13 |
//! | | agentrl only: `vanilla_pg` | [`PolicyLoss::Vanilla`]: [`vanilla_pg_loss`] | §1, §7 |
//! | | agentrl only: `gspo_sequence` | [`PolicyLoss::Gspo`]: [`gspo_loss`] | §9 |
//! | `loss_agg_mode` | `token-mean`, `token-sum`, `seq-mean-token-sum`, `seq-mean-token-mean`, `seq-mean-token-sum-norm` | [`AggMode`] in [`aggregate`] (global-batch normalisation: [`AggScale::verl`]) | §0, §17 |
//! | `kl_loss_type` (verl `kl_loss_type`, or `kl_penalty` in the reward) | `kl`/`k1`, `mse`/`k2`, `low_var_kl`/`k3`, `abs`, `k1+`/`kl+`, `k2+`/`mse+`, `k3+`/`low_var_kl+`, `abs+` | [`KlEstimator`] in [`kl_loss`] / [`apply_kl_to_rewards`] | §11 |
//! | `rollout_is`, `rollout_is_threshold`, `rollout_is_batch_normalize` | `token`, `sequence`; `C` or `"lo_hi"`; bool | [`RolloutCorrectionConfig`] → [`RolloutCorrectionSpec`] → [`rollout_correction_and_rejection`] | §13 (TIS, IcePop, MIS) |
//! | `rollout_rs`, `rollout_rs_threshold` | `token_k1..3`, `seq_sum_k1..3`, `seq_mean_k1..3`, `seq_max_k2/3`, comma-combined; thresholds shared or paired | [`RsOption`], [`RsFilter`] | §13; verl `rollout_corr_math.md` |
//! | `bypass_mode`, `loss_type` | `true`; `ppo_clip`, `reinforce` | [`PolicyLoss::BypassMode`], [`BypassLossType`] | §13 "bypass" |
//! | (distillation) | GKD | [`gkd_loss`] | §15; the distillation recipe, issue 15 |
//!
//! The trainer's presets (`agentrl-train`, `algorithm.name`, one file each in its `algo/`)
//! compose these as: `opo`, `gpg`, `remax` (with a greedy episode per task for the baseline),
//! `sapo`, `geo_mean` (GMPO), `dppo_tv` / `dppo_kl`, `dro`, `gdpo` (the gym's verdict split
//! into `hidden_solved`, `hidden_fraction` and `format` components), `grpo_passk`,
//! `optimal_token_baseline` / `tir_optimal_token_baseline` (Σπ² from the trainer's logits),
//! `bypass_ppo_clip_k3_rs` / `bypass_pg_is` (verl's bypass-mode presets of those names), and
//! from the first table `clip_cov` / `kl_cov`. GKD needs a teacher: distillation (issue 15).
//!
//! ## Remaining differences from verl 0.9.1 (everything else matches its own functions at f32
//! tolerance, see `tests/rl/verl_fixtures.rs`)
//!
//! - **Two of this crate's serde names differ from verl's.** [`PolicyLoss`]'s own `vanilla`
//!   is the unclipped importance-weighted PG and its `gspo` the sequence-level form; verl's
//!   `vanilla` is PPO clip with dual clip ([`PolicyLoss::PpoClip`]) and verl's `gspo` is
//!   GSPO-token ([`PolicyLoss::GspoToken`]). The trainer's config takes verl's names with
//!   verl's meaning (`policy_loss = "vanilla"` is PPO clip); the crate's two are there
//!   `vanilla_pg` and `gspo_sequence`. Both pairs are compared with verl in
//!   `tests/rl/verl_fixtures.rs`.
//! - **Dual clip is opt-in in the trainer.** verl's `vanilla` always dual-clips at
//!   `clip_ratio_c` (default 3); the trainer's presets leave `dual_clip_c` unset (off), so a
//!   negative-advantage token whose ratio exceeds 3 is bounded by the PPO clip alone. Set
//!   `algorithm.dual_clip_c = 3` for verl's behaviour. Bypass `ppo_clip` uses 3 when unset, as
//!   verl. The DPPO presets set c = 20 (the fallback inside verl's DPPO functions, and the
//!   paper's advice of a large c), where verl's actor config passes its global 3.
//! - **Decoupled rejection and advantages.** verl's trainer drops rejected tokens from the
//!   mask before computing advantages; the trainer here computes advantages on the original
//!   mask and drops them from the loss only. For the outcome estimators (GRPO, RLOO, OPO,
//!   GDPO, …) that is the same (verl sums rewards over every position either way); for the
//!   token-level ones (GAE's whitening, REINFORCE++, ReMax, OTB) verl's statistics skip the
//!   rejected tokens and these do not.
//! - **Not exposed, fixed at verl's defaults** (verl's config does not expose them either):
//!   GPG's `f_norm = 1` and OTB's `handle_zero_tail = true`. KL `full` is not accepted (verl
//!   raises `NotImplementedError` for it too).
//! - **REINFORCE's loss value.** [`vanilla_pg_loss`] with `old = sg(log π_θ)` reports `−Â·r = −Â`;
//!   verl's `compute_policy_loss_reinforce` reports `−Â log π_θ`. Same gradient; the ratio form
//!   is also PPO at `r = 1`, which the crate's properties rely on.
//! - **Singletons in `rloo_vectorized`.** verl's vectorized RLOO gives a group of size 1
//!   advantage 0, its loop `rloo` (and every estimator here) the raw reward; `rloo_vectorized`
//!   is therefore not accepted as a name.
//! - **Outcome rewards are masked sums.** [`sequence_rewards`] adds the token rewards on valid
//!   tokens only; verl's outcome estimators sum `token_level_rewards` over every position. They
//!   differ only for a reward placed on a masked token (e.g. a response with no valid token).
//! - **Zero-variance groups** get advantage exactly 0, where verl divides a float-rounding
//!   residue of the mean by `std + 1e-6` (same up to that residue).
//! - **Clip-Cov / KL-Cov** select `⌊r·N⌋` tokens (paper), verl `max(⌊r·N⌋, 1)`; Clip-Cov's pick
//!   is a seeded ChaCha8 draw, verl's `torch.randperm`.
//! - **All-masked batches** aggregate to 0 (verl: NaN for `token-mean`); OPO gives a group with
//!   no valid token baseline 0 (verl: NaN).
//! - **Masked positions** hold 0 in the ReMax, OTB and TIR-OTB advantages and returns (verl
//!   leaves the reward-to-go on observation holes; the loss mask drops them either way).
//! - **pass@k ties** for the best reward go to the first sequence in batch order (torch's
//!   `topk` leaves it unspecified).
//! - **GDPO components** are passed per sequence ([`AdvantageExtras::reward_components`]);
//!   verl reads them from `non_tensor_batch[gdpo_reward_keys]` and places them on the last
//!   response token, which gives the same sums.
//! - **Masked-mean denominators.** verl adds `1e-8` to masked-mean denominators (and to the
//!   per-sequence token counts of `seq-mean-token-mean`); the losses here divide by the exact
//!   count (≤ 1e-8 relative; the ported estimators and rollout metrics keep verl's `+1e-8`).
//! - **Multi-rank IS batch normalisation** (`distributed_masked_mean`) is not modelled: pass
//!   the global batch to get the same factor.
//! - **Orientation of ratio bounds.** [`mis_weights`] / [`RolloutCorrection::Mis`] bound
//!   `ρ = π_train/π_rollout`; verl's `k1` rejection strings bound `π_rollout/π_train`. Both exist
//!   and are named so: the verl strings ([`RolloutCorrectionConfig`]) keep verl's meaning.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

// The data-flow order of these is the table "Where each concept lives" above.
mod checks;
pub mod error;

pub mod advantages;
pub mod aggregation;
pub mod entropy;
pub mod eval;
pub mod kl;
pub mod overlong;
pub mod policy_loss;
pub mod post_training;
pub mod returns;
pub mod rollout_correction;

pub use advantages::{
    broadcast_to_tokens, compute_advantages, compute_advantages_with, dynamic_sampling_filter,
    gdpo_advantages, gpg_advantages, group_advantages, grpo_passk_advantages, opo_advantages,
    optimal_token_baseline_advantages, reinforce_pp_advantages, reinforce_pp_baseline_advantages,
    remax_advantages, sequence_rewards, tir_optimal_token_baseline_advantages, AdvantageEstimator,
    AdvantageExtras, AdvantageInputs, AdvantageOutput, DynamicSamplingFilter, GroupAdvantages,
    GroupBaseline, OtbInputs,
};
pub use aggregation::{aggregate, masked_mean_value, step_scale, AggMode, AggScale};
pub use entropy::{entropy_bonus_loss, entropy_from_logits, sum_pi_squared, token_log_probs};
pub use error::{Result, RlError};
pub use eval::{
    bootstrap_ci, mean_pass_at_k, mean_pass_hat_k, pass_at_k, pass_hat_k, ConfidenceInterval,
};
pub use kl::{
    apply_kl_to_rewards, kl_estimate, kl_loss, AdaptiveKlController, KlController, KlEstimator,
};
pub use overlong::{overlong_filter_mask, soft_overlong_penalties, soft_overlong_penalty};
pub use policy_loss::{
    bypass_mode_loss, cispo_loss, clip_cov_loss, compute_policy_loss, dppo_loss, dro_loss,
    geo_mean_loss, gpg_loss, gspo_loss, gspo_token_loss, kl_cov_loss, ppo_clip_loss, sapo_loss,
    token_ratio, vanilla_pg_loss, BypassLossType, ClipCovParams, DppoDivergence, PolicyLoss,
    PolicyLossDiagnostics, PolicyLossInputs, PolicyLossOutput,
};
pub use post_training::{
    distill_advantages, dpo_loss, gkd_jsd_per_token, gkd_loss, reverse_kl_per_token,
    sequence_log_probs, sft_nll_loss, DpoOutput,
};
pub use returns::{
    discounted_returns, gae, masked_var, masked_whiten, value_loss, GaeOutput, ValueLossOutput,
};
pub use rollout_correction::{
    icepop_weights, mis_weights, mismatch_metrics, rollout_corr_metrics,
    rollout_correction_and_rejection, rollout_correction_weights, tis_weights, CorrectionWeights,
    IsLevel, MisLevel, MismatchMetrics, RolloutCorrection, RolloutCorrectionConfig,
    RolloutCorrectionOutput, RolloutCorrectionSpec, RsFilter, RsOption, ThresholdSpec,
};
