//! The tile IR: a typed, validated kernel every emitter walks.
//!
//! Each node keeps the span of the user's tokens. After `check`, every
//! expression carries its type: a scalar, a tile (a row chunk of at most
//! `TILE` elements) or a global buffer.

use proc_macro2::Span;

/// Element types of the DSL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Prim {
    Bool,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
}

impl Prim {
    pub fn from_name(s: &str) -> Option<Prim> {
        Some(match s {
            "bool" => Prim::Bool,
            "i32" => Prim::I32,
            "u32" => Prim::U32,
            "i64" => Prim::I64,
            "u64" => Prim::U64,
            "f32" => Prim::F32,
            "f64" => Prim::F64,
            _ => return None,
        })
    }
    pub fn rust_name(self) -> &'static str {
        match self {
            Prim::Bool => "bool",
            Prim::I32 => "i32",
            Prim::U32 => "u32",
            Prim::I64 => "i64",
            Prim::U64 => "u64",
            Prim::F32 => "f32",
            Prim::F64 => "f64",
        }
    }
    pub fn is_int(self) -> bool {
        matches!(self, Prim::I32 | Prim::U32 | Prim::I64 | Prim::U64)
    }
    pub fn is_float(self) -> bool {
        matches!(self, Prim::F32 | Prim::F64)
    }
    pub fn is_signed(self) -> bool {
        matches!(self, Prim::I32 | Prim::I64 | Prim::F32 | Prim::F64)
    }
    /// Size in bytes (bool as one byte).
    pub fn bytes(self) -> u32 {
        match self {
            Prim::Bool => 1,
            Prim::I32 | Prim::U32 | Prim::F32 => 4,
            Prim::I64 | Prim::U64 | Prim::F64 => 8,
        }
    }
}

/// Types of values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ty {
    Scalar(Prim),
    Tile(Prim),
    /// A global buffer; `true` when writable.
    Gm(Prim, bool),
    Tuple(Vec<Ty>),
    Unit,
    /// An unsuffixed integer literal not yet unified with another type.
    IntLit,
    /// An unsuffixed float literal not yet unified with another type.
    FloatLit,
}

impl Ty {
    pub fn prim(&self) -> Option<Prim> {
        match self {
            Ty::Scalar(p) | Ty::Tile(p) | Ty::Gm(p, _) => Some(*p),
            Ty::IntLit => Some(Prim::I32),
            Ty::FloatLit => Some(Prim::F32),
            _ => None,
        }
    }
    pub fn is_tile(&self) -> bool {
        matches!(self, Ty::Tile(_))
    }
    pub fn is_scalarish(&self) -> bool {
        matches!(self, Ty::Scalar(_) | Ty::IntLit | Ty::FloatLit)
    }
    pub fn describe(&self) -> String {
        match self {
            Ty::Scalar(p) => p.rust_name().to_string(),
            Ty::Tile(p) => format!("Tile<{}>", p.rust_name()),
            Ty::Gm(p, false) => format!("Gm<{}>", p.rust_name()),
            Ty::Gm(p, true) => format!("GmMut<{}>", p.rust_name()),
            Ty::Tuple(v) => format!("({})", v.iter().map(|t| t.describe()).collect::<Vec<_>>().join(", ")),
            Ty::Unit => "()".into(),
            Ty::IntLit => "{integer}".into(),
            Ty::FloatLit => "{float}".into(),
        }
    }
}

/// One compiled variant: `TILE` elements per tile, `threads` per block on NVIDIA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    pub tile: u32,
    pub threads: u32,
}

/// A kernel parameter.
#[derive(Clone, Debug)]
pub struct Param {
    pub name: syn::Ident,
    pub ty: Ty,
    pub span: Span,
    /// Declared `Logits`: checked as a `Gm<f32>` (read-only f32 elements),
    /// stored as f32, bf16 or f16 as chosen at launch (the emitters give it
    /// a dtype-carrying view; `ParamKind::Logits`).
    pub logits: bool,
}

