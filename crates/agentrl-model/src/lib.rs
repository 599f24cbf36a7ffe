//! placeholder
pub mod lora;
pub mod qwen3;
pub mod weights;
