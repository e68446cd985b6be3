//! The engine surface: the state an inference engine keeps between steps,
//! built on the per-step [`Sampler::sample`] API (SAMPLER.md sections 2 and
//! 6-9). See `docs/ENGINE.md`.
//!
//! Each [`Engine::step`]:
//! 1. admits waiting requests while the MTP info pool has a free slot;
//! 2. schedules every running request: a prefill chunk (at most
//!    `prefill_chunk` prompt tokens) or a decode step verifying its pending
//!    drafts (`seqlen_q = drafts + 1`);
//! 3. computes the prompt logprobs of this step's prefill chunks in sampler
//!    calls of at most `max_prompt_rows` rows ([`prompt`]); a collective
//!    barrier follows (the reference's embedding gather);
//! 4. builds the grammar masks (`nextn + 1` per step, [`grammar`]), the golden
//!    tokens ([`golden`]) and the draft distributions read from the pool
//!    ([`pool`]), asks the model for the target logits, and samples;
//! 5. runs the draft model's draws (seed + 1000000007, positions
//!    `sample_position + last_valid_offset + i`) and stores their processed
//!    top-N distributions in the request's pool slot;
//! 6. broadcasts the step's tokens and drafts from the driver ([`cp`]); every
//!    rank applies them, so a follower's state matches the driver's while it
//!    returns an empty report.

pub mod golden;
pub mod grammar;
pub mod pool;
pub mod prompt;
mod step;
pub mod synth;

use std::collections::VecDeque;

use thiserror::Error;

use crate::error::{BatchError, RequestError};
use crate::layout::DRAFT_SEED_OFFSET;
use crate::params::{random_seed, SamplingParams};
use crate::request::{Request, RequestKind};
use crate::sampler::Sampler;

pub use crate::dist::collective::{Collective, CollectiveError, LocalCollective, NcclCollective, Role, SoloCollective};
pub use grammar::{GrammarMatcher, JsonMatcher, StepMasks};
pub use pool::{pool_bytes, tree_pool_bytes, MtpInfoPool};
pub use prompt::{compute_prompt_logprobs, PromptJob, PromptStats, MAX_PROMPT_ROWS};
pub use synth::SyntheticModel;

/// Seed offset of the draft model's draws (re-exported for engines).
pub const DRAFT_SEED: u64 = DRAFT_SEED_OFFSET;

/// An engine-level failure (not of one request).
#[derive(Debug, Error)]
pub enum EngineError {
    /// The engine configuration is invalid.
    #[error("engine configuration: {0}")]
    Config(String),
    /// The model failed.
    #[error("model: {0}")]
    Model(String),
    /// The sampler refused the batch.
    #[error(transparent)]
    Batch(#[from] BatchError),
    /// A collective (context parallelism) failed.
    #[error(transparent)]
    Collective(#[from] CollectiveError),
    /// Ranks disagree about the step.
    #[error("context-parallel protocol: {0}")]
    Protocol(String),
}

/// Engine configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Requests running at once (pool slots).
    pub max_num_seqs: usize,
    /// Draft tokens per step (0 = no speculative decoding).
    pub nextn: usize,
    /// Prompt tokens prefilled per step (0 = the whole prompt in one step).
    pub prefill_chunk: usize,
    /// Rows per sampler call for prompt logprobs (section 8: 8192).
    pub max_prompt_rows: usize,
    /// Driver or follower rank.
    pub role: Role,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_num_seqs: 64,
            nextn: 5,
            prefill_chunk: 0,
            max_prompt_rows: MAX_PROMPT_ROWS,
            role: Role::Driver,
        }
    }
}

/// A request as the engine receives it.
pub struct EngineRequest {
    /// Caller's id (unique among live requests).
    pub id: u64,
    /// Prompt tokens (at least one).
    pub prompt: Vec<i32>,
    /// Sampling parameters; `golden_token_ids` turns on teacher forcing and
    /// `prompt_logprobs` the prompt logprobs. An absent seed is drawn once here.
    pub params: SamplingParams,
    /// Output tokens at most (at least 1).
    pub max_tokens: usize,
    /// End-of-sequence token: the request finishes after emitting it.
    pub eos: Option<i32>,
    /// Grammar constraint (driver only).
    pub grammar: Option<Box<dyn GrammarMatcher>>,
}

impl EngineRequest {
    /// A plain request.
    pub fn new(id: u64, prompt: Vec<i32>, params: SamplingParams, max_tokens: usize) -> EngineRequest {
        EngineRequest { id, prompt, params, max_tokens, eos: None, grammar: None }
    }
}

