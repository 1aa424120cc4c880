//! The conversion from `syn`'s tree to the IR: name resolution in scopes, and an error at
//! the span of anything outside the supported subset.

use proc_macro2::TokenTree;
use quote::ToTokens;

use super::*;

struct Conv<'a> {
    names: &'a TypeNames<'a>,
    bindings: Vec<Binding>,
    scopes: Vec<Vec<(String, usize)>>,
    nodes: usize,
    errors: Vec<syn::Error>,
    /// A `let` failed: its names are unknown, so unknown names are not reported again.
    poisoned: bool,
}

/// Checks and resolves `block`, the body of `fn f(params...)`.
pub fn convert(params: &[&syn::Ident], block: &syn::Block, names: &TypeNames) -> syn::Result<Body> {
    let mut c =
        Conv { names, bindings: Vec::new(), scopes: vec![Vec::new()], nodes: 0, errors: Vec::new(), poisoned: false };
    for p in params {
        c.bind(p);
    }
    let block = c.block(block, block.brace_token.span.join());
    match (
        block,
        c.errors.into_iter().reduce(|mut a, b| {
            a.combine(b);
            a
        }),
    ) {
        (Some(block), None) => Ok(Body { bindings: c.bindings, params: params.len(), block, nodes: c.nodes }),
        (_, Some(e)) => Err(e),
        (None, None) => unreachable!("a failed conversion records an error"),
    }
}

