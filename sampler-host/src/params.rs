//! Sampling parameters and their validation (SAMPLER.md sections 1 and 10).

use crate::error::ParamError;

/// `SAMPLING_EPS`: temperatures below it (compared in f32) become it, and
/// top-p and top-k are turned off.
pub const SAMPLING_EPS: f32 = 1e-5;

/// Per-request sampling parameters, as an engine receives them (raw).
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature; error if negative (`< 0`; -0.0 counts as 0 and
    /// is clamped like it), NaN or +inf ([`ParamError::Temperature`]).
    pub temperature: f32,
    /// Nucleus mass in (0, 1]; 1 = off.
    pub top_p: f32,
    /// Top-k; -1 = off; error for 0, below -1 or above `i32::MAX`.
    pub top_k: i64,
    /// How many top logprobs to return (error if above N).
    pub top_logprobs: u32,
    /// Seed of the request's random streams; `None` draws 64 bits from the OS.
    pub seq_seed: Option<u64>,
    /// Return prompt logprobs on prefill (section 8). Engine level
    /// (`EngineRequest`): a `Sampler` request asks for prompt logprobs by
    /// being `RequestKind::PromptLogprobs`, and refuses this flag elsewhere.
    pub prompt_logprobs: bool,
    /// Teacher forcing: the output the request must follow (section 7).
    /// Engine level (`EngineRequest`): a `Sampler` request gives this step's
    /// golden ids in `Request::golden`, and refuses this field.
    pub golden_token_ids: Vec<i32>,
    /// Min-p (section 10.1): remove a candidate whose probability is below
    /// `min_p` times the largest one, tested as `x_i < L` with x from
    /// section 3.4 and `L = ln(min_p)` ([`ValidParams::log_min_p`]).
    /// f32 in `[0, 1]`, 0 (or -0.0) = off (the default); NaN or out of range
    /// is [`ParamError::MinP`]. Turned off by the temperature clamp of section 1.
    pub min_p: f32,
    /// Which of top-k and top-p applies first (section 10.2); the default is the seed's.
    pub filter_order: FilterOrder,
    /// Which logprobs are reported (section 10.3); the default is the seed's.
    pub logprobs_mode: LogprobsMode,
}

/// The order of the top-p and top-k cuts (SAMPLER.md section 10.2).
///
/// With p = [0.5, 0.3, 0.2], top_k = 2 and top_p = 0.6, the seed's order keeps
/// tokens {0, 1} and vLLM's / Hugging Face's keeps {0} (p' = [0.625, 0.375]):
///
/// ```
/// use sampler_host::{FilterOrder, Request, Sampler, SamplerConfig, SamplingParams};
/// let logits: Vec<f32> = [0.5f32, 0.3, 0.2].iter().map(|p| p.ln()).collect();
/// let mut s = Sampler::new(SamplerConfig { vocab_size: 3, force_topk: 0, nextn: 5, backend: Default::default() }).unwrap();
/// let mut kept = |order| {
///     let p = SamplingParams { top_k: 2, top_p: 0.6, top_logprobs: 3, filter_order: order, seq_seed: Some(1), ..Default::default() };
///     let out = s.sample(&logits, &[Request::prefill(p, 4)]).unwrap();
///     out.rows[0].top_logprobs.iter().filter(|(_, lp)| *lp > f32::NEG_INFINITY).map(|(id, _)| *id).collect::<Vec<i32>>()
/// };
/// assert_eq!(kept(FilterOrder::TopPThenTopK), [0, 1]);
/// assert_eq!(kept(FilterOrder::TopKThenTopP), [0]);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FilterOrder {
    /// Top-p on the unrenormalised p, then top-k (sections 3.7-3.8; the seed). `"top_p_then_top_k"`.
    #[default]
    TopPThenTopK,
    /// Top-k, then top-p on the renormalised top-k mass (vLLM, HF). `"top_k_then_top_p"`.
    TopKThenTopP,
}

impl FilterOrder {
    /// The name used in case files and on command lines.
    pub fn as_str(self) -> &'static str {
        match self {
            FilterOrder::TopPThenTopK => "top_p_then_top_k",
            FilterOrder::TopKThenTopP => "top_k_then_top_p",
        }
    }
}

impl std::str::FromStr for FilterOrder {
    type Err = ParamError;
    /// Errors: [`ParamError::FilterOrder`] naming the value.
    fn from_str(s: &str) -> Result<Self, ParamError> {
        match s {
            "top_p_then_top_k" => Ok(FilterOrder::TopPThenTopK),
            "top_k_then_top_p" => Ok(FilterOrder::TopKThenTopP),
            _ => Err(ParamError::FilterOrder(s.to_string())),
        }
    }
}

