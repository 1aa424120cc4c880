//! The table's readers (on settings of their own names, so that setting variables here
//! cannot change what other tests of this binary read), and the table against the
//! reference page, the docs and every variable the workspace mentions.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use super::*;

/// A copy of `s` under names no other test reads.
const fn own(s: Setting, name: &'static str, alias: &'static str) -> Setting {
    Setting { name, nccl: Some(alias), ..s }
}

fn set(var: &str, v: Option<&str>) {
    match v {
        Some(v) => std::env::set_var(var, v),
        None => std::env::remove_var(var),
    }
}

#[test]
fn the_jitccl_name_wins_over_the_nccl_alias() {
    const S: Setting = own(NSOCKS_PERTHREAD, "JITCCL_T_ALIAS_SOCKS", "NCCL_T_ALIAS_SOCKS");
    set(S.name, None);
    set("NCCL_T_ALIAS_SOCKS", None);
    assert_eq!(S.whole::<usize>(None), Ok(1), "the default");
    set("NCCL_T_ALIAS_SOCKS", Some("4"));
    assert_eq!(S.whole::<usize>(None), Ok(4), "the alias alone");
    assert_eq!(source(&S), Source::Alias("NCCL_T_ALIAS_SOCKS"));
    set(S.name, Some("2"));
    assert_eq!(S.whole::<usize>(None), Ok(2), "JITCCL_ wins");
    assert_eq!(source(&S), Source::Var(S.name));
    assert_eq!(S.whole(Some(3usize)), Ok(3), "the Config field wins over both");
    set(S.name, Some("  "));
    assert_eq!(S.whole::<usize>(None), Ok(4), "a blank value is unset");
    set("NCCL_T_ALIAS_SOCKS", Some("40"));
    let e = S.whole::<usize>(None).unwrap_err().to_string();
    assert_eq!(e, "NCCL_T_ALIAS_SOCKS='40' (read as JITCCL_T_ALIAS_SOCKS): expected 1..=16");
    set(S.name, None);
    set("NCCL_T_ALIAS_SOCKS", None);
}

/// The JSON form parses, and carries each row's value as given (quotes, backslashes and
/// newlines included), whether it was given, and why it is refused.
#[test]
fn the_json_form_carries_values_sources_and_problems() {
    const GIVEN: Setting = own(TRANSPORT, "JITCCL_T_JSON_GIVEN", "NCCL_T_JSON_GIVEN");
    const UNSET: Setting = own(BUFFSIZE, "JITCCL_T_JSON_UNSET", "NCCL_T_JSON_UNSET");
    const TEXT: Setting = Setting { kind: Kind::Text, ..own(TRANSPORT, "JITCCL_T_JSON_TEXT", "NCCL_T_JSON_TEXT") };
    set(GIVEN.name, Some("ib"));
    set(UNSET.name, None);
    set("NCCL_T_JSON_TEXT", Some("a \"b\" \\ c\nd"));
    let rows: serde_json::Value = serde_json::from_str(&json(&current([&GIVEN, &UNSET, &TEXT]))).unwrap();
    let row = |i: usize, k: &str| rows[i][k].clone();
    assert_eq!(row(0, "name"), "JITCCL_T_JSON_GIVEN");
    assert_eq!(row(0, "given"), true);
    assert_eq!(row(0, "value"), "ib");
    assert_eq!(row(0, "problem"), "expected one of auto, shm, net");
    assert_eq!(row(1, "given"), false);
    assert_eq!(row(1, "source"), "default");
    assert_eq!(row(1, "value"), row(1, "default"));
    assert_eq!(row(1, "problem"), serde_json::Value::Null);
    assert_eq!(row(2, "source"), "NCCL_T_JSON_TEXT");
    assert_eq!(row(2, "value"), "a \"b\" \\ c\nd");
    assert_eq!(row(2, "scope"), "user");
    set(GIVEN.name, None);
    set("NCCL_T_JSON_TEXT", None);
}

fn source(s: &Setting) -> Source {
    current([s])[0].source
}

