//! C++ spellings: types, literals, operators and casts of the generated code.

use super::*;

/// C++ type of a scalar.
pub(super) fn scalar_type(p: Prim) -> &'static str {
    match p {
        Prim::Bool => "bool",
        Prim::I32 => "int32_t",
        Prim::U32 => "uint32_t",
        Prim::I64 => "int64_t",
        Prim::U64 => "uint64_t",
        Prim::F32 => "float",
        Prim::F64 => "double",
    }
}

/// C++ type of an element in UB or GM (bools are bytes).
pub(super) fn ub_type(p: Prim) -> &'static str {
    match p {
        Prim::Bool => "uint8_t",
        other => scalar_type(other),
    }
}

pub(super) fn ub_elem_bytes(p: Prim) -> u32 {
    p.bytes()
}

/// C++ read of element `i` of a tile as its DSL scalar type.
pub(super) fn elem_read(t: &TileV, i: &str) -> String {
    if t.prim == Prim::Bool {
        format!("({}.GetValue({i}) != 0)", t.t)
    } else {
        format!("{}.GetValue({i})", t.t)
    }
}

pub(super) fn lit(l: &Lit, p: Prim) -> String {
    match l {
        Lit::Bool(b) => b.to_string(),
        Lit::Int(v, _) => {
            if p.is_float() {
                format!("(({}){v}.0)", scalar_type(p))
            } else {
                format!("(({}){v}ull)", scalar_type(p))
            }
        }
        Lit::Float(v, _) => {
            if p == Prim::F64 {
                format!("{:e}", v)
            } else {
                format!("{:e}f", *v as f32)
            }
        }
    }
}

pub(super) fn binary(op: BinOp, p: Prim, a: &str, b: &str) -> String {
    let t = scalar_type(p);
    match op {
        BinOp::Add => format!("sk::add<{t}>({a}, {b})"),
        BinOp::Sub => format!("sk::sub<{t}>({a}, {b})"),
        BinOp::Mul => format!("sk::mul<{t}>({a}, {b})"),
        BinOp::Div => format!("sk::div<{t}>({a}, {b})"),
        BinOp::Rem => format!("sk::rem<{t}>({a}, {b})"),
        BinOp::Shl => format!("sk::shl<{t}>({a}, (uint32_t)({b}))"),
        BinOp::Shr => format!("sk::shr<{t}>({a}, (uint32_t)({b}))"),
        BinOp::And => format!("(({a}) && ({b}))"),
        BinOp::Or => format!("(({a}) || ({b}))"),
        BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor => format!("(({t})(({t})({a}) {} ({t})({b})))", op.symbol()),
        _ => format!("(({t})({a}) {} ({t})({b}))", op.symbol()),
    }
}

pub(super) fn cast(from: Prim, to: Prim, a: &str) -> String {
    if from.is_float() && to.is_int() {
        let f = match to {
            Prim::I32 => "i32",
            Prim::U32 => "u32",
            Prim::I64 => "i64",
            _ => "u64",
        };
        return format!("sk::f32_to_{f}((float)({a}))");
    }
    format!("(({})({a}))", scalar_type(to))
}

pub(super) fn lowest(p: Prim) -> &'static str {
    match p {
        Prim::I32 => "(int32_t)0x80000000",
        Prim::I64 => "(int64_t)0x8000000000000000ull",
        Prim::F32 => "sk::bits_f32(0xff800000u)",
        _ => "0",
    }
}

pub(super) fn highest(p: Prim) -> &'static str {
    match p {
        Prim::I32 => "0x7fffffff",
        Prim::U32 => "0xffffffffu",
        Prim::I64 => "0x7fffffffffffffffll",
        Prim::U64 => "0xffffffffffffffffull",
        _ => "sk::bits_f32(0x7f800000u)",
    }
}
