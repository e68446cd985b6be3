"""Types of sampler_py (the Rust extension). Spec: SAMPLER.md (section numbers below).

Array arguments accept any object with ``__dlpack__`` (numpy, torch, ...) on the
CPU; small integer / float arguments also accept Python sequences. Host logits
are float32 (borrowed, no copy), bfloat16 or float16 (widened to float32 on the
host); their outputs are numpy arrays, or torch CPU tensors for torch inputs.

CUDA logits (a torch CUDA tensor, or any DLPack kDLCUDA producer) in float32,
bfloat16 or float16 are read in place on the caller's stream (``stream=``;
default: torch's current stream of the logits' device). The call enqueues the
step and returns a ``CudaStepOutput`` (or an int32 token tensor) on that device
without waiting; it can be captured by ``torch.cuda.graph`` (run the same step
shape once first). Per-row parameters are host values (a CUDA tensor parameter
is copied to the host, which waits for it).
"""

from typing import Any, Optional, Sequence, Tuple, Union

ArrayLike = Any  # an object with __dlpack__ (numpy.ndarray, torch.Tensor, ...)
Array = Any  # numpy.ndarray, or torch.Tensor for torch inputs
IntSeq = Union[ArrayLike, Sequence[int]]
FloatSeq = Union[ArrayLike, Sequence[float]]
PerRowInt = Union[int, IntSeq, None]
PerRowFloat = Union[float, FloatSeq, None]
StreamLike = Union[int, Any, None]  # a cudaStream_t as int, or a torch.cuda.Stream

SAMPLING_EPS: float
"""1e-5: temperatures below it are clamped and turn top-p / top-k off (section 1)."""

class SamplingParams:
    """Per-request parameters (section 1). Bad values give the request an error
    status when the step runs; wrong types raise TypeError and out-of-range
    ints ValueError, naming the field (constructor and attribute setters)."""

    temperature: float
    top_p: float
    top_k: int
    top_logprobs: int
    seq_seed: Optional[int]
    prompt_logprobs: bool
    golden_token_ids: list[int]
    min_p: float
    filter_order: str
    """"top_p_then_top_k" or "top_k_then_top_p"; another string raises ValueError."""
    logprobs_mode: str
    """"processed" or "raw"; another string raises ValueError."""
    def __init__(
        self,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = -1,
        top_logprobs: int = 0,
        seq_seed: Optional[int] = None,
        prompt_logprobs: bool = False,
        golden_token_ids: Optional[IntSeq] = None,
        min_p: float = 0.0,
        filter_order: str = "top_p_then_top_k",
        logprobs_mode: str = "processed",
    ) -> None: ...

class DraftDist:
    """The draft model's processed distribution that proposed one draft token
    (section 6): ids not listed have logprob -inf."""

    def __init__(self, ids: IntSeq, logprobs: FloatSeq) -> None: ...
    @property
    def ids(self) -> list[int]: ...
    @property
    def logprobs(self) -> list[float]: ...
    def __len__(self) -> int: ...

class DraftTree:
    """A draft tree of one decode request (section 11.1): parent [M] (parent[0] = -1,
    siblings in draw order), tokens [M - 1] (node n's token at tokens[n - 1]),
    draft_dists: one per internal node in node order (None = fixed children, 11.3)."""

    def __init__(self, parent: IntSeq, tokens: IntSeq, draft_dists: Optional[Sequence[Union[DraftDist, Tuple[IntSeq, FloatSeq]]]] = None, without_replacement: bool = False) -> None: ...
    @staticmethod
    def chain(drafts: IntSeq, draft_dists: Optional[Sequence[Union[DraftDist, Tuple[IntSeq, FloatSeq]]]] = None) -> DraftTree: ...
    @property
    def parent(self) -> list[int]: ...
    @property
    def tokens(self) -> list[int]: ...
    @property
    def without_replacement(self) -> bool: ...
    @property
    def nodes(self) -> int: ...
    @staticmethod
    def parents_from_first_child_next_sibling(first_child: IntSeq, next_sibling: IntSeq, *, renumber: bool = False) -> Union[list[int], Tuple[list[int], list[int]]]:
        """Parents (11.1 order required), or with renumber=True any order (SGLang) and
        (parent, perm): new node n is input node perm[n] (identity when already in order)."""
    @staticmethod
    def parents_from_rank_paths(paths: Sequence[IntSeq]) -> list[int]: ...
    @staticmethod
    def parents_from_node_paths(m: int, paths: Sequence[IntSeq], *, renumber: bool = False) -> Union[list[int], Tuple[list[int], list[int]]]:
        """As parents_from_first_child_next_sibling, from EAGLE-2 retrieve_indices (-1 padded)."""
    @staticmethod
    def parents_from_dfs_depths(depths: IntSeq) -> list[int]: ...
    @staticmethod
    def dists_from_child_rows(parent: IntSeq, child_row: IntSeq, table: Sequence[Union[DraftDist, Tuple[IntSeq, FloatSeq]]]) -> list[DraftDist]: ...