impl Conv<'_> {
    fn bind(&mut self, id: &syn::Ident) -> usize {
        let name = syn::ext::IdentExt::unraw(id).to_string();
        let b = self.bindings.len();
        self.bindings.push(Binding { name: name.clone() });
        self.scopes.last_mut().expect("a scope").push((name, b));
        b
    }

    fn lookup(&self, name: &str) -> Option<usize> {
        self.scopes.iter().rev().flat_map(|s| s.iter().rev()).find(|(n, _)| n == name).map(|&(_, b)| b)
    }

    fn fail<T>(&mut self, at: &impl ToTokens, msg: impl std::fmt::Display) -> Option<T> {
        self.errors.push(Sp::of(at).error(msg));
        None
    }

    fn fail_at<T>(&mut self, span: Span, msg: impl std::fmt::Display) -> Option<T> {
        self.errors.push(syn::Error::new(span, msg));
        None
    }

    fn node(&mut self, span: Sp, kind: Kind) -> Expr {
        self.nodes += 1;
        Expr { id: self.nodes - 1, span, kind }
    }

    fn block(&mut self, b: &syn::Block, span: Span) -> Option<Block> {
        self.scopes.push(Vec::new());
        let r = self.block_inner(b, span);
        self.scopes.pop();
        r
    }

    fn block_inner(&mut self, b: &syn::Block, span: Span) -> Option<Block> {
        let mut lets = Vec::new();
        let mut tail = None;
        let mut ok = true;
        let n = b.stmts.len();
        for (i, s) in b.stmts.iter().enumerate() {
            match s {
                syn::Stmt::Local(l) => match self.local(l) {
                    Some(l) => lets.push(l),
                    None => {
                        ok = false;
                        self.poisoned = true;
                    }
                },
                syn::Stmt::Expr(e, None) if i + 1 == n => {
                    tail = self.expr(e);
                    ok &= tail.is_some();
                }
                syn::Stmt::Expr(e, semi) => {
                    ok = false;
                    let msg = match e {
                        syn::Expr::Assign(_) => {
                            "assignment is not supported: bind a new name with `let` instead".to_string()
                        }
                        syn::Expr::Binary(x) if is_compound_assign(&x.op) => {
                            "compound assignment is not supported: bind a new name with `let` instead".to_string()
                        }
                        syn::Expr::Return(_) => {
                            "`return` is not supported: the body's last expression is the result".to_string()
                        }
                        syn::Expr::ForLoop(_) | syn::Expr::While(_) | syn::Expr::Loop(_) => {
                            format!("loops are not supported; {SUPPORTED}")
                        }
                        syn::Expr::Macro(m) => {
                            format!("macro `{}!` is not supported; {SUPPORTED}", path_str(&m.mac.path))
                        }
                        _ if e.to_token_stream().into_iter().any(|t| is_return(&t)) => {
                            "`return` is not supported: the body's last expression is the result".to_string()
                        }
                        _ if semi.is_some() && i + 1 == n => {
                            "this block has no value: remove the `;` after its last expression".to_string()
                        }
                        _ => {
                            "only `let` statements and a final expression are supported in a reduction body".to_string()
                        }
                    };
                    self.fail::<()>(e, msg);
                }
                syn::Stmt::Item(it) => {
                    ok = false;
                    self.fail::<()>(it, format!("items are not supported inside a reduction body; {SUPPORTED}"));
                }
                syn::Stmt::Macro(m) => {
                    ok = false;
                    self.fail::<()>(m, format!("macro `{}!` is not supported; {SUPPORTED}", path_str(&m.mac.path)));
                }
            }
        }
        if !ok {
            return None;
        }
        match tail {
            Some(t) => Some(Block { lets, tail: Box::new(t) }),
            None => self.fail_at(
                span,
                "this block has no value: it must end with an expression (without `;`) that gives the result",
            ),
        }
    }

    fn local(&mut self, l: &syn::Local) -> Option<Let> {
        let (pat, ty) = match &l.pat {
            syn::Pat::Type(pt) => (&*pt.pat, Some(&*pt.ty)),
            p => (p, None),
        };
        let ident = match pat {
            syn::Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                if let Some(m) = &pi.mutability {
                    return self.fail(m, "mutable bindings are not supported: bind a new name with `let` instead");
                }
                &pi.ident
            }
            p => return self.fail(p, "only simple `let name = ...;` bindings are supported (no patterns)"),
        };
        let ty = match ty {
            Some(t) => Some((self.ty(t)?, Sp::of(t))),
            None => None,
        };
        let init = match &l.init {
            None => return self.fail(l, "a `let` binding needs a value: `let name = ...;`"),
            Some(i) if i.diverge.is_some() => return self.fail(l, "`let ... else` is not supported"),
            Some(i) => self.expr(&i.expr)?,
        };
        // Bound after its initializer: `let x = x + 1;` refers to the outer `x`.
        let binding = self.bind(ident);
        Some(Let { binding, ty, init })
    }

    fn ty(&mut self, t: &syn::Type) -> Option<TyRef> {
        let bad = |c: &mut Self, what: &str| {
            c.fail(
                t,
                format!(
                    "unsupported type {what}: the body computes with {PRIM_NAMES}{}",
                    match c.names.param {
                        Some(p) => format!(" and the type parameter `{p}`"),
                        None => String::new(),
                    }
                ),
            )
        };
        let p = match t {
            syn::Type::Path(p) if p.qself.is_none() => p,
            syn::Type::Paren(p) => return self.ty(&p.elem),
            syn::Type::Group(g) => return self.ty(&g.elem),
            _ => return bad(self, ""),
        };
        let Some(id) = p.path.get_ident() else {
            let s = path_str(&p.path);
            return bad(self, &format!("`{s}`"));
        };
        let s = id.to_string();
        if Some(s.as_str()) == self.names.param {
            return Some(TyRef::Param);
        }
        if let Some(p) = Prim::from_name(&s) {
            return Some(TyRef::Prim(p));
        }
        if Some(s.as_str()) == self.names.narrow_elem {
            return self.fail(
                t,
                format!(
                    "`{s}` is not a compute type: {s} values are widened to f32, combined, and rounded back; write f32"
                ),
            );
        }
        bad(self, &format!("`{s}`"))
    }

    fn expr(&mut self, e: &syn::Expr) -> Option<Expr> {
        let span = Sp::of(e);
        use syn::Expr as E;
        let kind = match e {
            E::Paren(p) => return self.expr(&p.expr),
            E::Group(g) => return self.expr(&g.expr),
            E::Lit(l) => self.lit(&l.lit, false)?,
            E::Path(p) => {
                if p.qself.is_none() && p.attrs.is_empty() {
                    if let Some(id) = p.path.get_ident() {
                        let name = syn::ext::IdentExt::unraw(id).to_string();
                        return match self.lookup(&name) {
                            Some(b) => Some(self.node(span, Kind::Var(b))),
                            None if self.poisoned => None,
                            None => self.fail(e,
                                format!("unknown name `{name}`: a reduction body may only use its two arguments and its `let` bindings"),
                            ),
                        };
                    }
                }
                let s = path_str(&p.path);
                return self.fail(e,
                    format!("paths such as `{s}` are not supported: a reduction body may only use its two arguments, its `let` bindings and literals"),
                );
            }
            E::Unary(u) => {
                let op = match u.op {
                    syn::UnOp::Neg(_) => Un::Neg,
                    syn::UnOp::Not(_) => Un::Not,
                    _ => return self.fail(e, format!("dereference is not supported; {SUPPORTED}")),
                };
                // `-literal` is one literal (so that `-128i8` is in range, as in Rust).
                if op == Un::Neg {
                    if let E::Lit(l) = strip(&u.expr) {
                        let kind = self.lit(&l.lit, true)?;
                        return Some(self.node(span, kind));
                    }
                }
                let x = self.expr(&u.expr)?;
                Kind::Unary(op, Box::new(x))
            }
            E::Binary(b) => {
                let op = match b.op {
                    syn::BinOp::Add(_) => Bin::Add,
                    syn::BinOp::Sub(_) => Bin::Sub,
                    syn::BinOp::Mul(_) => Bin::Mul,
                    syn::BinOp::Div(_) => Bin::Div,
                    syn::BinOp::Rem(_) => Bin::Rem,
                    syn::BinOp::And(_) => Bin::And,
                    syn::BinOp::Or(_) => Bin::Or,
                    syn::BinOp::BitAnd(_) => Bin::BitAnd,
                    syn::BinOp::BitOr(_) => Bin::BitOr,
                    syn::BinOp::BitXor(_) => Bin::BitXor,
                    syn::BinOp::Eq(_) => Bin::Eq,
                    syn::BinOp::Ne(_) => Bin::Ne,
                    syn::BinOp::Lt(_) => Bin::Lt,
                    syn::BinOp::Le(_) => Bin::Le,
                    syn::BinOp::Gt(_) => Bin::Gt,
                    syn::BinOp::Ge(_) => Bin::Ge,
                    syn::BinOp::Shl(_) => Bin::Shl,
                    syn::BinOp::Shr(_) => Bin::Shr,
                    ref op if is_compound_assign(op) => {
                        return self.fail(e, "compound assignment is not supported: bind a new name with `let` instead")
                    }
                    _ => return self.fail(&b.op, format!("this operator is not supported; {SUPPORTED}")),
                };
                let l = self.expr(&b.left);
                let r = self.expr(&b.right);
                Kind::Binary(op, Box::new(l?), Box::new(r?))
            }
            E::If(i) => {
                let cond = self.expr(&i.cond);
                let then = self.block(&i.then_branch, i.then_branch.brace_token.span.join());
                let Some((_, els)) = &i.else_branch else {
                    return self.fail(e, "an `if` without `else` has no value: add an `else` branch");
                };
                let els = match &**els {
                    E::Block(b) if b.label.is_none() && b.attrs.is_empty() => {
                        self.block(&b.block, b.block.brace_token.span.join())
                    }
                    other => {
                        // `else if`: a block whose value is the nested `if`.
                        let nested = self.expr(other);
                        nested.map(|n| Block { lets: Vec::new(), tail: Box::new(n) })
                    }
                };
                Kind::If(Box::new(cond?), then?, els?)
            }
            E::Block(b) if b.label.is_none() => Kind::Block(self.block(&b.block, b.block.brace_token.span.join())?),
            E::Cast(c) => {
                let x = self.expr(&c.expr);
                let t = self.ty(&c.ty);
                Kind::Cast(Box::new(x?), t?)
            }
            E::MethodCall(m) => {
                let name = m.method.to_string();
                let Some(method) = Method::from_name(&name) else {
                    return self.fail(&m.method,
                        format!("method `{name}` is not supported; the supported methods are abs, min, max, sqrt, mul_add, clamp and to_bits"),
                    );
                };
                if let Some(t) = &m.turbofish {
                    return self.fail(t, "type arguments on methods are not supported");
                }
                if m.args.len() != method.nargs() {
                    return self.fail(m,
                        format!("`{name}` takes {} argument(s), found {}", method.nargs(), m.args.len()),
                    );
                }
                let recv = self.expr(&m.receiver);
                let args: Vec<Option<Expr>> = m.args.iter().map(|a| self.expr(a)).collect();
                let args: Option<Vec<Expr>> = args.into_iter().collect();
                if let (Method::Clamp, Some([lo, hi])) = (method, args.as_deref()) {
                    if let (Some(l), Some(h)) = (lit_value(lo), lit_value(hi)) {
                        if l > h {
                            return self.fail(m,
                                "`clamp` with a minimum above its maximum: Rust panics on this call",
                            );
                        }
                    }
                }
                Kind::Method(method, Box::new(recv?), args?)
            }
            E::Call(c) if is_from_bits(&c.func) => {
                if c.args.len() != 1 {
                    return self.fail(e, format!("`f32::from_bits` takes 1 argument, found {}", c.args.len()));
                }
                Kind::FromBits(Box::new(self.expr(&c.args[0])?))
            }
            E::Call(_) => {
                return self.fail(e,
                    format!("function calls other than `f32::from_bits` are not supported (use method syntax for abs, min, max, sqrt, mul_add, clamp, to_bits: `x.abs()`); {SUPPORTED}"),
                )
            }
            E::Macro(m) => {
                return self.fail(e, format!("macro `{}!` is not supported; {SUPPORTED}", path_str(&m.mac.path)))
            }
            E::Match(_) => return self.fail(e, format!("`match` is not supported: use `if`/`else`; {SUPPORTED}")),
            E::ForLoop(_) | E::While(_) | E::Loop(_) => {
                return self.fail(e, format!("loops are not supported; {SUPPORTED}"))
            }
            E::Return(_) => {
                return self.fail(e, "`return` is not supported: the body's last expression is the result")
            }
            E::Assign(_) => {
                return self.fail(e, "assignment is not supported: bind a new name with `let` instead")
            }
            E::Let(_) => return self.fail(e, format!("`if let` and `let` expressions are not supported; {SUPPORTED}")),
            E::Closure(_) => return self.fail(e, format!("closures are not supported; {SUPPORTED}")),
            E::Reference(_) => return self.fail(e, format!("references are not supported; {SUPPORTED}")),
            E::Index(_) | E::Array(_) | E::Repeat(_) => {
                return self.fail(e, format!("arrays and indexing are not supported; {SUPPORTED}"))
            }
            E::Tuple(_) | E::Field(_) | E::Struct(_) => {
                return self.fail(e, format!("tuples, structs and fields are not supported; {SUPPORTED}"))
            }
            E::Unsafe(_) => return self.fail(e, format!("`unsafe` blocks are not supported; {SUPPORTED}")),
            _ => return self.fail(e, format!("this expression is not supported; {SUPPORTED}")),
        };
        Some(self.node(span, kind))
    }

    fn lit(&mut self, l: &syn::Lit, neg: bool) -> Option<Kind> {
        match l {
            syn::Lit::Int(i) => {
                let suffix = self.suffix(i.suffix(), i.span())?;
                if suffix.is_some_and(Prim::is_float) {
                    return Some(Kind::Float { digits: i.base10_digits().to_string(), neg, suffix });
                }
                let value = match i.base10_parse::<u128>() {
                    Ok(v) => v,
                    Err(e) => return self.fail(i, e),
                };
                Some(Kind::Int { value, neg, suffix })
            }
            syn::Lit::Float(f) => {
                let suffix = self.suffix(f.suffix(), f.span())?;
                if suffix.is_some_and(Prim::is_int) {
                    return self.fail(f, "an integer suffix on a float literal");
                }
                Some(Kind::Float { digits: f.base10_digits().to_string(), neg, suffix })
            }
            syn::Lit::Bool(b) if !neg => Some(Kind::Bool(b.value)),
            _ => self.fail(l, format!("only numeric and bool literals are supported; {SUPPORTED}")),
        }
    }

    fn suffix(&mut self, s: &str, span: Span) -> Option<Option<Prim>> {
        if s.is_empty() {
            return Some(None);
        }
        match Prim::from_name(s) {
            Some(p) => Some(Some(p)),
            None => {
                self.fail_at(span, format!("unsupported literal suffix `{s}`: the body computes with {PRIM_NAMES}"))
            }
        }
    }
}

