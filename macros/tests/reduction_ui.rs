//! Compile-fail tests of `#[reduction]` and `#[wire_codec]` (`codec_*.rs`; used as
//! `#[jitccl::reduction]` and `#[jitccl::wire_codec]`; here straight from this crate, so
//! that the harness checks nothing but the macros): every unsupported form is
//! an error at its span that says what is supported (the expected messages are in
//! tests/ui/*.stderr; regenerate them with
//! `TRYBUILD=overwrite cargo test -p jitccl-macros --test reduction_ui`).

#[test]
fn unsupported_forms_are_compile_errors() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
