//! Shared test helpers: fixture loading, tensor construction and tolerant comparison.

use candle_core::{Device, Tensor, Var};
use serde_json::Value;

/// Loads `tests/fixtures/NAME.json` (written by `scripts/make_fixtures.py`).
pub fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/{name}.json", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {path}: {e}"))
}

pub fn f(v: &Value) -> f64 {
    v.as_f64()
        .unwrap_or_else(|| panic!("expected a number, got {v}"))
}

pub fn vec1(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| f(x) as f32)
        .collect()
}

pub fn vec2(v: &Value) -> Vec<Vec<f32>> {
    v.as_array().expect("array").iter().map(vec1).collect()
}

pub fn t2(v: &Value) -> Tensor {
    let rows = vec2(v);
    let (b, n) = (rows.len(), rows.first().map_or(0, Vec::len));
    Tensor::from_vec(rows.concat(), (b, n), &Device::Cpu).unwrap()
}

pub fn t1(v: &Value) -> Tensor {
    let x = vec1(v);
    let n = x.len();
    Tensor::from_vec(x, n, &Device::Cpu).unwrap()
}

pub fn var2(v: &Value) -> Var {
    Var::from_tensor(&t2(v)).unwrap()
}

pub fn rows(t: &Tensor) -> Vec<Vec<f32>> {
    t.to_vec2::<f32>().unwrap()
}

pub fn scalar(t: &Tensor) -> f32 {
    t.to_scalar::<f32>().unwrap()
}

/// `|a − b| ≤ 1e-5·|b| + 1e-6`: f32 tolerance at ≤ 1e-5 relative, with a tiny absolute floor
/// for values that are zero in the reference.
pub fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-5 * b.abs() + 1e-6
}

pub fn assert_close(what: &str, a: f64, b: f64) {
    assert!(
        close(a, b),
        "{what}: got {a}, expected {b} (diff {})",
        (a - b).abs()
    );
}

pub fn assert_rows_close(what: &str, got: &[Vec<f32>], want: &[Vec<f32>]) {
    assert_eq!(got.len(), want.len(), "{what}: row count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{what}: row {i} length");
        for (t, (a, b)) in g.iter().zip(w).enumerate() {
            assert!(
                close(f64::from(*a), f64::from(*b)),
                "{what}[{i}][{t}]: got {a}, expected {b}"
            );
        }
    }
}

pub fn assert_slice_close(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            close(f64::from(*a), f64::from(*b)),
            "{what}[{i}]: got {a}, expected {b}"
        );
    }
}

/// Central finite-difference gradient of a scalar function of a `[B, T]` tensor, in f64 on
/// host, compared with autograd at loose tolerance (f32 forward passes).
pub fn finite_difference(f: impl Fn(&Tensor) -> f64, x: &[Vec<f32>], eps: f64) -> Vec<Vec<f64>> {
    let (b, n) = (x.len(), x[0].len());
    let mut out = vec![vec![0.0; n]; b];
    for i in 0..b {
        for t in 0..n {
            let mut plus = x.to_vec();
            let mut minus = x.to_vec();
            plus[i][t] += eps as f32;
            minus[i][t] -= eps as f32;
            let actual = f64::from(plus[i][t]) - f64::from(minus[i][t]);
            let tp = Tensor::from_vec(plus.concat(), (b, n), &Device::Cpu).unwrap();
            let tm = Tensor::from_vec(minus.concat(), (b, n), &Device::Cpu).unwrap();
            out[i][t] = (f(&tp) - f(&tm)) / actual;
        }
    }
    out
}