impl std::fmt::Debug for EngineRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineRequest")
            .field("id", &self.id)
            .field("prompt_len", &self.prompt.len())
            .field("max_tokens", &self.max_tokens)
            .field("grammar", &self.grammar.is_some())
            .finish()
    }
}

/// What a row of logits is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowRole {
    /// A prompt-logprobs row (scores the next prompt token).
    Prompt,
    /// A target row that samples or verifies (prefill's last row, decode rows).
    Target,
    /// A draft-model row.
    Draft,
}

/// One row the engine asks the model for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowQuery {
    /// Request id.
    pub request: u64,
    /// What the row is for.
    pub role: RowRole,
    /// The row's input token (-1 when not known yet: drafts after the first).
    pub input: i32,
    /// Index in the whole sequence (prompt + output) of the token the row predicts.
    pub predicts: u64,
}

/// The model: logits for the rows the engine asks for.
pub trait LogitsSource {
    /// `[rows.len(), V]` f32 target-model logits.
    fn target_logits(&mut self, rows: &[RowQuery]) -> Vec<f32>;
    /// `[rows.len(), V]` f32 draft-model logits.
    fn draft_logits(&mut self, rows: &[RowQuery]) -> Vec<f32>;
}

/// A model that is never asked (a follower rank).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoModel;

impl LogitsSource for NoModel {
    fn target_logits(&mut self, _rows: &[RowQuery]) -> Vec<f32> {
        Vec::new()
    }
    fn draft_logits(&mut self, _rows: &[RowQuery]) -> Vec<f32> {
        Vec::new()
    }
}

/// One request's phase in a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Prefill of prompt positions `start .. start + len` (`last`: the final chunk, which samples).
    Prefill {
        /// First prompt position.
        start: usize,
        /// Positions in this chunk.
        len: usize,
        /// Whether this is the final chunk.
        last: bool,
    },
    /// Decode verifying `drafts` drafts.
    Decode {
        /// Drafts verified.
        drafts: usize,
    },
}

/// One request's step.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestStep {
    /// The request's id.
    pub id: u64,
    /// Its phase this step.
    pub phase: Phase,
    /// Drafts accepted.
    pub accepted: u32,
    /// Tokens emitted (after truncation at `max_tokens` / EOS).
    pub emitted: Vec<i32>,
    /// Whether golden tokens were assigned to its rows.
    pub teacher_forced: bool,
    /// Prompt logprobs computed this step.
    pub prompt_logprobs: usize,
    /// Drafts proposed for the next step.
    pub new_drafts: usize,
    /// Ok, or why the request failed (it then finishes).
    pub status: Result<(), RequestError>,
    /// The request finished this step.
    pub finished: bool,
}

/// What a step returns (empty on a follower).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepReport {
    /// Step number (from 0).
    pub step: u64,
    /// Per scheduled request (driver only).
    pub requests: Vec<RequestStep>,
    /// Prompt-logprob cut statistics.
    pub prompt_stats: PromptStats,
    /// Bytes of this step's grammar masks (0 when no request has a grammar).
    pub mask_bytes: usize,
    /// Bytes of the MTP info pool.
    pub pool_bytes: u64,
    /// Pool slots in use after the step.
    pub slots_in_use: usize,
}

impl StepReport {
    /// True on a follower (and on an idle step).
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }
    /// Drafts verified and accepted this step.
    pub fn acceptance(&self) -> (u64, u64) {
        self.requests.iter().fold((0, 0), |(a, d), r| match r.phase {
            Phase::Decode { drafts } => (a + r.accepted as u64, d + drafts as u64),
            _ => (a, d),
        })
    }
}

/// A finished request.
#[derive(Clone, Debug, PartialEq)]
pub struct Finished {
    /// The request's id.
    pub id: u64,
    /// Output tokens.
    pub output: Vec<i32>,
    /// Processed logprob of each output token (driver only; followers hold the broadcast values).
    pub output_logprobs: Vec<f32>,
    /// Prompt logprobs (P - 1 values when asked; driver only).
    pub prompt_logprobs: Vec<f32>,
    /// Ok, or why it failed.
    pub status: Result<(), RequestError>,
    /// Drafts accepted / proposed over its life.
    pub accepted: u64,
    /// Drafts proposed over its life.
    pub drafted: u64,
    /// Pool slot it held.
    pub slot: usize,
}

