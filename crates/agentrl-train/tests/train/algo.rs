//! The algorithm presets: every name and verl spelling reads back, every preset passes its
//! own checks, and the checks name the knob at fault.

use agentrl_train::algo::{
    bypass, clip_cov, dppo, grpo, rloo, sapo, AdvEstimatorName, Algorithm, Knobs, PolicyLossName,
    StepShape, ALL,
};
use serde::Deserialize;

const SHAPE: StepShape = StepShape {
    group_size: 8,
    tasks_per_step: 8,
};

fn named(name: &str) -> Algorithm {
    Algorithm::deserialize(toml::Value::String(name.into()))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn every_name_reads_back_and_verl_spellings_are_accepted() {
    for algorithm in ALL {
        assert_eq!(named(algorithm.as_str()), algorithm);
    }
    for (alias, algorithm) in [
        ("gmpo", Algorithm::Gmpo),
        ("dppo", Algorithm::DppoTv),
        ("clip-cov", Algorithm::ClipCov),
        ("kl-cov", Algorithm::KlCov),
        ("otb", Algorithm::Otb),
        ("tir_otb", Algorithm::TirOtb),
    ] {
        assert_eq!(named(alias), algorithm);
    }
}

#[test]
fn every_preset_passes_its_own_checks() {
    for algorithm in ALL {
        let f = algorithm.check(&algorithm.preset(), SHAPE, &[]);
        assert!(f.errors.is_empty(), "{algorithm}: {:?}", f.errors);
    }
}

#[test]
fn the_new_knobs_are_checked() {
    let errors = |algorithm: Algorithm, knobs: Knobs| algorithm.check(&knobs, SHAPE, &[]).errors;
    let sapo = Knobs {
        tau_neg: 0.0,
        ..sapo::PRESET
    };
    assert!(errors(Algorithm::Sapo, sapo)[0].contains("tau_neg"));
    let clip_cov = Knobs {
        clip_cov_lb: 6.0,
        ..clip_cov::PRESET
    };
    assert!(errors(Algorithm::ClipCov, clip_cov)[0].contains("clip_cov_lb"));
    // DPPO's bounds are divergence thresholds: an asymmetric pair is no swap.
    let dppo = Knobs {
        eps_low: 0.3,
        ..dppo::PRESET_TV
    };
    assert!(errors(Algorithm::DppoTv, dppo).is_empty());
    // A knob only another preset reads is reported.
    let f = Algorithm::Grpo.check(&grpo::PRESET, SHAPE, &["tau_pos".to_string()]);
    assert!(
        f.warnings.iter().any(|w| w.contains("tau_pos")),
        "{:?}",
        f.warnings
    );
}

#[test]
fn only_remax_samples_a_greedy_baseline_and_it_has_no_group_baseline() {
    for algorithm in ALL {
        let k = algorithm.preset();
        let greedy = k.needs_greedy_baseline();
        assert_eq!(greedy, algorithm == Algorithm::Remax, "{algorithm}");
        assert!(!(greedy && k.uses_group_baseline()), "{algorithm}");
    }
}

/// Every estimator and every loss, selected by verl's name on another preset, passes the
/// checks with its own knobs' defaults, except where the loss needs a knob the preset
/// leaves unset (DPPO's truncation c), which is an error naming the knob.
#[test]
fn every_verl_name_is_selectable_on_any_preset() {
    for &adv_estimator in AdvEstimatorName::ALL {
        let k = Knobs {
            adv_estimator,
            value_coef: if adv_estimator == AdvEstimatorName::Gae {
                0.5
            } else {
                0.0
            },
            ..grpo::PRESET
        };
        let f = Algorithm::Grpo.check(&k, SHAPE, &["adv_estimator".into()]);
        assert!(f.errors.is_empty(), "{adv_estimator}: {:?}", f.errors);
    }
    for &policy_loss in PolicyLossName::ALL {
        let k = Knobs {
            policy_loss,
            ..rloo::PRESET
        };
        let f = Algorithm::Rloo.check(&k, SHAPE, &["policy_loss".into()]);
        if matches!(policy_loss, PolicyLossName::DppoTv | PolicyLossName::DppoKl) {
            assert!(f.errors[0].contains("dual_clip_c"), "{:?}", f.errors);
        } else {
            assert!(f.errors.is_empty(), "{policy_loss}: {:?}", f.errors);
        }
    }
}

#[test]
fn rollout_correction_checks_name_the_knob() {
    let errors = |k: Knobs| Algorithm::Grpo.check(&k, SHAPE, &[]).errors;
    // Decoupled mode needs the trainer's π_old.
    let decoupled = Knobs {
        rollout_is: Some(agentrl_rl::IsLevel::Token),
        ..grpo::PRESET
    };
    assert!(errors(decoupled.clone())[0].contains("old_logprob_pass"));
    assert!(errors(Knobs {
        old_logprob_pass: true,
        ..decoupled
    })
    .is_empty());
    // Bypass mode is the opposite, and allows epochs > 1 on the engine's log-probs.
    let bypass = Knobs {
        epochs: 2,
        ..bypass::PRESET_PG_IS
    };
    assert!(
        errors(bypass.clone()).is_empty(),
        "{:?}",
        errors(bypass.clone())
    );
    assert!(errors(Knobs {
        old_logprob_pass: true,
        ..bypass
    })[0]
        .contains("bypass_mode"));
    let bad = Knobs {
        rollout_rs: Some("token_k1,seq_mean_k3".into()),
        rollout_rs_threshold: Some(agentrl_rl::ThresholdSpec::Text("0.5_2.0".into())),
        ..bypass::PRESET_PPO_CLIP_K3_RS
    };
    // One threshold shared by both options: `0.5_2.0` is no upper bound for k3.
    assert!(
        errors(bad.clone())[0].starts_with("algorithm.rollout_rs_threshold"),
        "{:?}",
        errors(bad)
    );
}