#[test]
fn bad_values_name_the_variable_and_what_it_accepts() {
    let cases: [(Setting, &str, &str); 5] = [
        (
            own(TIMEOUT, "JITCCL_T_BAD_TIMEOUT", "NCCL_T_BAD_TIMEOUT"),
            "soon",
            "expected seconds, more than 0 and at most 1e9",
        ),
        (own(BUFFSIZE, "JITCCL_T_BAD_BUFF", "NCCL_T_BAD_BUFF"), "100", "expected bytes (e.g. 4M), 512..=1073741824"),
        (own(COMM_BLOCKING, "JITCCL_T_BAD_FLAG", "NCCL_T_BAD_FLAG"), "maybe", "expected 0 or 1"),
        (own(TRANSPORT, "JITCCL_T_BAD_CHOICE", "NCCL_T_BAD_CHOICE"), "ib", "expected one of auto, shm, net"),
        (own(MIN_CTAS, "JITCCL_T_BAD_CTAS", "NCCL_T_BAD_CTAS"), "65", "expected 1..=64"),
    ];
    for (s, bad, accepted) in cases {
        set(s.name, Some(bad));
        let e = match s.kind {
            Kind::Seconds => s.seconds(None).map(drop),
            Kind::Flag => s.flag(None).map(drop),
            Kind::Choice(_) => s.choice(None).map(drop),
            _ => s.whole::<u64>(None).map(drop),
        }
        .unwrap_err();
        assert_eq!(e.to_string(), format!("{}='{bad}': {accepted}", s.name));
        assert_eq!(s.check(bad), Err(accepted.to_string()));
        set(s.name, None);
    }
    let e = MIN_CTAS.whole(Some(0usize)).unwrap_err().to_string();
    assert_eq!(e, "Config.min_ctas (JITCCL_MIN_CTAS)='0': expected 1..=64");
    let e = TIMEOUT.seconds(Some(Duration::ZERO)).unwrap_err().to_string();
    assert!(e.starts_with("Config.timeout (JITCCL_TIMEOUT)='0ns': expected more than 0"), "{e}");
    let e = COMM_NAME.flag(None).unwrap_err().to_string();
    assert!(e.contains("internal") && e.contains("JITCCL_COMM_NAME"), "a reader of the wrong kind: {e}");
}

#[test]
fn defaults_are_the_tables() {
    let own = |s| own(s, "JITCCL_T_DEFAULT", "NCCL_T_DEFAULT");
    set("JITCCL_T_DEFAULT", None);
    assert_eq!(own(TIMEOUT).seconds(None), Ok(Duration::from_secs(300)));
    assert_eq!(own(BOOTSTRAP_TIMEOUT).seconds(None), Ok(Duration::from_secs(120)));
    assert_eq!(own(BUFFSIZE).whole_opt::<usize>(None), Ok(None), "computed by the caller: the network decides");
    assert_eq!(own(MAX_CTAS).whole::<usize>(None), Ok(MAX_CHANNELS));
    assert_eq!(own(NCHANNELS).whole_opt::<usize>(None), Ok(None), "computed by the caller");
    assert_eq!(own(COMM_BLOCKING).flag(None), Ok(true));
    assert_eq!(own(ABORT_PROPAGATE).flag(None), Ok(false));
    assert!(own(HOST_ARENA).flag_or_warn());
    assert_eq!(own(NET).text(), Ok(None), "no name asked: chosen at init");
    set("JITCCL_T_DEFAULT", Some(" Libfabric "));
    assert_eq!(own(NET).text(), Ok(Some("Libfabric".into())), "any name: checked against the networks at init");
    set("JITCCL_T_DEFAULT", None);
    assert_eq!(own(TRANSPORT).choice(None), Ok("auto"));
    set("JITCCL_T_DEFAULT", Some("NET"));
    assert_eq!(own(TRANSPORT).choice(None), Ok("net"), "as the table spells it");
    set("JITCCL_T_DEFAULT", Some("8M"));
    assert_eq!(own(BUFFSIZE).whole::<usize>(None), Ok(8 << 20));
    set("JITCCL_T_DEFAULT", Some("x"));
    assert!(!own(P2P_DISABLE).flag_or_warn(), "a bad flag where it cannot fail: the default");
    set("JITCCL_T_DEFAULT", None);
}