/// A whole kernel.
#[derive(Clone, Debug)]
pub struct Kernel {
    pub name: syn::Ident,
    pub vis: syn::Visibility,
    pub docs: Vec<syn::Attribute>,
    pub params: Vec<Param>,
    pub variants: Vec<Variant>,
    pub debug: bool,
    /// Whether AscendC is wanted (`#[kernel(ascend = false)]` opts out).
    pub ascend: bool,
    /// `#[kernel(cluster = C)]`: the most CTAs a program (row) may run on
    /// as one thread-block cluster (NVIDIA); 0 for a plain kernel.
    pub cluster: u32,
    pub body: Block,
}

#[derive(Clone, Debug, Default)]
pub struct Block {
    pub stmts: Vec<Stmt>,
}

#[derive(Clone, Debug)]
pub enum Stmt {
    /// `let [mut] a = e;` or `let (a, b) = e;`
    Let { names: Vec<(syn::Ident, bool)>, value: Expr, span: Span },
    /// `a = e;` or `a op= e;`
    Assign { target: syn::Ident, op: Option<BinOp>, value: Expr, span: Span },
    /// An expression evaluated for its effect (stores).
    Expr(Expr),
    /// `if c { .. } else { .. }` on a scalar condition.
    If { cond: Expr, then: Block, els: Option<Block>, span: Span },
    /// `for i in a..b { .. }` over scalar integers.
    For { var: syn::Ident, start: Expr, end: Expr, body: Block, span: Span },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    And,
    Or,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
}

impl BinOp {
    pub fn is_compare(self) -> bool {
        matches!(self, BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne)
    }
    pub fn is_arith(self) -> bool {
        matches!(self, BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem)
    }
    pub fn is_logic(self) -> bool {
        matches!(self, BinOp::And | BinOp::Or)
    }
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::And => "&&",
            BinOp::Or => "||",
            BinOp::BitAnd => "&",
            BinOp::BitOr => "|",
            BinOp::BitXor => "^",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Not,
}

/// Named constants of the DSL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Const {
    /// The variant's tile size (u32).
    Tile,
    /// `f32` negative infinity.
    NegInf,
    /// `f32` positive infinity.
    PosInf,
}

#[derive(Clone, Debug)]
pub enum Lit {
    Int(u64, Option<Prim>),
    Float(f64, Option<Prim>),
    Bool(bool),
}

#[derive(Clone, Debug)]
pub struct Expr {
    pub kind: ExprKind,
    pub ty: Ty,
    /// The first token's span (rustc's caret starts here).
    pub span: Span,
    /// The last token's span: errors cover `span ..= end`.
    pub end: Span,
}

#[derive(Clone, Debug)]
pub enum ExprKind {
    Lit(Lit),
    Var(syn::Ident),
    Const(Const),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Cast(Box<Expr>, Prim),
    Call(crate::ops::Op, Vec<Expr>),
    /// `if c { a } else { b }` on scalars.
    If(Box<Expr>, Box<Expr>, Box<Expr>),
}

impl Expr {
    pub fn new(kind: ExprKind, span: Span) -> Expr {
        Expr { kind, ty: Ty::Unit, span, end: span }
    }
    /// The source range, for errors covering the whole expression.
    pub fn range(&self) -> (Span, Span) {
        (self.span, self.end)
    }
    /// Whether this is a `warp_scope(len)` call (the condition of a warp scope).
    pub fn is_warp_scope(&self) -> bool {
        matches!(&self.kind, ExprKind::Call(crate::ops::Op::WarpScope, args) if args.len() == 1)
    }
    /// Whether this tile-typed node is computed element by element
    /// (so it fuses into one map with its elementwise operands).
    pub fn is_elementwise(&self) -> bool {
        match &self.kind {
            ExprKind::Unary(..) | ExprKind::Binary(..) | ExprKind::Cast(..) => true,
            ExprKind::Call(op, _) => op.is_elem(),
            _ => false,
        }
    }
}
