//! verl's registries by name: which advantage estimator (`algorithm.adv_estimator`), policy
//! loss (`algorithm.policy_loss`, verl's `policy_loss.loss_mode`) and rollout correction
//! (`algorithm.rollout_is`, `rollout_rs`, `bypass_mode`, …) a run uses, on any preset.
//!
//! Where it sits: a preset ([`super::Algorithm`]) names its estimator and loss in its
//! [`Knobs`]; the user's `[algorithm]` keys override them like any other knob. The update asks
//! the resolved knobs for the `agentrl-rl` variant ([`Knobs::advantage_estimator`],
//! [`Knobs::policy_loss`], [`Knobs::rollout_correction`]), built here and only here, with the
//! knobs' own parameters (ε, τ, β, …): each hyperparameter has one source. Names are verl's,
//! spelt as verl's YAML spells them; an unknown one is an error that names the config field and
//! lists the valid names.
//!
//! Which verl parameter each knob is:
//!
//! | verl | knob |
//! |---|---|
//! | `algorithm.adv_estimator` | `adv_estimator` |
//! | `algorithm.norm_adv_by_std_in_grpo` | `std_normalize` |
//! | `algorithm.gamma`, `lam` | `gamma`, `lam` |
//! | `algorithm.gdpo_reward_keys`, `gdpo_reward_weights` | same names |
//! | `actor.policy_loss.loss_mode` | `policy_loss` |
//! | `actor.loss_agg_mode` | `loss_agg_mode` |
//! | `actor.kl_loss_type` (in the loss), `algorithm.kl_penalty` (in the reward) | `kl_loss_type`, placed by `kl_placement` |
//! | `actor.clip_ratio_low`, `clip_ratio_high`, `clip_ratio_c` | `eps_low`, `eps_high`, `dual_clip_c` |
//! | `actor.tau_pos`, `tau_neg`, `policy_loss.clip_cov_*`, `kl_cov_ratio`, `ppo_kl_coef`, `dro_beta` | same names |
//! | `algorithm.rollout_correction.*` (`rollout_is`, `rollout_is_threshold`, `rollout_is_batch_normalize`, `rollout_rs`, `rollout_rs_threshold`, `bypass_mode`, `loss_type`) | same names |
//!
//! Fixed at verl's defaults, not knobs (verl's config does not expose them either): GPG's
//! `f_norm = 1` and OTB's `handle_zero_tail = true`.

use std::fmt;

use agentrl_rl::{
    AdvantageEstimator, BypassLossType, PolicyLoss, RlError, RolloutCorrectionConfig,
    RolloutCorrectionSpec,
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Knobs;

/// A closed set of verl names: `as_str` for the canonical spelling, `parse` for every accepted
/// one, and serde through those, so an unknown name is an error naming the field with the
/// valid names listed (serde's derived message lists neither the field nor the aliases).
macro_rules! verl_names {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident ($field:literal, $what:literal) {
            $( $(#[$vmeta:meta])* $variant:ident = $str:literal $(| $alias:literal)* ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every name, in the order the docs list them.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The canonical spelling (verl's, where verl has the name).
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $str, )+
                }
            }

            /// Every accepted spelling, aliases included, for error messages.
            pub fn spellings() -> Vec<&'static str> {
                vec![$( $str $(, $alias)* ),+]
            }

            /// The variant spelt `s`, or an error naming the config field and the valid names.
            pub fn parse(s: &str) -> Result<Self, String> {
                match s {
                    $( $str $(| $alias)* => Ok($name::$variant), )+
                    _ => Err(format!(
                        "algorithm.{} = {s:?} is not {}; the names are: {}",
                        $field,
                        $what,
                        Self::spellings().join(", ")
                    )),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                $name::parse(&s).map_err(serde::de::Error::custom)
            }
        }
    };
}

