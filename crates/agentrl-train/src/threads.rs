//! The compute thread count of a process: the one place the library sets process-wide state,
//! at the trainer's entry points ([`crate::trainer::Trainer::create`] and `resume`),
//! before any tensor work.
//!
//! candle sizes its CPU matmul parallelism from `RAYON_NUM_THREADS` on every call, and rayon
//! sizes its global pool from the same variable once, so both are set together here. A run's
//! thread count fixes its float summation order, which is what "the same seed and the same
//! thread count give the same run" rests on.

/// Keeps candle from starting a thread pool of its own beside rayon's: candle 0.11 runs every
/// elementwise op of 64k elements or more on a "barrier pool" (`CANDLE_NUM_THREADS`, by default
/// the rayon thread count, minus the calling thread) whose workers spin for 25,000 rounds after
/// each op. On 2 cores that put a spinning thread beside the two rayon workers: a quarter of
/// `agentrl bench train-step` runs took 36 ms instead of 22 (8 runs each way; with the pool off,
/// 8 of 8 at 21.6–23.9 ms), and under load the step took 1.5x as long. With one thread the pool
/// has no workers and those ops run on the calling thread; every matmul and fused kernel still
/// runs on rayon's pool. Idempotent; `CANDLE_NUM_THREADS`, when set in the environment, wins.
/// Called at the trainer's entry points ([`apply`]) and by the `agentrl` binary at start-up,
/// before any tensor work.
pub fn single_candle_pool() {
    static APPLIED: std::sync::Once = std::sync::Once::new();
    APPLIED.call_once(|| {
        if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
            std::env::set_var("CANDLE_NUM_THREADS", "1");
            CANDLE_POOL_IS_OURS.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    });
}

/// Whether `CANDLE_NUM_THREADS` was written by this module rather than by the user.
static CANDLE_POOL_IS_OURS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Gives candle's elementwise pool `threads` threads, for a real language model: its
/// elementwise ops run over `[T, hidden]` tensors of a million elements and more (RMSNorm,
/// RoPE, SiLU, LoRA's sums, and the gradient sums of candle's backward pass), a quarter of an
/// update's time on one thread. Measured on SmolLM2 (`agentrl sft --config smollm2
/// --set rollout.group_size=1 --set algorithm.minibatches=2`, 3 steps, 2 cores): the update
/// took 26.2 s a step with one thread, 22.6 s with two, with the same losses to every digit
/// (an elementwise op computes each element alone). TinyAgent keeps [`single_candle_pool`]:
/// its tensors are small and the pool's spinning worker only contends with rayon's. Called
/// by the trainer's entry points before [`apply`] and before any tensor work (candle sizes the
/// pool once, on its first elementwise op of 64k elements or more). A `CANDLE_NUM_THREADS`
/// set in the environment still wins.
pub fn share_candle_pool(threads: usize) {
    if CANDLE_POOL_IS_OURS.load(std::sync::atomic::Ordering::SeqCst)
        || std::env::var_os("CANDLE_NUM_THREADS").is_none()
    {
        std::env::set_var("CANDLE_NUM_THREADS", threads.to_string());
        CANDLE_POOL_IS_OURS.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Makes this process compute on `threads` threads. Idempotent for the same count; a second
/// call with another count after the pool exists is an error (the pool cannot be resized).
pub fn apply(threads: usize) -> anyhow::Result<()> {
    anyhow::ensure!(threads > 0, "train.threads resolved to 0 threads");
    single_candle_pool();
    static APPLIED: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let first = *APPLIED.get_or_init(|| {
        // Set before rayon's global pool exists, in the process's first call; the variable
        // is read by candle on every matmul.
        std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
        // Fails only if another part of the process built the pool first; the variable
        // still sizes candle's kernels, and the check below reports a mismatch.
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build_global();
        threads
    });
    anyhow::ensure!(
        first == threads && rayon::current_num_threads() == threads,
        "this process already computes on {} threads; train.threads = {threads} cannot be \
         applied (start a new process)",
        rayon::current_num_threads()
    );
    Ok(())
}
