//! The closed op set of the DSL: names, arities and type rules.
//!
//! Tile ops run block-cooperatively on NVIDIA and as vector calls on
//! AscendC; element functions apply per element inside a fused map, or to
//! scalars. `sampler_kernels::rt::cpu` documents each op's semantics.

use crate::ir::{Prim, Ty};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    // --- program and memory ---
    Row,
    Load,
    Store,
    StoreHead,
    LoadScalar,
    StoreScalar,
    MaskBits,
    Iota,
    Full,
    Len,
    Gather,
    Scatter,
    // --- reductions, scans, search ---
    ReduceMax,
    ReduceMin,
    ReduceSum,
    Count,
    Any,
    All,
    ExclusiveScan,
    InclusiveScan,
    FirstWhere,
    LastWhere,
    Get,
    // --- selection and order ---
    TopN,
    TopNSet,
    TopNCounted,
    TopNSetCounted,
    TopNStreamCounted,
    TopNChunkStream,
    TopNMergeStream,
    TopNCluster,
    SortDesc,
    Categorical,
    // --- scopes ---
    WarpScope,
    // --- element functions (tiles elementwise, or scalars) ---
    Exp,
    Min,
    Max,
    Select,
    IsNan,
    IsPosInf,
    IsNegInf,
    Abs,
    ToFixed,
    // --- scalar-only functions ---
    FixedToF32,
    LnFixed,
    FracFloor,
    Accept,
    Uniform53,
    RandU64,
}

/// Every op with its DSL name.
pub const OPS: &[(&str, Op)] = &[
    ("row", Op::Row),
    ("load", Op::Load),
    ("store", Op::Store),
    ("store_head", Op::StoreHead),
    ("load_scalar", Op::LoadScalar),
    ("store_scalar", Op::StoreScalar),
    ("mask_bits", Op::MaskBits),
    ("iota", Op::Iota),
    ("full", Op::Full),
    ("len", Op::Len),
    ("gather", Op::Gather),
    ("scatter", Op::Scatter),
    ("reduce_max", Op::ReduceMax),
    ("reduce_min", Op::ReduceMin),
    ("reduce_sum", Op::ReduceSum),
    ("count", Op::Count),
    ("any", Op::Any),
    ("all", Op::All),
    ("exclusive_scan", Op::ExclusiveScan),
    ("inclusive_scan", Op::InclusiveScan),
    ("first_where", Op::FirstWhere),
    ("last_where", Op::LastWhere),
    ("get", Op::Get),
    ("top_n", Op::TopN),
    ("top_n_set", Op::TopNSet),
    ("top_n_counted", Op::TopNCounted),
    ("top_n_set_counted", Op::TopNSetCounted),
    ("top_n_stream_counted", Op::TopNStreamCounted),
    ("top_n_chunk_stream", Op::TopNChunkStream),
    ("top_n_merge_stream", Op::TopNMergeStream),
    ("top_n_cluster", Op::TopNCluster),
    ("sort_desc", Op::SortDesc),
    ("categorical", Op::Categorical),
    ("warp_scope", Op::WarpScope),
    ("exp", Op::Exp),
    ("min", Op::Min),
    ("max", Op::Max),
    ("select", Op::Select),
    ("is_nan", Op::IsNan),
    ("is_pos_inf", Op::IsPosInf),
    ("is_neg_inf", Op::IsNegInf),
    ("abs", Op::Abs),
    ("to_fixed", Op::ToFixed),
    ("fixed_to_f32", Op::FixedToF32),
    ("ln_fixed", Op::LnFixed),
    ("frac_floor", Op::FracFloor),
    ("accept", Op::Accept),
    ("uniform53", Op::Uniform53),
    ("rand_u64", Op::RandU64),
];

