//! Lowers a typed body to the C statements of `C jc_combine(C a, C b)`, text that compiles
//! as C11 (host target, system C compiler) and as CUDA C++ (NVRTC, no headers).
//!
//! Every operation keeps its Rust meaning: integer arithmetic wraps (through unsigned
//! types: signed overflow is undefined in C, and narrow types would be promoted to `int`),
//! float-to-integer casts saturate, `min`/`max` ignore a NaN operand, `if` and `&&`/`||`
//! evaluate only the branch Rust evaluates. The few functions that need the target (abs,
//! sqrt and fused multiply-add of floats) are `jcu_*` macros defined at the top of the body:
//! CUDA's device built-ins under NVRTC, compiler built-ins or exact emulations on the host
//! (kernels there are not linked against libm).

use std::collections::BTreeSet;

use crate::infer::{FTy, Typed};
use crate::ir::{Bin, Block, Body, Expr, Kind, Method, Un};
use crate::types::Prim;

mod helper;
use helper::Helper;

/// The C names of a body's parameters, in order.
const PARAMS: [&str; 2] = ["a", "b"];

/// The C body for a function whose element types compute in `groups` (one typing of the
/// body per distinct compute type, in order): a reduction's, or with one group a codec's.
pub fn c_body(body: &Body, groups: &[(Prim, Typed)]) -> String {
    let mut helpers = BTreeSet::new();
    let mut counter = 0;
    let mut out = Vec::new();
    if let [(p, typed)] = groups {
        let mut em = Em::new(body, typed, &mut helpers, &mut counter, 1);
        for (k, arg) in PARAMS.iter().take(body.params).enumerate() {
            em.names[k] = Some((*arg).into());
        }
        let r = em.block(&body.block);
        let _ = p;
        out.extend(em.lines);
        out.push(format!("  return {r};"));
    } else {
        for (i, (p, typed)) in groups.iter().enumerate() {
            let last = i + 1 == groups.len();
            out.push(if last {
                format!("  {{ /* {} */", p.name())
            } else {
                format!("  if ({}) {{ /* {} */", p.c_is_compute_type(), p.name())
            });
            let mut em = Em::new(body, typed, &mut helpers, &mut counter, 2);
            for (k, arg) in PARAMS.into_iter().enumerate() {
                let name = em.fresh(&body.bindings[k].name);
                em.push(format!("{} {name} = ({}){arg};", p.c(), p.c()));
                em.names[k] = Some(name);
            }
            let r = em.block(&body.block);
            out.extend(em.lines);
            out.push(format!("    return (C)({r});"));
            out.push("  }".into());
        }
    }
    let mut text = String::from("\n");
    if !helpers.is_empty() {
        text.push_str("#ifdef __CUDACC__\n");
        for h in &helpers {
            text.push_str(&h.cuda());
            text.push('\n');
        }
        text.push_str("#else\n");
        for h in &helpers {
            text.push_str(&h.host());
            text.push('\n');
        }
        text.push_str("#endif\n");
    }
    for l in out {
        text.push_str(&l);
        text.push('\n');
    }
    for h in &helpers {
        text.push_str(&format!("#undef {}\n", h.name()));
    }
    text
}

struct Em<'a> {
    body: &'a Body,
    ty: &'a Typed,
    helpers: &'a mut BTreeSet<Helper>,
    counter: &'a mut usize,
    names: Vec<Option<String>>,
    lines: Vec<String>,
    depth: usize,
}

fn c_type(t: FTy) -> &'static str {
    match t {
        FTy::P(p) => p.c(),
        FTy::Bool => "int",
    }
}

