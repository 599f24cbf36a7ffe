//! Training recipes: each turns a config into a run, sharing the session, checkpoints, resume
//! and metrics. [`rl`] is reinforcement learning with any preset of [`crate::algo`]; [`sft`] is
//! supervised fine-tuning on the gym expert's demonstrations or a file of episodes; [`rft`]
//! is rejection-sampling fine-tuning (the policy's own samples that pass the hidden tests);
//! [`dpo`] is direct preference optimisation on verified-against-failed pairs; [`distill`] is
//! on-policy distillation from a teacher run.

pub mod distill;
pub mod dpo;
pub mod rft;
pub mod rl;
pub mod sft;

/// Which recipe a command runs, for what differs between them in the config they read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recipe {
    Rl,
    Sft,
    Rft,
    Dpo,
    Distill,
}

/// `optim.lr` and the schedule around it, read by the recipes whose rate follows the
/// schedule ([`crate::schedule`]).
const SCHEDULED_LR: [&str; 4] = [
    "optim.lr",
    "optim.schedule",
    "optim.warmup_steps",
    "optim.min_lr_ratio",
];

impl Recipe {
    /// The command that runs this recipe (`agentrl COMMAND`).
    pub fn command(self) -> &'static str {
        match self {
            Recipe::Rl => "train",
            Recipe::Sft => "sft",
            Recipe::Rft => "rft",
            Recipe::Dpo => "dpo",
            Recipe::Distill => "distill",
        }
    }

    /// The key that sets this recipe's learning rate: RL and distillation follow `optim.lr`
    /// on its schedule; SFT and RFT's supervised updates run at a constant `sft.lr`, DPO at a
    /// constant `dpo.lr` (`sft.rs`, `rft.rs`, `dpo.rs`).
    pub fn lr_key(self) -> &'static str {
        match self {
            Recipe::Rl | Recipe::Distill => "optim.lr",
            Recipe::Sft | Recipe::Rft => "sft.lr",
            Recipe::Dpo => "dpo.lr",
        }
    }

    /// The learning-rate keys this recipe never reads.
    fn unread_lr_keys(self) -> Vec<&'static str> {
        match self {
            Recipe::Rl | Recipe::Distill => vec!["sft.lr", "dpo.lr"],
            Recipe::Sft | Recipe::Rft => [&SCHEDULED_LR[..], &["dpo.lr"]].concat(),
            Recipe::Dpo => [&SCHEDULED_LR[..], &["sft.lr"]].concat(),
        }
    }

    /// Refuses a `--set` of a learning-rate key this recipe does not read, naming the key
    /// that applies. Accepting it would look like a change and do nothing (`agentrl sft --set
    /// optim.lr=…` once did exactly that); an override a command does not read is an error.
    pub fn refuse_unread_overrides(self, overrides: &[String]) -> anyhow::Result<()> {
        let unread = self.unread_lr_keys();
        for item in overrides {
            let key = item
                .split_once('=')
                .map_or(item.as_str(), |(k, _)| k)
                .trim();
            if unread.contains(&key) {
                let applies = self.lr_key();
                let how = if applies == "optim.lr" {
                    "on the `optim.schedule`"
                } else {
                    "constant, with no schedule"
                };
                anyhow::bail!(
                    "--set {item:?}: `agentrl {}` does not read `{key}`; its learning rate is \
                     `{applies}` ({how}): use --set {applies}=…",
                    self.command()
                );
            }
        }
        Ok(())
    }
}
