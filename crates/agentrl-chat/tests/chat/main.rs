//! `agentrl-chat`'s integration tests, one test target (`chat`): the Qwen3 tokenizer, chat
//! template and tool-call codec against the real shared assets (the text between a task's
//! tools and the model's token ids). Run one module with
//! `cargo test --release --workspace --test chat -- qwen3_codec::`.

mod qwen3;
mod qwen3_codec;
