//! `x · W` on the CPU's matrix unit (Intel AMX) at f32 accuracy: the frozen Qwen3 weights'
//! GEMM when scoring or sampling (`ForwardMode::Inference`), where the f32 GEMM bounded
//! `bench qwen3` (`qwen3/model.rs`, `Linear`).
//!
//! **Why.** An f32 GEMM on two AVX-512 cores reaches about 200 GFLOP/s here (the `gemm` crate
//! and PyTorch's MKL alike), and the 0.6B model needs 1.19 GFLOP per scored token, so f32 alone
//! capped scoring at ~170 tokens/s. AMX multiplies bf16 tiles at 1024 FLOP per cycle per core
//! (16x an AVX-512 f32 FMA pair), but bf16 keeps 8 bits of mantissa: one bf16 product would
//! move Qwen3's log-probs by ~1e-2.
//!
//! **How (bf16x3).** Each f32 is split into two bf16 parts, `x = hi + lo + r` with
//! `hi = bf16(x)`, `lo = bf16(x - hi)`, `|r| ≤ 2⁻¹⁸|x|`, and the product is summed as
//! `a_hi·b_hi + a_hi·b_lo + a_lo·b_hi` with f32 accumulation: only the `a_lo·b_lo` term
//! (≤ 2⁻¹⁸ relative) and the residuals are dropped, so each product carries about 2⁻¹⁶ relative
//! error, random in sign, against f32's 2⁻²⁴ per operation; over a dot product of length K
//! f32's own rounding grows too, and the two land within a few units of 1e-6 relative (the
//! tests bound it against an f64 reference). The same three-product split is oneDNN's
//! `fpmath_mode::bf16x3`-style emulation of f32 on bf16 units. Three tile products per pair of
//! tiles still leave AMX ~5x ahead of the f32 FMA units.
//!
//! **Layout.** The weight `W [K, N]` (the transposed storage `x·Wᵀ` reads) is split and packed
//! once, at load: for each block of 32 output columns and each block of 32 inputs, four 1 KiB
//! tiles (`hi` for columns 0–15 and 16–31, then `lo` for both), each in AMX's pair-interleaved
//! ("VNNI") layout: row `r` holds inputs `2r, 2r + 1` of 16 columns. The packed weight costs as
//! much memory as the f32 one (two bf16 per value). The activations are split per call into
//! row-major `hi`/`lo` copies padded to 32 rows. Each 32 × 32 output block lives in four tile
//! registers across the whole K loop (12 tile products per 10 tile loads), and threads take
//! disjoint column blocks, so every output is summed in one fixed order: the result does not
//! depend on the thread count.
//!
//! **Where.** Opt-in ([`crate::qwen3::Qwen3::pack_for_amx`], chosen by [`CpuMatmul`]: the run
//! config's `engine.cpu_matmul`, `agentrl serve --cpu-matmul`; `bench qwen3` times both paths),
//! and only on Linux x86-64 CPUs with AMX-BF16 (Sapphire Rapids and later), after the kernel
//! grants the process the tile state (`arch_prctl(ARCH_REQ_XCOMP_PERM)`), for `K` and `N`
//! multiples of 32 (every Qwen3 size). Not the default because its ~1e-4 log-prob error is
//! past the tests' 1e-5 ties between the f32 paths and at the edge of the 1e-4 parity with
//! transformers on sharp tiny models.

use std::sync::OnceLock;

use half::bf16;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Inputs and output columns per tile step; packed weights need both dimensions divisible by it.
pub const BLOCK: usize = 32;
/// Rows of one tile.
const TILE_ROWS: usize = 16;
/// bf16 values in one tile (16 rows × 64 bytes).
const TILE_VALUES: usize = TILE_ROWS * 32;

/// Whether the AMX path can run in this process: the CPU has AMX-BF16 and AMX-TILE and the
/// kernel granted the tile state. Checked once.
pub fn amx_available() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(arch::request_tiles)
}

/// Which kernel multiplies a Qwen3's frozen f32 weights on the CPU when it scores or samples:
/// the run config's `engine.cpu_matmul` and `agentrl serve --cpu-matmul`. Never the trainer's
/// own forwards: they stay on the f32 GEMM every test pins.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CpuMatmul {
    /// The f32 GEMM (the default; ~1e-6 from transformers' log-probs).
    #[default]
    F32,
    /// This module's bf16x3 path (`Qwen3::pack_for_amx`; ~1e-4): an error where the CPU has no
    /// AMX, so asking for it never silently falls back.
    Amx,
    /// AMX where this CPU has it, else f32.
    Auto,
}

