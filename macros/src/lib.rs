//! Procedural macros for jitccl: `#[reduction]` turns a Rust function into a custom
//! reduction op that every reducing collective kernel can be specialized for, and
//! `#[wire_codec]` a pair of Rust functions into a wire format the kernels carry their
//! elements in, on the host and CUDA targets alike. Use them through the facade, as
//! `#[jitccl::reduction]` and `#[jitccl::wire_codec]`.

mod attr;
mod codec;
mod emit_c;
mod infer;
mod ir;
mod types;

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

use crate::types::{Elem, Prim, ELEM_NAMES};

/// Turns `fn name(a: T, b: T) -> T` into a custom reduction op: the constant `NAME` (the
/// function's name in SCREAMING_CASE), a `static jitccl::CustomOp` to pass as
/// `Op::custom(&NAME)`, next to the function itself, which stays callable as the reduction's
/// Rust reference.
///
/// ```ignore
/// #[jitccl::reduction(identity = 0.0)]
/// fn absmax(a: f32, b: f32) -> f32 {
///     let x = a.abs();
///     let y = b.abs();
///     if x > y { x } else { y }
/// }
/// // comm.all_reduce(&send, &recv, count, jitccl::Op::custom(&ABSMAX), &stream)?;
/// // absmax(-3.0, 2.0) == 3.0
/// ```
///
/// # Arguments
/// - `identity = <literal>` (required): the op's identity element, e.g. `0.0` or `-1`.
/// - `commutative = <bool>` (default `true`): whether `f(a, b) == f(b, a)`. Tree algorithms
///   combine in an order other than the rank order and refuse non-commutative ops.
/// - `types(<type>, ...)`: the element types of a generic reduction, written
///   `fn name<T>(a: T, b: T) -> T`. Element types: i8, u8, i32, u32, i64, u64, f16, bf16,
///   f32, f64, F8E4M3, F8E5M2. A non-generic function is defined for its argument type.
/// - `name = "..."`: the op's name in kernel names and symbols (default: the function's).
///
/// # The body
/// `let` bindings (optionally typed), literals, the operators `+ - * / %`,
/// `== != < <= > >=`, `&& || !` and `& | ^`, `if`/`else` expressions, blocks, `as` casts
/// between i8, u8, i32, u32, i64, u64, f32 and f64 (and `T`), and the methods `abs`, `min`,
/// `max`, `sqrt`, `mul_add` and `clamp`. Anything else is a compile error at its span.
/// Types follow Rust: operands of one operator have one type, unsuffixed literals take
/// the type their use demands. A generic body must type-check for every listed type.
///
/// # Semantics
/// The body is translated to C once per compute type and the kernels compute exactly what
/// the Rust function computes: integer arithmetic wraps, float-to-integer casts saturate
/// (NaN gives 0), `min`/`max` return the other operand when one is NaN, only the branch
/// taken is evaluated, floats round to nearest-even at each operation (CUDA kernels are
/// compiled without FMA contraction) and `mul_add` is fused. f16, bf16 and fp8 elements are
/// widened to f32, combined and rounded back once; the generated reference does the same,
/// so the body of such a reduction computes in f32 (write `f32`, not `f16`, inside it).
/// Where Rust panics the kernels cannot: an integer division or remainder by zero gives 0
/// and `MIN / -1` wraps. The sign of a zero returned by `min`/`max` of `0.0` and `-0.0` is
/// unspecified in Rust and may differ.
///
/// In a ring algorithm, `a` is the partial result received from the previous rank and `b`
/// this rank's value, so a reduction over ranks `r0, r1, ...` in ring order is
/// `f(f(x_r0, x_r1), x_r2)...`.
#[proc_macro_attribute]
pub fn reduction(attr: proc_macro::TokenStream, item: proc_macro::TokenStream) -> proc_macro::TokenStream {
    match expand(attr.into(), item.into()) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// Turns a module of plain functions into a wire format of the user's: the constant `NAME`
/// (the module's name in SCREAMING_CASE), a `static jitccl::WireCodec` to pass as
/// `Wire::Custom(&NAME)` to `Comm::wired` or `Config::wire`, next to the module itself,
/// whose functions stay callable as the codec's Rust reference.
///
/// ```ignore
/// #[jitccl::wire_codec(block = 64)]
/// mod log8 {
///     pub fn scale(amax: f32) -> f32 { amax }
///     pub fn encode(value: f32, scale: f32) -> u8 { /* ... */ 0 }
///     pub fn decode(code: u8, scale: f32) -> f32 { /* ... */ 0.0 }
/// }
/// // comm.wired(jitccl::Wire::Custom(&LOG8)).all_reduce(&send, &recv, count, Op::Sum, &stream)?;
/// ```
///
/// A module, not an attribute on one function: the codec is its functions together, and an
/// attribute sees only the item it is on.
///
/// # The functions
/// - `fn encode(value: f32) -> u8` and `fn decode(code: u8) -> f32`: a code per element;
/// - with `block = N` (32, 64, 128 or 256): `fn scale(amax: f32) -> f32`, a block's scale
///   from its largest finite magnitude (0 for a block of zeros, ±Inf and NaN), which
///   travels with the block as an f32, and `fn encode(value: f32, scale: f32) -> u8`,
///   `fn decode(code: u8, scale: f32) -> f32`;
/// - `name = "..."`: the codec's name in kernel names and symbols (default: the module's).
///
/// The bodies take what a `#[reduction]` body takes, and the codec's Rust reference and
/// kernels compute the same bits (see its "Semantics"). `encode` sees every value as it is,
/// ±Inf and NaN included: what they become is the codec's choice. Codes are single bytes.
///
/// # In the kernels
/// A sender encodes each step (the scales of its blocks, counted from the step's start,
/// first), a receiver decodes it and adds in fp32; an AllReduce encodes its final sums once,
/// so that every rank ends with the same bits, as with the built-in wires.
#[proc_macro_attribute]
pub fn wire_codec(attr: proc_macro::TokenStream, item: proc_macro::TokenStream) -> proc_macro::TokenStream {
    match codec::expand(attr.into(), item.into()) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn err(span: Span, msg: impl std::fmt::Display) -> syn::Error {
    syn::Error::new(span, msg)
}

/// What the signature says.
struct Sig<'a> {
    params: [&'a syn::Ident; 2],
    /// The type parameter of a generic reduction.
    generic: Option<&'a syn::Ident>,
    /// The argument type of a non-generic one.
    concrete: Option<&'a syn::Type>,
    elems: Vec<Elem>,
}

fn signature<'a>(f: &'a syn::ItemFn, args: &attr::Args) -> syn::Result<Sig<'a>> {
    let s = &f.sig;
    const SHAPE: &str = "a reduction is `fn name(a: E, b: E) -> E` or, generic over `types(...)`, \
         `fn name<T>(a: T, b: T) -> T`";
    if let Some(t) = &s.constness {
        return Err(err(t.span(), format!("a reduction is not a `const fn`; {SHAPE}")));
    }
    if let Some(t) = &s.asyncness {
        return Err(err(t.span(), format!("a reduction is not `async`; {SHAPE}")));
    }
    if let Some(t) = &s.unsafety {
        return Err(err(t.span(), format!("a reduction is not `unsafe`; {SHAPE}")));
    }
    if let Some(a) = &s.abi {
        return Err(err(a.span(), format!("a reduction has no `extern` ABI; {SHAPE}")));
    }
    if let Some(v) = &s.variadic {
        return Err(err(v.span(), SHAPE));
    }
    if let Some(w) = &s.generics.where_clause {
        return Err(err(w.span(), format!("a reduction takes no `where` clause; {SHAPE}")));
    }
    let mut generic = None;
    for p in &s.generics.params {
        match p {
            syn::GenericParam::Type(t) if generic.is_none() => {
                if !t.bounds.is_empty() || t.default.is_some() || !t.attrs.is_empty() {
                    return Err(err(
                        t.span(),
                        "the type parameter takes no bounds: the element types come from `types(...)`",
                    ));
                }
                generic = Some(&t.ident);
            }
            p => return Err(err(p.span(), format!("a reduction has at most one type parameter; {SHAPE}"))),
        }
    }
    if s.inputs.len() != 2 {
        return Err(err(
            s.paren_token.span.join(),
            format!("a reduction takes exactly two arguments, found {}; {SHAPE}", s.inputs.len()),
        ));
    }
    let mut params = Vec::new();
    let mut tys = Vec::new();
    for a in &s.inputs {
        let syn::FnArg::Typed(pt) = a else {
            return Err(err(a.span(), format!("a reduction is a free function, not a method; {SHAPE}")));
        };
        match &*pt.pat {
            syn::Pat::Ident(pi) if pi.by_ref.is_none() && pi.mutability.is_none() && pi.subpat.is_none() => {
                params.push(&pi.ident)
            }
            p => return Err(err(p.span(), "arguments must be plain names (no `mut`, no patterns)")),
        }
        tys.push(&*pt.ty);
    }
    let same = |a: &syn::Type, b: &syn::Type| quote!(#a).to_string() == quote!(#b).to_string();
    if !same(tys[0], tys[1]) {
        return Err(err(tys[1].span(), format!("both arguments must have one type; {SHAPE}")));
    }
    match &s.output {
        syn::ReturnType::Type(_, t) if same(t, tys[0]) => {}
        syn::ReturnType::Type(_, t) => {
            return Err(err(t.span(), format!("the result must have the arguments' type; {SHAPE}")))
        }
        syn::ReturnType::Default => {
            return Err(err(s.ident.span(), format!("a reduction returns the arguments' type; {SHAPE}")))
        }
    }
    let ty = tys[0];
    let elems = match generic {
        Some(g) => {
            let is_g = matches!(ty, syn::Type::Path(p) if p.qself.is_none() && p.path.is_ident(g));
            if !is_g {
                return Err(err(ty.span(), format!("the arguments of a generic reduction have type `{g}`; {SHAPE}")));
            }
            match &args.types {
                Some((list, _)) => list.iter().map(|(e, _)| *e).collect(),
                None => {
                    return Err(err(
                        g.span(),
                        format!(
                            "a generic reduction lists its element types: add `types({ELEM_NAMES})` or some of them"
                        ),
                    ))
                }
            }
        }
        None => {
            if let Some((_, span)) = &args.types {
                return Err(err(*span, format!("`types(...)` is for a generic reduction; {SHAPE}")));
            }
            let e = match ty {
                syn::Type::Path(p) if p.qself.is_none() => p
                    .path
                    .segments
                    .last()
                    .filter(|s| s.arguments.is_none())
                    .and_then(|s| Elem::from_name(&s.ident.to_string())),
                _ => None,
            };
            match e {
                Some(e) => vec![e],
                None => {
                    return Err(syn::Error::new_spanned(
                        ty,
                        format!("unsupported element type `{}`: a reduction is defined for {ELEM_NAMES}", quote!(#ty)),
                    ))
                }
            }
        }
    };
    Ok(Sig { params: [params[0], params[1]], generic, concrete: generic.is_none().then_some(ty), elems })
}

fn screaming(name: &str) -> String {
    let mut out = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if c.is_uppercase() && prev_lower {
            out.push('_');
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        out.extend(c.to_uppercase());
    }
    out
}

fn expand(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let args = attr::parse(attr)?;
    let f: syn::ItemFn = syn::parse2(item)?;
    let sig = signature(&f, &args)?;
    let Some((identity, id_span)) = &args.identity else {
        return Err(err(Span::call_site(), format!("missing `identity = <literal>`; {}", attr::USAGE)));
    };
    let identity = attr::identity_c(identity, *id_span, &sig.elems)?;

    let fn_name = syn::ext::IdentExt::unraw(&f.sig.ident).to_string();
    let generic_name = sig.generic.map(|g| g.to_string());
    let narrow_name = match (sig.concrete, sig.elems.as_slice()) {
        (Some(syn::Type::Path(p)), [e]) if e.is_narrow() => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    };
    let names = ir::TypeNames { param: generic_name.as_deref(), narrow_elem: narrow_name.as_deref() };
    let body = ir::convert(&sig.params, &f.block, &names)?;

    // One typing (and one C translation) per compute type.
    let mut groups: Vec<(Prim, infer::Typed)> = Vec::new();
    for e in &sig.elems {
        let p = e.compute();
        if groups.iter().any(|(q, _)| *q == p) {
            continue;
        }
        let context = match sig.generic {
            Some(g) if e.is_narrow() => {
                format!("with {g} = {} (computed as {}): ", e.name(), p.name())
            }
            Some(g) => format!("with {g} = {}: ", e.name()),
            None => String::new(),
        };
        let typed = infer::infer(&body, &[p, p], p, p, context)?;
        groups.push((p, typed));
    }
    let c_body = emit_c::c_body(&body, &groups);

    let op_name = args.name.as_ref().map_or_else(|| fn_name.clone(), |(n, _)| n.clone());
    if !op_name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(err(f.sig.ident.span(), "the op's name must be ASCII: give it one with `name = \"...\"`"));
    }
    let const_ident = format_ident!("{}", screaming(&fn_name), span = f.sig.ident.span());
    let vis = &f.vis;
    let commutative = args.commutative;
    let dtypes = sig.elems.iter().map(|e| format_ident!("{}", e.datatype()));
    let doc = format!(
        "The custom reduction `{op_name}` made by `#[jitccl::reduction]` from [`{fn_name}`] (its Rust \
         reference): pass it as `jitccl::Op::custom(&{const_ident})`."
    );
    let reference = reference_fn(&f, &sig);
    // The op is a use of its function: a crate that calls only the op is not told that the
    // function is never used.
    let ident = &f.sig.ident;
    let instance = sig.generic.map(|_| {
        let first = sig.elems[0].rust_type();
        quote!(::<#first>)
    });
    let op = quote_spanned! {f.sig.ident.span()=>
        #[doc = #doc]
        #vis static #const_ident: ::jitccl::CustomOp = ::jitccl::CustomOp {
            name: #op_name,
            body: #c_body,
            identity: #identity,
            commutative: #commutative,
            dtypes: &[#(::jitccl::DataType::#dtypes),*],
        };
    };
    Ok(quote! {
        #reference
        #op
        const _: () = {
            let _ = #ident #instance;
        };
    })
}

/// The Rust function, kept as the reduction's reference. Narrow float elements are widened
/// to f32 around the body, as in the kernels; a generic one dispatches through a trait
/// implemented for each listed type.
fn reference_fn(f: &syn::ItemFn, sig: &Sig) -> TokenStream {
    let [p0, p1] = sig.params;
    let stmts = &f.block.stmts;
    let (attrs, vis, ident) = (&f.attrs, &f.vis, &f.sig.ident);
    let widened = |elem: TokenStream, alias: Option<&syn::Ident>| {
        let alias = alias.map(|g| quote!(type #g = f32;));
        quote! {
            #[inline(always)]
            fn compute(#p0: f32, #p1: f32) -> f32 {
                #alias
                #(#stmts)*
            }
            <#elem>::from_f32(compute(#p0.to_f32(), #p1.to_f32()))
        }
    };
    match (sig.generic, sig.concrete) {
        (None, Some(ty)) if sig.elems[0].is_narrow() => {
            let body = widened(quote!(#ty), None);
            quote! {
                #(#attrs)*
                #vis fn #ident(#p0: #ty, #p1: #ty) -> #ty { #body }
            }
        }
        (None, _) => quote!(#f),
        (Some(g), _) => {
            let module = format_ident!("__jitccl_reduction_{}", syn::ext::IdentExt::unraw(ident));
            let impls = sig.elems.iter().map(|e| {
                let ty = e.rust_type();
                if e.is_narrow() {
                    let body = widened(quote!(Self), Some(g));
                    quote! {
                        impl Element for #ty {
                            #[inline]
                            fn combine(#p0: Self, #p1: Self) -> Self { #body }
                        }
                    }
                } else {
                    quote! {
                        impl Element for #ty {
                            #[inline]
                            fn combine(#p0: #ty, #p1: #ty) -> #ty {
                                type #g = #ty;
                                #(#stmts)*
                            }
                        }
                    }
                }
            });
            let doc = format!("The element types `{ident}` is defined for.");
            quote! {
                #(#attrs)*
                #vis fn #ident<#g: #module::Element>(#p0: #g, #p1: #g) -> #g {
                    <#g as #module::Element>::combine(#p0, #p1)
                }
                #[doc(hidden)]
                #[allow(non_snake_case, non_camel_case_types, clippy::all)]
                #vis mod #module {
                    #[doc = #doc]
                    pub trait Element: Copy {
                        fn combine(a: Self, b: Self) -> Self;
                    }
                    #(#impls)*
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c_of(src: &str, types: Option<&str>) -> String {
        let attr: TokenStream = match types {
            Some(t) => format!("identity = 0, types({t})").parse().unwrap(),
            None => "identity = 0".parse().unwrap(),
        };
        let out = expand(attr, src.parse().unwrap()).unwrap_or_else(|e| panic!("{e}"));
        let s: syn::File = syn::parse2(out).unwrap();
        for item in s.items {
            if let syn::Item::Static(st) = item {
                if let syn::Expr::Struct(es) = *st.expr {
                    for f in es.fields {
                        if matches!(&f.member, syn::Member::Named(n) if n == "body") {
                            if let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) = f.expr {
                                return s.value();
                            }
                        }
                    }
                }
            }
        }
        panic!("no body")
    }

    #[test]
    fn constant_names() {
        assert_eq!(screaming("absmax"), "ABSMAX");
        assert_eq!(screaming("clamped_sum2"), "CLAMPED_SUM2");
        assert_eq!(screaming("absMax"), "ABS_MAX");
    }

    #[test]
    fn literals_are_exact() {
        assert_eq!(emit_c::int_lit(i32::MIN as i128, Prim::I32), "(-2147483647 - 1)");
        assert_eq!(emit_c::int_lit(-5, Prim::I8), "((jc_i8)-5)");
        assert_eq!(emit_c::int_lit(u64::MAX as i128, Prim::U64), "18446744073709551615ULL");
        assert_eq!(emit_c::float_lit(0.1f32 as f64, Prim::F32), "0.1f");
        assert_eq!(emit_c::float_lit(-0.0, Prim::F64), "(-0.0)");
        assert_eq!(emit_c::float_lit(1e-7f32 as f64, Prim::F32), "1e-7f");
    }

    #[test]
    fn lowering_keeps_rust_semantics() {
        // Integer arithmetic wraps through unsigned types; a constant divisor needs no guard.
        let c = c_of("fn f(a: i8, b: i8) -> i8 { (a + b) / 2 }", None);
        assert!(c.contains("((jc_i8)((jc_u32)a + (jc_u32)b))"), "{c}");
        assert!(c.contains("/ ((jc_i8)2)"), "{c}");
        // A variable divisor is guarded against 0 and -1.
        let c = c_of("fn f(a: i32, b: i32) -> i32 { a / b }", None);
        assert!(c.contains("b == 0 ? (jc_i32)0 : b == -1"), "{c}");
        // `if` arms with statements evaluate lazily.
        let c = c_of("fn f(a: u32, b: u32) -> u32 { if b != 0 { let q = a % b; q } else { a } }", None);
        assert!(c.contains("if ((b != 0u)) {"), "{c}");
        // Several compute types: one branch each, chosen by the kernel's `C`.
        let c = c_of("fn f<T>(a: T, b: T) -> T { a.max(b) }", Some("u8, f32, f16"));
        assert_eq!(c.matches("/* u8 */").count() + c.matches("/* f32 */").count(), 2, "{c}");
        assert!(c.contains("sizeof(C) == 1 && (C)0.5 == (C)0 && ((C)-1 < (C)0) == 0"), "{c}");
        // The target-dependent helpers come with both definitions.
        let c = c_of("fn f(a: f64, b: f64) -> f64 { a.mul_add(b, 1.0).sqrt() }", None);
        assert!(c.contains("#define jcu_fma(x, y, z) fma(x, y, z)") && c.contains("unsigned __int128"), "{c}");
        assert!(c.contains("sqrtsd") && c.contains("#undef jcu_sqrt"), "{c}");
    }

    #[test]
    fn shifts_and_bit_casts_keep_rust_semantics() {
        // The amount modulo the width; a left shift through the unsigned type; an amount of
        // another integer type than the value.
        let c = c_of("fn f(a: i32, b: i32) -> i32 { (a << b) + (a >> 3u8) }", None);
        assert!(c.contains("((jc_i32)((jc_u32)a << ((jc_u32)(b) & 31u)))"), "{c}");
        assert!(c.contains("((jc_i32)(a >> ((jc_u32)(((jc_u8)3)) & 31u)))"), "{c}");
        let c = c_of("fn f(a: u8, b: u8) -> u8 { a << b }", None);
        assert!(c.contains("((jc_u8)((jc_u32)a << ((jc_u32)(b) & 7u)))"), "{c}");
        let c = c_of("fn f(a: f32, b: f32) -> f32 { f32::from_bits(a.to_bits() & b.to_bits()) }", None);
        assert!(c.contains("jc_bits_f32(((jc_u32)(jc_f32_bits(a) & jc_f32_bits(b))))"), "{c}");
    }
}
