//! Error type of the RL math core.
//!
//! Every public function of `agentrl-rl` returns [`Result`]. Errors name the function and the
//! argument at fault, so a trainer that wires tensors together wrongly sees *which* tensor had
//! the wrong shape instead of a bare candle broadcast error.

/// Result alias used throughout the crate.
pub type Result<T> = std::result::Result<T, RlError>;

/// What can go wrong when feeding data into the RL math.
#[derive(Debug, thiserror::Error)]
pub enum RlError {
    /// A tensor or slice argument does not have the shape the function needs.
    #[error("{func}: argument `{arg}` has shape {got:?}, expected {expected}")]
    Shape {
        /// The public function that rejected its input.
        func: &'static str,
        /// The argument with the wrong shape.
        arg: &'static str,
        /// The shape it had.
        got: Vec<usize>,
        /// The shape it should have had, in words.
        expected: String,
    },
    /// A value is NaN or infinite where a finite number is required (e.g. a reward).
    #[error("{func}: argument `{arg}` holds a non-finite value ({value}) at index {index}")]
    NonFinite {
        /// The public function that rejected its input.
        func: &'static str,
        /// The argument holding the bad value.
        arg: &'static str,
        /// Flat index of the first offending element.
        index: usize,
        /// The offending value.
        value: f64,
    },
    /// The input is empty where at least one element is required (empty batch, empty group,
    /// a mask with too few valid tokens, ...).
    #[error("{func}: {what}")]
    Empty {
        /// The public function that rejected its input.
        func: &'static str,
        /// What was empty.
        what: String,
    },
    /// A hyper-parameter or argument is outside its valid range.
    #[error("{func}: invalid argument `{arg}`: {reason}")]
    InvalidArgument {
        /// The public function that rejected its input.
        func: &'static str,
        /// The argument at fault.
        arg: &'static str,
        /// Why it is invalid.
        reason: String,
    },
    /// An error raised by candle while evaluating a tensor expression.
    #[error("tensor operation failed: {0}")]
    Candle(#[from] candle_core::Error),
}

impl RlError {
    /// Shorthand for [`RlError::InvalidArgument`].
    pub(crate) fn invalid(
        func: &'static str,
        arg: &'static str,
        reason: impl Into<String>,
    ) -> Self {
        RlError::InvalidArgument {
            func,
            arg,
            reason: reason.into(),
        }
    }
}