/// The op whose name is within two edits of `name` (a likely typo), if any.
pub fn near_op(name: &str) -> Option<&'static str> {
    fn dist(a: &str, b: &str) -> usize {
        let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
        let mut prev: Vec<usize> = (0..=b.len()).collect();
        for i in 1..=a.len() {
            let mut cur = vec![i; b.len() + 1];
            for j in 1..=b.len() {
                let sub = prev[j - 1] + usize::from(a[i - 1] != b[j - 1]);
                cur[j] = sub.min(prev[j] + 1).min(cur[j - 1] + 1);
            }
            prev = cur;
        }
        prev[b.len()]
    }
    // Short names (`f`, `g`) are too close to everything to be typos of an
    // op; one edit up to 7 letters (`reduce_maxx`), two from 8 (`exclusiv_scan`).
    if name.len() < 4 {
        return None;
    }
    let most = if name.len() >= 8 { 2 } else { 1 };
    OPS.iter().map(|(n, _)| (dist(name, n), *n)).filter(|&(d, _)| d <= most).min().map(|(_, n)| n)
}

impl Op {
    pub fn from_name(s: &str) -> Option<Op> {
        OPS.iter().find(|(n, _)| *n == s).map(|(_, o)| *o)
    }
    pub fn name(self) -> &'static str {
        OPS.iter().find(|(_, o)| *o == self).map(|(n, _)| *n).unwrap_or("?")
    }
    /// Element functions: applied per element of tiles, or to scalars.
    pub fn is_elem(self) -> bool {
        matches!(
            self,
            Op::Exp | Op::Min | Op::Max | Op::Select | Op::IsNan | Op::IsPosInf | Op::IsNegInf | Op::Abs | Op::ToFixed
        )
    }
    /// Scalar-only functions of the element library.
    pub fn is_scalar_fn(self) -> bool {
        matches!(self, Op::FixedToF32 | Op::LnFixed | Op::FracFloor | Op::Accept | Op::Uniform53 | Op::RandU64)
    }
    /// Selection and sorting (`top_n*`, `top_n_cluster`, `sort_desc`): the
    /// ops that need the whole block and, on NVIDIA, its sort buffer.
    pub fn is_selection(self) -> bool {
        matches!(
            self,
            Op::TopN
                | Op::TopNSet
                | Op::TopNCounted
                | Op::TopNSetCounted
                | Op::TopNStreamCounted
                | Op::TopNChunkStream
                | Op::TopNMergeStream
                | Op::TopNCluster
                | Op::SortDesc
        )
    }
    /// Tile-level ops (everything else): lowered to a runtime call.
    pub fn is_tile_op(self) -> bool {
        !self.is_elem() && !self.is_scalar_fn()
    }
    pub fn arity(self) -> usize {
        match self {
            Op::Row => 0,
            Op::Iota
            | Op::Len
            | Op::WarpScope
            | Op::ReduceMax
            | Op::ReduceMin
            | Op::ReduceSum
            | Op::Count
            | Op::Any
            | Op::All => 1,
            Op::ExclusiveScan | Op::InclusiveScan | Op::FirstWhere | Op::LastWhere => 1,
            Op::Exp | Op::IsNan | Op::IsPosInf | Op::IsNegInf | Op::Abs | Op::ToFixed => 1,
            Op::FixedToF32 | Op::LnFixed => 1,
            Op::Full | Op::LoadScalar | Op::Get | Op::SortDesc | Op::Categorical | Op::Min | Op::Max => 2,
            Op::FracFloor | Op::Uniform53 | Op::RandU64 => 2,
            Op::Load | Op::Store | Op::StoreScalar | Op::MaskBits | Op::Select | Op::Accept => 3,
            Op::StoreHead
            | Op::TopN
            | Op::TopNSet
            | Op::TopNCounted
            | Op::TopNSetCounted
            | Op::Gather
            | Op::Scatter => 4,
            Op::TopNStreamCounted | Op::TopNCluster => 5,
            Op::TopNChunkStream => 6,
            Op::TopNMergeStream => 12,
        }
    }
    /// Short signature for error messages.
    pub fn signature(self) -> &'static str {
        match self {
            Op::Row => "row() -> u32",
            Op::Load => "load(buf: Gm<T>, offset: u64, n: u32) -> Tile<T>",
            Op::Store => "store(buf: GmMut<T>, offset: u64, tile: Tile<T>)",
            Op::StoreHead => "store_head(buf: GmMut<T>, offset: u64, tile: Tile<T>, k: u32)",
            Op::LoadScalar => "load_scalar(buf: Gm<T>, index: u64) -> T",
            Op::StoreScalar => "store_scalar(buf: GmMut<T>, index: u64, value: T)",
            Op::MaskBits => "mask_bits(words: Gm<u32>, word_offset: u64, n: u32) -> Tile<bool>",
            Op::Iota => "iota(n: u32) -> Tile<u32>",
            Op::Full => "full(n: u32, value: T) -> Tile<T>",
            Op::Len => "len(tile: Tile<T>) -> u32",
            Op::Gather => "gather(buf: Gm<T>, offset: u64, idx: Tile<i32>, fallback: T) -> Tile<T>",
            Op::Scatter => "scatter(buf: GmMut<T>, offset: u64, idx: Tile<i32>, values: Tile<T>)",
            Op::ReduceMax => "reduce_max(tile: Tile<f32|i32|u32|u64>) -> T",
            Op::ReduceMin => "reduce_min(tile: Tile<f32|i32|u32|u64>) -> T",
            Op::ReduceSum => "reduce_sum(tile: Tile<u32|u64>) -> T",
            Op::Count => "count(tile: Tile<bool>) -> u32",
            Op::Any => "any(tile: Tile<bool>) -> bool",
            Op::All => "all(tile: Tile<bool>) -> bool",
            Op::ExclusiveScan => "exclusive_scan(tile: Tile<u32|u64>) -> Tile<T>",
            Op::InclusiveScan => "inclusive_scan(tile: Tile<u32|u64>) -> Tile<T>",
            Op::FirstWhere => "first_where(tile: Tile<bool>) -> i32",
            Op::LastWhere => "last_where(tile: Tile<bool>) -> i32",
            Op::Get => "get(tile: Tile<T>, index: u32) -> T",
            Op::TopN => "top_n(buf: Gm<f32>, offset: u64, v: u32, n: u32) -> (Tile<f32>, Tile<i32>)",
            Op::TopNSet => "top_n_set(buf: Gm<f32>, offset: u64, v: u32, n: u32) -> (Tile<f32>, Tile<i32>)",
            Op::TopNCounted => {
                "top_n_counted(buf: Gm<f32>, offset: u64, v: u32, n: u32) -> (Tile<f32>, Tile<i32>, u32, u32)"
            }
            Op::TopNSetCounted => {
                "top_n_set_counted(buf: Gm<f32>, offset: u64, v: u32, n: u32) -> (Tile<f32>, Tile<i32>, u32, u32)"
            }
            Op::TopNStreamCounted => {
                "top_n_stream_counted(buf: Gm<f32>, offset: u64, v: u32, n: u32, sorted: u32) -> (Tile<f32>, Tile<i32>, u32, u32, u32)"
            }
            Op::TopNChunkStream => {
                "top_n_chunk_stream(buf: Gm<f32>, row_offset: u64, v: u32, start: u32, len: u32, n: u32) -> (Tile<f32>, Tile<i32>, u32, u32)"
            }
            Op::TopNMergeStream => {
                "top_n_merge_stream(vals: Gm<f32>, ids: Gm<i32>, counts: Gm<u32>, cand_offset: u64, slot: u32, count_offset: u64, chunks: u32, logits: Gm<f32>, row_offset: u64, v: u32, n: u32, sorted: u32) -> (Tile<f32>, Tile<i32>)"
            }
            Op::TopNCluster => {
                "top_n_cluster(buf: Gm<f32>, offset: u64, v: u32, n: u32, sorted: u32) -> (Tile<f32>, Tile<i32>, u32, u32, u32)"
            }
            Op::SortDesc => "sort_desc(values: Tile<f32>, ids: Tile<i32>) -> (Tile<f32>, Tile<i32>)",
            Op::Categorical => "categorical(weights: Tile<u64>, k: u64) -> i32",
            Op::WarpScope => "warp_scope(len: u32) -> bool (only as `if warp_scope(len) { .. }`)",
            Op::Exp => "exp(x: f32) -> f32",
            Op::Min => "min(a: T, b: T) -> T",
            Op::Max => "max(a: T, b: T) -> T",
            Op::Select => "select(cond: bool, a: T, b: T) -> T",
            Op::IsNan => "is_nan(x: f32) -> bool",
            Op::IsPosInf => "is_pos_inf(x: f32) -> bool",
            Op::IsNegInf => "is_neg_inf(x: f32) -> bool",
            Op::Abs => "abs(x: f32) -> f32",
            Op::ToFixed => "to_fixed(p: f32) -> u64",
            Op::FixedToF32 => "fixed_to_f32(s: u64) -> f32",
            Op::LnFixed => "ln_fixed(s: u64) -> f32",
            Op::FracFloor => "frac_floor(total: u64, p: f32) -> u64",
            Op::Accept => "accept(k: u64, q: f32, p: f32) -> bool",
            Op::Uniform53 => "uniform53(seed: u64, seq: u64) -> u64",
            Op::RandU64 => "rand_u64(seed: u64, seq: u64) -> u64",
        }
    }
}

