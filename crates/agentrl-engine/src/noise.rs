//! Injected engine/trainer mismatch: an [`Engine`] wrapper that adds seeded Gaussian noise to
//! every log-prob the inner engine reports, while the sampled tokens stay the inner engine's.
//!
//! Where it sits: between the rollout driver and any engine, when `engine.logprob_noise` is
//! set. It imitates an engine whose numerics differ from the trainer's (a bf16 server, another
//! kernel), so the mismatch metrics, the rollout corrections (ALGORITHMS.md §13) and the
//! doctor can be exercised on a CPU.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

use crate::{Completion, Engine, GenerateParams, GenerateRequest, WeightSync};

/// Adds `N(0, std²)` to each reported log-prob (kept ≤ 0), seeded per request.
pub struct NoisyLogprobs<E> {
    inner: E,
    noise: Normal<f64>,
}

impl<E: Engine> NoisyLogprobs<E> {
    /// Errors when `std` is negative or not finite.
    pub fn new(inner: E, std: f64) -> anyhow::Result<Self> {
        anyhow::ensure!(
            std.is_finite() && std >= 0.0,
            "engine.logprob_noise = {std}: the noise's standard deviation must be a number >= 0"
        );
        let noise = Normal::new(0.0, std)
            .map_err(|e| anyhow::anyhow!("engine.logprob_noise = {std}: {e}"))?;
        Ok(Self { inner, noise })
    }
}

impl<E: Engine> Engine for NoisyLogprobs<E> {
    fn generate(
        &mut self,
        requests: &[GenerateRequest],
        params: &GenerateParams,
    ) -> anyhow::Result<Vec<Completion>> {
        let mut out = self.inner.generate(requests, params)?;
        for (request, completion) in requests.iter().zip(&mut out) {
            // A stream per request (not per call), so the noise does not depend on batching.
            let mut rng = ChaCha8Rng::seed_from_u64(request.seed ^ 0x6e6f_6973_655f_6c70);
            for logprob in &mut completion.logprobs {
                let noisy = f64::from(*logprob) + self.noise.sample(&mut rng);
                *logprob = noisy.min(0.0) as f32;
            }
        }
        Ok(out)
    }

    fn max_seq(&self) -> usize {
        self.inner.max_seq()
    }

    fn sync_weights(&mut self, sync: &WeightSync) -> anyhow::Result<()> {
        self.inner.sync_weights(sync)
    }

    fn weight_version(&self) -> u64 {
        self.inner.weight_version()
    }
}
