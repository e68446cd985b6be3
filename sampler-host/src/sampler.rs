//! The `Sampler`: configuration, backend choice, and assembly of the
//! per-row and per-request outputs (SAMPLER.md sections 5-9).

use crate::error::{BatchError, ConfigError, RequestError};
use crate::layout::{build_plan, RequestInfo};
use crate::params::SamplingParams;
use crate::request::{Request, RequestKind, RequestOutput, RowOutput, StepOutput};
use crate::runtime::device::cpu::CpuBackend;
use crate::runtime::device::cuda::CudaBackend;
use crate::runtime::device::Backend;
use crate::runtime::plan::{Logits, StepResult};

pub use sampler_kernels::codes::{MAX_N_ASCEND, MAX_N_NVIDIA};
/// Largest vocabulary the kernels' fixed-point sums support.
pub const MAX_VOCAB: u32 = sampler_kernels::rt::math::MAX_VOCAB;

/// Which backend runs the kernels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendKind {
    /// CUDA when a driver and GPU are present, else the CPU.
    #[default]
    Auto,
    /// The host CPU (rayon over rows).
    Cpu,
    /// NVIDIA GPU through the CUDA driver (PTX from the same kernels).
    Cuda,
    /// Huawei Ascend 910B/910C through CANN (AscendC from the same kernels,
    /// the shared launch list; force top-k N <= 4096). Without CANN,
    /// `Sampler::new` returns `ConfigError::BackendUnavailable`; never run
    /// on hardware yet (docs/ASCEND.md).
    Ascend,
}

impl std::str::FromStr for BackendKind {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "auto" => Ok(BackendKind::Auto),
            "cpu" => Ok(BackendKind::Cpu),
            "cuda" => Ok(BackendKind::Cuda),
            "ascend" => Ok(BackendKind::Ascend),
            other => Err(ConfigError::Field {
                field: "backend",
                msg: format!("unknown backend `{other}` (expected auto, cpu, cuda or ascend)"),
            }),
        }
    }
}

/// Sampler configuration (fixed for the sampler's life).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SamplerConfig {
    /// Vocabulary size V (1..=524288).
    pub vocab_size: u32,
    /// Force top-k width N; 0 (or >= V) = off (section 3.3).
    pub force_topk: u32,
    /// Most drafts a decode request verifies, and most draft rows of a
    /// `Draft` request, per step (default 5); more fail that request.
    pub nextn: u32,
    /// Backend choice.
    pub backend: BackendKind,
}

impl SamplerConfig {
    /// A configuration with force top-k off, nextn 5 and the best backend present.
    pub fn new(vocab_size: u32) -> Self {
        SamplerConfig { vocab_size, force_topk: 0, nextn: 5, backend: BackendKind::Auto }
    }
}

/// The sampler: validates requests, lays out each step and runs it on a backend.
pub struct Sampler {
    cfg: SamplerConfig,
    n: u32,
    backend: Backend,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("cfg", &self.cfg)
            .field("n", &self.n)
            .field("backend", &self.backend.name())
            .finish()
    }
}

/// Checks N against a platform's limit (section 9): a clear error, not an assert.
pub fn check_force_topk(force_topk: u32, vocab: u32, platform: &'static str) -> Result<(), ConfigError> {
    let limit = match platform {
        "ascend" => MAX_N_ASCEND,
        "nvidia" | "cuda" => MAX_N_NVIDIA,
        _ => return Ok(()),
    };
    if force_topk != 0 && force_topk < vocab && force_topk > limit {
        return Err(ConfigError::ForceTopkTooLarge { n: force_topk, platform, limit });
    }
    Ok(())
}