class Request:
    """One request of a step; owns consecutive logits rows. ``masks``: grammar
    bit masks ``[rows, ceil(V/32)]`` of int32/uint32 words (bit t%32 of word
    t//32 = token t allowed); ``golden``: ``[rows]`` teacher-forced tokens (-1 none)."""

    @staticmethod
    def prefill(params: SamplingParams, seqlen_k: int, *, golden: Optional[IntSeq] = None, masks: Optional[ArrayLike] = None) -> Request: ...
    @staticmethod
    def decode(
        params: SamplingParams,
        seqlen_k: int,
        seqlen_q: Optional[int] = None,
        drafts: Optional[IntSeq] = None,
        draft_dists: Optional[Sequence[Union[DraftDist, Tuple[IntSeq, FloatSeq]]]] = None,
        *,
        golden: Optional[IntSeq] = None,
        masks: Optional[ArrayLike] = None,
    ) -> Request: ...
    @staticmethod
    def verify(
        params: SamplingParams,
        seqlen_k: int,
        drafts: IntSeq,
        draft_dists: Sequence[Union[DraftDist, Tuple[IntSeq, FloatSeq]]],
        *,
        golden: Optional[IntSeq] = None,
        masks: Optional[ArrayLike] = None,
    ) -> Request: ...
    @staticmethod
    def draft(params: SamplingParams, seqlen_k: int, seqlen_q: int, last_valid_offset: int, rows: int, *, masks: Optional[ArrayLike] = None) -> Request: ...
    @staticmethod
    def prompt_logprobs(params: SamplingParams, targets: IntSeq, *, masks: Optional[ArrayLike] = None) -> Request: ...
    @staticmethod
    def tree(params: SamplingParams, seqlen_k: int, tree: DraftTree, *, golden: Optional[IntSeq] = None, masks: Optional[ArrayLike] = None) -> Request:
        """Verifies a draft tree (section 11): one row per node; the accepted path is StepOutput.paths."""
    @property
    def rows(self) -> int: ...
    @property
    def kind(self) -> str: ...

class StepOutput:
    """Outputs of a step (sections 5-8): R rows, B requests, k = top_logprobs_width."""

    tokens: Array  # [R] int32, -1 = none
    logprobs: Array  # [R] float32, -inf = none
    top_ids: Array  # [R, k] int32 (-1 on failed requests' rows)
    top_logprobs: Array  # [R, k] float32
    sum_smaller_probs: Array  # [R] float32
    accepted: Array  # [B] int32
    ok: Array  # [B] bool
    row_offsets: Array  # [B + 1] int64
    errors: list[Optional[str]]  # B entries: None or the Rust error text
    emitted: list[Array]  # B x [n] int32
    emitted_logprobs: list[Array]  # B x [n] float32
    prompt_logprobs: list[Array]  # B x [n] float32
    paths: list[Optional[Array]]  # B entries: a tree request's accepted path (int32 node ids, root first), else None
    top_logprobs_width: int
    def result_json(self) -> str: ...
    def __len__(self) -> int: ...

class CudaStepOutput:
    """Outputs of a step on CUDA logits, torch tensors on the logits' device:
    views of one buffer the outputs were written into on the caller's stream (by
    default this step's range of a buffer later steps' outputs share; never written
    again unless passed as `out=`).
    Rows of a failed request (status != 0) hold unspecified values."""

    tokens: Array  # [R] int32, -1 = none
    logprobs: Array  # [R] float32
    top_ids: Array  # [R, k] int32
    top_logprobs: Array  # [R, k] float32
    sum_smaller_probs: Array  # [R] float32
    accepted: Array  # [B] int32
    status: Array  # [B] int32: 0 ok, -1 rejected on the host (Sampler.check), 1 bad logit value, 2 all masked
    ok: Array  # [B] bool (status == 0)
    paths: list[Optional[Array]]  # B: tree requests' [M] int32 device views (path root first, then -1), else None
    row_offsets: list[int]  # B + 1 (host)
    top_logprobs_width: int
    buffer: Array  # the one uint8 device tensor holding them
    def __len__(self) -> int: ...

