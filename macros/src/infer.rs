//! Type inference for a body with the type parameter fixed to one compute type, following
//! Rust's rules for this subset: both operands of an operator have one type, unsuffixed
//! literals take the type their uses demand (integers default to i32, floats to f64), a
//! method's receiver type must be known where it is called, and `as` gives an unsuffixed
//! literal the target type when the kinds agree.

use crate::ir::{Bin, Block, Body, Expr, Kind, Method, Sp, TyRef, Un};
use crate::types::Prim;

/// A final type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FTy {
    P(Prim),
    Bool,
}

impl FTy {
    pub fn prim(self) -> Prim {
        match self {
            FTy::P(p) => p,
            FTy::Bool => panic!("bool where a number was checked"),
        }
    }
}

/// Types of every node and binding of a body, for one compute type.
pub struct Typed {
    pub nodes: Vec<FTy>,
    pub bindings: Vec<FTy>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    P(Prim),
    Bool,
    Var(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VarKind {
    Int,
    Float,
}

/// Checks that can only be made once types are final.
enum Check {
    /// An operator's operand type must be acceptable for the operator.
    Operand { span: Sp, ty: Ty, what: &'static str, ok: fn(FTy) -> bool, need: &'static str },
    /// An integer literal must fit its type; a float literal must be finite in it.
    Lit { span: Sp, ty: Ty, int: Option<(u128, bool)>, digits: Option<(String, bool)> },
    /// `as` between numeric types (and bool to integer).
    Cast { span: Sp, from: Ty, to: Prim },
}

struct Inf {
    t: Prim,
    vars: Vec<(VarKind, Option<Ty>)>,
    nodes: Vec<Option<Ty>>,
    bindings: Vec<Option<Ty>>,
    checks: Vec<Check>,
    /// Prepended to errors (which type parameter instance failed).
    context: String,
}

/// Infers the types of `body` with its type parameter equal to `t`, its parameters of types
/// `params` and its result of type `result`; `context` starts every error message.
pub fn infer(body: &Body, params: &[Prim], result: Prim, t: Prim, context: String) -> syn::Result<Typed> {
    let mut inf = Inf {
        t,
        vars: Vec::new(),
        nodes: vec![None; body.nodes],
        bindings: vec![None; body.bindings.len()],
        checks: Vec::new(),
        context,
    };
    for (b, p) in params.iter().enumerate() {
        inf.bindings[b] = Some(Ty::P(*p));
    }
    let r = inf.block(&body.block)?;
    inf.unify(r, Ty::P(result), body.block.tail.span, "the result")?;
    let checks = std::mem::take(&mut inf.checks);
    for c in checks {
        inf.check(c)?;
    }
    let nodes = inf.nodes.iter().map(|t| inf.fin(t.expect("every node is typed"))).collect();
    let bindings = inf.bindings.iter().map(|t| inf.fin(t.expect("every binding is typed"))).collect();
    Ok(Typed { nodes, bindings })
}

fn describe(t: Ty, inf: &Inf) -> String {
    match inf.resolve(t) {
        Ty::P(p) => format!("`{}`", p.name()),
        Ty::Bool => "`bool`".into(),
        Ty::Var(v) => match inf.vars[v].0 {
            VarKind::Int => "an integer literal".into(),
            VarKind::Float => "a float literal".into(),
        },
    }
}

impl Inf {
    fn err(&self, span: Sp, msg: impl std::fmt::Display) -> syn::Error {
        span.error(format!("{}{msg}", self.context))
    }

    fn resolve(&self, mut t: Ty) -> Ty {
        while let Ty::Var(v) = t {
            match self.vars[v].1 {
                Some(n) => t = n,
                None => break,
            }
        }
        t
    }

    /// The final type: unconstrained literals default as in Rust.
    fn fin(&self, t: Ty) -> FTy {
        match self.resolve(t) {
            Ty::P(p) => FTy::P(p),
            Ty::Bool => FTy::Bool,
            Ty::Var(v) => match self.vars[v].0 {
                VarKind::Int => FTy::P(Prim::I32),
                VarKind::Float => FTy::P(Prim::F64),
            },
        }
    }

    fn var(&mut self, k: VarKind) -> Ty {
        self.vars.push((k, None));
        Ty::Var(self.vars.len() - 1)
    }

    fn unify(&mut self, a: Ty, b: Ty, span: Sp, what: &str) -> syn::Result<()> {
        let (ra, rb) = (self.resolve(a), self.resolve(b));
        if ra == rb {
            return Ok(());
        }
        let ok = match (ra, rb) {
            (Ty::Var(x), Ty::Var(y)) if self.vars[x].0 == self.vars[y].0 => {
                self.vars[x].1 = Some(rb);
                true
            }
            (Ty::Var(x), Ty::P(p)) | (Ty::P(p), Ty::Var(x)) => {
                let fits = match self.vars[x].0 {
                    VarKind::Int => p.is_int(),
                    VarKind::Float => p.is_float(),
                };
                if fits {
                    self.vars[x].1 = Some(Ty::P(p));
                }
                fits
            }
            _ => false,
        };
        if ok {
            return Ok(());
        }
        let hint = match (ra, rb) {
            (Ty::Var(x), Ty::P(p)) | (Ty::P(p), Ty::Var(x)) if p.is_float() && self.vars[x].0 == VarKind::Int => {
                " (write integer-valued float literals with a decimal point, e.g. `1.0`)"
            }
            (Ty::Bool, _) | (_, Ty::Bool) => "",
            _ => " (Rust does not convert between numeric types implicitly: use `as`)",
        };
        Err(self
            .err(span, format!("mismatched types in {what}: {} and {}{hint}", describe(ra, self), describe(rb, self))))
    }

    fn set(&mut self, e: &Expr, t: Ty) -> Ty {
        self.nodes[e.id] = Some(t);
        t
    }

    fn block(&mut self, b: &Block) -> syn::Result<Ty> {
        for l in &b.lets {
            let ti = self.expr(&l.init)?;
            let t = match l.ty {
                Some((tr, span)) => {
                    let ta = Ty::P(self.tyref(tr));
                    self.unify(ti, ta, span, "this `let` binding")?;
                    ta
                }
                None => ti,
            };
            self.bindings[l.binding] = Some(t);
        }
        self.expr(&b.tail)
    }

    fn tyref(&self, t: TyRef) -> Prim {
        match t {
            TyRef::Prim(p) => p,
            TyRef::Param => self.t,
        }
    }

    fn operand(&mut self, span: Sp, ty: Ty, what: &'static str, ok: fn(FTy) -> bool, need: &'static str) {
        self.checks.push(Check::Operand { span, ty, what, ok, need });
    }

    fn expr(&mut self, e: &Expr) -> syn::Result<Ty> {
        let t = match &e.kind {
            Kind::Var(b) => self.bindings[*b].expect("bound before use"),
            Kind::Int { value, neg, suffix } => {
                let t = match suffix {
                    Some(p) => Ty::P(*p),
                    None => self.var(VarKind::Int),
                };
                self.checks.push(Check::Lit { span: e.span, ty: t, int: Some((*value, *neg)), digits: None });
                t
            }
            Kind::Float { digits, neg, suffix } => {
                let t = match suffix {
                    Some(p) => Ty::P(*p),
                    None => self.var(VarKind::Float),
                };
                self.checks.push(Check::Lit { span: e.span, ty: t, int: None, digits: Some((digits.clone(), *neg)) });
                t
            }
            Kind::Bool(_) => Ty::Bool,
            Kind::Unary(op, x) => {
                let t = self.expr(x)?;
                match op {
                    Un::Neg => self.operand(
                        e.span,
                        t,
                        "unary `-`",
                        |t| matches!(t, FTy::P(p) if p.is_signed()),
                        "a signed integer or float",
                    ),
                    Un::Not => self.operand(
                        e.span,
                        t,
                        "`!`",
                        |t| t == FTy::Bool || matches!(t, FTy::P(p) if p.is_int()),
                        "bool or an integer",
                    ),
                }
                t
            }
            Kind::Binary(op, l, r) => {
                let tl = self.expr(l)?;
                let tr = self.expr(r)?;
                match op {
                    Bin::And | Bin::Or => {
                        self.unify(tl, Ty::Bool, l.span, "a logical operator's operand")?;
                        self.unify(tr, Ty::Bool, r.span, "a logical operator's operand")?;
                        Ty::Bool
                    }
                    // As in Rust, the amount may be of another integer type than the value.
                    Bin::Shl | Bin::Shr => {
                        let int = |t: FTy| matches!(t, FTy::P(p) if p.is_int());
                        self.operand(l.span, tl, "a shift", int, "an integer to shift");
                        self.operand(r.span, tr, "a shift", int, "an integer amount");
                        tl
                    }
                    _ => {
                        self.unify(tl, tr, e.span, &format!("the operands of `{}`", op.c()))?;
                        if op.is_comparison() {
                            Ty::Bool
                        } else {
                            if *op == Bin::Rem {
                                self.operand(
                                    e.span,
                                    tl,
                                    "`%`",
                                    |t| matches!(t, FTy::P(p) if p.is_int()),
                                    "integers (float `%` would need libm's fmod, which kernels do not link)",
                                );
                            } else if op.is_arith() {
                                self.operand(e.span, tl, "arithmetic", |t| matches!(t, FTy::P(_)), "numbers");
                            } else if op.is_bitwise() {
                                self.operand(
                                    e.span,
                                    tl,
                                    "bitwise operators",
                                    |t| t == FTy::Bool || matches!(t, FTy::P(p) if p.is_int()),
                                    "integers or bools",
                                );
                            }
                            tl
                        }
                    }
                }
            }
            Kind::If(c, a, b) => {
                let tc = self.expr(c)?;
                self.unify(tc, Ty::Bool, c.span, "an `if` condition")?;
                let ta = self.block(a)?;
                let tb = self.block(b)?;
                self.unify(ta, tb, b.tail.span, "the branches of `if`")?;
                ta
            }
            Kind::Block(b) => self.block(b)?,
            Kind::Cast(x, to) => {
                let to = self.tyref(*to);
                // As rustc: an unsuffixed literal cast to a type of its kind has that type.
                let lit_kind = match &x.kind {
                    Kind::Int { suffix: None, .. } => Some(to.is_int()),
                    Kind::Float { suffix: None, .. } => Some(to.is_float()),
                    _ => None,
                };
                let tx = self.expr(x)?;
                if lit_kind == Some(true) {
                    self.unify(tx, Ty::P(to), x.span, "a cast")?;
                }
                self.checks.push(Check::Cast { span: e.span, from: tx, to });
                Ty::P(to)
            }
            Kind::Method(m, recv, args) => {
                let tr = self.expr(recv)?;
                let p = match self.resolve(tr) {
                    Ty::P(p) => p,
                    Ty::Bool => return Err(self.err(recv.span, format!("no method `{}` on `bool`", m.name()))),
                    Ty::Var(v) => {
                        let k = if self.vars[v].0 == VarKind::Int { "{integer}" } else { "{float}" };
                        return Err(self.err(
                            recv.span,
                            format!(
                                "can't call method `{}` on ambiguous numeric type `{k}`: give the literal a suffix (e.g. `2.0f32`) or the binding a type",
                                m.name()
                            ),
                        ));
                    }
                };
                let bad = match m {
                    Method::ToBits if p != Prim::F32 => Some("f32"),
                    Method::Abs if !p.is_signed() => Some("signed integers and floats"),
                    Method::Sqrt | Method::MulAdd if !p.is_float() => Some("floats"),
                    _ => None,
                };
                if let Some(need) = bad {
                    return Err(
                        self.err(e.span, format!("`{}` is defined for {need}, not for `{}`", m.name(), p.name()))
                    );
                }
                for a in args {
                    let ta = self.expr(a)?;
                    self.unify(ta, Ty::P(p), a.span, &format!("the argument of `{}`", m.name()))?;
                }
                match m {
                    Method::ToBits => Ty::P(Prim::U32),
                    _ => Ty::P(p),
                }
            }
            Kind::FromBits(x) => {
                let tx = self.expr(x)?;
                self.unify(tx, Ty::P(Prim::U32), x.span, "the argument of `f32::from_bits`")?;
                Ty::P(Prim::F32)
            }
        };
        Ok(self.set(e, t))
    }

    fn check(&self, c: Check) -> syn::Result<()> {
        match c {
            Check::Operand { span, ty, what, ok, need } => {
                let t = self.fin(ty);
                if !ok(t) {
                    let name = match t {
                        FTy::P(p) => p.name(),
                        FTy::Bool => "bool",
                    };
                    return Err(self.err(span, format!("{what} is not defined for `{name}`: it needs {need}")));
                }
            }
            Check::Lit { span, ty, int, digits } => {
                let FTy::P(p) = self.fin(ty) else { unreachable!("literals are numbers") };
                if let Some((v, neg)) = int {
                    if neg && !p.is_signed() {
                        return Err(self.err(span, format!("cannot negate a `{}`: it is unsigned", p.name())));
                    }
                    let (lo, hi) = p.int_range();
                    let fits = if neg { v <= lo.unsigned_abs() } else { v <= hi as u128 };
                    if !fits {
                        return Err(self.err(span, format!("literal out of range for `{}`", p.name())));
                    }
                }
                if let Some((d, _)) = digits {
                    let finite = match p {
                        Prim::F32 => d.parse::<f32>().is_ok_and(f32::is_finite),
                        _ => d.parse::<f64>().is_ok_and(f64::is_finite),
                    };
                    if !finite {
                        return Err(self.err(span, format!("literal out of range for `{}`", p.name())));
                    }
                }
            }
            Check::Cast { span, from, to } => {
                let ok = match self.fin(from) {
                    FTy::P(_) => true,
                    FTy::Bool => to.is_int(),
                };
                if !ok {
                    return Err(self.err(span, format!("cannot cast `bool` as `{}`", to.name())));
                }
            }
        }
        Ok(())
    }
}
