//! Experiments: how requests are assigned to variants (`assign`) and how variants are judged
//! (`stats`: an always-valid sequential test). `docs/experiments.md`.

pub mod assign;
pub mod stats;