/// Which logprobs a request reports (SAMPLER.md section 10.3).
///
/// `Raw` reports `log_softmax` of the masked logits over all V at
/// temperature 1; the draw and every decision still use the processed
/// distribution. At temperature 0 with logits [2.0, 1.5], the processed
/// logprob of token 1 is about -50000 (x = -0.5 / 1e-5), the raw one
/// `-ln(1 + e^0.5)`:
///
/// ```
/// use sampler_host::{LogprobsMode, Request, Sampler, SamplerConfig, SamplingParams};
/// let mut s = Sampler::new(SamplerConfig { vocab_size: 2, force_topk: 0, nextn: 5, backend: Default::default() }).unwrap();
/// let mut lp1 = |mode| {
///     let p = SamplingParams { temperature: 0.0, top_logprobs: 2, logprobs_mode: mode, seq_seed: Some(1), ..Default::default() };
///     s.sample(&[2.0, 1.5], &[Request::prefill(p, 4)]).unwrap().rows[0].top_logprobs[1].1
/// };
/// assert!(lp1(LogprobsMode::Processed) < -49_000.0);
/// assert!((lp1(LogprobsMode::Raw) - -(1.0f32 + 0.5f32.exp()).ln()).abs() < 1e-5);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LogprobsMode {
    /// The renormalised logprobs of the kept set (section 3.9; the seed). `"processed"`.
    #[default]
    Processed,
    /// `log_softmax` of the masked logits at temperature 1 (section 10.3). `"raw"`.
    Raw,
}

impl LogprobsMode {
    /// The name used in case files and on command lines.
    pub fn as_str(self) -> &'static str {
        match self {
            LogprobsMode::Processed => "processed",
            LogprobsMode::Raw => "raw",
        }
    }
}

impl std::str::FromStr for LogprobsMode {
    type Err = ParamError;
    /// Errors: [`ParamError::LogprobsMode`] naming the value.
    fn from_str(s: &str) -> Result<Self, ParamError> {
        match s {
            "processed" => Ok(LogprobsMode::Processed),
            "raw" => Ok(LogprobsMode::Raw),
            _ => Err(ParamError::LogprobsMode(s.to_string())),
        }
    }
}

impl SamplingParams {
    /// These parameters without the engine-level fields (`prompt_logprobs`,
    /// `golden_token_ids`), which the engine layer implements and the
    /// `Sampler` refuses (they would do nothing there).
    pub fn for_sampler(&self) -> SamplingParams {
        SamplingParams { prompt_logprobs: false, golden_token_ids: Vec::new(), ..self.clone() }
    }
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_p: 1.0,
            top_k: -1,
            top_logprobs: 0,
            seq_seed: None,
            prompt_logprobs: false,
            golden_token_ids: Vec::new(),
            min_p: 0.0,
            filter_order: FilterOrder::TopPThenTopK,
            logprobs_mode: LogprobsMode::Processed,
        }
    }
}

/// Parameters after validation and clamping, as the kernels use them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ValidParams {
    /// Temperature, at least `SAMPLING_EPS`.
    pub temperature: f32,
    /// Top-p in (0, 1].
    pub top_p: f32,
    /// Top-k, -1 = off.
    pub top_k: i32,
    /// Top logprobs requested (<= N).
    pub top_logprobs: u32,
    /// The seed (drawn from the OS when absent).
    pub seed: u64,
    /// Min-p in [0, 1], 0 = off (also after the temperature clamp; -0.0 is stored as 0).
    pub min_p: f32,
    /// Section 10.1's `L = ln(min_p)`: computed in f64 and rounded to f32
    /// once here ([`log_min_p`]); `-inf` when min-p is off, 0 for min_p = 1.
    /// Every backend removes candidate i when `x_i < L` (one f32 comparison).
    pub log_min_p: f32,
    /// Order of the top-p and top-k cuts (section 10.2).
    pub filter_order: FilterOrder,
    /// Reported logprobs (section 10.3).
    pub logprobs_mode: LogprobsMode,
}