impl Sampler {
    /// Builds a sampler. Errors: vocabulary out of range, N above the chosen
    /// platform's limit, or a forced backend that is not available.
    pub fn new(cfg: SamplerConfig) -> Result<Sampler, ConfigError> {
        if cfg.vocab_size == 0 || cfg.vocab_size > MAX_VOCAB {
            return Err(ConfigError::VocabSize(cfg.vocab_size as u64));
        }
        let n = if cfg.force_topk == 0 || cfg.force_topk >= cfg.vocab_size { cfg.vocab_size } else { cfg.force_topk };
        let backend = match cfg.backend {
            BackendKind::Cpu => Backend::Cpu(CpuBackend::default()),
            BackendKind::Cuda => {
                check_force_topk(cfg.force_topk, cfg.vocab_size, "nvidia")?;
                cuda_backend()?
            }
            BackendKind::Ascend => {
                check_force_topk(cfg.force_topk, cfg.vocab_size, "ascend")?;
                Backend::Ascend(crate::runtime::device::ascend::AscendBackend::new()?)
            }
            BackendKind::Auto => match cuda_backend() {
                Ok(b) => {
                    check_force_topk(cfg.force_topk, cfg.vocab_size, "nvidia")?;
                    b
                }
                Err(_) => Backend::Cpu(CpuBackend::default()),
            },
        };
        Ok(Sampler { cfg, n, backend })
    }

    /// Checks `req` against this sampler's configuration (parameters,
    /// vocabulary ids, draft counts within `nextn`, masks): the error a step
    /// would give it, now. Only its logits are left to check at `sample`.
    pub fn check(&self, req: &Request) -> Result<(), RequestError> {
        crate::layout::validate(req, self.cfg.vocab_size, self.n, self.cfg.nextn).map(|_| ())
    }

    /// Builds a request and checks it ([`Sampler::check`]).
    ///
    /// ```
    /// use sampler_host::{BackendKind, RequestKind, Sampler, SamplerConfig, SamplingParams};
    /// let s = Sampler::new(SamplerConfig { backend: BackendKind::Cpu, ..SamplerConfig::new(100) }).unwrap();
    /// let ok = s.request(SamplingParams::default(), RequestKind::Prefill { seqlen_k: 41 });
    /// assert!(ok.is_ok());
    /// let bad = s.request(SamplingParams { top_p: 1.5, ..Default::default() }, RequestKind::Prefill { seqlen_k: 41 });
    /// assert!(bad.is_err());
    /// ```
    pub fn request(&self, params: SamplingParams, kind: RequestKind) -> Result<Request, RequestError> {
        let req = Request { params, kind, golden: Vec::new(), masks: None };
        self.check(&req)?;
        Ok(req)
    }

