//! The supported subset of a reduction body, checked and resolved: every name is a
//! binding, every node has an id (for its inferred type) and a span (for errors).
//! Anything outside the subset is reported here, at its span.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;

use crate::types::{Prim, PRIM_NAMES};

pub const SUPPORTED: &str = "a #[jitccl::reduction] or #[jitccl::wire_codec] body may contain `let` \
     bindings, literals, arithmetic (+ - * / %), comparison (== != < <= > >=), logical (&& || !), \
     bitwise (& | ^) and shift (<< >>) operators, `if`/`else` expressions, `as` casts between \
     numeric types, the methods abs, min, max, sqrt, mul_add, clamp and to_bits, and \
     `f32::from_bits`";

/// Where a piece of source is: its first and last tokens, so that an error underlines all
/// of it (a single `Span` cannot be joined on stable Rust).
#[derive(Debug, Clone, Copy)]
pub struct Sp {
    start: Span,
    end: Span,
}

impl Sp {
    pub fn of(t: &impl ToTokens) -> Sp {
        let mut tokens = t.to_token_stream().into_iter();
        let start = tokens.next().map_or_else(Span::call_site, |t| t.span());
        let end = tokens.last().map_or(start, |t| t.span());
        Sp { start, end }
    }

    pub fn error(self, msg: impl std::fmt::Display) -> syn::Error {
        let mut a = proc_macro2::Punct::new('+', proc_macro2::Spacing::Alone);
        a.set_span(self.start);
        let mut b = a.clone();
        b.set_span(self.end);
        let ts: TokenStream = [TokenTree::Punct(a), TokenTree::Punct(b)].into_iter().collect();
        syn::Error::new_spanned(ts, msg)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Un {
    Neg,
    Not,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bin {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
    And,
    Or,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Bin {
    pub fn is_comparison(self) -> bool {
        matches!(self, Bin::Eq | Bin::Ne | Bin::Lt | Bin::Le | Bin::Gt | Bin::Ge)
    }
    pub fn is_arith(self) -> bool {
        matches!(self, Bin::Add | Bin::Sub | Bin::Mul | Bin::Div | Bin::Rem)
    }
    pub fn is_bitwise(self) -> bool {
        matches!(self, Bin::BitAnd | Bin::BitOr | Bin::BitXor)
    }
    pub fn is_shift(self) -> bool {
        matches!(self, Bin::Shl | Bin::Shr)
    }
    pub fn c(self) -> &'static str {
        match self {
            Bin::Add => "+",
            Bin::Sub => "-",
            Bin::Mul => "*",
            Bin::Div => "/",
            Bin::Rem => "%",
            Bin::BitAnd => "&",
            Bin::BitOr => "|",
            Bin::BitXor => "^",
            Bin::Shl => "<<",
            Bin::Shr => ">>",
            Bin::And => "&&",
            Bin::Or => "||",
            Bin::Eq => "==",
            Bin::Ne => "!=",
            Bin::Lt => "<",
            Bin::Le => "<=",
            Bin::Gt => ">",
            Bin::Ge => ">=",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Abs,
    Min,
    Max,
    Sqrt,
    MulAdd,
    Clamp,
    /// An f32's bits as a u32.
    ToBits,
}

impl Method {
    pub fn from_name(s: &str) -> Option<Method> {
        Some(match s {
            "abs" => Method::Abs,
            "min" => Method::Min,
            "max" => Method::Max,
            "sqrt" => Method::Sqrt,
            "mul_add" => Method::MulAdd,
            "clamp" => Method::Clamp,
            "to_bits" => Method::ToBits,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Method::Abs => "abs",
            Method::Min => "min",
            Method::Max => "max",
            Method::Sqrt => "sqrt",
            Method::MulAdd => "mul_add",
            Method::Clamp => "clamp",
            Method::ToBits => "to_bits",
        }
    }
    pub fn nargs(self) -> usize {
        match self {
            Method::Abs | Method::Sqrt | Method::ToBits => 0,
            Method::Min | Method::Max => 1,
            Method::MulAdd | Method::Clamp => 2,
        }
    }
}

/// A type written in the body: a primitive or the reduction's type parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TyRef {
    Prim(Prim),
    Param,
}

#[derive(Debug)]
pub struct Expr {
    pub id: usize,
    pub span: Sp,
    pub kind: Kind,
}

#[derive(Debug)]
pub enum Kind {
    /// A parameter or `let` binding (index into `Body::bindings`).
    Var(usize),
    /// An integer literal; `neg` when written with a leading `-`.
    Int {
        value: u128,
        neg: bool,
        suffix: Option<Prim>,
    },
    /// A float literal's decimal digits (without suffix or underscores).
    Float {
        digits: String,
        neg: bool,
        suffix: Option<Prim>,
    },
    Bool(bool),
    Unary(Un, Box<Expr>),
    Binary(Bin, Box<Expr>, Box<Expr>),
    If(Box<Expr>, Block, Block),
    Block(Block),
    Cast(Box<Expr>, TyRef),
    Method(Method, Box<Expr>, Vec<Expr>),
    /// `f32::from_bits(x)`: the f32 of a u32's bits.
    FromBits(Box<Expr>),
}

#[derive(Debug)]
pub struct Block {
    pub lets: Vec<Let>,
    pub tail: Box<Expr>,
}

#[derive(Debug)]
pub struct Let {
    pub binding: usize,
    pub ty: Option<(TyRef, Sp)>,
    pub init: Expr,
}

#[derive(Debug)]
pub struct Binding {
    pub name: String,
}

/// A checked body: the first `params` bindings are the parameters.
#[derive(Debug)]
pub struct Body {
    pub bindings: Vec<Binding>,
    pub params: usize,
    pub block: Block,
    pub nodes: usize,
}

/// How the body's type names resolve.
pub struct TypeNames<'a> {
    /// The generic parameter's name (`T`), if the function is generic.
    pub param: Option<&'a str>,
    /// The element type's name when it is a narrow float (`f16`): not a compute type.
    pub narrow_elem: Option<&'a str>,
}

mod convert;
pub use convert::convert;
