//! `x · W` for a few rows of `x` (decoding: one row per sequence of the batch, 1 to
//! [`MAX_ROWS`]) against a frozen f32 weight packed once into column panels, with AVX2 + FMA
//! and f32 accumulation: the frozen Qwen3 weights' product when the engine decodes
//! (`ForwardMode::Inference`, `qwen3/model.rs`, `Linear`). No backward pass.
//!
//! **Why.** Decoding multiplies `[m, in]` by each weight with `m` the batch (1–16). The `gemm`
//! crate behind candle's matmul is built for large products: on SmolLM2-135M batch-8 decoding
//! (`perf record`) 17% of the time went to its packing of the weight on every call, for a
//! product that reads each weight value only `m` times, and its microkernels ran at a fraction
//! of the FMA units' rate on these thin shapes.
//!
//! **Layout.** The weight `W [K, N]` (the transposed storage `x·Wᵀ` reads) is copied once into
//! panels of [`PANEL`] = 16 output columns: panel `p` holds, for each input `k`, the 16 values
//! `W[k, 16p..16p + 16]` as one 64-byte aligned line (zero past `N`), so the kernel reads a panel
//! as one contiguous stream. It costs as much memory as the f32 weight.
//!
//! **Kernel.** For a panel and a tile of up to `MAX_TILE_ROWS` = 6 rows of `x`, the 6 × 16
//! outputs live in 12 AVX2 registers; each step loads the panel's two vectors and broadcasts
//! one `x` value per row: 12 FMAs per 8 loads, so the FMA units, not the loads, bound it. The
//! rows are split into balanced tiles (16 rows: 6 + 5 + 5), and the `K` loop into blocks of
//! `K_BLOCK` inputs: every tile runs over one block (8 KiB of the panel) before the next, so
//! the later tiles read it from L1, the running sums wait in a small aligned buffer between
//! blocks, and the first tile prefetches (into L2) the lines two blocks ahead. The weights
//! stream from memory (a model's weights do not fit in cache): measured on one core of this
//! 2-core Xeon, `[16, 576] × [576, 1536]` streamed from memory ran at 57 GFLOP/s (the same
//! product from L2: 94), candle's matmul (the `gemm` crate, AVX-512 here) at 36; the prefetch
//! took the streamed figure from ~48 to ~57-61. Threads take disjoint ranges of panels, and
//! each output is one sequential sum over `k` (a block boundary only passes the sum through
//! memory): the result does not depend on the thread count or on the other rows.
//!
//! **Where.** Only where the CPU has AVX2 and FMA (checked at run time; the portable path is
//! candle's matmul), for `m ≤ MAX_ROWS`.

use rayon::prelude::*;

/// Output columns per packed panel.
pub const PANEL: usize = 16;
/// Most rows of `x` the thin path takes; more rows go to the general GEMM, which then amortises
/// its packing.
pub const MAX_ROWS: usize = 16;
/// Rows of `x` whose outputs one kernel call keeps in registers.
const MAX_TILE_ROWS: usize = 6;
/// Inputs per block: every row tile of a panel runs over one block of `K_BLOCK` lines (8 KiB)
/// before the next block, so the later tiles read it from L1, and the panel's stream from
/// memory advances at an even pace instead of once per panel.
const K_BLOCK: usize = 128;
/// How far ahead of the line it multiplies the first tile prefetches (two blocks: 16 KiB).
const PREFETCH_LINES: usize = 2 * K_BLOCK;

/// Chunks of panels per thread of the pool (see `ThinWeight::matmul`).
const CHUNKS_PER_THREAD: usize = 4;

/// One panel's running sums for up to [`MAX_ROWS`] rows, between blocks.
#[repr(C, align(64))]
struct Sums([f32; MAX_ROWS * PANEL]);

/// One input's 16 weights of a panel, on a cache line of its own.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; PANEL]);

/// Whether this CPU runs the thin path (AVX2 and FMA).
pub fn thin_available() -> bool {
    arch::available()
}

/// A `[K, N]` f32 weight packed in column panels for [`ThinWeight::matmul`] (module doc).
#[derive(Clone)]
pub struct ThinWeight {
    k: usize,
    n: usize,
    /// `N / 16` (rounded up) panels of `K` lines.
    lines: Vec<Line>,
}