    /// The configuration.
    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }
    /// Candidate width N (V when force top-k is off).
    pub fn n(&self) -> u32 {
        self.n
    }
    /// Name of the backend in use (`"cpu"`, `"cuda"`).
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// Samples one step and waits for it.
    ///
    /// `logits`: `[R, V]` row-major, R the sum of the requests' rows, in
    /// request order: a host slice of f32, `half::bf16` or `half::f16`
    /// (borrowed, never copied whole), or CUDA device memory in f32, bf16 or
    /// f16 ([`crate::interop::CudaLogits`]; see [`Sampler::sample_async`] for
    /// the path that does not wait). Half precision is read as it is and
    /// widened to f32 inside the kernels, at load (exact), on the CPU and on
    /// CUDA, so results equal those of the widened f32 logits bit for bit;
    /// the Ascend backend widens host half logits on the host. Errors: [`BatchError`] for the batch's shape
    /// or a device failure; a bad request only gets an error status in its
    /// [`RequestOutput`] (SAMPLER.md sections 1-9).
    ///
    /// Host logits:
    /// ```
    /// use sampler_host::{BackendKind, Request, Sampler, SamplerConfig, SamplingParams};
    /// let mut s = Sampler::new(SamplerConfig { backend: BackendKind::Cpu, ..SamplerConfig::new(8) }).unwrap();
    /// let params = SamplingParams { temperature: 0.0, seq_seed: Some(1), ..Default::default() };
    /// let logits = [0.0f32, 1.0, 5.0, 0.5, 0.0, 0.0, 0.0, 0.0]; // [1, 8]
    /// let out = s.sample(&logits, &[Request::prefill(params.clone(), 3)]).unwrap();
    /// assert_eq!(out.requests[0].emitted, [2]);
    /// // The same logits as bf16 (exact here): the same result.
    /// let half: Vec<half::bf16> = logits.iter().map(|&x| half::bf16::from_f32(x)).collect();
    /// assert_eq!(s.sample(&half, &[Request::prefill(params, 3)]).unwrap(), out);
    /// ```
    ///
    /// Device logits (CUDA; the engine's buffer, read on its own stream),
    /// f32 or bf16 (read in place, widened at load):
    /// ```no_run
    /// use sampler_host::interop::{bf16, CudaLogits, CudaSlice};
    /// use sampler_host::{Request, Sampler, SamplerConfig, SamplingParams};
    /// # fn demo(logits: &CudaSlice<f32>, half: &CudaSlice<bf16>, reqs: &[Request]) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut s = Sampler::new(SamplerConfig::new(129280))?;
    /// let out = s.sample(CudaLogits::f32(logits), reqs)?;
    /// let out16 = s.sample(CudaLogits::bf16(half), reqs)?;
    /// # Ok(()) }
    /// ```
    pub fn sample<'a>(
        &mut self,
        logits: impl Into<Logits<'a>>,
        requests: &[Request],
    ) -> Result<StepOutput, BatchError> {
        let (plan, infos) = build_plan(self.cfg.vocab_size, self.n, self.cfg.nextn, logits, requests)?;
        let res = self.backend.run(&plan)?;
        Ok(assemble(requests, &infos, &res, plan.k as usize))
    }

    /// Starts one step and returns without waiting for the device: the
    /// device-resident path. With CUDA `logits` ([`crate::interop::CudaLogits`],
    /// f32, bf16 or f16, read in place; read on their own stream, which the sampler's stream waits for
    /// through one reused event, or on [`Sampler::cuda_stream`] itself,
    /// which needs none), nothing is copied to or from the host but the
    /// step's metadata and no host synchronisation happens: the metadata
    /// (every per-step input and initial value) goes up in one async copy
    /// from pinned memory on a copy stream, which overlaps the engine's work
    /// still producing the logits; the outputs stay on the device
    /// ([`PendingStep::device_outputs`]) until [`PendingStep::wait`] reads
    /// them back in one copy. No device memory is allocated and no event
    /// created once a step of the same or larger shape has run. On the CPU
    /// the step runs to the end here.
    ///
    /// Errors: as [`Sampler::sample`].
    pub fn sample_async<'a, 'r>(
        &mut self,
        logits: impl Into<Logits<'a>>,
        requests: &'r [Request],
    ) -> Result<PendingStep<'_, 'r>, BatchError> {
        let (plan, infos) = build_plan(self.cfg.vocab_size, self.n, self.cfg.nextn, logits, requests)?;
        let done = self.backend.enqueue(&plan)?;
        Ok(PendingStep { sampler: self, plan: plan.without_logits(), infos, requests, done })
    }

    /// [`Sampler::sample_async`] with the outputs written by the kernels
    /// straight into the caller's device buffers (CUDA): `outputs` is called
    /// once the step is laid out with (R, k, G) (rows, top-logprobs width,
    /// requests) and returns where each output goes
    /// ([`crate::interop::OutputPtrs`]; `None` fields stay in the
    /// sampler's buffers), or `None` to enqueue nothing (`Ok(false)`).
    /// Nothing is waited for or copied; the outputs are ordered on
    /// [`Sampler::cuda_stream`]. Errors: not the CUDA backend, or as [`Sampler::sample`].
    pub fn sample_async_into<'a>(
        &mut self,
        logits: impl Into<Logits<'a>>,
        requests: &[Request],
        outputs: impl FnOnce(usize, usize, usize) -> Option<crate::interop::OutputPtrs>,
    ) -> Result<bool, BatchError> {
        let (plan, _) = build_plan(self.cfg.vocab_size, self.n, self.cfg.nextn, logits, requests)?;
        let Some(cuda) = cuda_of(&mut self.backend) else {
            return Err(BatchError::Backend(crate::error::BackendError::Device {
                backend: "cpu",
                msg: "device outputs need the CUDA backend".into(),
            }));
        };
        let Some(out) = outputs(plan.rows as usize, plan.k as usize, plan.groups()) else { return Ok(false) };
        cuda.enqueue_into(&plan, &out)?;
        Ok(true)
    }

    /// Captures a step of this shape (rows per request, request kinds,
    /// draft widths, top-logprobs width, logits buffer) as a CUDA graph, for
    /// [`Sampler::replay`]; engines keep one per batch-size bucket. Runs the
    /// step once eagerly first. Errors: not the CUDA backend
    /// ([`BatchError::Backend`]), or as [`Sampler::sample`].
    pub fn capture<'a>(
        &mut self,
        logits: impl Into<Logits<'a>>,
        requests: &[Request],
    ) -> Result<crate::runtime::device::cuda::StepGraph, BatchError> {
        let (plan, _) = build_plan(self.cfg.vocab_size, self.n, self.cfg.nextn, logits, requests)?;
        let Some(cuda) = cuda_of(&mut self.backend) else {
            return Err(BatchError::Backend(crate::error::BackendError::Device {
                backend: "cpu",
                msg: "CUDA graphs need the CUDA backend".into(),
            }));
        };
        Ok(cuda.capture(&plan)?)
    }

    /// Runs a step through a graph from [`Sampler::capture`]: the metadata
    /// goes up in one async copy, the graph is launched, nothing waits.
    /// Errors: a step whose shape differs from the captured one, or as
    /// [`Sampler::sample`].
    pub fn replay<'a, 'r>(
        &mut self,
        graph: &crate::runtime::device::cuda::StepGraph,
        logits: impl Into<Logits<'a>>,
        requests: &'r [Request],
    ) -> Result<PendingStep<'_, 'r>, BatchError> {
        let (plan, infos) = build_plan(self.cfg.vocab_size, self.n, self.cfg.nextn, logits, requests)?;
        let Some(cuda) = cuda_of(&mut self.backend) else {
            return Err(BatchError::Backend(crate::error::BackendError::Device {
                backend: "cpu",
                msg: "CUDA graphs need the CUDA backend".into(),
            }));
        };
        cuda.replay(graph, &plan)?;
        Ok(PendingStep { sampler: self, plan: plan.without_logits(), infos, requests, done: None })
    }

    /// The CUDA stream the sampler launches on (its outputs are ordered on
    /// it); `None` on the CPU.
    pub fn cuda_stream(&mut self) -> Option<std::sync::Arc<crate::interop::CudaStream>> {
        cuda_of(&mut self.backend).map(|c| c.stream().clone())
    }

    /// Like [`Sampler::sample`], and also returns the processed top-N
    /// distribution (section 3: candidate ids in the order of 3.6 and their
    /// processed logprobs, N columns each) of the rows `rows` (indices into
    /// the logits, in the order given). The engine uses it to fill the MTP
    /// info pool from draft-model draws. Errors as `sample`, plus a row out of range.
    pub fn sample_with_processed<'a>(
        &mut self,
        logits: impl Into<Logits<'a>>,
        requests: &[Request],
        rows: &[usize],
    ) -> Result<(StepOutput, ProcessedRows), BatchError> {
        let (mut plan, infos) = build_plan(self.cfg.vocab_size, self.n, self.cfg.nextn, logits, requests)?;
        if let Some(&bad) = rows.iter().find(|&&r| r >= plan.rows as usize) {
            return Err(BatchError::Field {
                field: "rows",
                msg: format!("processed row {bad} is not below R = {}", plan.rows),
            });
        }
        plan.processed_rows = rows.iter().map(|&r| r as u32).collect();
        let mut res = self.backend.run(&plan)?;
        let out = assemble(requests, &infos, &res, plan.k as usize);
        let proc_rows = ProcessedRows {
            n: self.n as usize,
            rows: rows.to_vec(),
            ids: std::mem::take(&mut res.processed_ids),
            logprobs: std::mem::take(&mut res.processed_lps),
        };
        Ok((out, proc_rows))
    }
}

