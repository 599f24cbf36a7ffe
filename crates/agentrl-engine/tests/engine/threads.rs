//! The thread-count wrapper: `generate` runs on a rayon pool of the asked size (its own
//! pool, so the other tests' threads are untouched).

use agentrl_engine::{Completion, Engine, GenerateParams, GenerateRequest, OnThreads, WeightSync};
use agentrl_engine::{FinishReason, LogprobKind, SamplingParams};

/// Reports, as its one token, how many threads the pool it runs in has.
struct CountsThreads;

impl Engine for CountsThreads {
    fn generate(
        &mut self,
        requests: &[GenerateRequest],
        _: &GenerateParams,
    ) -> anyhow::Result<Vec<Completion>> {
        Ok(requests
            .iter()
            .map(|_| Completion {
                tokens: vec![rayon::current_num_threads() as u32],
                logprobs: vec![0.0],
                finish: FinishReason::Length,
                logprob_kind: LogprobKind::TemperatureScaled,
                weight_version: 0,
            })
            .collect())
    }
    fn max_seq(&self) -> usize {
        8
    }
    fn sync_weights(&mut self, _: &WeightSync) -> anyhow::Result<()> {
        Ok(())
    }
    fn weight_version(&self) -> u64 {
        0
    }
}

#[test]
fn generate_runs_on_a_pool_of_the_asked_thread_count() {
    let params = GenerateParams {
        sampling: SamplingParams::default(),
        max_tokens: 1,
        stop: vec![],
    };
    let request = GenerateRequest {
        prompt: vec![0],
        seed: 0,
        session: None,
    };
    for threads in [1, 3] {
        let mut engine = OnThreads::new(CountsThreads, threads).unwrap();
        let out = engine
            .generate(std::slice::from_ref(&request), &params)
            .unwrap();
        assert_eq!(out[0].tokens, vec![threads as u32]);
    }
    assert!(OnThreads::new(CountsThreads, 0).is_err());
}
