//! Compile-fail tests of `#[reduction]` (used as `#[jitccl::reduction]`; here straight from
//! this crate, so that the harness checks nothing but the macro): every unsupported form is
//! an error at its span that says what is supported (the expected messages are in
//! tests/ui/*.stderr; regenerate them with
//! `TRYBUILD=overwrite cargo test -p jitccl-macros --test reduction_ui`).

#[test]
fn unsupported_forms_are_compile_errors() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
