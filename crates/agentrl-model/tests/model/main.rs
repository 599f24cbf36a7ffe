//! `agentrl-model`'s integration tests, one test target (`model`): Qwen3 (the policy that
//! turns an episode's tokens into log-probs) against transformers/PEFT fixtures, and its
//! ragged decoding, and TinyAgent's explicit trunk against candle's autograd; TinyAgent's candle
//! forward, the fused CPU ops against the composed candle ops (`fused_check` holds their shared
//! check), LoRA, safetensors IO and the device choice. Run one module with
//! `cargo test --release --workspace --test model -- qwen3_ragged::`.

mod amx_matmul;
// Only the CPU answer is fixed without a GPU; the CUDA path is checked by compiling it
// (`scripts/build_cuda.sh`) and by runs on a GPU machine.
#[cfg(not(feature = "cuda"))]
mod device;
mod fused_causal_attention;
mod fused_causal_softmax;
mod fused_check;
mod fused_exp;
mod fused_frozen_matmul;
mod fused_gelu;
mod fused_log_prob_entropy;
mod fused_log_softmax_gather;
mod fused_ragged_decode_attention;
mod fused_rms_norm;
mod fused_rope;
mod fused_silu_mul;
mod lora;
mod qwen3;
mod qwen3_checkpoint;
mod qwen3_ragged;
mod smollm2;
mod thin_matmul;
mod tiny_agent;
mod tiny_decode;
mod tiny_trunk;
mod weights;
