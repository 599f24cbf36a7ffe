//! Where the rollout engine reads its weights, and how they are brought to the trainer's: the
//! trainer's own weights (synchronous runs in f32), the engine's copy (`engine.dtype = "bf16"`,
//! asynchronous rollouts), or inference servers (a LoRA adapter in PEFT layout, or a full
//! safetensors folder, written under the run's `weights/` and loaded by the servers).
//!
//! Where it sits: built from the config beside the policy (`crate::build`), held by the
//! trainer; the sampler (`crate::sampler`) reads [`EngineWeights`], a recipe's step calls
//! [`EngineSync::sync_for`] before it samples. It knows no recipe and no trainer.
//!
//! **AMX** (`engine.cpu_matmul`, [`AmxChoice`]). A local Qwen3 engine on the CPU may multiply
//! its frozen f32 weights on the AMX unit (`Qwen3::pack_for_amx`), ~1e-4 off the f32 GEMM.
//! It then always gets a copy of its own, even in a synchronous f32 run that would otherwise
//! sample from the trainer's weights: packing is a property of a model object, and the
//! trainer's own model also computes the old and reference log-probs and the preflight's
//! scores in inference mode, so packing it would move the very figures the engine's are
//! compared with (and that importance ratios divide by) off the f32 path. The copy costs one
//! more set of weights plus their packing (as much again). At each sync
//! (`Qwen3::copy_weights_from`) a LoRA run's frozen base is kept with its packing and only the
//! adapters are copied; a run that trains the whole model copies and packs the new weights
//! again (on the 0.6B shape 4.7 s against 0.64 s for the plain copy, 2 cores, 2026-12-06), so
//! the engine never silently falls back to f32 after the first update.

use std::path::{Path, PathBuf};
use std::time::Instant;

use agentrl_engine::{Engine, RemoteEngine, WeightSync};
use agentrl_model::fused::amx_matmul::CpuMatmul;
use agentrl_model::lora::LoraConfig;
use agentrl_model::qwen3::Qwen3;
use agentrl_rollout::StalenessBound;
use anyhow::{bail, Context};
use candle_core::DType;

use crate::build::{connect_remote, lora_config, parse_dtype};
use crate::config::validate::cpu_matmul_on_amx;
use crate::config::Config;
use crate::policy_stack::{EngineReplica, TrainPolicy};

/// The engine's own copy of the weights, and their version.
pub struct EngineCopy {
    pub replica: Box<dyn EngineReplica>,
    pub version: u64,
}

/// Where a rollout engine reads its weights.
#[derive(Clone, Copy)]
pub enum EngineWeights<'a> {
    /// The trainer's own weights (synchronous runs in f32): they change under an update, so
    /// an engine on them never samples during one.
    Trainer {
        policy: &'a dyn TrainPolicy,
        version: u64,
    },
    /// The engine's copy ([`EngineCopy`]).
    Copy(&'a EngineCopy),
    /// Inference servers, at the version last synced to them.
    Remote(&'a RemoteEngine),
}

impl EngineWeights<'_> {
    /// The weight version the engine samples with.
    pub fn version(&self) -> u64 {
        match self {
            Self::Trainer { version, .. } => *version,
            Self::Copy(copy) => copy.version,
            Self::Remote(remote) => remote.weight_version(),
        }
    }
}

/// What `engine.cpu_matmul` came to for this run's engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmxChoice {
    /// Whether the engine's copy is packed for the AMX unit.
    pub packed: bool,
    /// The line the run's log prints about it (`None` for the default, `"f32"`).
    pub note: Option<String>,
}

impl AmxChoice {
    /// Resolves `engine.cpu_matmul` for `policy`: `"amx"` where it cannot apply (a config
    /// error [`Config::validate`] reports first, or a model off the CPU) or the CPU has no AMX
    /// is an error naming the key; `"auto"` says which path it took and why.
    pub fn resolve(config: &Config, policy: &dyn TrainPolicy) -> anyhow::Result<Self> {
        let setting = config.engine.cpu_matmul;
        if setting == CpuMatmul::F32 {
            return Ok(Self {
                packed: false,
                note: None,
            });
        }
        let off_cpu = policy
            .as_any()
            .downcast_ref::<Qwen3>()
            .filter(|q| !q.device().is_cpu())
            .map(|q| format!("the Qwen3 is on {:?}, not the CPU", q.device().location()));
        let inapplicable = config.cpu_matmul_inapplicable().or(off_cpu);
        let packed = cpu_matmul_on_amx(setting, inapplicable.as_deref())?;
        let note = match (packed, inapplicable) {
            (true, _) => format!(
                "engine.cpu_matmul = \"{setting}\": the engine samples from its own copy of the \
                 weights, packed for the CPU's AMX unit (log-probs ~1e-4 off the trainer's f32 \
                 ones, which stay on the f32 GEMM)"
            ),
            (false, Some(why)) => format!("engine.cpu_matmul = \"{setting}\": f32 ({why})"),
            (false, None) => {
                format!("engine.cpu_matmul = \"{setting}\": f32 (this CPU has no AMX)")
            }
        };
        Ok(Self {
            packed,
            note: Some(note),
        })
    }
}