verl_names! {
    /// verl's `algorithm.adv_estimator` (`core_algos.AdvantageEstimator`). `rloo_vectorized` is
    /// not accepted: it differs from `rloo` on groups of one (see `agentrl_rl`'s docs).
    pub enum AdvEstimatorName ("adv_estimator", "an advantage estimator") {
        /// GAE with the value head, whitened (ALGORITHMS.md §2); the only one with a critic.
        Gae = "gae",
        /// `(R − mean)/std` per group, or `R − mean` without `std_normalize` (§4, §5).
        Grpo = "grpo" | "grpo_vectorized",
        /// Discounted returns whitened over the batch (§8).
        ReinforcePlusPlus = "reinforce_plus_plus",
        /// Group mean subtracted, then whitened over the batch (§8).
        ReinforcePlusPlusBaseline = "reinforce_plus_plus_baseline",
        /// Reward-to-go minus a greedy episode's reward; the trainer samples that episode.
        Remax = "remax",
        /// Leave-one-out group baseline (§7).
        Rloo = "rloo",
        /// Length-weighted group baseline.
        Opo = "opo",
        /// Only the best of each group gets `R_max − R_2nd` (over the group std).
        GrpoPassk = "grpo_passk",
        /// `α (R − mean)`, `α = B / #{R ≠ 0}`.
        Gpg = "gpg",
        /// Per-token optimal baseline from Σπ² of the old logits.
        OptimalTokenBaseline = "optimal_token_baseline",
        /// OTB counted in policy tokens across tool-output holes.
        TirOptimalTokenBaseline = "tir_optimal_token_baseline",
        /// Per-component group normalisation of `gdpo_reward_keys`, weighted, then whitened.
        Gdpo = "gdpo",
    }
}

verl_names! {
    /// verl's `actor.policy_loss.loss_mode` (`core_algos.register_policy_loss`), plus two
    /// agentrl-only names for losses verl's registry does not have. Bypass mode is not a name
    /// here: as in verl, `algorithm.bypass_mode = true` replaces whatever loss is named.
    pub enum PolicyLossName ("policy_loss", "a policy loss") {
        /// verl `vanilla`: token-level PPO clip with clip-higher bounds; dual clip when
        /// `dual_clip_c` is set (verl always dual-clips at `clip_ratio_c`, default 3).
        Vanilla = "vanilla",
        /// verl `gspo`: GSPO-token, `s_{i,t} = sg[s_i]·π_θ/sg[π_θ]` clipped (§9).
        Gspo = "gspo",
        /// SAPO's soft gate (always `seq-mean-token-mean`, as verl).
        Sapo = "sapo",
        /// GMPO, the geometric mean of clipped token ratios (ignores `loss_agg_mode`, as verl).
        GeoMean = "geo_mean",
        /// PPO clip with covariance-selected tokens detached (§12).
        ClipCov = "clip_cov",
        /// `−Â·r` plus `β|Δ log π|` on the top-covariance tokens (§12).
        KlCov = "kl_cov",
        /// `−Â log π_θ`.
        Gpg = "gpg",
        /// Clipped, detached IS weight times `Â log π_θ` (§10).
        Cispo = "cispo",
        /// DPPO with a total-variation trust region on the sampled token.
        DppoTv = "dppo_tv",
        /// DPPO with a binary-KL trust region.
        DppoKl = "dppo_kl",
        /// `−(Â log π_θ − ½β(log π_θ − log π_old)²)`.
        Dro = "dro",
        /// agentrl only: the unclipped importance-weighted policy gradient `−Â·r`, REINFORCE
        /// on-policy (§1, §7; RLOO's loss).
        VanillaPg = "vanilla_pg",
        /// agentrl only: GSPO's sequence-level form, one clipped ratio per response (§9); equal
        /// to `gspo` in value and gradient under `seq-mean-token-mean` with sequence-level
        /// advantages.
        GspoSequence = "gspo_sequence",
    }
}

/// Maps an `agentrl-rl` parse error of the rollout-correction strings to the knob at fault.
fn correction_error(e: RlError) -> anyhow::Error {
    match e {
        RlError::InvalidArgument { arg, reason, .. } => {
            anyhow::anyhow!("algorithm.{arg}: {reason}")
        }
        other => anyhow::anyhow!("algorithm.rollout_is / rollout_rs: {other}"),
    }
}