class Sampler:
    """Mirrors sampler_host::Sampler. Raises ValueError for a bad configuration
    (section 9), RuntimeError when a forced backend is unavailable."""

    def __init__(self, vocab_size: int, *, force_topk: int = 0, nextn: int = 5, backend: str = "auto", reuse_outputs: bool = False) -> None:
        """`reuse_outputs` (CUDA, off by default): reuse an earlier step's output buffer of
        the same size on the same stream once nothing refers to it (no result, no view)
        instead of a new torch allocation (slower than torch's allocator on the H200;
        `out=` is the cheap reuse)."""
    def sample(self, logits: ArrayLike, requests: Sequence[Request], *, stream: StreamLike = None, out: Optional[CudaStepOutput] = None) -> Union[StepOutput, CudaStepOutput]:
        """logits [R, V]; R = sum of the requests' rows. Host logits: a StepOutput,
        the GIL released while it runs. CUDA logits: enqueued on `stream`, a
        CudaStepOutput without waiting (`out`: an earlier one of the same shape,
        written again instead of a new allocation; see also `reuse_outputs`).
        A Request object at the same index as in the last call is not converted
        again (the sampler keeps the last call's requests until the next one)."""
    def sample_probs(self, probs: ArrayLike, requests: Sequence[Request]) -> StepOutput:
        """SAMPLER.md section 12: probability rows [R, V] (host), prefill / decode requests at temperature 1."""
    def check(self, request: Request) -> Optional[str]:
        """The host-side error text of `request` (section 1), or None when valid."""
    def sample_with_processed(self, logits: ArrayLike, requests: Sequence[Request], rows: IntSeq) -> Tuple[StepOutput, Array, Array]:
        """Also the processed top-N (ids [len(rows), N] int32, logprobs [len(rows), N] float32) of `rows`."""
    @property
    def vocab_size(self) -> int: ...
    @property
    def force_topk(self) -> int: ...
    @property
    def n(self) -> int: ...
    @property
    def nextn(self) -> int: ...
    @property
    def backend(self) -> str: ...

