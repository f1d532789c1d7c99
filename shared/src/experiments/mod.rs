//! Experiments: what one is and which requests it takes (`spec`), how requests are assigned to
//! variants (`assign`), how variants are judged (`stats`: an always-valid sequential test;
//! `results`: every variant against the control). `docs/experiments.md`.

pub mod assign;
pub mod results;
pub mod spec;
pub mod stats;