/// What an argument position accepts, for the checker.
#[derive(Clone, Copy, Debug)]
pub enum ArgKind {
    /// A global buffer, optionally writable, optionally of a fixed element type.
    Gm { write: bool, elem: Option<Prim> },
    /// A scalar of this type.
    Scalar(Prim),
    /// A scalar of the element type bound by an earlier `Gm` / tile argument.
    ScalarOfElem,
    /// A scalar of any type (binds the element type).
    ScalarAny,
    /// A tile of this element type (None: any; binds the element type).
    Tile(Option<Prim>),
    /// A tile of the element type bound earlier.
    TileOfElem,
}

/// Argument kinds of a tile op or scalar function (element functions are
/// checked separately since they accept tiles or scalars).
pub fn arg_kinds(op: Op) -> &'static [ArgKind] {
    use ArgKind::*;
    use Prim::*;
    match op {
        Op::Row => &[],
        Op::Load => &[Gm { write: false, elem: None }, Scalar(U64), Scalar(U32)],
        Op::Store => &[Gm { write: true, elem: None }, Scalar(U64), TileOfElem],
        Op::StoreHead => &[Gm { write: true, elem: None }, Scalar(U64), TileOfElem, Scalar(U32)],
        Op::LoadScalar => &[Gm { write: false, elem: None }, Scalar(U64)],
        Op::StoreScalar => &[Gm { write: true, elem: None }, Scalar(U64), ScalarOfElem],
        Op::MaskBits => &[Gm { write: false, elem: Some(U32) }, Scalar(U64), Scalar(U32)],
        Op::Iota | Op::WarpScope => &[Scalar(U32)],
        Op::Full => &[Scalar(U32), ScalarAny],
        Op::Len => &[Tile(None)],
        Op::Gather => &[Gm { write: false, elem: None }, Scalar(U64), Tile(Some(I32)), ScalarOfElem],
        Op::Scatter => &[Gm { write: true, elem: None }, Scalar(U64), Tile(Some(I32)), TileOfElem],
        Op::ReduceMax | Op::ReduceMin => &[Tile(None)],
        Op::ReduceSum | Op::ExclusiveScan | Op::InclusiveScan => &[Tile(None)],
        Op::Count | Op::Any | Op::All | Op::FirstWhere | Op::LastWhere => &[Tile(Some(Bool))],
        Op::Get => &[Tile(None), Scalar(U32)],
        Op::TopN | Op::TopNSet | Op::TopNCounted | Op::TopNSetCounted => {
            &[Gm { write: false, elem: Some(F32) }, Scalar(U64), Scalar(U32), Scalar(U32)]
        }
        Op::TopNStreamCounted | Op::TopNCluster => {
            &[Gm { write: false, elem: Some(F32) }, Scalar(U64), Scalar(U32), Scalar(U32), Scalar(U32)]
        }
        Op::TopNChunkStream => {
            &[Gm { write: false, elem: Some(F32) }, Scalar(U64), Scalar(U32), Scalar(U32), Scalar(U32), Scalar(U32)]
        }
        Op::TopNMergeStream => &[
            Gm { write: false, elem: Some(F32) },
            Gm { write: false, elem: Some(I32) },
            Gm { write: false, elem: Some(U32) },
            Scalar(U64),
            Scalar(U32),
            Scalar(U64),
            Scalar(U32),
            Gm { write: false, elem: Some(F32) },
            Scalar(U64),
            Scalar(U32),
            Scalar(U32),
            Scalar(U32),
        ],
        Op::SortDesc => &[Tile(Some(F32)), Tile(Some(I32))],
        Op::Categorical => &[Tile(Some(U64)), Scalar(U64)],
        Op::FixedToF32 | Op::LnFixed => &[Scalar(U64)],
        Op::FracFloor => &[Scalar(U64), Scalar(F32)],
        Op::Accept => &[Scalar(U64), Scalar(F32), Scalar(F32)],
        Op::Uniform53 | Op::RandU64 => &[Scalar(U64), Scalar(U64)],
        _ => &[],
    }
}

