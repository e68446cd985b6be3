//! Shared test support: the independent f64 reference of SAMPLER.md
//! (`reference`) and small helpers.
#![allow(dead_code)]

pub mod ascendc_emu;
pub mod gen;
pub mod reference;
