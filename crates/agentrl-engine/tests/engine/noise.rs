//! The noisy-log-prob wrapper: it moves log-probs, never tokens, seeded per request.

use agentrl_engine::{
    Completion, Engine, GenerateParams, GenerateRequest, NoisyLogprobs, WeightSync,
};
use agentrl_engine::{FinishReason, LogprobKind, SamplingParams};

struct Fixed;
impl Engine for Fixed {
    fn generate(
        &mut self,
        requests: &[GenerateRequest],
        _: &GenerateParams,
    ) -> anyhow::Result<Vec<Completion>> {
        Ok(requests
            .iter()
            .map(|_| Completion {
                tokens: vec![1, 2, 3],
                logprobs: vec![-1.0, -2.0, -3.0],
                finish: FinishReason::Length,
                logprob_kind: LogprobKind::TemperatureScaled,
                weight_version: 0,
            })
            .collect())
    }
    fn max_seq(&self) -> usize {
        16
    }
    fn sync_weights(&mut self, _: &WeightSync) -> anyhow::Result<()> {
        Ok(())
    }
    fn weight_version(&self) -> u64 {
        0
    }
}

#[test]
fn noise_moves_logprobs_but_not_tokens_and_is_seeded_per_request() {
    let params = GenerateParams {
        sampling: SamplingParams::default(),
        max_tokens: 3,
        stop: vec![],
    };
    let req = |seed| GenerateRequest {
        prompt: vec![0],
        seed,
        session: None,
    };
    let mut engine = NoisyLogprobs::new(Fixed, 0.3).unwrap();
    let a = engine.generate(&[req(1), req(2)], &params).unwrap();
    let b = engine.generate(&[req(2)], &params).unwrap();
    assert_eq!(a[0].tokens, vec![1, 2, 3]);
    assert_ne!(a[0].logprobs, vec![-1.0, -2.0, -3.0]);
    assert_eq!(
        a[1].logprobs, b[0].logprobs,
        "noise depends on the request only"
    );
    assert!(a.iter().flat_map(|c| &c.logprobs).all(|&l| l <= 0.0));
    assert!(NoisyLogprobs::new(Fixed, -1.0).is_err());
}