struct Seq {
    id: u64,
    prompt: Vec<i32>,
    params: SamplingParams,
    max_tokens: usize,
    eos: Option<i32>,
    grammar: Option<Box<dyn GrammarMatcher>>,
    slot: usize,
    prefilled: usize,
    output: Vec<i32>,
    output_logprobs: Vec<f32>,
    prompt_logprobs: Vec<f32>,
    drafts: Vec<i32>,
    status: Result<(), RequestError>,
    accepted: u64,
    drafted: u64,
}

impl Seq {
    fn last_token(&self) -> i32 {
        *self.output.last().unwrap_or(&self.prompt[self.prompt.len() - 1])
    }
    fn len(&self) -> u64 {
        (self.prompt.len() + self.output.len()) as u64
    }
}

/// Per-request result of a step, as the driver broadcasts it.
#[derive(Clone, Debug, Default, PartialEq)]
struct Update {
    ok: bool,
    accepted: u32,
    emitted: Vec<i32>,
    logprobs: Vec<f32>,
    drafts: Vec<i32>,
    finished: bool,
}

fn encode(updates: &[Option<Update>]) -> Vec<i32> {
    let mut v = vec![updates.len() as i32];
    for u in updates {
        match u {
            None => v.push(0),
            Some(u) => {
                v.extend([1, u.ok as i32, u.accepted as i32, u.finished as i32, u.emitted.len() as i32]);
                v.extend(&u.emitted);
                v.extend(u.logprobs.iter().map(|x| x.to_bits() as i32));
                v.push(u.drafts.len() as i32);
                v.extend(&u.drafts);
            }
        }
    }
    v
}

fn decode(v: &[i32]) -> Result<Vec<Option<Update>>, EngineError> {
    let bad = || EngineError::Protocol("malformed step broadcast".into());
    let mut it = v.iter().copied();
    let mut next = || it.next().ok_or_else(bad);
    let n = next()?;
    let mut out = Vec::new();
    for _ in 0..n {
        if next()? == 0 {
            out.push(None);
            continue;
        }
        let ok = next()? != 0;
        let accepted = next()? as u32;
        let finished = next()? != 0;
        let ne = next()?.max(0) as usize;
        let emitted = (0..ne).map(|_| next()).collect::<Result<Vec<_>, _>>()?;
        let logprobs = (0..ne).map(|_| next().map(|b| f32::from_bits(b as u32))).collect::<Result<Vec<_>, _>>()?;
        let nd = next()?.max(0) as usize;
        let drafts = (0..nd).map(|_| next()).collect::<Result<Vec<_>, _>>()?;
        out.push(Some(Update { ok, accepted, emitted, logprobs, drafts, finished }));
    }
    Ok(out)
}

/// The engine: per-request state across steps over one [`Sampler`].
pub struct Engine {
    sampler: Sampler,
    cfg: EngineConfig,
    pool: MtpInfoPool,
    collective: Box<dyn Collective>,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
    finished: Vec<Finished>,
    step: u64,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("cfg", &self.cfg)
            .field("running", &self.running.len())
            .field("waiting", &self.waiting.len())
            .finish()
    }
}

impl Engine {
    /// An engine alone on one rank (driver, no collectives).
    pub fn new(sampler: Sampler, cfg: EngineConfig) -> Result<Engine, EngineError> {
        Engine::with_collective(sampler, cfg, Box::new(SoloCollective))
    }

