//! The engine layer (context parallelism, pools, grammar, prompt logprobs, the synthetic golden) and vocabulary-parallel sampling.
//! One test binary; each module is a former `tests/<name>.rs`.

#[path = "../common/mod.rs"]
mod common;

mod cp;
mod golden;
mod grammar;
mod pool;
mod prompt;
mod vocab_parallel;