/// A step started by [`Sampler::sample_async`] or [`Sampler::replay`]: on
/// CUDA its outputs are still on the device ([`PendingStep::device_outputs`]);
/// [`PendingStep::wait`] copies them to pinned host memory and assembles
/// the per-request outputs.
pub struct PendingStep<'s, 'r> {
    sampler: &'s mut Sampler,
    plan: crate::runtime::plan::StepPlan<'static>,
    infos: Vec<RequestInfo>,
    requests: &'r [Request],
    done: Option<StepResult>,
}

impl std::fmt::Debug for PendingStep<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingStep").field("rows", &self.plan.rows).field("on_device", &self.done.is_none()).finish()
    }
}

impl PendingStep<'_, '_> {
    /// The step's outputs on the device (CUDA; `None` on the CPU, whose
    /// step has already finished): tokens `[R]` i32, logprobs `[R]` f32,
    /// top ids / logprobs `[R, k]`, `sum_smaller_probs` `[R]` f32, accepted
    /// and status `[G]` per request, ordered on [`Sampler::cuda_stream`].
    pub fn device_outputs(&mut self) -> Option<crate::runtime::device::cuda::DeviceOutputs<'_>> {
        if self.done.is_some() {
            return None;
        }
        let plan = &self.plan;
        cuda_of(&mut self.sampler.backend).and_then(|c| c.outputs(plan))
    }

    /// Waits for the step, copies its outputs to (pinned) host memory and
    /// returns the per-row and per-request outputs, as [`Sampler::sample`].
    /// Errors: a device failure ([`BatchError::Backend`]).
    pub fn wait(mut self) -> Result<StepOutput, BatchError> {
        let res = match self.done.take() {
            Some(r) => r,
            None => self.sampler.backend.collect(&self.plan)?,
        };
        Ok(assemble(self.requests, &self.infos, &res, self.plan.k as usize))
    }
}

