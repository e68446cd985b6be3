//! The conformance harness: case files in ([`case`]), result documents
//! out, and their comparison ([`compare`]). Tools and tests, not engines
//! (the `conformance` feature).

pub mod case;
pub mod compare;
mod requests;
