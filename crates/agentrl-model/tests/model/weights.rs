//! Safetensors IO: a missing checkpoint names the files it looked for; save then load
//! converts dtypes.

use std::collections::HashMap;

use agentrl_model::weights::{checkpoint_files, load_folder, save_file, SHARD_INDEX, SINGLE_FILE};
use candle_core::{DType, Device, Tensor};

#[test]
fn missing_checkpoint_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = checkpoint_files(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains(SINGLE_FILE) && err.contains(SHARD_INDEX),
        "{err}"
    );
}

#[test]
fn save_then_load_round_trips_with_dtype_conversion() {
    let dir = tempfile::tempdir().unwrap();
    let tensor = Tensor::new(&[[1.5f32, -2.0], [0.25, 8.0]], &Device::Cpu).unwrap();
    let map = HashMap::from([("w".to_string(), tensor.clone())]);
    save_file(&map, &dir.path().join(SINGLE_FILE)).unwrap();
    let loaded = load_folder(dir.path(), DType::BF16, &Device::Cpu).unwrap();
    let back = loaded["w"].to_dtype(DType::F32).unwrap();
    assert_eq!(
        back.to_vec2::<f32>().unwrap(),
        tensor.to_vec2::<f32>().unwrap()
    );
}