impl Knobs {
    /// The estimator `adv_estimator` names, with these knobs' parameters.
    pub fn advantage_estimator(&self) -> AdvantageEstimator {
        let norm_by_std = self.std_normalize;
        match self.adv_estimator {
            AdvEstimatorName::Gae => AdvantageEstimator::Gae {
                gamma: self.gamma,
                lambda: self.lam,
            },
            AdvEstimatorName::Grpo => AdvantageEstimator::Grpo { norm_by_std },
            AdvEstimatorName::ReinforcePlusPlus => {
                AdvantageEstimator::ReinforcePlusPlus { gamma: self.gamma }
            }
            AdvEstimatorName::ReinforcePlusPlusBaseline => {
                AdvantageEstimator::ReinforcePlusPlusBaseline
            }
            AdvEstimatorName::Remax => AdvantageEstimator::Remax,
            AdvEstimatorName::Rloo => AdvantageEstimator::Rloo,
            AdvEstimatorName::Opo => AdvantageEstimator::Opo,
            AdvEstimatorName::GrpoPassk => AdvantageEstimator::GrpoPassk { norm_by_std },
            AdvEstimatorName::Gpg => AdvantageEstimator::Gpg { f_norm: 1.0 },
            AdvEstimatorName::OptimalTokenBaseline => AdvantageEstimator::OptimalTokenBaseline {
                handle_zero_tail: true,
            },
            AdvEstimatorName::TirOptimalTokenBaseline => {
                AdvantageEstimator::TirOptimalTokenBaseline {
                    handle_zero_tail: true,
                }
            }
            AdvEstimatorName::Gdpo => AdvantageEstimator::Gdpo { norm_by_std },
        }
    }

    /// The loss `policy_loss` names with these knobs' parameters, or bypass mode's loss when
    /// `bypass_mode` is on (as verl, which then sets `loss_mode = "bypass_mode"`). Errors name
    /// the rollout-correction knob whose string does not parse.
    pub fn policy_loss(&self) -> anyhow::Result<PolicyLoss> {
        let (clip_low, clip_high) = (self.eps_low, self.eps_high);
        if self.bypass_mode {
            return Ok(PolicyLoss::BypassMode {
                loss_type: self.loss_type,
                clip_low,
                clip_high,
                // verl's bypass `ppo_clip` is its vanilla loss, which always dual-clips at
                // `clip_ratio_c` (default 3).
                clip_ratio_c: self.dual_clip_c.unwrap_or(3.0),
                rollout_correction: self.correction_spec()?,
            });
        }
        // DPPO's truncation c; `dppo::check` rejects an unset one, so the fallback (verl's
        // in-function default) is never reached by a checked config.
        let clip_ratio_c = self.dual_clip_c.unwrap_or(20.0);
        Ok(match self.policy_loss {
            PolicyLossName::Vanilla => PolicyLoss::PpoClip {
                clip_low,
                clip_high,
                dual_clip: self.dual_clip_c,
            },
            PolicyLossName::Gspo => PolicyLoss::GspoToken {
                clip_low,
                clip_high,
            },
            PolicyLossName::GspoSequence => PolicyLoss::Gspo {
                clip_low,
                clip_high,
            },
            PolicyLossName::Sapo => PolicyLoss::Sapo {
                tau_pos: self.tau_pos,
                tau_neg: self.tau_neg,
            },
            PolicyLossName::GeoMean => PolicyLoss::GeoMean {
                clip_low,
                clip_high,
            },
            PolicyLossName::ClipCov => PolicyLoss::ClipCov {
                clip_low,
                clip_high,
                clip_cov_ratio: self.clip_cov_ratio,
                cov_low: self.clip_cov_lb,
                cov_high: self.clip_cov_ub,
                // Reseeded for every optimizer step by the update.
                seed: 0,
            },
            PolicyLossName::KlCov => PolicyLoss::KlCov {
                kl_cov_ratio: self.kl_cov_ratio,
                kl_coef: self.ppo_kl_coef,
            },
            PolicyLossName::Gpg => PolicyLoss::Gpg,
            PolicyLossName::Cispo => PolicyLoss::Cispo {
                clip_low,
                clip_high,
            },
            PolicyLossName::DppoTv => PolicyLoss::DppoTv {
                clip_low,
                clip_high,
                clip_ratio_c,
            },
            PolicyLossName::DppoKl => PolicyLoss::DppoKl {
                clip_low,
                clip_high,
                clip_ratio_c,
            },
            PolicyLossName::Dro => PolicyLoss::Dro {
                dro_beta: self.dro_beta,
            },
            PolicyLossName::VanillaPg => PolicyLoss::Vanilla,
        })
    }

