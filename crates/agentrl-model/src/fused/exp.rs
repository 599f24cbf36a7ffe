//! `exp` for the fused kernels' inner loops: the softmax in attention and in the log-prob
//! gather, and GELU's sigmoid.
//!
//! Why not `f32::exp`: it is a call into libm, opaque to the compiler, so every loop that
//! contains it stays scalar; it was 7–10% of a TinyAgent training step (`perf`, issue 16). This
//! one is plain inlined arithmetic, so those loops vectorise (8 lanes inside the AVX2-compiled
//! kernels). Crates such as `wide` offer a SIMD exp, but only through their own vector types,
//! with the width fixed when the crate is compiled (SSE2 on the default target), which would
//! split every kernel into lane-sized chunks for half the width.
//!
//! The method is Cephes' `expf`: `x = n·ln 2 + r` with `|r| ≤ ln 2 / 2`, a degree-7 polynomial
//! for `e^r`, and `2^n` built from its exponent bits. The relative error stays under 2e-7
//! (about 2 ulp; checked below against `f32::exp`), and it uses no fused multiply-add, so the
//! result is the same on every x86-64 CPU, with or without AVX2.

const LOG2_E: f32 = std::f32::consts::LOG2_E;
/// `ln 2` split in a part exact in few bits and the remainder, so `n·LN2_HI` is exact.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Above this `e^x` overflows f32; below the lower bound it is under the smallest normal.
const MAX_INPUT: f32 = 88.376_26;
const MIN_INPUT: f32 = -87.336_55;
/// `1.5 · 2^23`: adding and subtracting it rounds an f32 of magnitude < 2^22 to the nearest
/// integer, in plain arithmetic that vectorises without SSE4.1's `round`.
const ROUND_MAGIC: f32 = 12_582_912.0;

/// `e^x` to about 2 ulp; `+∞` above 88.38, `0` below −87.34 (where `f32::exp` returns
/// subnormals), NaN for NaN.
// Public for the integration tests (tests/model/fused_exp.rs).
#[doc(hidden)]
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let clamped = x.clamp(MIN_INPUT, MAX_INPUT);
    let rounded = clamped * LOG2_E + ROUND_MAGIC;
    let n = rounded - ROUND_MAGIC;
    let r = clamped - n * LN2_HI - n * LN2_LO;
    let r2 = r * r;
    let poly = ((((1.987_569_1e-4 * r + 1.398_2e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 0.5;
    let e_r = poly * r2 + r + 1.0;
    // `rounded`'s bits are those of ROUND_MAGIC plus the integer `n` (|n| < 2^22 keeps the
    // exponent fixed), so `2^n` is built by integer arithmetic on them: an `n as i32` (a
    // saturating conversion) is scalarised per lane in AVX-512 loops.
    let n_bits = rounded.to_bits().wrapping_sub(ROUND_MAGIC.to_bits());
    let two_n = f32::from_bits(n_bits.wrapping_add(127) << 23);
    let y = e_r * two_n;
    if x > MAX_INPUT {
        f32::INFINITY
    } else if x < MIN_INPUT {
        0.0
    } else {
        // NaN fails both comparisons and stays NaN through the arithmetic.
        y
    }
}