#[test]
fn every_setting_is_declared_once_and_consistently() {
    let mut names = BTreeSet::new();
    for s in ALL {
        assert!(s.name.starts_with("JITCCL_") && names.insert(s.name), "{} twice or misnamed", s.name);
        assert!(s.nccl.is_none_or(|n| n.starts_with("NCCL_") && names.insert(n)), "{}", s.name);
        let typed = match s.default {
            Initial::Whole(d) => s.check(&d.to_string()).is_ok(),
            Initial::Seconds(d) => s.kind == Kind::Seconds && d > 0,
            Initial::Flag(_) => s.kind == Kind::Flag,
            Initial::Text(t) => s.check(t).is_ok(),
            Initial::Computed(_) => true,
        };
        assert!(typed, "{}: the default {:?} is not a {:?}", s.name, s.default, s.kind);
        assert_eq!(s.field.is_some(), s.ranks != Ranks::Process, "{}: a Config field says how ranks agree", s.name);
    }
}

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

#[test]
fn the_reference_page_is_generated_from_the_table() {
    let path = workspace().join("docs/settings.md");
    let page = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        page == markdown(),
        "{} is not the table's; rewrite it with `cargo run --release -p jitccl-cli -- env --markdown > docs/settings.md`",
        path.display()
    );
}

#[test]
fn the_docs_point_to_the_reference_and_name_no_undeclared_setting() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let section = readme.split("\n## Settings").nth(1).expect("README has a Settings section");
    let section = section.split("\n## ").next().unwrap();
    assert!(section.contains("docs/settings.md"), "the README's Settings section links to the reference");
    for doc in ["README.md", "docs/guide.md", "docs/architecture.md", "docs/performance.md"] {
        let text = std::fs::read_to_string(workspace().join(doc)).unwrap();
        for name in mentioned(&text) {
            assert!(ALL.iter().any(|s| s.name == name), "{doc} mentions {name}, which the table does not declare");
        }
    }
}

/// The `JITCCL_*` names in `text` (a bare prefix is not a name).
fn mentioned(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("JITCCL_") {
        let tail = &rest[i..];
        let end =
            tail.find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')).unwrap_or(tail.len());
        let name = tail[..end].trim_end_matches('_');
        if name.len() > "JITCCL_".len() {
            out.insert(name.to_string());
        }
        rest = &tail[end.max(1)..];
    }
    out
}

/// Every `JITCCL_*` name in the workspace's Rust and Python sources is in the table, but
/// C preprocessor macros and this file's own test names.
#[test]
fn the_table_declares_every_variable_the_workspace_reads() {
    const NOT_VARIABLES: &[&str] = &["JITCCL_NO_CUDA_HEADERS"];
    let mut missing = BTreeSet::new();
    let mut stack = vec![workspace().to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !name.starts_with('.') && name != "target" {
                    stack.push(path);
                }
            } else if (name.ends_with(".rs") || name.ends_with(".py")) && !path.ends_with("settings/src/tests.rs") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                for var in mentioned(&text) {
                    if !ALL.iter().any(|s| s.name == var) && !NOT_VARIABLES.contains(&var.as_str()) {
                        missing.insert(format!("{var} ({})", path.display()));
                    }
                }
            }
        }
    }
    assert!(missing.is_empty(), "not declared in settings/src/table.rs: {missing:?}");
}

#[test]
fn names_are_found_in_text() {
    let found = mentioned("JITCCL_ALGO=ring, `JITCCL_` alone, JITCCL_NCHANNELS_, x JITCCL_T2.");
    assert_eq!(found.into_iter().collect::<Vec<_>>(), ["JITCCL_ALGO", "JITCCL_NCHANNELS", "JITCCL_T2"]);
}