/// Processed top-N distributions of chosen rows ([`Sampler::sample_with_processed`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessedRows {
    /// Width N of each row.
    pub n: usize,
    /// The logits rows, in order.
    pub rows: Vec<usize>,
    /// `[rows.len(), N]` candidate vocabulary ids (order of section 3.6).
    pub ids: Vec<i32>,
    /// `[rows.len(), N]` processed logprobs (`-inf` for removed candidates).
    pub logprobs: Vec<f32>,
}

impl ProcessedRows {
    /// `(ids, logprobs)` of the i-th requested row, `N` each. Errors:
    /// [`BatchError::Field`] when `i` is not below `rows.len()`.
    pub fn row(&self, i: usize) -> Result<(&[i32], &[f32]), BatchError> {
        if i >= self.rows.len() {
            return Err(BatchError::Field {
                field: "i",
                msg: format!("processed row index {i} is not below {}", self.rows.len()),
            });
        }
        Ok((&self.ids[i * self.n..(i + 1) * self.n], &self.logprobs[i * self.n..(i + 1) * self.n]))
    }
}

fn cuda_backend() -> Result<Backend, ConfigError> {
    Backend::cuda()
}

/// The CUDA backend, when the sampler runs on one.
fn cuda_of(b: &mut Backend) -> Option<&mut CudaBackend> {
    match b {
        Backend::Cuda(c) => Some(c),
        _ => None,
    }
}

/// Why a group failed on the device, from the rows' status codes.
fn device_error(info: &RequestInfo, res: &StepResult) -> RequestError {
    // Rows are named relative to the request, so the message does not depend on the batch.
    for j in 0..info.rows {
        match res.row_status[info.first_row + j] {
            1 => return RequestError::BadLogits { row: j },
            2 => return RequestError::AllMasked { row: j },
            _ => {}
        }
    }
    RequestError::Field { field: "status", msg: "device reported an error".into() }
}

fn failed_row() -> RowOutput {
    RowOutput { token: -1, logprob: f32::NEG_INFINITY, top_logprobs: Vec::new(), sum_smaller_probs: 0.0 }
}

