//! verl's estimator and loss names: they parse back, map to the RL crate's variants with the
//! knobs' parameters, and a bad name or rejection string names its knob.

use agentrl_rl::{AdvantageEstimator, BypassLossType, PolicyLoss};
use agentrl_train::algo::{AdvEstimatorName, Algorithm, Knobs, PolicyLossName, ALL, BASE};

#[test]
fn every_name_parses_back_and_unknown_names_list_the_valid_ones() {
    for &name in AdvEstimatorName::ALL {
        assert_eq!(AdvEstimatorName::parse(name.as_str()), Ok(name));
    }
    for &name in PolicyLossName::ALL {
        assert_eq!(PolicyLossName::parse(name.as_str()), Ok(name));
    }
    assert_eq!(
        AdvEstimatorName::parse("grpo_vectorized"),
        Ok(AdvEstimatorName::Grpo)
    );
    let err = AdvEstimatorName::parse("rloo_vectorized").unwrap_err();
    assert!(
        err.contains("algorithm.adv_estimator") && err.contains("tir_optimal_token_baseline"),
        "{err}"
    );
    let err = PolicyLossName::parse("ppo").unwrap_err();
    assert!(
        err.contains("algorithm.policy_loss") && err.contains("dppo_kl"),
        "{err}"
    );
}

#[test]
fn names_map_to_the_crate_variants_with_the_knobs_parameters() -> anyhow::Result<()> {
    let k = Knobs {
        eps_low: 0.1,
        eps_high: 0.3,
        dual_clip_c: Some(4.0),
        tau_pos: 0.7,
        dro_beta: 0.3,
        ..BASE
    };
    let with = |policy_loss| Knobs {
        policy_loss,
        ..k.clone()
    };
    assert_eq!(
        with(PolicyLossName::Vanilla).policy_loss()?,
        PolicyLoss::PpoClip {
            clip_low: 0.1,
            clip_high: 0.3,
            dual_clip: Some(4.0)
        }
    );
    assert_eq!(
        with(PolicyLossName::Gspo).policy_loss()?,
        PolicyLoss::GspoToken {
            clip_low: 0.1,
            clip_high: 0.3
        }
    );
    assert_eq!(
        with(PolicyLossName::DppoKl).policy_loss()?,
        PolicyLoss::DppoKl {
            clip_low: 0.1,
            clip_high: 0.3,
            clip_ratio_c: 4.0
        }
    );
    assert!(matches!(
        with(PolicyLossName::Sapo).policy_loss()?,
        PolicyLoss::Sapo { tau_pos, .. } if tau_pos == 0.7
    ));
    assert_eq!(
        with(PolicyLossName::Dro).policy_loss()?,
        PolicyLoss::Dro { dro_beta: 0.3 }
    );
    // Bypass mode replaces the named loss, as verl's apply_bypass_mode does.
    let bypass = Knobs {
        bypass_mode: true,
        loss_type: BypassLossType::Reinforce,
        ..with(PolicyLossName::Sapo)
    };
    assert!(matches!(
        bypass.policy_loss()?,
        PolicyLoss::BypassMode {
            loss_type: BypassLossType::Reinforce,
            clip_ratio_c,
            ..
        } if clip_ratio_c == 4.0
    ));
    let est = |adv_estimator| Knobs {
        adv_estimator,
        std_normalize: false,
        gamma: 0.9,
        ..k.clone()
    };
    assert_eq!(
        est(AdvEstimatorName::Gae).advantage_estimator(),
        AdvantageEstimator::Gae {
            gamma: 0.9,
            lambda: BASE.lam
        }
    );
    assert_eq!(
        est(AdvEstimatorName::GrpoPassk).advantage_estimator(),
        AdvantageEstimator::GrpoPassk { norm_by_std: false }
    );
    assert_eq!(
        est(AdvEstimatorName::ReinforcePlusPlus).advantage_estimator(),
        AdvantageEstimator::ReinforcePlusPlus { gamma: 0.9 }
    );
    Ok(())
}

#[test]
fn a_bad_rejection_string_names_its_knob() {
    let k = Knobs {
        rollout_rs: Some("token_k1,seq_mean_k3".into()),
        rollout_rs_threshold: Some(agentrl_rl::ThresholdSpec::Text("0.5_2.0,0.1,3".into())),
        ..BASE
    };
    let err = k.rollout_correction().unwrap_err().to_string();
    assert!(err.starts_with("algorithm.rollout_rs_threshold"), "{err}");
    let k = Knobs {
        rollout_rs: Some("token_k9".into()),
        rollout_rs_threshold: Some(agentrl_rl::ThresholdSpec::Number(2.0)),
        ..BASE
    };
    let err = k.rollout_correction().unwrap_err().to_string();
    assert!(
        err.starts_with("algorithm.rollout_rs") && err.contains("seq_max_k3"),
        "{err}"
    );
}

#[test]
fn every_preset_names_an_estimator_and_a_loss_that_build() -> anyhow::Result<()> {
    for algorithm in ALL {
        let k = algorithm.preset();
        k.policy_loss()?;
        k.advantage_estimator();
        assert_eq!(
            k.needs_greedy_baseline(),
            algorithm == Algorithm::Remax,
            "{algorithm}"
        );
    }
    Ok(())
}
