"""LLM sampler kernels from Python (spec: SAMPLER.md of the sampler project).

Two layers:

- the functional API, shaped like FlashInfer's: ``top_k_top_p_sampling_from_logits``,
  ``top_k_renorm_probs`` / ``top_p_renorm_probs``, ``top_k_top_p_renorm_logprobs``
  and ``verify`` (speculative decoding);
- ``sampler_py.flashinfer``: FlashInfer's sampling functions with its signatures and
  defaults, on this project's kernels and contract (each difference stated in its docstring);
- ``Sampler``, mirroring the Rust ``sampler_host::Sampler``: ``Request`` objects
  (prefill / decode / verify / draft / prompt-logprobs / tree with a ``DraftTree``) with ``SamplingParams``,
  grammar bit masks, and the ``MtpInfoPool``.

Tensors come in through DLPack (numpy, torch, ...) without a copy when they are
float32 on the CPU; float16 / bfloat16 are widened to float32 on the host; host
outputs are numpy arrays (torch CPU tensors for torch inputs). CUDA logits
(torch, f32 / bf16 / f16) are read in place on the caller's current stream and
the outputs are torch tensors on the same device (``CudaStepOutput``), with no
host synchronisation; such a call can be captured by ``torch.cuda.graph``. A bad
request is an error status in the output; a bad call raises ``TypeError`` /
``ValueError`` with the Rust error text. The GIL is released while a host step runs.
"""

from ._native import (
    SAMPLING_EPS as SAMPLING_EPS,
    CudaStepOutput as CudaStepOutput,
    DraftDist as DraftDist,
    DraftTree as DraftTree,
    MtpInfoPool as MtpInfoPool,
    Request as Request,
    Sampler as Sampler,
    SamplingParams as SamplingParams,
    StepOutput as StepOutput,
    golden_files as golden_files,
    is_cuda_tensor as is_cuda_tensor,
    run_case_json as run_case_json,
    top_k_renorm_probs as top_k_renorm_probs,
    top_k_top_p_renorm_logprobs as top_k_top_p_renorm_logprobs,
    top_k_top_p_sampling_from_logits as top_k_top_p_sampling_from_logits,
    top_p_renorm_probs as top_p_renorm_probs,
    verify as verify,
)

from . import flashinfer as flashinfer

__version__ = "0.1.0"

__all__ = [
    "SAMPLING_EPS",
    "CudaStepOutput",
    "DraftDist",
    "DraftTree",
    "MtpInfoPool",
    "Request",
    "Sampler",
    "SamplingParams",
    "StepOutput",
    "flashinfer",
    "golden_files",
    "is_cuda_tensor",
    "run_case_json",
    "top_k_renorm_probs",
    "top_k_top_p_renorm_logprobs",
    "top_k_top_p_sampling_from_logits",
    "top_p_renorm_probs",
    "verify",
]
