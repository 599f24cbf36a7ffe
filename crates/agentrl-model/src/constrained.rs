//! A policy whose next-token logits carry a bias chosen by the previous token: the way an
//! action grammar (TinyAgent's `model.action_vocab`) is applied without anyone threading a
//! logit-bias table by hand.
//!
//! The bias is a `[V, V]` table: row `w` is added to the logits of the position whose input
//! token is `w`. The trainer's forward adds `table[ids]` (an embedding lookup) to every
//! position; the engine's decode step (`agentrl-engine`) adds the row of each sequence's last
//! fed token. Both sides see the same distribution, so on-policy ratios stay 1. The table
//! itself is built where the grammar is known (`agentrl_chat::tiny::grammar`).

use candle_core::{Device, Result, Tensor, Var};

use crate::policy::{ForUpdate, Policy, PolicyOutput};

/// A `[V, V]` previous-token logit bias (0 = allowed; a large negative value = never).
#[derive(Debug, Clone)]
pub struct LogitBias {
    vocab_size: usize,
    host: Vec<f32>,
    table: Tensor,
}

impl LogitBias {
    /// `table` holds `vocab_size²` entries, row-major by previous token.
    pub fn new(table: Vec<f32>, vocab_size: usize, device: &Device) -> Result<Self> {
        if table.len() != vocab_size * vocab_size {
            candle_core::bail!(
                "logit bias: {} entries for a vocabulary of {vocab_size} (need {})",
                table.len(),
                vocab_size * vocab_size
            );
        }
        let tensor = Tensor::from_slice(&table, (vocab_size, vocab_size), device)?;
        Ok(Self {
            vocab_size,
            host: table,
            table: tensor,
        })
    }

    /// The bias row after token `prev` (for decoding one position).
    pub fn row(&self, prev: u32) -> &[f32] {
        let n = self.vocab_size;
        let start = (prev as usize).min(n.saturating_sub(1)) * n;
        &self.host[start..start + n]
    }

    /// `table[ids]`: the `[B, T, V]` bias of every position of `ids` `[B, T]`.
    pub fn for_ids(&self, ids: &Tensor) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        self.table
            .embedding(&ids.flatten_all()?)?
            .reshape((b, t, self.vocab_size))
    }

    /// [`LogitBias::for_ids`] at `positions` only (u32 `[N]`, indexing `ids`' `B*T` positions
    /// row-major): `[N, V]`, each position's row of its own input token.
    pub fn at_positions(&self, ids: &Tensor, positions: &Tensor) -> Result<Tensor> {
        self.table
            .embedding(&ids.flatten_all()?.index_select(positions, 0)?)
    }
}

/// A policy with an optional [`LogitBias`]; without one it is the inner policy unchanged.
pub struct ConstrainedPolicy<P> {
    inner: P,
    bias: Option<LogitBias>,
}

impl<P: Policy> ConstrainedPolicy<P> {
    pub fn new(inner: P, bias: Option<LogitBias>) -> Self {
        Self { inner, bias }
    }

    pub fn inner(&self) -> &P {
        &self.inner
    }

    pub fn bias(&self) -> Option<&LogitBias> {
        self.bias.as_ref()
    }
}

impl<P: Policy> Policy for ConstrainedPolicy<P> {
    fn forward(&self, ids: &Tensor) -> Result<PolicyOutput> {
        let out = self.inner.forward(ids)?;
        Ok(match &self.bias {
            Some(bias) => PolicyOutput {
                logits: (out.logits + bias.for_ids(ids)?)?,
                values: out.values,
            },
            None => out,
        })
    }
    fn forward_at_for_update(&self, ids: &Tensor, positions: &Tensor) -> Result<ForUpdate> {
        let ForUpdate { output, pending } = self.inner.forward_at_for_update(ids, positions)?;
        let output = match &self.bias {
            Some(bias) => PolicyOutput {
                logits: (output.logits + bias.at_positions(ids, positions)?)?,
                values: output.values,
            },
            None => output,
        };
        Ok(ForUpdate { output, pending })
    }
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }
    fn max_seq(&self) -> usize {
        self.inner.max_seq()
    }
    fn device(&self) -> &Device {
        self.inner.device()
    }
    fn trainable_vars(&self) -> Vec<(String, Var)> {
        self.inner.trainable_vars()
    }
    fn save(&self, path: &std::path::Path) -> anyhow::Result<()> {
        self.inner.save(path)
    }
    fn load(&self, path: &std::path::Path) -> anyhow::Result<()> {
        self.inner.load(path)
    }
}
