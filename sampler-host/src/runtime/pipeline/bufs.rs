//! The buffers of a step: their names ([`Buf`]), sizes and initial
//! contents ([`BufSpec`], [`Init`]), the host arrays that fill them
//! ([`host_input`], [`HostSlice`], [`Upload`]) and the outputs read back.

use sampler_kernels::spec::{LaunchArg, Prim};

use crate::runtime::plan::StepPlan;

macro_rules! bufs {
    ($($name:ident: $prim:ident),* $(,)?) => {
        /// The buffers of a step, each with one element type.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[allow(missing_docs)]
        pub enum Buf { $($name,)* }
        impl Buf {
            /// Every buffer, in declaration order (`b as usize` indexes it).
            pub const ALL: &'static [Buf] = &[$(Buf::$name,)*];
            /// Element type of the buffer.
            pub fn prim(self) -> Prim {
                match self { $(Buf::$name => Prim::$prim,)* }
            }
        }
    };
}

bufs! {
    Logits: F32, Masked: F32, Masks: U32, HasMask: U32, RowStatus: I32,
    Cand: F32, CandIds: I32, Logprobs: F32,
    Temperature: F32, TopP: F32, TopK: I32, LogMinP: F32, FilterOrder: U32,
    Raw: U32, RawMax: F32, RawSum: U64,
    Seed: U64, SeqDraw: U64, SeqAccept: U64, SeqResidual: U64,
    Fresh: I32, Golden: I32, Drafts: I32,
    DraftIds: I32, DraftLps: F32, ColOf: I32, QLps: F32, DraftCol: I32, DraftQ: F32,
    Accept: U32, Residual: I32,
    GroupFirst: U32, GroupRows: U32, GroupKind: U32, GroupStatusIn: I32,
    Tokens: I32, Lookup: I32, Accepted: U32, GroupStatus: I32,
    TokenLp: F32, SumSmaller: F32, TopIds: I32, TopLps: F32,
    ChunkCand: F32, ChunkIds: I32, ChunkBad: U32, ChunkFinite: U32,
    Mass: U64, Overflow: U32, SelFallback: U32,
    TreeParent: I32, TreeToken: I32, TreeMode: U32, Path: I32,
    ChunkCount: U32,
}

/// A borrowed host array of one element type (uploads).
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub enum HostSlice<'a> {
    F32(&'a [f32]),
    I32(&'a [i32]),
    U32(&'a [u32]),
    U64(&'a [u64]),
}

impl HostSlice<'_> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            HostSlice::F32(s) => s.len(),
            HostSlice::I32(s) => s.len(),
            HostSlice::U32(s) => s.len(),
            HostSlice::U64(s) => s.len(),
        }
    }
    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A mutable host array of one element type (downloads).
#[derive(Debug)]
#[allow(missing_docs)]
pub enum HostSliceMut<'a> {
    F32(&'a mut [f32]),
    I32(&'a mut [i32]),
    U32(&'a mut [u32]),
    U64(&'a mut [u64]),
}

/// One input of [`Device::upload_inputs`].
#[derive(Clone, Copy, Debug)]
pub enum Upload<'a> {
    /// Host data.
    Data(HostSlice<'a>),
    /// `len` copies of a value.
    Fill(LaunchArg<()>, usize),
    /// Room for `len` elements of a step output ([`OUTPUTS`]): written by the
    /// kernels, read back by [`collect`]. A device may pack the outputs next
    /// to each other so that reading them back is one copy.
    Output(usize),
}

/// The buffers [`collect`] reads back whole (the step's outputs), in the
/// order a device packing them lays them out.
pub const OUTPUTS: &[Buf] = &[
    Buf::Path,
    Buf::RowStatus,
    Buf::Tokens,
    Buf::Accepted,
    Buf::GroupStatus,
    Buf::TokenLp,
    Buf::SumSmaller,
    Buf::TopIds,
    Buf::TopLps,
    Buf::Overflow,
];

/// Initial contents of a step buffer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// Uploaded from the plan ([`host_input`]).
    Input,
    /// Every element set to this value (bit pattern of the buffer's type).
    Fill(LaunchArg<()>),
    /// Written by a kernel before any read: contents undefined.
    Scratch,
}

/// One buffer of a step: `len` elements of `buf.prim()`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BufSpec {
    /// Which buffer.
    pub buf: Buf,
    /// Elements.
    pub len: usize,
    /// Initial contents.
    pub init: Init,
}

/// The plan's host array for an [`Init::Input`] buffer (`None` for the
/// logits, bound by [`Device::bind_logits`], and for non-input buffers).
pub fn host_input<'p>(p: &'p StepPlan<'_>, buf: Buf) -> Option<HostSlice<'p>> {
    use Buf::*;
    Some(match buf {
        Masks => HostSlice::U32(&p.masks),
        HasMask => HostSlice::U32(&p.has_mask),
        Temperature => HostSlice::F32(&p.temperature),
        TopP => HostSlice::F32(&p.top_p),
        TopK => HostSlice::I32(&p.top_k),
        LogMinP => HostSlice::F32(&p.log_min_p),
        FilterOrder => HostSlice::U32(&p.filter_order),
        Raw => HostSlice::U32(&p.raw_logprobs),
        TreeParent => HostSlice::I32(&p.tree_parent),
        TreeToken => HostSlice::I32(&p.tree_token),
        TreeMode => HostSlice::U32(&p.tree_mode),
        Seed => HostSlice::U64(&p.seed),
        SeqDraw => HostSlice::U64(&p.seq_draw),
        SeqAccept => HostSlice::U64(&p.seq_accept),
        SeqResidual => HostSlice::U64(&p.seq_residual),
        Golden => HostSlice::I32(&p.golden),
        Drafts => HostSlice::I32(&p.drafts),
        DraftIds => HostSlice::I32(&p.draft_ids),
        DraftLps => HostSlice::F32(&p.draft_lps),
        GroupFirst => HostSlice::U32(&p.group_first),
        GroupRows => HostSlice::U32(&p.group_rows),
        GroupKind => HostSlice::U32(&p.group_kind),
        GroupStatusIn => HostSlice::I32(&p.group_status),
        _ => return None,
    })
}
