//! An [`Engine`] wrapper that decodes on a thread count of its own: every `generate` runs
//! inside a rayon pool of `threads` threads, so candle's matmuls and the fused kernels
//! (which parallelise over the current rayon pool) split their work that many ways.
//!
//! Where it sits: between the trainer and its local engine (`engine.threads`, by default the
//! trainer's thread count). Through candle's ops a small model's decoding step, a batch of
//! tiny matmuls, ran faster on one thread than on two (issue 16); TinyAgent's explicit decoder
//! (`agentrl_model::tiny`, `decode.rs`) runs whole chunks of rows per thread instead, and the
//! default run's `timing_s/gen` went from 5.5 s on one thread to 4.4 s on two (60 steps, 2
//! cores, same figures: its chunks do not depend on the thread count). The rollout driver
//! runs the sandbox's test runs after the engine's turn, not beside it, so the second core
//! was idle while the engine decoded on one.
//!
//! The pools are built once per thread count and shared (a pool's threads live as long as
//! the process), since the trainer asks for an engine every step.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::{Completion, Engine, GenerateParams, GenerateRequest, WeightSync};

/// `inner`, with every `generate` on a rayon pool of its own thread count.
pub struct OnThreads<E> {
    inner: E,
    pool: Arc<rayon::ThreadPool>,
}

/// The shared pool of `threads` threads.
fn pool_of(threads: usize) -> anyhow::Result<Arc<rayon::ThreadPool>> {
    static POOLS: OnceLock<Mutex<BTreeMap<usize, Arc<rayon::ThreadPool>>>> = OnceLock::new();
    let mut pools = POOLS
        .get_or_init(Default::default)
        .lock()
        .map_err(|_| anyhow::anyhow!("engine.threads: the pool registry was poisoned"))?;
    if let Some(pool) = pools.get(&threads) {
        return Ok(pool.clone());
    }
    let pool = Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("agentrl-engine-{i}"))
            .build()
            .map_err(|e| anyhow::anyhow!("engine.threads = {threads}: {e}"))?,
    );
    pools.insert(threads, pool.clone());
    Ok(pool)
}

impl<E: Engine + Send> OnThreads<E> {
    /// Errors when `threads` is 0 or the pool cannot be built.
    pub fn new(inner: E, threads: usize) -> anyhow::Result<Self> {
        anyhow::ensure!(threads > 0, "engine.threads must be > 0 here");
        Ok(Self {
            inner,
            pool: pool_of(threads)?,
        })
    }
}

impl<E: Engine + Send> Engine for OnThreads<E> {
    fn generate(
        &mut self,
        requests: &[GenerateRequest],
        params: &GenerateParams,
    ) -> anyhow::Result<Vec<Completion>> {
        let inner = &mut self.inner;
        self.pool.install(|| inner.generate(requests, params))
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