impl ThinWeight {
    /// Packs `weight`, a row-major `[k, n]` f32 matrix; `None` when its length is not `k · n`
    /// or a dimension is zero.
    pub fn pack(weight: &[f32], k: usize, n: usize) -> Option<Self> {
        if k == 0 || n == 0 || weight.len() != k * n {
            return None;
        }
        let panels = n.div_ceil(PANEL);
        let mut lines = vec![Line([0.0; PANEL]); panels * k];
        lines
            .par_chunks_mut(k)
            .enumerate()
            .for_each(|(panel, lines)| {
                let first = panel * PANEL;
                let width = PANEL.min(n - first);
                for (row, line) in lines.iter_mut().enumerate() {
                    let start = row * n + first;
                    line.0[..width].copy_from_slice(&weight[start..start + width]);
                }
            });
        Some(Self { k, n, lines })
    }

    /// Input features `K`.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Output features `N`.
    pub fn n(&self) -> usize {
        self.n
    }

    /// `x · W` for row-major `x: [m, K]`, as a row-major `[m, N]` vector; `None` when the thin
    /// path does not apply (no AVX2/FMA, `m` is 0 or above [`MAX_ROWS`], or `x` has the wrong
    /// length), and the caller runs the general GEMM.
    pub fn matmul(&self, x: &[f32], m: usize) -> Option<Vec<f32>> {
        if !thin_available() || m == 0 || m > MAX_ROWS || x.len() != m * self.k {
            return None;
        }
        let (k, n) = (self.k, self.n);
        let panels = n.div_ceil(PANEL);
        let mut out: Vec<f32> = Vec::with_capacity(m * n);
        // A few chunks per thread rather than one, so a thread that loses its core to another
        // process (a shared machine) does not hold the whole product back: the others take
        // its remaining chunks.
        let chunks = (rayon::current_num_threads() * CHUNKS_PER_THREAD).clamp(1, panels);
        let per_chunk = panels.div_ceil(chunks);
        let out_ptr = SendPtr(out.spare_capacity_mut().as_mut_ptr().cast::<f32>());
        let tiles = row_tiles(m);
        (0..chunks).into_par_iter().for_each(|t| {
            let first = t * per_chunk;
            let last = ((t + 1) * per_chunk).min(panels);
            if first >= last {
                return;
            }
            // The whole wrapper, not its raw field (a closure captures fields by themselves).
            let out_ptr = &out_ptr;
            // This chunk's panels, one contiguous stream of lines.
            let range = &self.lines[first * k..last * k];
            let mut sums = Sums([0.0; MAX_ROWS * PANEL]);
            for panel in 0..last - first {
                for start in (0..k).step_by(K_BLOCK) {
                    let steps = K_BLOCK.min(k - start);
                    let at = panel * k + start;
                    let ahead = at + PREFETCH_LINES;
                    let prefetch = if ahead + steps <= range.len() {
                        range[ahead..].as_ptr().cast::<f32>()
                    } else {
                        std::ptr::null()
                    };
                    for (index, &(row, rows)) in tiles.iter().enumerate() {
                        let block = arch::Block {
                            // SAFETY (of the offset): `row < m` and `start < k`.
                            x: unsafe { x.as_ptr().add(row * k + start) },
                            x_stride: k,
                            lines: range[at..].as_ptr().cast::<f32>(),
                            steps,
                            prefetch: if index == 0 {
                                prefetch
                            } else {
                                std::ptr::null()
                            },
                            sums: sums.0[row * PANEL..].as_mut_ptr(),
                            fresh: start == 0,
                        };
                        // SAFETY: the thin path is available (checked above); `x` holds `m`
                        // rows of `k` values, so `rows` rows of `steps` values from `block.x`;
                        // `range` holds `steps` lines from `at`, and `prefetch` (when not null)
                        // as many from `ahead`; `sums` holds `rows` lines from `row` (64-byte
                        // aligned, as `Sums` and `PANEL` are).
                        unsafe { arch::tile(rows, &block) };
                    }
                }
                let column = (first + panel) * PANEL;
                let width = PANEL.min(n - column);
                for (row, line) in sums.0.chunks_exact(PANEL).take(m).enumerate() {
                    // SAFETY: columns `column..column + width` of row `row < m` of the `[m, n]`
                    // output are inside it, and only this chunk writes this panel's columns.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            line.as_ptr(),
                            out_ptr.0.add(row * n + column),
                            width,
                        )
                    };
                }
            }
        });
        // SAFETY: every chunk stored every column of its panels in every row, and f32 has no
        // invalid bit patterns.
        unsafe { out.set_len(m * n) };
        Some(out)
    }
}