    /// verl's `rollout_correction` block of these knobs, parsed with verl's rules.
    pub fn correction_spec(&self) -> anyhow::Result<RolloutCorrectionSpec> {
        let config = RolloutCorrectionConfig {
            rollout_is: self.rollout_is,
            rollout_is_threshold: Some(self.rollout_is_threshold.clone()),
            rollout_is_batch_normalize: self.rollout_is_batch_normalize,
            rollout_rs: self.rollout_rs.as_deref().map(String::from),
            rollout_rs_threshold: self.rollout_rs_threshold.clone(),
        };
        RolloutCorrectionSpec::from_config(&config).map_err(correction_error)
    }

    /// Whether any IS weight or rejection filter is configured.
    pub fn corrects_rollouts(&self) -> bool {
        self.rollout_is.is_some() || self.rollout_rs.is_some()
    }

    /// verl's decoupled mode: the correction between the trainer's π_old (the old-log-prob
    /// pass) and the engine's π_rollout, applied once per batch before the update (IS weights
    /// into the policy loss, rejected tokens out of the loss mask). `None` without a
    /// correction, and in bypass mode, where the loss applies it itself.
    pub fn rollout_correction(&self) -> anyhow::Result<Option<RolloutCorrectionSpec>> {
        if self.bypass_mode || !self.corrects_rollouts() {
            return Ok(None);
        }
        self.correction_spec().map(Some)
    }

    /// Whether the estimator trains the value head (GAE), so the batch needs values.
    pub fn uses_critic(&self) -> bool {
        self.adv_estimator == AdvEstimatorName::Gae
    }

    /// Whether the baseline is the reward of a greedy (temperature 0) episode of each task,
    /// which the trainer samples besides the group (ReMax).
    pub fn needs_greedy_baseline(&self) -> bool {
        self.adv_estimator == AdvEstimatorName::Remax
    }

    /// Whether the estimator needs `Σ_v π_old(v)²` from the logits (OTB, TIR-OTB).
    pub fn needs_sum_pi_squared(&self) -> bool {
        matches!(
            self.adv_estimator,
            AdvEstimatorName::OptimalTokenBaseline | AdvEstimatorName::TirOptimalTokenBaseline
        )
    }

    /// Whether the estimator reads reward components instead of the scalar reward (GDPO).
    pub fn needs_reward_components(&self) -> bool {
        self.adv_estimator == AdvEstimatorName::Gdpo
    }

    /// Whether the advantage baseline comes from the other episodes of the task's group.
    pub fn uses_group_baseline(&self) -> bool {
        !matches!(
            self.adv_estimator,
            AdvEstimatorName::Gae | AdvEstimatorName::ReinforcePlusPlus | AdvEstimatorName::Remax
        )
    }

    /// Whether `eps_low` / `eps_high` bound a ratio (or log-ratio) from both sides, so that
    /// `eps_high < eps_low` is probably a swap. CISPO's bounds are on a weight with a large
    /// `eps_low`, DPPO's are divergence thresholds, and the rest read neither.
    pub fn clips_the_ratio(&self) -> bool {
        if self.bypass_mode {
            return self.loss_type == BypassLossType::PpoClip;
        }
        matches!(
            self.policy_loss,
            PolicyLossName::Vanilla
                | PolicyLossName::Gspo
                | PolicyLossName::GspoSequence
                | PolicyLossName::GeoMean
                | PolicyLossName::ClipCov
        )
    }

    /// Whether the loss reads `dual_clip_c` (PPO's dual clip, DPPO's truncation, bypass
    /// `ppo_clip`).
    pub fn reads_dual_clip(&self) -> bool {
        if self.bypass_mode {
            return self.loss_type == BypassLossType::PpoClip;
        }
        matches!(
            self.policy_loss,
            PolicyLossName::Vanilla | PolicyLossName::DppoTv | PolicyLossName::DppoKl
        )
    }
}
