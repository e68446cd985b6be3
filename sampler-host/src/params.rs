//! Sampling parameters and their validation (SAMPLER.md section 1).

use crate::error::ParamError;

/// `SAMPLING_EPS`: temperatures below it (compared in f32) become it, and
/// top-p and top-k are turned off.
pub const SAMPLING_EPS: f32 = 1e-5;

/// Per-request sampling parameters, as an engine receives them (raw).
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature; error if negative (sign bit set) or NaN.
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
}

impl SamplingParams {
    /// Validates against SAMPLER.md section 1 for candidate width `n` and
    /// applies the temperature clamp. Draws a random seed when absent.
    ///
    /// Errors: [`ParamError`] naming the field and its value.
    pub fn validate(&self, n: u32) -> Result<ValidParams, ParamError> {
        let t = self.temperature;
        if t.is_nan() || t.is_sign_negative() {
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
        let seed = self.seq_seed.unwrap_or_else(random_seed);
        let (temperature, top_p, top_k) =
            if t < SAMPLING_EPS { (SAMPLING_EPS, 1.0, -1) } else { (t, self.top_p, self.top_k as i32) };
        Ok(ValidParams { temperature, top_p, top_k, top_logprobs: self.top_logprobs, seed })
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
        let p = |t: f32, tp: f32, k: i64| SamplingParams { temperature: t, top_p: tp, top_k: k, seq_seed: Some(1), ..Default::default() };
        assert_eq!(p(-1.0, 1.0, -1).validate(8), Err(ParamError::Temperature(-1.0)));
        assert!(matches!(p(-0.0, 1.0, -1).validate(8), Err(ParamError::Temperature(_))));
        assert!(matches!(p(f32::NAN, 1.0, -1).validate(8), Err(ParamError::Temperature(_))));
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
    fn absent_seed_is_random() {
        let p = SamplingParams::default();
        assert_ne!(p.validate(8).unwrap().seed, p.validate(8).unwrap().seed);
    }
}