impl std::fmt::Debug for ThinWeight {
    /// The shape only: the packed values are as large as the weight.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThinWeight")
            .field("k", &self.k)
            .field("n", &self.n)
            .finish_non_exhaustive()
    }
}

/// `m` rows as balanced `(first row, rows)` tiles of at most `MAX_TILE_ROWS`.
fn row_tiles(m: usize) -> Vec<(usize, usize)> {
    let count = m.div_ceil(MAX_TILE_ROWS);
    let (base, extra) = (m / count, m % count);
    let mut row = 0;
    (0..count)
        .map(|i| {
            let rows = base + usize::from(i < extra);
            let tile = (row, rows);
            row += rows;
            tile
        })
        .collect()
}

/// A raw output pointer shared by threads that write disjoint panels.
struct SendPtr(*mut f32);
// SAFETY: each thread writes a disjoint set of output elements (see `ThinWeight::matmul`).
unsafe impl Sync for SendPtr {}
unsafe impl Send for SendPtr {}

#[cfg(target_arch = "x86_64")]
mod arch {
    use std::arch::x86_64::*;

    use super::PANEL;

    pub(super) fn available() -> bool {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }

    /// One kernel call: `rows` rows of `x` times one block of a panel.
    pub(super) struct Block {
        /// The rows' first inputs of the block (row stride `x_stride`).
        pub x: *const f32,
        pub x_stride: usize,
        /// The block's first line.
        pub lines: *const f32,
        /// Lines (inputs) in the block.
        pub steps: usize,
        /// Null, or `steps` lines to prefetch.
        pub prefetch: *const f32,
        /// The rows' running sums, one 64-byte aligned line each: read unless `fresh`, written.
        pub sums: *mut f32,
        pub fresh: bool,
    }

    /// Dispatches a tile of `rows` (1 to 6) rows to its register-resident kernel.
    ///
    /// # Safety
    /// AVX2 and FMA must be available and `block`'s pointers valid for the sizes it names.
    pub(super) unsafe fn tile(rows: usize, block: &Block) {
        if !block.prefetch.is_null() {
            return match rows {
                1 => tile_rows::<1, true>(block),
                2 => tile_rows::<2, true>(block),
                3 => tile_rows::<3, true>(block),
                4 => tile_rows::<4, true>(block),
                5 => tile_rows::<5, true>(block),
                _ => tile_rows::<6, true>(block),
            };
        }
        match rows {
            1 => tile_rows::<1, false>(block),
            2 => tile_rows::<2, false>(block),
            3 => tile_rows::<3, false>(block),
            4 => tile_rows::<4, false>(block),
            5 => tile_rows::<5, false>(block),
            _ => tile_rows::<6, false>(block),
        }
    }

    /// `R` rows × 16 columns over one block, summed in registers (module doc); with
    /// `PREFETCH`, each step also prefetches one line of the stream ahead.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile_rows<const R: usize, const PREFETCH: bool>(block: &Block) {
        let &Block {
            x,
            x_stride,
            lines,
            steps,
            prefetch,
            sums,
            fresh,
        } = block;
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        if !fresh {
            for (r, acc) in acc.iter_mut().enumerate() {
                acc[0] = _mm256_load_ps(sums.add(r * PANEL));
                acc[1] = _mm256_load_ps(sums.add(r * PANEL + 8));
            }
        }
        for i in 0..steps {
            let w = lines.add(i * PANEL);
            if PREFETCH {
                _mm_prefetch::<_MM_HINT_T1>(prefetch.add(i * PANEL).cast::<i8>());
            }
            let w0 = _mm256_load_ps(w);
            let w1 = _mm256_load_ps(w.add(8));
            for (r, acc) in acc.iter_mut().enumerate() {
                let a = _mm256_broadcast_ss(&*x.add(r * x_stride + i));
                acc[0] = _mm256_fmadd_ps(a, w0, acc[0]);
                acc[1] = _mm256_fmadd_ps(a, w1, acc[1]);
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            _mm256_store_ps(sums.add(r * PANEL), acc[0]);
            _mm256_store_ps(sums.add(r * PANEL + 8), acc[1]);
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod arch {
    /// See the x86-64 version; never built into a call here.
    pub(super) struct Block {
        pub x: *const f32,
        pub x_stride: usize,
        pub lines: *const f32,
        pub steps: usize,
        pub prefetch: *const f32,
        pub sums: *mut f32,
        pub fresh: bool,
    }

    pub(super) fn available() -> bool {
        false
    }

    /// Never called: [`available`] is false on this target.
    pub(super) unsafe fn tile(_rows: usize, _block: &Block) {}
}
