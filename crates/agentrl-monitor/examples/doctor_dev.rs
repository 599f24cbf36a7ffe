fn main() -> anyhow::Result<()> {
    for arg in std::env::args().skip(1) {
        let run = agentrl_monitor::RunData::load(std::path::Path::new(&arg))?;
        let found = agentrl_monitor::diagnose(&run.lines, &agentrl_monitor::DoctorConfig::default());
        println!("== {} ({} steps): {} findings", run.name, run.lines.len(), found.len());
        for f in found { println!("[{}] {}-{}: {}", f.signature.title(), f.first_step, f.last_step, f.evidence); }
    }
    Ok(())
}