class MtpInfoPool:
    """The MTP info pool (sections 6, 9): (max_num_seqs + 1) * nextn rows of N logprobs (+ ids when N < V)."""

    def __init__(self, max_num_seqs: int, nextn: int, n: int, vocab: int) -> None: ...
    def alloc(self) -> Optional[int]: ...
    def release(self, slot: int) -> None: ...
    def write(self, slot: int, i: int, ids: IntSeq, logprobs: FloatSeq) -> None: ...
    def read(self, slot: int, i: int) -> DraftDist: ...
    @property
    def rows(self) -> int: ...
    @property
    def n(self) -> int: ...
    @property
    def nextn(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def scratch_slot(self) -> int: ...

def top_k_top_p_sampling_from_logits(
    logits: ArrayLike,
    top_k: PerRowInt = None,
    top_p: PerRowFloat = None,
    *,
    temperature: PerRowFloat = None,
    min_p: PerRowFloat = None,
    filter_order: Optional[str] = None,
    seed: PerRowInt = None,
    positions: PerRowInt = None,
    force_topk: int = 0,
    return_logprobs: bool = False,
    top_logprobs: int = 0,
    backend: str = "auto",
    stream: StreamLike = None,
) -> Union[Array, StepOutput, CudaStepOutput]:
    """[R] int32 tokens (-1 for a bad row of a per-row array); StepOutput with return_logprobs=True.
    Defaults: top_k -1 (off), top_p 1 (off), temperature 1, min_p 0 (off),
    filter_order "top_p_then_top_k" (or "top_k_then_top_p", SAMPLER.md 10.2), seed random, positions 0.
    An invalid scalar (top_k=0, top_p=0, a negative or infinite temperature, min_p
    outside [0, 1]) raises ValueError naming it. A scalar seed is every row's seed: rows
    at the same position then draw the same u, so pass positions (or per-row seeds) for
    independent rows, and advance positions between calls.
    CUDA logits: the `[R]` int32 tokens are a range of a buffer from torch's caching
    allocator that later calls' tokens share (never written twice)."""

def verify(
    target_logits: ArrayLike,
    draft_ids: ArrayLike,
    draft_logprobs: ArrayLike,
    top_k: PerRowInt = None,
    top_p: PerRowFloat = None,
    *,
    temperature: PerRowFloat = None,
    min_p: PerRowFloat = None,
    filter_order: Optional[str] = None,
    seed: PerRowInt = None,
    positions: PerRowInt = None,
    draft_dist_ids: Optional[ArrayLike] = None,
    force_topk: int = 0,
    top_logprobs: int = 0,
    nextn: Optional[int] = None,
    backend: str = "auto",
    stream: StreamLike = None,
) -> Union[StepOutput, CudaStepOutput]:
    """Section 6: target_logits [B, m, V] or [B*m, V], draft_ids [B, m-1],
    draft_logprobs [B, m-1, V] (or [B, m-1, W] with draft_dist_ids [B, m-1, W]).
    Any number of drafts m-1: the cached sampler takes nextn = m-1 (``nextn`` may
    ask for more; fewer than m-1 raises ValueError)."""

def top_k_top_p_renorm_logprobs(
    logits: ArrayLike,
    top_k: PerRowInt = None,
    top_p: PerRowFloat = None,
    *,
    temperature: PerRowFloat = None,
    min_p: PerRowFloat = None,
    filter_order: Optional[str] = None,
    force_topk: int = 0,
    backend: str = "auto",
) -> Tuple[Array, Array]:
    """Processed distribution (section 3): (ids [R, N] int32, logprobs [R, N] float32)."""

def top_k_renorm_probs(probs: ArrayLike, top_k: PerRowInt, *, backend: str = "auto") -> Array:
    """[R, V] float32 renormalised probs after top-k (SAMPLER.md section 12: ordered by p, ties
    by lower id; computed on the host whatever backend says)."""

def top_p_renorm_probs(probs: ArrayLike, top_p: PerRowFloat, *, backend: str = "auto") -> Array:
    """[R, V] float32 renormalised probs after top-p (SAMPLER.md section 12, on the host)."""

def probs_sample(
    probs: ArrayLike,
    top_k: PerRowInt = None,
    top_p: PerRowFloat = None,
    min_p: PerRowFloat = None,
    *,
    filter_order: Optional[str] = None,
    seed: PerRowInt = None,
    positions: PerRowInt = None,
) -> Tuple[Array, Array]:
    """Section 12: one draw per row of probs [R, V] float32 (host): (tokens [R] int32, valid [R] bool)."""

def probs_verify(
    draft_probs: ArrayLike,
    draft_ids: ArrayLike,
    target_probs: ArrayLike,
    *,
    seed: PerRowInt = None,
    positions: PerRowInt = None,
) -> Tuple[Array, Array, Array]:
    """Section 6 on section 12's rows (host): (tokens [B, D+1] int32, independently
    accepted drafts [B] int32, accepted [B] int32)."""

def run_case_json(case_json: str, backend: str = "cpu") -> str:
    """A CONFORMANCE.md case run in Rust: its result document (JSON text)."""

def golden_files(dir: str) -> list[str]:
    """Golden case files under dir (dir/*.json plus the landed next/ cases)."""

def is_cuda_tensor(tensor: Any) -> bool:
    """Whether tensor is on a CUDA device (DLPack kDLCUDA)."""

def _dlpack_data_ptr(array: ArrayLike) -> int: ...
def _bench_rust_step(sampler: Sampler, logits: ArrayLike, requests: Sequence[Request], iters: int) -> float: ...
def _bench_rust_step_cuda(sampler: Sampler, logits: ArrayLike, requests: Sequence[Request], iters: int) -> list[float]: ...
def _bench_convert_requests(requests: Sequence[Request], iters: int) -> float: ...
def _bench_binding_pieces(logits: ArrayLike, requests: Sequence[Request], iters: int, *, top_k: Any = None, top_p: Any = None, temperature: Any = None, seed: Any = None, positions: Any = None) -> list[tuple[str, float]]: ...
def _bench_dispatch(logits: Any, requests: Any, *, stream: Any = None, out: Optional[CudaStepOutput] = None) -> None: ...
def _bench_api_clock(on: bool) -> None: ...
def _bench_api_ns() -> int: ...
def _bench_slabs(on: bool) -> None: ...