impl SamplingParams {
    /// Validates against SAMPLER.md sections 1 and 10 for candidate width `n`
    /// and applies the temperature clamp (which also turns min-p off). Draws
    /// a random seed when absent.
    ///
    /// Errors: [`ParamError`] naming the field and its value.
    pub fn validate(&self, n: u32) -> Result<ValidParams, ParamError> {
        let t = self.temperature;
        // "Negative" is `< 0` in IEEE order: -0.0 is 0 (clamped below). +inf
        // is an error: (-inf - m) / inf is NaN for a masked logit.
        if !(0.0..f32::INFINITY).contains(&t) {
            return Err(ParamError::Temperature(t));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(ParamError::TopP(self.top_p));
        }
        if self.top_k == 0 || self.top_k < -1 || self.top_k > i32::MAX as i64 {
            return Err(ParamError::TopK(self.top_k));
        }
        if self.top_logprobs > n {
            return Err(ParamError::TopLogprobs { top_logprobs: self.top_logprobs, n });
        }
        if !(self.min_p >= 0.0 && self.min_p <= 1.0) {
            return Err(ParamError::MinP(self.min_p));
        }
        let seed = self.seq_seed.unwrap_or_else(random_seed);
        let (temperature, top_p, top_k, min_p) = if t < SAMPLING_EPS {
            (SAMPLING_EPS, 1.0, -1, 0.0)
        } else {
            // -0.0 is 0 (off).
            (t, self.top_p, self.top_k as i32, if self.min_p == 0.0 { 0.0 } else { self.min_p })
        };
        Ok(ValidParams {
            temperature,
            top_p,
            top_k,
            top_logprobs: self.top_logprobs,
            seed,
            min_p,
            log_min_p: log_min_p(min_p),
            filter_order: self.filter_order,
            logprobs_mode: self.logprobs_mode,
        })
    }
}

/// Section 10.1's min-p threshold `L = ln(min_p)` for a valid `min_p` in
/// [0, 1]: `ln` in f64, rounded to f32 once; `-inf` for 0 (off, -0.0
/// included), exactly 0 for 1. Every backend compares the f32 `x_i < L`, so
/// the boundary is the same bits everywhere: with logits `[0, f32(-ln 2)]`
/// and min_p 0.5, `x_1 == L` and token 1 is kept.
///
/// ```
/// use sampler_host::params::log_min_p;
/// assert_eq!(log_min_p(0.0), f32::NEG_INFINITY);
/// assert_eq!(log_min_p(1.0), 0.0);
/// assert_eq!(log_min_p(0.5), (-std::f64::consts::LN_2) as f32);
/// ```
pub fn log_min_p(min_p: f32) -> f32 {
    if min_p == 0.0 {
        f32::NEG_INFINITY
    } else if min_p == 1.0 {
        0.0
    } else {
        (min_p as f64).ln() as f32
    }
}