fn is_simple(s: &str) -> bool {
    let s = s.strip_prefix('(').and_then(|s| s.strip_suffix(')')).unwrap_or(s);
    let s = s.strip_prefix('-').unwrap_or(s);
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

/// An integer constant of type `p`.
pub fn int_lit(v: i128, p: Prim) -> String {
    match p {
        Prim::I32 if v == i32::MIN as i128 => "(-2147483647 - 1)".into(),
        Prim::I32 if v < 0 => format!("({v})"),
        Prim::I32 => format!("{v}"),
        Prim::U32 => format!("{v}u"),
        Prim::I64 if v == i64::MIN as i128 => "(-9223372036854775807LL - 1)".into(),
        Prim::I64 if v < 0 => format!("({v}LL)"),
        Prim::I64 => format!("{v}LL"),
        Prim::U64 => format!("{v}ULL"),
        Prim::I8 | Prim::U8 => format!("(({}){v})", p.c()),
        Prim::F32 | Prim::F64 => float_lit(v as f64, p),
    }
}

/// A float constant of type `p` (`v` is exactly a value of `p`), in the shortest form
/// that reads back as the same value.
pub fn float_lit(v: f64, p: Prim) -> String {
    let s = match p {
        Prim::F32 => format!("{:?}f", v as f32),
        _ => format!("{v:?}"),
    };
    if s.starts_with('-') {
        format!("({s})")
    } else {
        s
    }
}

/// The value of float literal digits in type `p`, rounded once, as rustc does.
pub fn parse_float(digits: &str, neg: bool, p: Prim) -> f64 {
    let v = if p == Prim::F32 {
        digits.parse::<f32>().expect("checked literal") as f64
    } else {
        digits.parse::<f64>().expect("checked literal")
    };
    if neg {
        -v
    } else {
        v
    }
}

impl<'a> Em<'a> {
    fn new(
        body: &'a Body, ty: &'a Typed, helpers: &'a mut BTreeSet<Helper>, counter: &'a mut usize, depth: usize,
    ) -> Self {
        Em { body, ty, helpers, counter, names: vec![None; body.bindings.len()], lines: Vec::new(), depth }
    }

    fn push(&mut self, l: String) {
        self.lines.push(format!("{}{l}", "  ".repeat(self.depth)));
    }

    fn fresh(&mut self, base: &str) -> String {
        *self.counter += 1;
        let n = *self.counter;
        if !base.is_empty() && base.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            format!("{base}_{n}")
        } else {
            format!("jcu_v{n}")
        }
    }

    fn temp(&mut self, t: FTy, value: String) -> String {
        *self.counter += 1;
        let name = format!("jcu_t{}", *self.counter);
        self.push(format!("{} {name} = {value};", c_type(t)));
        name
    }

    /// `value` as something that can be repeated: a name or a constant.
    fn simple(&mut self, t: FTy, value: String) -> String {
        if is_simple(&value) {
            value
        } else {
            self.temp(t, value)
        }
    }

    fn ty(&self, e: &Expr) -> FTy {
        self.ty.nodes[e.id]
    }

    /// Lowers `f` into its own statement list (an `if` branch, or the right operand of
    /// `&&`/`||`): returns the statements and the value.
    fn sub(&mut self, f: impl FnOnce(&mut Self) -> String) -> (Vec<String>, String) {
        let saved = std::mem::take(&mut self.lines);
        self.depth += 1;
        let v = f(self);
        self.depth -= 1;
        (std::mem::replace(&mut self.lines, saved), v)
    }

    fn block(&mut self, b: &Block) -> String {
        for l in &b.lets {
            let v = self.expr(&l.init);
            let t = self.ty.bindings[l.binding];
            let name = self.fresh(&self.body.bindings[l.binding].name);
            self.push(format!("{} {name} = {v};", c_type(t)));
            self.names[l.binding] = Some(name);
        }
        self.expr(&b.tail)
    }

    fn expr(&mut self, e: &Expr) -> String {
        let t = self.ty(e);
        match &e.kind {
            Kind::Var(b) => self.names[*b].clone().expect("bound before use"),
            Kind::Int { value, neg, .. } => {
                let v = if *neg { -(*value as i128) } else { *value as i128 };
                int_lit(v, t.prim())
            }
            Kind::Float { digits, neg, .. } => float_lit(parse_float(digits, *neg, t.prim()), t.prim()),
            Kind::Bool(b) => (if *b { "1" } else { "0" }).into(),
            Kind::Unary(op, x) => {
                let v = self.expr(x);
                match (op, t) {
                    (Un::Not, FTy::Bool) => format!("(!{v})"),
                    (Un::Not, FTy::P(p)) => format!("(({})~{v})", p.c()),
                    (Un::Neg, FTy::P(p)) if p.is_float() => format!("(-{v})"),
                    (Un::Neg, FTy::P(p)) => {
                        format!("(({x})(({u})0 - ({u}){v}))", x = p.c(), u = p.c_unsigned())
                    }
                    (Un::Neg, FTy::Bool) => unreachable!("checked"),
                }
            }
            Kind::Binary(op, l, r) => self.binary(*op, l, r, t),
            Kind::If(c, a, b) => {
                let cv = self.expr(c);
                let (la, va) = self.sub(|s| s.block(a));
                let (lb, vb) = self.sub(|s| s.block(b));
                if la.is_empty() && lb.is_empty() {
                    return format!("({cv} ? {va} : {vb})");
                }
                *self.counter += 1;
                let name = format!("jcu_t{}", *self.counter);
                self.push(format!("{} {name};", c_type(t)));
                self.push(format!("if ({cv}) {{"));
                self.lines.extend(la);
                self.push(format!("  {name} = {va};"));
                self.push("} else {".into());
                self.lines.extend(lb);
                self.push(format!("  {name} = {vb};"));
                self.push("}".into());
                name
            }
            Kind::Block(b) => self.block(b),
            Kind::FromBits(x) => format!("jc_bits_f32({})", self.expr(x)),
            Kind::Cast(x, _) => {
                let from = self.ty(x);
                let v = self.expr(x);
                self.cast(v, from, t.prim())
            }
            Kind::Method(m, recv, args) => {
                let p = t.prim();
                let x = self.expr(recv);
                let mut args: Vec<String> = args.iter().map(|a| self.expr(a)).collect();
                // Operands the C expression repeats become names first.
                let repeats =
                    matches!(m, Method::Min | Method::Max | Method::Clamp) || (*m == Method::Abs && p.is_int());
                let x = if repeats { self.simple(t, x) } else { x };
                if repeats {
                    args = args.into_iter().map(|a| self.simple(t, a)).collect();
                }
                let h = |s: &mut Self, h: Helper| {
                    s.helpers.insert(h);
                    h.name()
                };
                match (m, p.is_float()) {
                    (Method::ToBits, _) => format!("jc_f32_bits({x})"),
                    (Method::Abs, true) => format!("{}({x})", h(self, Helper::Fabs(p))),
                    (Method::Abs, false) => {
                        format!("({x} < 0 ? (({c})(({u})0 - ({u}){x})) : {x})", c = p.c(), u = p.c_unsigned())
                    }
                    (Method::Sqrt, _) => format!("{}({x})", h(self, Helper::Sqrt(p))),
                    (Method::MulAdd, _) => {
                        format!("{}({x}, {}, {})", h(self, Helper::Fma(p)), args[0], args[1])
                    }
                    (Method::Min, true) => {
                        format!("(({x} < {r} || {r} != {r}) ? {x} : {r})", r = args[0])
                    }
                    (Method::Max, true) => {
                        format!("(({x} > {r} || {r} != {r}) ? {x} : {r})", r = args[0])
                    }
                    (Method::Min, false) => format!("({r} < {x} ? {r} : {x})", r = args[0]),
                    (Method::Max, false) => format!("({x} > {r} ? {x} : {r})", r = args[0]),
                    (Method::Clamp, _) => {
                        format!("({x} < {lo} ? {lo} : {x} > {hi} ? {hi} : {x})", lo = args[0], hi = args[1])
                    }
                }
            }
        }
    }

    fn binary(&mut self, op: Bin, l: &Expr, r: &Expr, t: FTy) -> String {
        if matches!(op, Bin::And | Bin::Or) {
            // The right operand is evaluated only when Rust evaluates it.
            let lv = self.expr(l);
            let (lines, rv) = self.sub(|s| s.expr(r));
            if lines.is_empty() {
                return format!("({lv} {} {rv})", op.c());
            }
            let name = self.temp(FTy::Bool, lv);
            self.push(format!("if ({}{name}) {{", if op == Bin::And { "" } else { "!" }));
            self.lines.extend(lines);
            self.push(format!("  {name} = {rv};"));
            self.push("}".into());
            return name;
        }
        let operand = self.ty(l);
        let lv = self.expr(l);
        let rv = self.expr(r);
        if op.is_comparison() {
            return format!("({lv} {} {rv})", op.c());
        }
        let p = match operand {
            FTy::Bool => return format!("({lv} {} {rv})", op.c()),
            FTy::P(p) => p,
        };
        debug_assert_eq!(t, operand);
        let (x, u) = (p.c(), p.c_unsigned());
        if p.is_float() {
            return format!("({lv} {} {rv})", op.c());
        }
        if op.is_shift() {
            // Rust without overflow checks: the amount modulo the width. A left shift goes
            // through the unsigned type (C's signed overflow is undefined); a right shift of
            // a signed value is arithmetic, as every compiler the kernels meet makes it.
            let amount = format!("((jc_u32)({rv}) & {}u)", p.bits() - 1);
            return match op {
                Bin::Shl => format!("(({x})(({u}){lv} << {amount}))"),
                _ => format!("(({x})({lv} >> {amount}))"),
            };
        }
        match op {
            Bin::Add | Bin::Sub | Bin::Mul => format!("(({x})(({u}){lv} {} ({u}){rv}))", op.c()),
            Bin::BitAnd | Bin::BitOr | Bin::BitXor => format!("(({x})({lv} {} {rv}))", op.c()),
            Bin::Div | Bin::Rem => {
                // Division by zero and MIN / -1 trap on CPUs: they give 0 and the wrapped
                // result (Rust panics). A constant divisor needs no guard.
                let safe = matches!(r.kind, Kind::Int { value, neg, .. } if value != 0 && !(neg && value == 1));
                if safe {
                    return format!("(({x})({lv} {} {rv}))", op.c());
                }
                let lv = self.simple(operand, lv);
                let rv = self.simple(operand, rv);
                match (op, p.is_signed()) {
                    (Bin::Div, true) => {
                        format!("({rv} == 0 ? ({x})0 : {rv} == -1 ? (({x})(({u})0 - ({u}){lv})) : ({x})({lv} / {rv}))")
                    }
                    (Bin::Rem, true) => format!("(({rv} == 0 || {rv} == -1) ? ({x})0 : ({x})({lv} % {rv}))"),
                    _ => format!("({rv} == 0 ? ({x})0 : ({x})({lv} {} {rv}))", op.c()),
                }
            }
            _ => unreachable!("logical and comparison operators handled above"),
        }
    }

    /// `v as to` with Rust's semantics.
    fn cast(&mut self, v: String, from: FTy, to: Prim) -> String {
        let from = match from {
            FTy::Bool => return format!("(({}){v})", to.c()),
            FTy::P(p) => p,
        };
        if from == to {
            return v;
        }
        if !(from.is_float() && to.is_int()) {
            // Integer truncation wraps, int -> float and float -> float round to nearest.
            return format!("(({}){v})", to.c());
        }
        // Float -> integer saturates, NaN gives 0.
        let v = self.simple(FTy::P(from), v);
        let x = to.c();
        let (lo, hi) = to.int_range();
        // Powers of two, written out exactly.
        let pow = |e: u32| format!("{}.0{}", 1u128 << e, if from == Prim::F32 { "f" } else { "" });
        let bits = to.bits();
        if to.is_signed() {
            let top = pow(bits - 1);
            format!(
                "({v} != {v} ? ({x})0 : {v} >= {top} ? {max} : {v} <= -{top} ? {min} : ({x}){v})",
                max = int_lit(hi, to),
                min = int_lit(lo, to),
            )
        } else {
            format!(
                "({v} != {v} ? ({x})0 : {v} >= {top} ? {max} : {v} <= {m1} ? ({x})0 : ({x}){v})",
                top = pow(bits),
                max = int_lit(hi, to),
                m1 = float_lit(-1.0, from),
            )
        }
    }
}