/// How the servers load a new weight version (`engine.weight_sync`).
enum ServerSync {
    Lora { adapter: LoraConfig, base: String },
    Full,
}

/// The engine's weights apart from the trainer's (a copy, or servers), and their syncing.
pub struct EngineSync {
    /// The engine's own copy, where it must not read the trainer's weights.
    copy: Option<EngineCopy>,
    /// Inference servers that sample the rollouts (`engine.kind = "vllm"` or `"sglang"`).
    remote: Option<RemoteEngine>,
    server_sync: Option<ServerSync>,
    /// Where weight versions for the servers are written (the run's `weights/`).
    weights_dir: PathBuf,
    /// Whether this process has synced the engine's weights (copy or servers) at least once.
    synced_once: bool,
    /// Seconds of weight sync since they were last taken (`timing_s/update_weights`).
    seconds: f64,
    staleness: StalenessBound,
    /// What `engine.cpu_matmul` came to.
    amx: AmxChoice,
}

impl EngineSync {
    /// The engine of `config` for `policy`: servers when `engine.kind` names them (connected
    /// and checked), else a copy when the engine must not read the trainer's weights, else
    /// none (a copy packed for AMX when `engine.cpu_matmul` asks for it: the module doc).
    /// Server weight versions go under `run_root/weights/`.
    pub fn new(config: &Config, policy: &dyn TrainPolicy, run_root: &Path) -> anyhow::Result<Self> {
        let e = &config.engine;
        let engine_dtype = parse_dtype("engine.dtype", &e.dtype)?;
        let mut amx = AmxChoice::resolve(config, policy)?;
        let copy = if engine_dtype != DType::F32 || e.async_rollouts || amx.packed {
            let mut replica = policy.replica(engine_dtype)?;
            if amx.packed && !replica.pack_for_amx()? {
                let why = "no weight of this model is a whole number of 32 x 32 blocks";
                if e.cpu_matmul == CpuMatmul::Amx {
                    bail!("engine.cpu_matmul = \"amx\": {why}; set engine.cpu_matmul = \"f32\"");
                }
                // "auto": the copy samples on the f32 path, as the trainer's weights would.
                amx = AmxChoice {
                    packed: false,
                    note: Some(format!("engine.cpu_matmul = \"auto\": f32 ({why})")),
                };
            }
            Some(EngineCopy {
                replica,
                version: 0,
            })
        } else {
            None
        };
        let remote = connect_remote(config)?;
        let server_sync = match remote {
            None => None,
            Some(_) => Some(match e.weight_sync.as_str() {
                "lora" => ServerSync::Lora {
                    adapter: lora_config(&config.qwen3)
                        .context("engine.weight_sync = \"lora\" needs qwen3.lora_rank > 0")?,
                    base: config.model.dir.clone().unwrap_or_default(),
                },
                "full" => ServerSync::Full,
                other => bail!("engine.weight_sync = {other:?}: expected \"lora\" or \"full\""),
            }),
        };
        Ok(Self {
            copy,
            remote,
            server_sync,
            weights_dir: run_root.join("weights"),
            synced_once: false,
            seconds: 0.0,
            staleness: StalenessBound::new(if e.async_rollouts {
                e.max_staleness as u64
            } else {
                0
            }),
            amx,
        })
    }

    /// What `engine.cpu_matmul` came to: whether the engine's copy is on the AMX path, and
    /// the line for the run's log.
    pub fn amx(&self) -> &AmxChoice {
        &self.amx
    }

    /// Whether the engine's own copy is packed for the AMX unit now (after every sync, as
    /// long as `engine.cpu_matmul` chose it).
    pub fn copy_packed_for_amx(&self) -> bool {
        self.copy
            .as_ref()
            .is_some_and(|copy| copy.replica.packed_for_amx())
    }