/// 64 random bits from the OS generator (through std's randomly keyed hasher).
pub fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64));
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_of_section_1() {
        let p = |t: f32, tp: f32, k: i64| SamplingParams {
            temperature: t,
            top_p: tp,
            top_k: k,
            seq_seed: Some(1),
            ..Default::default()
        };
        assert_eq!(p(-1.0, 1.0, -1).validate(8), Err(ParamError::Temperature(-1.0)));
        assert_eq!(p(-1e-30, 1.0, -1).validate(8), Err(ParamError::Temperature(-1e-30)));
        assert_eq!(p(f32::NEG_INFINITY, 1.0, -1).validate(8), Err(ParamError::Temperature(f32::NEG_INFINITY)));
        assert!(matches!(p(f32::NAN, 1.0, -1).validate(8), Err(ParamError::Temperature(_))));
        // +inf is an error (decided), the largest finite value is not.
        assert_eq!(p(f32::INFINITY, 1.0, -1).validate(8), Err(ParamError::Temperature(f32::INFINITY)));
        assert_eq!(ParamError::Temperature(f32::INFINITY).to_string(), "temperature must be finite and >= 0, got inf");
        assert_eq!(p(f32::MAX, 1.0, -1).validate(8).unwrap().temperature, f32::MAX);
        // -0.0 counts as 0: clamped like it, top-p, top-k and min-p off.
        let mut z = p(-0.0, 0.5, 3);
        z.min_p = 0.5;
        let v = z.validate(8).unwrap();
        assert_eq!((v.temperature, v.top_p, v.top_k, v.min_p, v.log_min_p), (1e-5, 1.0, -1, 0.0, f32::NEG_INFINITY));
        assert_eq!(p(-0.0, 0.5, 3).validate(8), p(0.0, 0.5, 3).validate(8));
        // top_p -0.0 is 0, outside (0, 1].
        assert!(matches!(p(1.0, -0.0, -1).validate(8), Err(ParamError::TopP(x)) if x == 0.0));
        assert_eq!(p(1.0, 0.0, -1).validate(8), Err(ParamError::TopP(0.0)));
        assert_eq!(p(1.0, 1.5, -1).validate(8), Err(ParamError::TopP(1.5)));
        assert_eq!(p(1.0, 1.0, 0).validate(8), Err(ParamError::TopK(0)));
        assert_eq!(p(1.0, 1.0, -2).validate(8), Err(ParamError::TopK(-2)));
        assert_eq!(p(1.0, 1.0, 1 << 31).validate(8), Err(ParamError::TopK(1 << 31)));
        let v = p(0.0, 0.5, 3).validate(8).unwrap();
        assert_eq!((v.temperature, v.top_p, v.top_k), (1e-5, 1.0, -1));
        let v = p(1e-5, 0.5, 3).validate(8).unwrap();
        assert_eq!((v.temperature, v.top_p, v.top_k), (1e-5, 0.5, 3));
        let mut q = p(1.0, 1.0, -1);
        q.top_logprobs = 9;
        assert_eq!(q.validate(8), Err(ParamError::TopLogprobs { top_logprobs: 9, n: 8 }));
    }

    #[test]
    fn rules_of_section_10() {
        let p = |t: f32, mp: f32| SamplingParams { temperature: t, min_p: mp, seq_seed: Some(1), ..Default::default() };
        assert_eq!(p(1.0, -0.1).validate(8), Err(ParamError::MinP(-0.1)));
        assert_eq!(p(1.0, 1.5).validate(8), Err(ParamError::MinP(1.5)));
        assert!(matches!(p(1.0, f32::NAN).validate(8), Err(ParamError::MinP(x)) if x.is_nan()));
        assert_eq!(p(1.0, 0.0).validate(8).unwrap().min_p, 0.0);
        assert_eq!(p(1.0, 1.0).validate(8).unwrap().min_p, 1.0);
        // -0.0 is 0: off, stored as +0.
        let v = p(1.0, -0.0).validate(8).unwrap();
        assert_eq!((v.min_p.to_bits(), v.log_min_p), (0, f32::NEG_INFINITY));
        // L = ln(min_p) in f64, rounded once; 0 for 1, -inf for 0.
        for mp in [1e-45f32, 1e-4, 0.05, 0.1, 0.2, 0.3, 0.5, 0.9, 0.99999994, 1.0] {
            assert_eq!(p(1.0, mp).validate(8).unwrap().log_min_p, (mp as f64).ln() as f32, "{mp}");
        }
        assert_eq!(p(1.0, 1.0).validate(8).unwrap().log_min_p.to_bits(), 0);
        assert_eq!(p(1.0, 0.0).validate(8).unwrap().log_min_p, f32::NEG_INFINITY);
        assert_eq!(p(0.0, 0.5).validate(8).unwrap().log_min_p, f32::NEG_INFINITY);
        // The temperature clamp turns min-p off, like top-p and top-k.
        assert_eq!(p(0.0, 0.5).validate(8).unwrap().min_p, 0.0);
        assert_eq!(p(1e-5, 0.5).validate(8).unwrap().min_p, 0.5);
        assert_eq!("top_k_then_top_p".parse::<FilterOrder>(), Ok(FilterOrder::TopKThenTopP));
        assert_eq!("top_p_then_top_k".parse::<FilterOrder>(), Ok(FilterOrder::TopPThenTopK));
        assert_eq!("topk".parse::<FilterOrder>(), Err(ParamError::FilterOrder("topk".into())));
        assert_eq!("raw".parse::<LogprobsMode>(), Ok(LogprobsMode::Raw));
        assert_eq!("processed".parse::<LogprobsMode>(), Ok(LogprobsMode::Processed));
        assert_eq!("Raw".parse::<LogprobsMode>(), Err(ParamError::LogprobsMode("Raw".into())));
        for o in [FilterOrder::TopPThenTopK, FilterOrder::TopKThenTopP] {
            assert_eq!(o.as_str().parse::<FilterOrder>(), Ok(o));
        }
        for m in [LogprobsMode::Processed, LogprobsMode::Raw] {
            assert_eq!(m.as_str().parse::<LogprobsMode>(), Ok(m));
        }
        let d = SamplingParams::default();
        assert_eq!(
            (d.min_p, d.filter_order, d.logprobs_mode),
            (0.0, FilterOrder::TopPThenTopK, LogprobsMode::Processed)
        );
    }

    #[test]
    fn absent_seed_is_random() {
        let p = SamplingParams::default();
        assert_ne!(p.validate(8).unwrap().seed, p.validate(8).unwrap().seed);
    }
}