/// Whether `f` names `f32::from_bits`.
fn is_from_bits(f: &syn::Expr) -> bool {
    let syn::Expr::Path(p) = strip(f) else { return false };
    let names: Vec<String> = p.path.segments.iter().map(|s| s.ident.to_string()).collect();
    p.qself.is_none() && p.path.segments.iter().all(|s| s.arguments.is_none()) && names == ["f32", "from_bits"]
}

fn strip(e: &syn::Expr) -> &syn::Expr {
    match e {
        syn::Expr::Paren(p) => strip(&p.expr),
        syn::Expr::Group(g) => strip(&g.expr),
        e => e,
    }
}

fn is_compound_assign(op: &syn::BinOp) -> bool {
    use syn::BinOp as B;
    matches!(
        op,
        B::AddAssign(_)
            | B::SubAssign(_)
            | B::MulAssign(_)
            | B::DivAssign(_)
            | B::RemAssign(_)
            | B::BitXorAssign(_)
            | B::BitAndAssign(_)
            | B::BitOrAssign(_)
            | B::ShlAssign(_)
            | B::ShrAssign(_)
    )
}

fn path_str(p: &syn::Path) -> String {
    let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
    format!("{}{}", if p.leading_colon.is_some() { "::" } else { "" }, segs.join("::"))
}

/// The value of a literal node, for checks that do not depend on its type.
fn lit_value(e: &Expr) -> Option<f64> {
    let (v, neg) = match &e.kind {
        Kind::Int { value, neg, .. } => (*value as f64, *neg),
        Kind::Float { digits, neg, .. } => (digits.parse::<f64>().ok()?, *neg),
        _ => return None,
    };
    Some(if neg { -v } else { v })
}

fn is_return(t: &TokenTree) -> bool {
    match t {
        TokenTree::Ident(i) => i == "return",
        TokenTree::Group(g) => g.stream().into_iter().any(|t| is_return(&t)),
        _ => false,
    }
}
