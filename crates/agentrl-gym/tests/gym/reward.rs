//! Reward functions over verdict counts: the kinds, penalties, length knobs, the tampered
//! minimum and the TOML/JSON forms.

use agentrl_gym::{Ending, Reward, RewardFn, RewardKind};

fn counts(public: (u32, u32), hidden: (u32, u32), format_errors: u32) -> Reward {
    Reward {
        score: 0.0,
        public_passed: public.0,
        public_total: public.1,
        hidden_passed: hidden.0,
        hidden_total: hidden.1,
        tampered: false,
        format_errors,
        verdict_reruns: 0,
    }
}

const SUBMITTED: Ending = Ending {
    turns: 2,
    submitted: true,
};

#[test]
fn reward_functions_score_counts() {
    let hacked = counts((3, 3), (1, 5), 0);
    let solved = counts((3, 3), (5, 5), 2);
    let hidden = RewardFn::of(RewardKind::Hidden);
    let public = RewardFn::of(RewardKind::Public);
    assert_eq!(hidden.score(&hacked, SUBMITTED), 0.0);
    assert_eq!(hidden.score(&solved, SUBMITTED), 1.0);
    assert_eq!(public.score(&hacked, SUBMITTED), 1.0);
    assert_eq!(public.score(&counts((2, 3), (5, 5), 0), SUBMITTED), 0.0);
    assert!((RewardFn::of(RewardKind::Fraction).score(&hacked, SUBMITTED) - 0.2).abs() < 1e-6);
    let penalised = RewardFn {
        format_penalty: 0.25,
        ..RewardFn::default()
    };
    assert!((penalised.score(&solved, SUBMITTED) - 0.5).abs() < 1e-6);
    assert_eq!(RewardFn::default(), hidden);
}

#[test]
fn a_tampered_verdict_scores_the_minimum() {
    let forged = Reward {
        tampered: true,
        ..counts((3, 3), (5, 5), 1)
    };
    for kind in [RewardKind::Hidden, RewardKind::Fraction] {
        let f = RewardFn {
            kind,
            format_penalty: 0.25,
            ..RewardFn::default()
        };
        let failed = counts((3, 3), (0, 5), 1);
        assert_eq!(
            f.score(&forged, SUBMITTED),
            f.score(&failed, SUBMITTED),
            "{kind:?}"
        );
        assert!((f.score(&forged, SUBMITTED) + 0.25).abs() < 1e-6);
    }
    // The hackable reward stays hackable: that is what it is for.
    assert_eq!(
        RewardFn::of(RewardKind::Public).score(&forged, SUBMITTED),
        1.0
    );
}

#[test]
fn length_knobs_price_turns_and_an_unsubmitted_ending() {
    let solved = counts((3, 3), (5, 5), 0);
    let at_limit = Ending {
        turns: 4,
        submitted: false,
    };
    // By default the turn limit pays what a submit pays: nothing prices the length.
    let plain = RewardFn::default();
    assert_eq!(
        plain.score(&solved, at_limit),
        plain.score(&solved, SUBMITTED)
    );
    let costly = RewardFn {
        turn_cost: 0.05,
        ..RewardFn::default()
    };
    assert!((costly.score(&solved, SUBMITTED) - 0.9).abs() < 1e-6);
    assert!((costly.score(&solved, at_limit) - 0.8).abs() < 1e-6);
    let strict = RewardFn {
        require_submit: true,
        format_penalty: 0.25,
        ..RewardFn::default()
    };
    assert_eq!(strict.score(&solved, SUBMITTED), 1.0);
    // No verdict at the limit, but the penalties still apply.
    let sloppy = counts((3, 3), (5, 5), 1);
    assert!((strict.score(&sloppy, at_limit) + 0.25).abs() < 1e-6);
}

#[test]
fn reward_fn_round_trips_through_toml_and_json() {
    let f = RewardFn {
        kind: RewardKind::Fraction,
        format_penalty: 0.1,
        turn_cost: 0.02,
        require_submit: true,
    };
    let json = serde_json::to_string(&f).unwrap();
    assert_eq!(serde_json::from_str::<RewardFn>(&json).unwrap(), f);
    let cfg: RewardFn = toml::from_str("kind = \"public\"\nformat_penalty = 0.5\n").unwrap();
    assert_eq!(
        cfg,
        RewardFn {
            kind: RewardKind::Public,
            format_penalty: 0.5,
            ..RewardFn::default()
        }
    );
    assert!(toml::from_str::<RewardFn>("kind = \"public\"\npenalty = 0.5\n").is_err());
}