impl CpuMatmul {
    /// The name the config and the command line use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::Amx => "amx",
            Self::Auto => "auto",
        }
    }

    /// Whether to pack for the AMX path on this machine; `knob` names the setting in the
    /// error `Amx` gives on a CPU without AMX.
    pub fn wants_amx(self, knob: &str) -> anyhow::Result<bool> {
        match self {
            Self::F32 => Ok(false),
            Self::Amx if amx_available() => Ok(true),
            Self::Amx => anyhow::bail!(
                "{knob} = \"amx\": this CPU has no AMX (Sapphire Rapids or later, Linux x86-64, \
                 the `amx_tile` flag of /proc/cpuinfo) or the kernel refused the tile state; \
                 use \"auto\" (AMX where present) or \"f32\""
            ),
            Self::Auto => Ok(amx_available()),
        }
    }
}

impl std::fmt::Display for CpuMatmul {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a `[k, n]` weight can be packed for the AMX path.
pub fn packable(k: usize, n: usize) -> bool {
    k > 0 && n > 0 && k % BLOCK == 0 && n % BLOCK == 0
}

/// A `[K, N]` f32 weight split into bf16 `hi`/`lo` parts and packed in AMX tiles (module doc).
#[derive(Debug, Clone)]
pub struct PackedWeight {
    k: usize,
    n: usize,
    /// bf16 bit patterns: per 32-column block, per 32-input block, four tiles.
    tiles: Vec<u16>,
}

/// `x` as `(hi, lo)` bf16 parts, `x ≈ hi + lo` (module doc).
#[inline]
fn split(x: f32) -> (u16, u16) {
    let hi = bf16::from_f32(x);
    let lo = bf16::from_f32(x - hi.to_f32());
    (hi.to_bits(), lo.to_bits())
}

impl PackedWeight {
    /// Packs `weight`, a row-major `[k, n]` f32 matrix; `None` unless [`packable`].
    pub fn pack(weight: &[f32], k: usize, n: usize) -> Option<Self> {
        if !packable(k, n) || weight.len() != k * n {
            return None;
        }
        let k_blocks = k / BLOCK;
        let panel = k_blocks * 4 * TILE_VALUES;
        let mut tiles = vec![0u16; (n / BLOCK) * panel];
        tiles
            .par_chunks_mut(panel)
            .enumerate()
            .for_each(|(column_block, panel)| {
                for k_block in 0..k_blocks {
                    let group =
                        &mut panel[k_block * 4 * TILE_VALUES..(k_block + 1) * 4 * TILE_VALUES];
                    for pair in 0..TILE_ROWS {
                        for half_index in 0..2 {
                            let row = k_block * BLOCK + 2 * pair + half_index;
                            for column in 0..BLOCK {
                                let value = weight[row * n + column_block * BLOCK + column];
                                let (hi, lo) = split(value);
                                let tile = column / TILE_ROWS;
                                let at = pair * 32 + (column % TILE_ROWS) * 2 + half_index;
                                group[tile * TILE_VALUES + at] = hi;
                                group[(2 + tile) * TILE_VALUES + at] = lo;
                            }
                        }
                    }
                }
            });
        Some(Self { k, n, tiles })
    }

    /// Input features `K`.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Output features `N`.
    pub fn n(&self) -> usize {
        self.n
    }

