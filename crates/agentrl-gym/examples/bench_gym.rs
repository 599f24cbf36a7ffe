//! `agentrl bench gym` without the root binary (which builds the tensor stack):
//! `cargo run --release -p agentrl-gym --example bench_gym -- [--json]`.

fn main() -> anyhow::Result<()> {
    let json = std::env::args().skip(1).any(|a| a == "--json");
    agentrl_gym::bench::run(json)
}