pub(crate) fn assemble(requests: &[Request], infos: &[RequestInfo], res: &StepResult, k: usize) -> StepOutput {
    let mut rows = Vec::with_capacity(res.tokens.len());
    let mut outs = Vec::with_capacity(requests.len());
    for (g, (req, info)) in requests.iter().zip(infos).enumerate() {
        let status = match &info.params {
            Err(e) => Err(e.clone()),
            Ok(_) if res.group_status[g] != 0 => Err(device_error(info, res)),
            Ok(_) => Ok(()),
        };
        let rows_of = info.first_row..info.first_row + info.rows;
        let width = if status.is_ok() { (req.params.top_logprobs as usize).min(k) } else { 0 };
        let mut out = RequestOutput {
            status: Ok(()),
            accepted: 0,
            path: None,
            emitted: Vec::new(),
            emitted_logprobs: Vec::new(),
            prompt_logprobs: Vec::new(),
            rows: rows_of,
            top_logprobs_width: width,
        };
        if let Err(e) = status {
            rows.extend((0..info.rows).map(|_| failed_row()));
            out.status = Err(e);
            outs.push(out);
            continue;
        }
        for r in info.first_row..info.first_row + info.rows {
            let token = res.tokens[r];
            let top = (0..k).map(|c| (res.top_ids[r * k + c], res.top_lps[r * k + c])).collect();
            let (logprob, ssp) =
                if token >= 0 { (res.token_lp[r], res.sum_smaller[r]) } else { (f32::NEG_INFINITY, 0.0) };
            rows.push(RowOutput { token, logprob, top_logprobs: top, sum_smaller_probs: ssp });
            if token >= 0 {
                out.emitted.push(token);
                out.emitted_logprobs.push(logprob);
            }
        }
        if let RequestKind::PromptLogprobs { targets } = &req.kind {
            out.prompt_logprobs = targets
                .iter()
                .enumerate()
                .filter(|(_, t)| **t >= 0)
                .map(|(j, _)| res.token_lp[info.first_row + j])
                .collect();
        }
        out.accepted = res.accepted[g];
        if let RequestKind::Tree { .. } = &req.kind {
            // Section 11.9: the path, node indices root first (accepted + 1 of them).
            let f = info.first_row;
            out.path = Some(
                (0..=out.accepted as usize).map(|j| res.path.get(f + j).copied().unwrap_or(-1).max(0) as u32).collect(),
            );
        }
        outs.push(out);
    }
    StepOutput { rows, requests: outs, top_logprobs_width: k }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_into_caller_buffers_need_cuda() {
        // The callback is not asked for buffers, and nothing runs, off CUDA.
        let mut s = Sampler::new(SamplerConfig { backend: BackendKind::Cpu, ..SamplerConfig::new(8) }).unwrap();
        let logits = [0f32; 8];
        let mut asked = false;
        let r = s.sample_async_into(&logits[..], &[Request::prefill(SamplingParams::default(), 1)], |_, _, _| {
            asked = true;
            Some(Default::default())
        });
        assert!(matches!(&r, Err(BatchError::Backend(e)) if e.to_string().contains("CUDA")), "{r:?}");
        assert!(!asked);
    }

    #[test]
    fn section_9_limits_are_config_errors() {
        assert_eq!(check_force_topk(16384, 129280, "nvidia"), Ok(()));
        assert_eq!(
            check_force_topk(16385, 129280, "nvidia"),
            Err(ConfigError::ForceTopkTooLarge { n: 16385, platform: "nvidia", limit: 16384 })
        );
        assert_eq!(
            check_force_topk(4097, 129280, "ascend"),
            Err(ConfigError::ForceTopkTooLarge { n: 4097, platform: "ascend", limit: 4096 })
        );
        // Off (0, or N >= V) is never over a limit; the CPU has none.
        assert_eq!(check_force_topk(0, 129280, "ascend"), Ok(()));
        assert_eq!(check_force_topk(200_000, 129280, "nvidia"), Ok(()));
        assert_eq!(check_force_topk(100_000, 129280, "cpu"), Ok(()));
        let cfg = |v: u32| SamplerConfig { vocab_size: v, force_topk: 0, nextn: 5, backend: BackendKind::Cpu };
        assert_eq!(Sampler::new(cfg(0)).unwrap_err(), ConfigError::VocabSize(0));
        assert_eq!(Sampler::new(cfg(MAX_VOCAB + 1)).unwrap_err(), ConfigError::VocabSize(MAX_VOCAB as u64 + 1));
        let s = Sampler::new(SamplerConfig { force_topk: 100_000, ..cfg(129280) }).unwrap();
        assert_eq!(s.n(), 100_000);
        assert_eq!(Sampler::new(SamplerConfig { force_topk: 200_000, ..cfg(129280) }).unwrap().n(), 129280);
    }

    #[test]
    fn backend_names_parse() {
        assert_eq!("cpu".parse::<BackendKind>(), Ok(BackendKind::Cpu));
        assert_eq!("cuda".parse::<BackendKind>(), Ok(BackendKind::Cuda));
        assert!(matches!("tpu".parse::<BackendKind>(), Err(ConfigError::Field { field: "backend", .. })));
    }
}