    /// `x · W` for row-major `x: [m, K]`, as a row-major `[m, N]` vector; `None` when the AMX
    /// path is not available (the caller runs the f32 GEMM) or `x` has the wrong length.
    pub fn matmul(&self, x: &[f32], m: usize) -> Option<Vec<f32>> {
        if !amx_available() || x.len() != m * self.k || m == 0 {
            return None;
        }
        let (k, n) = (self.k, self.n);
        let padded = m.div_ceil(BLOCK) * BLOCK;
        let (a_hi, a_lo) = split_rows(x, m, k, padded);
        // Every element of the padded output is written by one tile store below, so the buffer
        // is not zeroed first (for the LM head that would be a 78 MB memset per call).
        let mut out: Vec<f32> = Vec::with_capacity(padded * n);
        let column_blocks = n / BLOCK;
        let threads = rayon::current_num_threads().clamp(1, column_blocks);
        let per_thread = column_blocks.div_ceil(threads);
        let out_ptr = SendPtr(out.spare_capacity_mut().as_mut_ptr().cast::<f32>());
        (0..threads).into_par_iter().for_each(|t| {
            let first = t * per_thread;
            let last = ((t + 1) * per_thread).min(column_blocks);
            if first >= last {
                return;
            }
            let out_ptr = &out_ptr;
            // SAFETY: the AMX path is available (checked above); `a_hi`/`a_lo` hold `padded`
            // rows of `k` values, `self.tiles` the packed panels of all column blocks, and this
            // thread writes only the columns of blocks `first..last` of `padded` rows of `out`,
            // which no other thread writes.
            unsafe {
                arch::kernel(Problem {
                    a_hi: a_hi.as_ptr(),
                    a_lo: a_lo.as_ptr(),
                    rows: padded,
                    k,
                    n,
                    tiles: self.tiles.as_ptr(),
                    column_blocks: first..last,
                    out: out_ptr.0,
                })
            };
        });
        // SAFETY: the kernels above stored all `padded × n` values (every row block of every
        // column block), and f32 has no invalid bit patterns.
        unsafe { out.set_len(padded * n) };
        out.truncate(m * n);
        Some(out)
    }
}

/// The `hi` and `lo` bf16 parts of `x: [m, k]`, row-major, with rows `m..padded` zero.
fn split_rows(x: &[f32], m: usize, k: usize, padded: usize) -> (Vec<u16>, Vec<u16>) {
    let mut hi = vec![0u16; padded * k];
    let mut lo = vec![0u16; padded * k];
    hi[..m * k]
        .par_chunks_mut(k)
        .zip(lo[..m * k].par_chunks_mut(k))
        .zip(x.par_chunks(k))
        .for_each(|((hi, lo), row)| {
            for ((h, l), &v) in hi.iter_mut().zip(lo.iter_mut()).zip(row) {
                (*h, *l) = split(v);
            }
        });
    (hi, lo)
}

/// A raw output pointer shared by threads that write disjoint columns.
struct SendPtr(*mut f32);
// SAFETY: each thread writes a disjoint set of output elements (see `PackedWeight::matmul`).
unsafe impl Sync for SendPtr {}
unsafe impl Send for SendPtr {}

/// One thread's share of a product (see `PackedWeight::matmul`).
#[cfg_attr(
    not(all(target_arch = "x86_64", target_os = "linux")),
    allow(dead_code)
)]
struct Problem {
    a_hi: *const u16,
    a_lo: *const u16,
    /// Rows of `a_hi`/`a_lo`/`out`, a multiple of 32.
    rows: usize,
    k: usize,
    n: usize,
    tiles: *const u16,
    column_blocks: std::ops::Range<usize>,
    out: *mut f32,
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod arch {
    use std::arch::asm;

    use super::{Problem, BLOCK, TILE_ROWS, TILE_VALUES};

    /// Linux `arch_prctl` request for extra XSAVE state, and AMX's tile-data component.
    const ARCH_REQ_XCOMP_PERM: libc::c_ulong = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_ulong = 18;

    /// CPUID says AMX-TILE and AMX-BF16, and the kernel grants the tile state.
    pub(super) fn request_tiles() -> bool {
        // SAFETY: CPUID leaf 7 exists on every x86-64 CPU that reports max leaf ≥ 7.
        #[allow(unused_unsafe)] // safe functions from Rust 1.87 on; the MSRV needs the block
        let max_leaf = unsafe { std::arch::x86_64::__cpuid(0) }.eax;
        if max_leaf < 7 {
            return false;
        }
        // SAFETY: leaf 7 is supported (checked above).
        #[allow(unused_unsafe)]
        let features = unsafe { std::arch::x86_64::__cpuid_count(7, 0) };
        let amx_bf16 = features.edx & (1 << 22) != 0;
        let amx_tile = features.edx & (1 << 24) != 0;
        if !(amx_bf16 && amx_tile) {
            return false;
        }
        // SAFETY: a plain syscall with integer arguments; failure is reported by its result.
        let granted = unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            )
        };
        granted == 0
    }

    /// AMX's 64-byte tile configuration (palette 1).
    #[repr(C, align(64))]
    struct TileConfig {
        palette: u8,
        start_row: u8,
        reserved: [u8; 14],
        bytes_per_row: [u16; 16],
        rows: [u8; 16],
    }

    /// Tiles 0–3 accumulate a 32 × 32 output block, 4–5 hold two 16-row activation tiles, 6–7
    /// two 16-column weight tiles.
    ///
    /// # Safety
    /// AMX must be available ([`request_tiles`] returned true) and `problem`'s pointers valid
    /// for the sizes it names.
    pub(super) unsafe fn kernel(problem: Problem) {
        let mut config = TileConfig {
            palette: 1,
            start_row: 0,
            reserved: [0; 14],
            bytes_per_row: [0; 16],
            rows: [0; 16],
        };
        for tile in 0..8 {
            config.bytes_per_row[tile] = 64;
            config.rows[tile] = TILE_ROWS as u8;
        }
        asm!("ldtilecfg [{}]", in(reg) &config as *const TileConfig, options(nostack));
        let Problem {
            a_hi,
            a_lo,
            rows,
            k,
            n,
            tiles,
            column_blocks,
            out,
        } = problem;
        let k_blocks = k / BLOCK;
        let a_stride = k * 2;
        let out_stride = n * 4;
        let tile_stride = 64usize;
        for column_block in column_blocks {
            let panel = tiles.add(column_block * k_blocks * 4 * TILE_VALUES);
            for row_block in 0..rows / BLOCK {
                asm!(
                    "tilezero tmm0",
                    "tilezero tmm1",
                    "tilezero tmm2",
                    "tilezero tmm3",
                    options(nostack)
                );
                let hi_top = a_hi.add(row_block * BLOCK * k);
                let lo_top = a_lo.add(row_block * BLOCK * k);
                for k_block in 0..k_blocks {
                    let hi0 = hi_top.add(k_block * BLOCK);
                    let hi1 = hi0.add(TILE_ROWS * k);
                    let lo0 = lo_top.add(k_block * BLOCK);
                    let lo1 = lo0.add(TILE_ROWS * k);
                    let w = panel.add(k_block * 4 * TILE_VALUES);
                    asm!(
                        // a_hi · w_hi
                        "tileloadd tmm4, [{hi0} + {a_stride}]",
                        "tileloadd tmm5, [{hi1} + {a_stride}]",
                        "tileloadd tmm6, [{w_hi0} + {t_stride}]",
                        "tileloadd tmm7, [{w_hi1} + {t_stride}]",
                        "tdpbf16ps tmm0, tmm4, tmm6",
                        "tdpbf16ps tmm1, tmm4, tmm7",
                        "tdpbf16ps tmm2, tmm5, tmm6",
                        "tdpbf16ps tmm3, tmm5, tmm7",
                        // a_hi · w_lo
                        "tileloadd tmm6, [{w_lo0} + {t_stride}]",
                        "tileloadd tmm7, [{w_lo1} + {t_stride}]",
                        "tdpbf16ps tmm0, tmm4, tmm6",
                        "tdpbf16ps tmm1, tmm4, tmm7",
                        "tdpbf16ps tmm2, tmm5, tmm6",
                        "tdpbf16ps tmm3, tmm5, tmm7",
                        // a_lo · w_hi
                        "tileloadd tmm4, [{lo0} + {a_stride}]",
                        "tileloadd tmm5, [{lo1} + {a_stride}]",
                        "tileloadd tmm6, [{w_hi0} + {t_stride}]",
                        "tileloadd tmm7, [{w_hi1} + {t_stride}]",
                        "tdpbf16ps tmm0, tmm4, tmm6",
                        "tdpbf16ps tmm1, tmm4, tmm7",
                        "tdpbf16ps tmm2, tmm5, tmm6",
                        "tdpbf16ps tmm3, tmm5, tmm7",
                        hi0 = in(reg) hi0,
                        hi1 = in(reg) hi1,
                        lo0 = in(reg) lo0,
                        lo1 = in(reg) lo1,
                        w_hi0 = in(reg) w,
                        w_hi1 = in(reg) w.add(TILE_VALUES),
                        w_lo0 = in(reg) w.add(2 * TILE_VALUES),
                        w_lo1 = in(reg) w.add(3 * TILE_VALUES),
                        a_stride = in(reg) a_stride,
                        t_stride = in(reg) tile_stride,
                        options(nostack, readonly)
                    );
                }
                let top = out.add(row_block * BLOCK * n + column_block * BLOCK);
                let bottom = top.add(TILE_ROWS * n);
                asm!(
                    "tilestored [{top} + {stride}], tmm0",
                    "tilestored [{top_right} + {stride}], tmm1",
                    "tilestored [{bottom} + {stride}], tmm2",
                    "tilestored [{bottom_right} + {stride}], tmm3",
                    top = in(reg) top,
                    top_right = in(reg) top.add(TILE_ROWS),
                    bottom = in(reg) bottom,
                    bottom_right = in(reg) bottom.add(TILE_ROWS),
                    stride = in(reg) out_stride,
                    options(nostack)
                );
            }
        }
        asm!("tilerelease", options(nostack, nomem));
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod arch {
    use super::Problem;

    pub(super) fn request_tiles() -> bool {
        false
    }

    /// Never called: [`request_tiles`] is false on this target.
    pub(super) unsafe fn kernel(_problem: Problem) {}
}