    /// An engine on one rank of a context-parallel group.
    pub fn with_collective(
        sampler: Sampler,
        cfg: EngineConfig,
        collective: Box<dyn Collective>,
    ) -> Result<Engine, EngineError> {
        if cfg.max_num_seqs == 0 {
            return Err(EngineError::Config("max_num_seqs must be at least 1".into()));
        }
        if (cfg.role == Role::Driver) != (collective.rank() == 0) {
            return Err(EngineError::Config(format!(
                "role {:?} on rank {} (the driver is rank 0)",
                cfg.role,
                collective.rank()
            )));
        }
        // The engine's decode and draft requests carry up to `cfg.nextn`
        // drafts; a sampler of smaller nextn would fail every one of them.
        let sn = sampler.config().nextn;
        if cfg.nextn as u64 > sn as u64 {
            return Err(EngineError::Config(format!("nextn = {} exceeds the sampler's nextn = {sn} (SamplerConfig::nextn must be at least EngineConfig::nextn)", cfg.nextn)));
        }
        let v = sampler.config().vocab_size as usize;
        let pool = MtpInfoPool::new(cfg.max_num_seqs, cfg.nextn, sampler.n() as usize, v)?;
        Ok(Engine {
            sampler,
            cfg,
            pool,
            collective,
            waiting: VecDeque::new(),
            running: Vec::new(),
            finished: Vec::new(),
            step: 0,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }
    /// The MTP info pool.
    pub fn pool(&self) -> &MtpInfoPool {
        &self.pool
    }
    /// The sampler.
    pub fn sampler(&mut self) -> &mut Sampler {
        &mut self.sampler
    }
    /// Requests waiting or running.
    pub fn pending(&self) -> usize {
        self.waiting.len() + self.running.len()
    }
    /// Ids of the running requests, in batch order.
    pub fn running_ids(&self) -> Vec<u64> {
        self.running.iter().map(|s| s.id).collect()
    }
    /// Pool slot of a running request.
    pub fn slot_of(&self, id: u64) -> Option<usize> {
        self.running.iter().find(|s| s.id == id).map(|s| s.slot)
    }
    /// Pending drafts of a running request.
    pub fn drafts_of(&self, id: u64) -> Option<&[i32]> {
        self.running.iter().find(|s| s.id == id).map(|s| s.drafts.as_slice())
    }
    /// Output so far of a running request.
    pub fn output_of(&self, id: u64) -> Option<&[i32]> {
        self.running.iter().find(|s| s.id == id).map(|s| s.output.as_slice())
    }
    /// Takes the requests finished so far.
    pub fn take_finished(&mut self) -> Vec<Finished> {
        std::mem::take(&mut self.finished)
    }

    /// Queues a request. Errors: an empty prompt, a prompt id outside V, or
    /// an id already waiting or running (the model's [`RowQuery`] and the
    /// [`Finished`] results name requests by id; a finished id may be reused).
    pub fn add_request(&mut self, r: EngineRequest) -> Result<(), EngineError> {
        if self.waiting.iter().chain(&self.running).any(|s| s.id == r.id) {
            return Err(EngineError::Config(format!(
                "request id {} is already waiting or running (ids must be unique among live requests)",
                r.id
            )));
        }
        let v = self.sampler.config().vocab_size as i64;
        if r.prompt.is_empty() {
            return Err(EngineError::Config(format!("request {}: empty prompt", r.id)));
        }
        if let Some(t) = r.prompt.iter().find(|&&t| t < 0 || t as i64 >= v) {
            return Err(EngineError::Config(format!("request {}: prompt token {t} outside 0..{v}", r.id)));
        }
        let mut params = r.params;
        if self.cfg.role == Role::Driver {
            params.seq_seed.get_or_insert_with(random_seed);
        }
        self.waiting.push_back(Seq {
            id: r.id,
            prompt: r.prompt,
            params,
            max_tokens: r.max_tokens.max(1),
            eos: r.eos,
            grammar: r.grammar,
            slot: usize::MAX,
            prefilled: 0,
            output: Vec::new(),
            output_logprobs: Vec::new(),
            prompt_logprobs: Vec::new(),
            drafts: Vec::new(),
            status: Ok(()),
            accepted: 0,
            drafted: 0,
        });
        Ok(())
    }

    fn admit(&mut self) {
        while !self.waiting.is_empty() {
            let Some(slot) = self.pool.alloc() else { break };
            let mut s = self.waiting.pop_front().unwrap();
            s.slot = slot;
            self.running.push(s);
        }
    }

    /// Steps until no request is waiting or running (at most `max_steps`).
    pub fn run_to_completion(
        &mut self,
        model: &mut dyn LogitsSource,
        max_steps: usize,
    ) -> Result<Vec<StepReport>, EngineError> {
        let mut reports = Vec::new();
        for _ in 0..max_steps {
            if self.pending() == 0 {
                break;
            }
            reports.push(self.step(model)?);
        }
        Ok(reports)
    }
}

fn check_len(what: &str, logits: &[f32], rows: usize, v: usize) -> Result<(), EngineError> {
    if logits.len() != rows * v {
        return Err(EngineError::Model(format!(
            "{what} logits: got {} values for {rows} rows of V = {v}",
            logits.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_roundtrip() {
        let u = vec![
            None,
            Some(Update {
                ok: true,
                accepted: 2,
                emitted: vec![3, 4, 5],
                logprobs: vec![-0.5, f32::NEG_INFINITY, -1.0],
                drafts: vec![7, 8],
                finished: false,
            }),
        ];
        assert_eq!(decode(&encode(&u)).unwrap(), u);
    }
}
