//! The doctor's failure signatures on synthetic runs: a healthy run is silent, each signature
//! is named with its evidence and steps, offline and live.

use agentrl_monitor::doctor::{diagnose, Doctor, DoctorConfig, Signature};
use agentrl_run::metrics::{names, MetricLine};

/// Lines of `steps` steps with `f(step)` giving each step's scalars.
fn run(steps: usize, f: impl Fn(usize) -> Vec<(&'static str, f64)>) -> Vec<MetricLine> {
    (1..=steps)
        .map(|s| {
            let mut line = MetricLine::new(s);
            for (name, v) in f(s) {
                line.set(name, v);
            }
            line
        })
        .collect()
}

/// A healthy run: reward and hidden solve climb, entropy falls gently, nothing else
/// moves. A tiny deterministic wobble keeps medians honest.
fn healthy(s: usize) -> Vec<(&'static str, f64)> {
    let x = s as f64;
    let wobble = 0.02 * ((s * 7919) % 5) as f64 / 5.0;
    let solve = (0.05 + 0.03 * x + wobble).min(0.97);
    vec![
        (names::REWARD_MEAN, solve),
        (names::REWARD_MAX, 1.0),
        (names::SOLVE_HIDDEN, solve),
        (names::SOLVE_PUBLIC, (solve + 0.4).min(1.0)),
        (names::TAMPER_RATE, 0.1),
        (names::HACKING_RATE, 0.4 - 0.01 * x),
        (names::ENTROPY, 0.6 - 0.01 * x),
        (names::PPO_KL, 1e-8 + wobble * 1e-8),
        (names::PG_CLIPFRAC, 0.0),
        (names::RESPONSE_LENGTH_MEAN, 10.0 + 0.1 * x),
        (names::RESPONSE_CLIP_RATIO, 0.0),
        (names::MISMATCH, 1e-7),
        (names::STALENESS_MEAN, 0.0),
        (names::ZERO_VARIANCE_GROUPS, 0.3),
        (names::FORMAT_ERROR_RATE, 0.05),
        (names::TURN_LIMIT_RATE, 0.3),
        (names::SUBMIT_RATE, 0.7),
    ]
}

/// A run that has stopped learning: [`healthy`] with hidden solve and reward flat at 0.1
/// (the context in which the doctor judges entropy and format errors as failures).
fn stalled(s: usize) -> Vec<(&'static str, f64)> {
    let wobble = 0.02 * ((s * 7919) % 5) as f64 / 5.0;
    let mut v = healthy(s);
    for (n, x) in &mut v {
        if *n == names::SOLVE_HIDDEN || *n == names::REWARD_MEAN {
            *x = 0.1 + wobble;
        }
    }
    v
}

fn with(
    base: fn(usize) -> Vec<(&'static str, f64)>,
    name: &'static str,
    value: impl Fn(usize) -> f64,
) -> impl Fn(usize) -> Vec<(&'static str, f64)> {
    move |s| {
        let mut v = base(s);
        for (n, x) in &mut v {
            if *n == name {
                *x = value(s);
            }
        }
        v
    }
}

fn signatures(lines: &[MetricLine]) -> Vec<Signature> {
    diagnose(lines, &DoctorConfig::default())
        .iter()
        .map(|f| f.signature)
        .collect()
}

#[test]
fn a_healthy_run_is_silent() {
    assert_eq!(signatures(&run(40, healthy)), []);
}

#[test]
fn mismatch_that_grows_is_named_and_a_flat_one_is_not() {
    // The hook for an engine with injected log-prob noise: |Δ log p| climbing each step.
    let growing = run(
        30,
        with(healthy, names::MISMATCH, |s| {
            if s < 10 {
                1e-7
            } else {
                0.02 * (s - 9) as f64
            }
        }),
    );
    let found = diagnose(&growing, &DoctorConfig::default());
    assert_eq!(
        found.iter().map(|f| f.signature).collect::<Vec<_>>(),
        [Signature::GrowingMismatch]
    );
    assert!(
        found[0].evidence.contains(names::MISMATCH),
        "{}",
        found[0].evidence
    );
    // Constant noise (a precision gap that does not grow) is not this signature.
    let flat = run(30, with(healthy, names::MISMATCH, |_| 0.08));
    assert_eq!(signatures(&flat), []);
    // A large mismatch from the start (`engine.logprob_noise = 0.5` measures about 0.27
    // nats per token) is named although it does not grow.
    let noisy = run(30, with(healthy, names::MISMATCH, |_| 0.27));
    assert_eq!(signatures(&noisy), [Signature::GrowingMismatch]);
}

#[test]
fn an_entropy_crash_is_collapse_even_when_it_stops_at_half_the_baseline() {
    // `actor/entropy` of the real "high LR, no entropy bonus" run on seed 2: a crash to
    // 30% at steps 6–8, a partial recovery, then 47% of the baseline at step 25.
    const SEED_2: [f64; 25] = [
        0.64, 0.65, 0.56, 0.61, 0.47, 0.22, 0.18, 0.25, 0.42, 0.45, 0.46, 0.45, 0.43, 0.45, 0.44,
        0.41, 0.45, 0.46, 0.38, 0.40, 0.39, 0.33, 0.31, 0.29, 0.29,
    ];
    let crashed = run(25, with(stalled, names::ENTROPY, |s| SEED_2[s - 1]));
    let found = diagnose(&crashed, &DoctorConfig::default());
    let collapse = found
        .iter()
        .find(|f| f.signature == Signature::EntropyCollapse)
        .expect("collapse found");
    assert!(
        collapse
            .evidence
            .contains("crashed from 0.610 (median of steps 1–5) to 0.250 (steps 6–10)"),
        "{}",
        collapse.evidence
    );
    // Found as soon as the crash is seen and has persisted: steps 10–12.
    assert_eq!((collapse.first_step, collapse.last_step), (10, 25));
    // The same crash while hidden solve climbs past half (healthy's 0.05 → 0.8) holds only
    // until the solve rate is no longer low: learning, from step 18 on.
    let learning = run(25, with(healthy, names::ENTROPY, |s| SEED_2[s - 1]));
    let found = diagnose(&learning, &DoctorConfig::default());
    let collapse = found
        .iter()
        .find(|f| f.signature == Signature::EntropyCollapse)
        .expect("collapse found");
    assert_eq!((collapse.first_step, collapse.last_step), (10, 17));
    // Seed 11 of the same run: entropy falls to 64% in 7 steps and stays there, the
    // policy stuck at the turn limit. Neither deep nor recovered.
    const SEED_11: [f64; 25] = [
        0.67, 0.65, 0.63, 0.57, 0.51, 0.45, 0.41, 0.44, 0.40, 0.40, 0.40, 0.38, 0.34, 0.36, 0.32,
        0.38, 0.39, 0.39, 0.38, 0.40, 0.40, 0.40, 0.40, 0.40, 0.40,
    ];
    let stuck = run(25, with(healthy, names::ENTROPY, |s| SEED_11[s - 1]));
    assert!(signatures(&stuck).contains(&Signature::EntropyCollapse));
    // The same crash followed by a full recovery is named for the steps it lasted only.
    let recovered = run(
        25,
        with(healthy, names::ENTROPY, |s| {
            if s <= 15 {
                SEED_2[s - 1]
            } else {
                0.6
            }
        }),
    );
    let found = diagnose(&recovered, &DoctorConfig::default());
    let collapse = found
        .iter()
        .find(|f| f.signature == Signature::EntropyCollapse)
        .expect("collapse found");
    assert_eq!((collapse.first_step, collapse.last_step), (10, 17));
    // A steady fall to half the baseline (a healthy run learning) is not one either.
    let steady = run(
        25,
        with(healthy, names::ENTROPY, |s| 0.64 - 0.013 * s as f64),
    );
    assert!(!signatures(&steady).contains(&Signature::EntropyCollapse));
    // Nor is a crash on a task the policy has solved.
    let solved = run(25, |s| {
        let mut v = with(healthy, names::ENTROPY, |s| SEED_2[s - 1])(s);
        for (n, x) in &mut v {
            if *n == names::SOLVE_HIDDEN {
                *x = 0.95;
            }
        }
        v
    });
    assert!(!signatures(&solved).contains(&Signature::EntropyCollapse));
}

#[test]
fn entropy_that_falls_as_the_solve_rate_climbs_is_learning_not_collapse() {
    // The README's PPO example (`--config ppo --set optim.lr=1e-3`, seed 0), steps 1–30:
    // entropy loses 42% of its baseline in 5 steps (steps 9–14) while hidden solve goes
    // 0.05 → 0.86, then sits at 11–16% of it while solving 0.9–1.0. The old rule named an
    // entropy collapse at steps 13–18.
    const ENTROPY: [f64; 30] = [
        0.61, 0.63, 0.63, 0.66, 0.62, 0.63, 0.59, 0.57, 0.51, 0.50, 0.44, 0.35, 0.39, 0.28, 0.24,
        0.23, 0.19, 0.16, 0.16, 0.13, 0.13, 0.11, 0.10, 0.14, 0.15, 0.10, 0.10, 0.09, 0.07, 0.07,
    ];
    const SOLVE: [f64; 30] = [
        0.02, 0.03, 0.06, 0.08, 0.05, 0.14, 0.09, 0.19, 0.33, 0.44, 0.34, 0.64, 0.59, 0.86, 0.81,
        0.73, 0.98, 0.94, 1.00, 0.98, 0.94, 1.00, 0.98, 0.86, 0.73, 0.94, 1.00, 0.89, 0.97, 0.91,
    ];
    let ppo = run(30, |s| {
        let mut v = healthy(s);
        for (n, x) in &mut v {
            match *n {
                names::ENTROPY => *x = ENTROPY[s - 1],
                names::SOLVE_HIDDEN | names::REWARD_MEAN => *x = SOLVE[s - 1],
                _ => {}
            }
        }
        v
    });
    assert_eq!(signatures(&ppo), []);
    // The same entropy with the solve rate stuck low is a collapse.
    let stuck = run(30, with(stalled, names::ENTROPY, |s| ENTROPY[s - 1]));
    assert!(signatures(&stuck).contains(&Signature::EntropyCollapse));
}

#[test]
fn the_doctor_says_which_signatures_it_could_judge() {
    let mut doctor = Doctor::new(DoctorConfig::default());
    for line in &run(12, healthy) {
        doctor.observe(line);
    }
    // Every metric is there, but 12 steps are too few for the reward plateau (5 + 20).
    let checked = doctor.checked();
    assert_eq!(checked.len(), Signature::ALL.len() - 1, "{checked:?}");
    let unchecked = doctor.unchecked();
    assert_eq!(unchecked.len(), 1);
    assert_eq!(unchecked[0].0, Signature::RewardPlateau);
    assert!(unchecked[0].1.contains("25 needed"), "{}", unchecked[0].1);
    // A metric the run does not record: that signature is not checked, and says why.
    let mut doctor = Doctor::new(DoctorConfig::default());
    for line in &run(30, healthy) {
        let mut line = line.clone();
        line.scalars.remove(names::MISMATCH);
        doctor.observe(&line);
    }
    let unchecked = doctor.unchecked();
    assert_eq!(unchecked.len(), 1, "{unchecked:?}");
    assert_eq!(unchecked[0].0, Signature::GrowingMismatch);
    assert!(unchecked[0].1.contains("records no"), "{}", unchecked[0].1);
}

#[test]
fn weights_that_never_sync_show_as_staleness_growing_by_one_per_step() {
    let stale = run(20, with(healthy, names::STALENESS_MEAN, |s| (s - 1) as f64));
    assert!(signatures(&stale).contains(&Signature::WeightsNeverSynced));
}

#[test]
fn public_rising_while_hidden_stays_flat_is_hacking() {
    let hack = |s: usize| {
        let mut v = healthy(s);
        for (n, x) in &mut v {
            match *n {
                names::SOLVE_HIDDEN => *x = 0.05,
                names::SOLVE_PUBLIC | names::REWARD_MEAN => *x = (0.4 + 0.04 * s as f64).min(1.0),
                _ => {}
            }
        }
        v
    };
    let found = diagnose(&run(30, hack), &DoctorConfig::default());
    let hacking = found
        .iter()
        .find(|f| f.signature == Signature::RewardHacking)
        .expect("hacking found");
    assert!(hacking.evidence.contains(names::SOLVE_PUBLIC));
    assert!(
        hacking.first_step > 5 && hacking.last_step == 30,
        "{hacking:?}"
    );
}

#[test]
fn a_signature_needs_persistence_and_is_reported_once_live() {
    let mut doctor = Doctor::new(DoctorConfig::default());
    let lines = run(
        25,
        with(stalled, names::FORMAT_ERROR_RATE, |s| {
            if s > 12 {
                0.6
            } else {
                0.05
            }
        }),
    );
    let mut appeared = Vec::new();
    for line in &lines {
        for f in doctor.observe(line) {
            appeared.push((line.step, f.signature));
        }
    }
    // The window median crosses at step 15 (3 of 5 recent values high), then 3 steps of
    // persistence: reported at step 17, once.
    assert_eq!(appeared, [(17, Signature::FormatCollapse)]);
    let f = &doctor.findings()[0];
    assert_eq!((f.first_step, f.last_step), (15, 25));

    // Format errors up while hidden solve climbs and holds: the noise of a learning policy.
    let errors = |s: usize| if s > 12 { 0.3 } else { 0.05 };
    let learning = run(25, with(healthy, names::FORMAT_ERROR_RATE, errors));
    assert!(!signatures(&learning).contains(&Signature::FormatCollapse));
    // The same errors as hidden solve falls from its best (0.6 → 0.1): a collapse, although
    // the run had learned.
    let falling = run(30, |s| {
        let mut v = with(healthy, names::FORMAT_ERROR_RATE, |s| {
            if s > 22 {
                0.3
            } else {
                0.05
            }
        })(s);
        for (n, x) in &mut v {
            if *n == names::SOLVE_HIDDEN || *n == names::REWARD_MEAN {
                *x = if s > 22 {
                    0.1
                } else {
                    (0.05 + 0.03 * s as f64).min(0.6)
                };
            }
        }
        v
    });
    assert!(signatures(&falling).contains(&Signature::FormatCollapse));
}

#[test]
fn a_diverged_kl_is_a_blow_up() {
    let nan = run(
        20,
        with(
            healthy,
            names::PPO_KL,
            |s| if s > 12 { f64::NAN } else { 1e-8 },
        ),
    );
    assert!(signatures(&nan).contains(&Signature::KlBlowUp));
}
