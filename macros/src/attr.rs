//! The attribute's arguments: `identity = <literal>`, `commutative = <bool>`,
//! `types(<type>, ...)`, `name = "<identifier>"`.

use proc_macro2::{Span, TokenStream};
use syn::spanned::Spanned;

use crate::emit_c::{float_lit, int_lit, parse_float};
use crate::types::{Elem, Prim, ELEM_NAMES};

pub const USAGE: &str = "expected `#[jitccl::reduction(identity = <literal>, commutative = <bool>, \
     types(<type>, ...), name = \"<name>\")]` (identity is required; the others are optional)";

/// The identity element as written.
pub enum Identity {
    Int(i128),
    /// Decimal digits and sign.
    Float(String, bool),
}

pub struct Args {
    pub identity: Option<(Identity, Span)>,
    pub commutative: bool,
    pub types: Option<(Vec<(Elem, Span)>, Span)>,
    pub name: Option<(String, Span)>,
}

pub fn parse(attr: TokenStream) -> syn::Result<Args> {
    let mut args = Args { identity: None, commutative: true, types: None, name: None };
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("identity") {
            let e: syn::Expr = meta.value()?.parse()?;
            args.identity = Some((identity(&e)?, e.span()));
        } else if meta.path.is_ident("commutative") {
            let b: syn::LitBool = meta.value()?.parse()?;
            args.commutative = b.value;
        } else if meta.path.is_ident("name") {
            args.name = Some(name(&meta)?);
        } else if meta.path.is_ident("types") {
            let mut list: Vec<(Elem, Span)> = Vec::new();
            let span = meta.path.span();
            meta.parse_nested_meta(|m| {
                let last = m.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default();
                let Some(e) = Elem::from_name(&last) else {
                    return Err(m.error(format!("unsupported element type `{last}`: supported are {ELEM_NAMES}")));
                };
                if list.iter().any(|(x, _)| *x == e) {
                    return Err(m.error(format!("`{last}` is listed twice")));
                }
                list.push((e, m.path.span()));
                Ok(())
            })?;
            if list.is_empty() {
                return Err(syn::Error::new(span, "`types(...)` needs at least one type"));
            }
            args.types = Some((list, span));
        } else {
            return Err(meta.error(format!("unknown argument; {USAGE}")));
        }
        Ok(())
    });
    syn::parse::Parser::parse2(parser, attr)?;
    Ok(args)
}

/// A `name = "..."` argument's value and span: identifier-safe, as it becomes part of kernel
/// symbols.
pub fn name(meta: &syn::meta::ParseNestedMeta) -> syn::Result<(String, Span)> {
    let s: syn::LitStr = meta.value()?.parse()?;
    let v = s.value();
    if v.is_empty() || !v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(syn::Error::new(
            s.span(),
            "the name must be identifier-safe (ASCII letters, digits and `_`): it becomes part of kernel symbols",
        ));
    }
    Ok((v, s.span()))
}

fn identity(e: &syn::Expr) -> syn::Result<Identity> {
    let bad = || {
        syn::Error::new(e.span(), "the identity must be a numeric literal, e.g. `identity = 0.0` or `identity = -1`")
    };
    let (lit, neg) = match e {
        syn::Expr::Lit(l) => (&l.lit, false),
        syn::Expr::Unary(u) if matches!(u.op, syn::UnOp::Neg(_)) => match &*u.expr {
            syn::Expr::Lit(l) => (&l.lit, true),
            _ => return Err(bad()),
        },
        _ => return Err(bad()),
    };
    match lit {
        syn::Lit::Int(i) if i.suffix().is_empty() => {
            let v: i128 = i.base10_parse()?;
            Ok(Identity::Int(if neg { -v } else { v }))
        }
        syn::Lit::Float(f) if f.suffix().is_empty() => {
            let d = f.base10_digits().to_string();
            if !d.parse::<f64>().is_ok_and(f64::is_finite) {
                return Err(bad());
            }
            Ok(Identity::Float(d, neg))
        }
        syn::Lit::Int(_) | syn::Lit::Float(_) => Err(syn::Error::new(
            lit.span(),
            "write the identity without a type suffix: it serves every element type of the reduction",
        )),
        _ => Err(bad()),
    }
}

/// The identity as a C constant of the compute type(s), checked against every element type.
pub fn identity_c(id: &Identity, span: Span, elems: &[Elem]) -> syn::Result<String> {
    let mut computes: Vec<Prim> = Vec::new();
    for e in elems {
        if !computes.contains(&e.compute()) {
            computes.push(e.compute());
        }
    }
    for e in elems {
        let p = e.compute();
        match id {
            Identity::Int(v) if p.is_int() => {
                let (lo, hi) = p.int_range();
                if *v < lo || *v > hi {
                    return Err(syn::Error::new(span, format!("identity {v} is not a value of {}", e.name())));
                }
            }
            Identity::Float(d, _) if p.is_int() => {
                return Err(syn::Error::new(span, format!("identity {d} is not a value of {}", e.name())));
            }
            _ => {}
        }
    }
    Ok(match (id, computes.as_slice()) {
        (Identity::Int(v), [p]) => int_lit(*v, *p),
        (Identity::Float(d, neg), [p]) => float_lit(parse_float(d, *neg, *p), *p),
        // Several compute types: a constant each converts to exactly.
        (Identity::Int(v), _) => {
            if *v < 0 {
                format!("({v})")
            } else {
                format!("{v}")
            }
        }
        (Identity::Float(d, neg), _) => float_lit(parse_float(d, *neg, Prim::F64), Prim::F64),
    })
}
