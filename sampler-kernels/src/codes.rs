//! Limits and status codes shared by the kernels and the host (one source:
//! SAMPLER.md sections 3.2, 7 and 9). The DSL has no named constants yet, so
//! kernels spell these values as literals next to a comment naming the
//! constant; `tests/kernels/codes.rs` runs the kernels and checks they agree.

/// Largest force top-k width N on NVIDIA (section 9): register tiles and the
/// shared-memory sort hold at most this many candidates.
pub const MAX_N_NVIDIA: u32 = 16384;
/// Largest force top-k width N on Ascend (section 9): `Sort32` + `MrgSort`
/// in the 184 KB unified buffer.
pub const MAX_N_ASCEND: u32 = 4096;

/// Row status (`mask_check`, `status_merge`): the row is fine.
pub const ROW_OK: i32 = 0;
/// Row status: the row has a NaN or `+inf` logit (after masking).
pub const ROW_BAD_VALUE: i32 = 1;
/// Row status: every logit of the row is `-inf` (after masking).
pub const ROW_ALL_MASKED: i32 = 2;

/// Group status: the group is fine. Any other value is the host's status
/// ([`GROUP_HOST_FAILED`]) or the first bad [`ROW_BAD_VALUE`] /
/// [`ROW_ALL_MASKED`] of its rows (`finalize`).
pub const GROUP_OK: i32 = 0;
/// Group status set by the host before the step: the request already failed
/// validation (bad parameters, mask, drafts); its rows are not sampled.
pub const GROUP_HOST_FAILED: i32 = -1;

/// Group kind (`finalize`): every row draws a fresh token (prefill, or a
/// decode step without drafts).
pub const GROUP_FRESH: u32 = 0;
/// Group kind: rows `0..m-1` verify drafts, the last row draws fresh.
pub const GROUP_VERIFY: u32 = 1;
/// Group kind: prompt logprobs; no token is drawn, each row looks up its target.
pub const GROUP_NO_DRAW: u32 = 2;
/// Group kind: a draft tree (SAMPLER.md section 11): `finalize` leaves its
/// rows at -1 and `tree_walk` decides them.
pub const GROUP_TREE: u32 = 3;

/// Tree proposal law (`tree_walk`'s `tree_mode`, SAMPLER.md 11.3): fixed
/// children, each accepted with q = 1 (no draft distribution).
pub const TREE_FIXED: u32 = 0;
/// Tree proposal law: children drawn with replacement from the node's draft distribution.
pub const TREE_WITH_REPLACEMENT: u32 = 1;
/// Tree proposal law: children drawn without replacement.
pub const TREE_WITHOUT_REPLACEMENT: u32 = 2;

/// Element type code of a `Logits` kernel parameter (the launch scalar that
/// follows its pointer on NVIDIA): IEEE single precision.
pub const LOGITS_F32: u32 = 0;
/// `Logits` element type code: bfloat16, widened exactly at load
/// (`f32::from_bits((bits as u32) << 16)`).
pub const LOGITS_BF16: u32 = 1;
/// `Logits` element type code: IEEE half precision, widened exactly at load
/// (every f16, subnormals included, is an f32).
pub const LOGITS_F16: u32 = 2;
