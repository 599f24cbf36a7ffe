//! `agentrl-chat`'s integration tests, one test target (`chat`): the Qwen3 tokenizer, chat
//! template and tool-call codec against the real shared assets (the text between a task's
//! tools and the model's token ids), and the parts below them: TinyAgent's vocabulary, codec
//! and grammar, the tool schemas, the template's Python compatibility and the asset lookup.
//! Run one module with
//! `cargo test --release --workspace --test chat -- qwen3_codec::`.

mod assets;
mod pyjson;
mod qwen3;
mod qwen3_codec;
mod smollm2;
mod template;
mod tiny_codec;
mod tiny_grammar;
mod tool_call_codec;
mod tools;
