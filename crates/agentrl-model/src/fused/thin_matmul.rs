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
//! **Kernel.** For a panel and a tile of up to [`MAX_TILE_ROWS`] = 6 rows of `x`, the 6 × 16
//! outputs live in 12 AVX2 registers over the whole `K` loop; each step loads the panel's two
//! vectors and broadcasts one `x` value per row: 12 FMAs per 8 loads, so the FMA units, not the
//! loads, bound it. The rows are split into balanced tiles (16 rows: 6 + 5 + 5) and the tiles of
//! one panel run back to back, so the later ones read the panel from cache. Threads take
//! disjoint ranges of panels, and each output is one sequential sum over `k`: the result does not
//! depend on the thread count or on the other rows.
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

/// One input's 16 weights of a panel, on a cache line of its own.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; PANEL]);

/// Whether this CPU runs the thin path (AVX2 and FMA).
pub fn thin_available() -> bool {
    arch::available()
}

/// A `[K, N]` f32 weight packed in column panels for [`ThinWeight::matmul`] (module doc).
#[derive(Debug, Clone)]
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
        let threads = rayon::current_num_threads().clamp(1, panels);
        let per_thread = panels.div_ceil(threads);
        let out_ptr = SendPtr(out.spare_capacity_mut().as_mut_ptr().cast::<f32>());
        let tiles = row_tiles(m);
        (0..threads).into_par_iter().for_each(|t| {
            let first = t * per_thread;
            let last = ((t + 1) * per_thread).min(panels);
            let out_ptr = &out_ptr;
            for panel in first..last {
                let lines = &self.lines[panel * k..(panel + 1) * k];
                let column = panel * PANEL;
                let width = PANEL.min(n - column);
                // The first tile fetches the thread's next panel while it computes: the panels
                // stream from memory (a model's weights do not fit in cache), and without it
                // every panel's first pass waited on memory.
                let next = if panel + 1 < last {
                    self.lines[(panel + 1) * k..].as_ptr().cast::<f32>()
                } else {
                    std::ptr::null()
                };
                for (index, &(row, rows)) in tiles.iter().enumerate() {
                    // SAFETY: the thin path is available (checked above); `x` holds `m` rows of
                    // `k` values and `row + rows ≤ m`; `lines` is this panel's `k` lines; the
                    // call writes columns `column..column + width` of rows `row..row + rows` of
                    // the `[m, n]` output, which no other call writes.
                    unsafe {
                        arch::tile(
                            rows,
                            x.as_ptr().add(row * k),
                            k,
                            lines.as_ptr().cast::<f32>(),
                            if index == 0 { next } else { std::ptr::null() },
                            out_ptr.0.add(row * n + column),
                            n,
                            width,
                        )
                    };
                }
            }
        });
        // SAFETY: every panel's tiles above stored every column of every row, and f32 has no
        // invalid bit patterns.
        unsafe { out.set_len(m * n) };
        Some(out)
    }
}

/// `m` rows as balanced `(first row, rows)` tiles of at most [`MAX_TILE_ROWS`].
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

    /// Dispatches a tile of `rows` (1 to 6) rows to its register-resident kernel.
    ///
    /// # Safety
    /// AVX2 and FMA must be available; `x` must hold `rows` rows of `k` values (row stride `k`),
    /// `lines` `k` lines of [`PANEL`] values, `next` be null or hold `k` lines too (only
    /// prefetched), and `out` `rows` rows (stride `n`) of `width ≤ 16` writable values.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn tile(
        rows: usize,
        x: *const f32,
        k: usize,
        lines: *const f32,
        next: *const f32,
        out: *mut f32,
        n: usize,
        width: usize,
    ) {
        if !next.is_null() {
            return match rows {
                1 => tile_rows::<1, true>(x, k, lines, next, out, n, width),
                2 => tile_rows::<2, true>(x, k, lines, next, out, n, width),
                3 => tile_rows::<3, true>(x, k, lines, next, out, n, width),
                4 => tile_rows::<4, true>(x, k, lines, next, out, n, width),
                5 => tile_rows::<5, true>(x, k, lines, next, out, n, width),
                _ => tile_rows::<6, true>(x, k, lines, next, out, n, width),
            };
        }
        match rows {
            1 => tile_rows::<1, false>(x, k, lines, next, out, n, width),
            2 => tile_rows::<2, false>(x, k, lines, next, out, n, width),
            3 => tile_rows::<3, false>(x, k, lines, next, out, n, width),
            4 => tile_rows::<4, false>(x, k, lines, next, out, n, width),
            5 => tile_rows::<5, false>(x, k, lines, next, out, n, width),
            _ => tile_rows::<6, false>(x, k, lines, next, out, n, width),
        }
    }

    /// `R` rows × 16 columns, summed over `k` in registers (module doc); with `PREFETCH`, each
    /// step also prefetches the same line of the `next` panel.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile_rows<const R: usize, const PREFETCH: bool>(
        x: *const f32,
        k: usize,
        lines: *const f32,
        next: *const f32,
        out: *mut f32,
        n: usize,
        width: usize,
    ) {
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        for i in 0..k {
            let w = lines.add(i * PANEL);
            if PREFETCH {
                _mm_prefetch::<_MM_HINT_T1>(next.add(i * PANEL).cast::<i8>());
            }
            let w0 = _mm256_load_ps(w);
            let w1 = _mm256_load_ps(w.add(8));
            for (r, acc) in acc.iter_mut().enumerate() {
                let a = _mm256_broadcast_ss(&*x.add(r * k + i));
                acc[0] = _mm256_fmadd_ps(a, w0, acc[0]);
                acc[1] = _mm256_fmadd_ps(a, w1, acc[1]);
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            let row = out.add(r * n);
            if width == PANEL {
                _mm256_storeu_ps(row, acc[0]);
                _mm256_storeu_ps(row.add(8), acc[1]);
            } else {
                let mut line = [0f32; PANEL];
                _mm256_storeu_ps(line.as_mut_ptr(), acc[0]);
                _mm256_storeu_ps(line.as_mut_ptr().add(8), acc[1]);
                std::ptr::copy_nonoverlapping(line.as_ptr(), row, width);
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod arch {
    pub(super) fn available() -> bool {
        false
    }

    /// Never called: [`available`] is false on this target.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn tile(
        _rows: usize,
        _x: *const f32,
        _k: usize,
        _lines: *const f32,
        _next: *const f32,
        _out: *mut f32,
        _n: usize,
        _width: usize,
    ) {
    }
}