    /// Where the engine reads its weights while the trainer's are at `trainer_version`.
    pub fn weights<'a>(
        &'a self,
        policy: &'a dyn TrainPolicy,
        trainer_version: u64,
    ) -> EngineWeights<'a> {
        match (&self.remote, &self.copy) {
            (Some(remote), _) => EngineWeights::Remote(remote),
            (None, Some(copy)) => EngineWeights::Copy(copy),
            (None, None) => EngineWeights::Trainer {
                policy,
                version: trainer_version,
            },
        }
    }

    /// Whether the engine samples with weights of its own (a copy or servers), which may
    /// differ from the trainer's.
    pub fn has_own_weights(&self) -> bool {
        self.copy.is_some() || self.remote.is_some()
    }

    /// How old the engine's weights may be when its rollouts are trained on: up to
    /// `engine.max_staleness` versions with asynchronous rollouts, none otherwise.
    pub fn staleness_bound(&self) -> StalenessBound {
        self.staleness
    }

    /// Seconds spent syncing since the last call.
    pub fn take_seconds(&mut self) -> f64 {
        std::mem::take(&mut self.seconds)
    }

    /// Brings the engine's weights to `policy`'s, at weight version `version`.
    pub fn sync(&mut self, policy: &dyn TrainPolicy, version: u64) -> anyhow::Result<()> {
        let started = Instant::now();
        let synced = self.sync_untimed(policy, version);
        self.seconds += started.elapsed().as_secs_f64();
        synced
    }

    /// Syncs the engine's weights to `policy`'s (at `version`) unless they are fresh enough
    /// for rollouts trained on at step `trained_at` ([`StalenessBound::allows`]). The first
    /// sync of a process always happens: a copy built before a checkpoint loaded holds other
    /// weights.
    pub fn sync_for(
        &mut self,
        policy: &dyn TrainPolicy,
        version: u64,
        trained_at: u64,
    ) -> anyhow::Result<()> {
        let engine_version = self.weights(policy, version).version();
        if self.has_own_weights()
            && self.synced_once
            && self.staleness.allows(trained_at, engine_version)
        {
            return Ok(());
        }
        self.sync(policy, version)
    }

    /// The copy takes `policy`'s weights now, whatever its version (new start weights).
    pub fn refresh_copy(&mut self, policy: &dyn TrainPolicy) -> anyhow::Result<()> {
        if let Some(copy) = &mut self.copy {
            copy.replica.refresh(policy)?;
        }
        Ok(())
    }

    /// [`Self::sync`], untimed.
    fn sync_untimed(&mut self, policy: &dyn TrainPolicy, version: u64) -> anyhow::Result<()> {
        if let (Some(remote), Some(server_sync)) = (&mut self.remote, &self.server_sync) {
            if remote.weight_version() == version && self.synced_once {
                return Ok(());
            }
            let qwen3 = policy
                .as_any()
                .downcast_ref::<Qwen3>()
                .context("a remote engine serves Qwen3 only")?;
            let weights = &self.weights_dir;
            let dir = weights.join(format!("v{version:06}"));
            if dir.exists() {
                std::fs::remove_dir_all(&dir)
                    .with_context(|| format!("clearing {}", dir.display()))?;
            }
            let sync = match server_sync {
                ServerSync::Lora { adapter, base } => {
                    qwen3.save_lora_peft(&dir, adapter, base)?;
                    WeightSync::LoraAdapter {
                        dir: dir.clone(),
                        name: "agentrl-policy".to_string(),
                        version,
                    }
                }
                ServerSync::Full => {
                    qwen3.save(&dir)?;
                    WeightSync::FullWeights {
                        dir: dir.clone(),
                        version,
                    }
                }
            };
            remote
                .sync_weights(&sync)
                .with_context(|| format!("syncing weight version {version} to the servers"))?;
            self.synced_once = true;
            // The servers have loaded this version: older folders are no longer read.
            if let Ok(entries) = std::fs::read_dir(weights) {
                for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
                    if path != dir {
                        let _ = std::fs::remove_dir_all(&path);
                    }
                }
            }
            return Ok(());
        }
        if let Some(copy) = &mut self.copy {
            if copy.version != version || !self.synced_once {
                copy.replica.refresh(policy)?;
                copy.version = version;
            }
            self.synced_once = true;
        }
        Ok(())
    }
}
