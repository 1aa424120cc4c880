//! `#[wire_codec]`: a module of plain Rust functions (`encode`, `decode` and, with a block,
//! `scale`) made into a wire format, each function translated to C as a reduction's body is.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

use crate::types::Prim;
use crate::{emit_c, err, infer, ir, screaming};

const USAGE: &str = "expected `#[jitccl::wire_codec]` or `#[jitccl::wire_codec(block = <32, 64, 128 or 256>, \
     name = \"<name>\")]` (both optional; a block needs `fn scale`) on `mod <name> { fn encode(...) ... }`";

/// The blocks a codec's scale may cover: those the kernels' wire steps take.
const BLOCKS: [u16; 4] = [32, 64, 128, 256];

struct Args {
    block: Option<(u16, Span)>,
    name: Option<String>,
}

fn parse_args(attr: TokenStream) -> syn::Result<Args> {
    let mut args = Args { block: None, name: None };
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("block") {
            let lit: syn::LitInt = meta.value()?.parse()?;
            let b: u16 = lit.base10_parse().ok().filter(|b| BLOCKS.contains(b)).ok_or_else(|| {
                syn::Error::new(lit.span(), "a codec's block is 32, 64, 128 or 256 elements: those a wire step takes")
            })?;
            args.block = Some((b, lit.span()));
        } else if meta.path.is_ident("name") {
            args.name = Some(crate::attr::name(&meta)?.0);
        } else {
            return Err(meta.error(format!("unknown argument; {USAGE}")));
        }
        Ok(())
    });
    syn::parse::Parser::parse2(parser, attr)?;
    Ok(args)
}

/// One of the codec's functions: which, and its parameters' and result's types.
#[derive(Clone, Copy, PartialEq)]
enum Role {
    Scale,
    Encode,
    Decode,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Scale => "scale",
            Role::Encode => "encode",
            Role::Decode => "decode",
        }
    }

    /// `fn name(params) -> result` as written in Rust, with or without the block's scale.
    fn shape(self, scaled: bool) -> (Vec<Prim>, Prim, &'static str) {
        match (self, scaled) {
            (Role::Scale, _) => (vec![Prim::F32], Prim::F32, "fn scale(amax: f32) -> f32"),
            (Role::Encode, true) => (vec![Prim::F32, Prim::F32], Prim::U8, "fn encode(value: f32, scale: f32) -> u8"),
            (Role::Encode, false) => (vec![Prim::F32], Prim::U8, "fn encode(value: f32) -> u8"),
            (Role::Decode, true) => (vec![Prim::U8, Prim::F32], Prim::F32, "fn decode(code: u8, scale: f32) -> f32"),
            (Role::Decode, false) => (vec![Prim::U8], Prim::F32, "fn decode(code: u8) -> f32"),
        }
    }
}

/// `f`'s body in C, after checking its signature against `role`'s shape.
fn translate(f: &syn::ItemFn, role: Role, scaled: bool) -> syn::Result<String> {
    let s = &f.sig;
    let (types, result, shape) = role.shape(scaled);
    let wrong = |span: Span, what: &str| err(span, format!("{what}; with {} it is `{shape}`", block_words(scaled)));
    if s.constness.is_some() || s.asyncness.is_some() || s.unsafety.is_some() || s.abi.is_some() {
        return Err(wrong(s.fn_token.span(), "a codec's function is a plain `fn`"));
    }
    if !s.generics.params.is_empty() || s.generics.where_clause.is_some() || s.variadic.is_some() {
        return Err(wrong(s.generics.span(), "a codec's function is not generic"));
    }
    if s.inputs.len() != types.len() {
        return Err(wrong(s.paren_token.span.join(), &format!("`{}` takes {} argument(s)", role.name(), types.len())));
    }
    let mut params = Vec::new();
    for (a, want) in s.inputs.iter().zip(&types) {
        let syn::FnArg::Typed(pt) = a else {
            return Err(wrong(a.span(), "a codec's function is a free function, not a method"));
        };
        match &*pt.pat {
            syn::Pat::Ident(pi) if pi.by_ref.is_none() && pi.mutability.is_none() && pi.subpat.is_none() => {
                params.push(&pi.ident)
            }
            p => return Err(err(p.span(), "arguments must be plain names (no `mut`, no patterns)")),
        }
        if !is_prim(&pt.ty, *want) {
            return Err(wrong(pt.ty.span(), &format!("this argument is a `{}`", want.name())));
        }
    }
    match &s.output {
        syn::ReturnType::Type(_, t) if is_prim(t, result) => {}
        syn::ReturnType::Type(_, t) => return Err(wrong(t.span(), &format!("the result is a `{}`", result.name()))),
        syn::ReturnType::Default => return Err(wrong(s.ident.span(), &format!("it returns a `{}`", result.name()))),
    }
    let names = ir::TypeNames { param: None, narrow_elem: None };
    let body = ir::convert(&params, &f.block, &names)?;
    let typed = infer::infer(&body, &types, result, Prim::F32, format!("in `{}`: ", role.name()))?;
    Ok(emit_c::c_body(&body, &[(Prim::F32, typed)]))
}