/// Result type of a tile op or scalar function given the bound element type.
pub fn result_type(op: Op, elem: Option<Prim>) -> Ty {
    use Prim::*;
    match op {
        Op::Row | Op::Len | Op::Count => Ty::Scalar(U32),
        Op::Load | Op::Gather | Op::Full => Ty::Tile(elem.unwrap_or(F32)),
        Op::Store | Op::StoreHead | Op::StoreScalar | Op::Scatter => Ty::Unit,
        Op::LoadScalar | Op::Get | Op::ReduceMax | Op::ReduceMin | Op::ReduceSum => Ty::Scalar(elem.unwrap_or(F32)),
        Op::MaskBits => Ty::Tile(Bool),
        Op::Iota => Ty::Tile(U32),
        Op::Any | Op::All | Op::Accept | Op::WarpScope => Ty::Scalar(Bool),
        Op::ExclusiveScan | Op::InclusiveScan => Ty::Tile(elem.unwrap_or(U64)),
        Op::FirstWhere | Op::LastWhere | Op::Categorical => Ty::Scalar(I32),
        Op::TopN | Op::TopNSet | Op::TopNMergeStream | Op::SortDesc => Ty::Tuple(vec![Ty::Tile(F32), Ty::Tile(I32)]),
        // (values, ids, bad, finite): the range's NaN-or-+inf and not--inf counts (SAMPLER.md 3.2).
        Op::TopNCounted | Op::TopNSetCounted | Op::TopNChunkStream => {
            Ty::Tuple(vec![Ty::Tile(F32), Ty::Tile(I32), Ty::Scalar(U32), Ty::Scalar(U32)])
        }
        // top_n_counted's, and why the device's one-pass stream fell back (0: it did not);
        // for the cluster form, how many CTAs selected the row (0: the leader alone).
        Op::TopNStreamCounted | Op::TopNCluster => {
            Ty::Tuple(vec![Ty::Tile(F32), Ty::Tile(I32), Ty::Scalar(U32), Ty::Scalar(U32), Ty::Scalar(U32)])
        }
        Op::FixedToF32 | Op::LnFixed => Ty::Scalar(F32),
        Op::FracFloor | Op::Uniform53 | Op::RandU64 => Ty::Scalar(U64),
        _ => Ty::Unit,
    }
}

/// Element types a reduction or scan accepts.
pub fn elem_allowed(op: Op, p: Prim) -> bool {
    match op {
        Op::ReduceMax | Op::ReduceMin => matches!(p, Prim::F32 | Prim::I32 | Prim::U32 | Prim::U64),
        // Integer only: exact sums, so no result depends on the order.
        Op::ReduceSum | Op::ExclusiveScan | Op::InclusiveScan => matches!(p, Prim::U32 | Prim::U64),
        _ => true,
    }
}
