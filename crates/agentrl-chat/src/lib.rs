//! placeholder

pub mod tiny;