fn block_words(scaled: bool) -> &'static str {
    if scaled {
        "a block"
    } else {
        "no block"
    }
}

fn is_prim(t: &syn::Type, p: Prim) -> bool {
    matches!(t, syn::Type::Path(tp) if tp.qself.is_none() && tp.path.is_ident(p.name()))
}

pub fn expand(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let args = parse_args(attr)?;
    let mut m: syn::ItemMod = syn::parse2(item).map_err(|e| err(e.span(), format!("{e}; {USAGE}")))?;
    let Some((brace, items)) = &m.content else {
        return Err(err(m.semi.span(), format!("a codec's module is written inline: `mod name {{ ... }}`; {USAGE}")));
    };
    let mut fns: Vec<(Role, &syn::ItemFn)> = Vec::new();
    for item in items {
        let syn::Item::Fn(f) = item else {
            return Err(err(
                item.span(),
                "a codec's module holds `fn encode`, `fn decode` and, with a block, `fn scale`; nothing else",
            ));
        };
        let role = match f.sig.ident.to_string().as_str() {
            "scale" => Role::Scale,
            "encode" => Role::Encode,
            "decode" => Role::Decode,
            other => {
                return Err(err(
                    f.sig.ident.span(),
                    format!("`{other}` is no codec function: they are `encode`, `decode` and, with a block, `scale`"),
                ))
            }
        };
        fns.push((role, f));
    }
    let find = |r: Role| fns.iter().find(|(role, _)| *role == r).map(|(_, f)| *f);
    let scaled = args.block.is_some();
    let scale = match (find(Role::Scale), args.block) {
        (Some(f), Some(_)) => translate(f, Role::Scale, true)?,
        (None, None) => String::new(),
        (Some(f), None) => {
            return Err(err(
                f.sig.ident.span(),
                "`fn scale` needs the block it scales: add `block = <32, 64, 128 or 256>`",
            ))
        }
        (None, Some((_, span))) => {
            return Err(err(span, "a block needs its scale: add `fn scale(amax: f32) -> f32` to the module"))
        }
    };
    let missing = |r: Role| {
        let (_, _, shape) = r.shape(scaled);
        err(brace.span.join(), format!("the codec has no `{}`: add `{shape}`", r.name()))
    };
    let encode = translate(find(Role::Encode).ok_or_else(|| missing(Role::Encode))?, Role::Encode, scaled)?;
    let decode = translate(find(Role::Decode).ok_or_else(|| missing(Role::Decode))?, Role::Decode, scaled)?;

    let mod_name = syn::ext::IdentExt::unraw(&m.ident).to_string();
    let name = args.name.unwrap_or_else(|| mod_name.clone());
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(err(m.ident.span(), "the codec's name must be ASCII: give it one with `name = \"...\"`"));
    }
    let const_ident = format_ident!("{}", screaming(&mod_name), span = m.ident.span());
    let block = match args.block {
        Some((b, _)) => quote!(::core::option::Option::Some(#b)),
        None => quote!(::core::option::Option::None),
    };
    let doc = format!(
        "The wire format `{name}` made by `#[jitccl::wire_codec]` from the module [`{mod_name}`] (its Rust \
         reference): pass it as `jitccl::Wire::Custom(&{const_ident})`."
    );
    // The codec is a use of its functions: a crate that only sends through it is not told
    // that they are never used.
    let uses: Vec<syn::Ident> = fns.iter().map(|(_, f)| f.sig.ident.clone()).collect();
    if let Some((_, items)) = &mut m.content {
        items.push(syn::parse_quote!(const _: () = { #(let _ = #uses;)* };));
    }
    let vis = &m.vis;
    let codec = quote_spanned! {m.ident.span()=>
        #[doc = #doc]
        #vis static #const_ident: ::jitccl::WireCodec = ::jitccl::WireCodec {
            name: #name,
            block: #block,
            scale: #scale,
            encode: #encode,
            decode: #decode,
        };
    };
    Ok(quote! {
        #m
        #codec
    })
}
