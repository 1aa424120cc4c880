//! The index at the top of `runtime/src/comm/mod.rs` names, for every public or crate-wide
//! method of `Comm`, the file its `impl Comm` block is in: a reader finds a method where
//! the index says, and a method added or moved without the index fails here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn comm_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/comm")
}

/// (file relative to `comm/`, method) pairs the index lists.
fn indexed() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(comm_dir().join("mod.rs")).unwrap();
    let doc: Vec<&str> = text.lines().take_while(|l| l.starts_with("//!")).map(|l| l[3..].trim()).collect();
    let start = doc.iter().position(|l| l.starts_with("Where each `Comm` method lives")).expect("the index");
    let mut out = BTreeMap::new();
    let mut file = String::new();
    for line in &doc[start + 1..] {
        let names = match line.strip_prefix("- `").and_then(|l| l.split_once("`:")) {
            Some((f, rest)) => {
                file = f.to_string();
                rest
            }
            None => line,
        };
        for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            assert!(out.insert(name.to_string(), file.clone()).is_none(), "{name} is indexed twice");
        }
    }
    out
}

/// (method, file) for every `pub`/`pub(crate)` fn of an `impl Comm` block under `comm/`.
fn defined() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![comm_dir()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(comm_dir()).unwrap().to_string_lossy().into_owned();
            let mut inside = false;
            for line in std::fs::read_to_string(&p).unwrap().lines() {
                if line == "impl Comm {" {
                    inside = true;
                } else if inside && line == "}" {
                    inside = false;
                } else if inside {
                    let fn_of = |prefix: &str| line.strip_prefix(prefix).map(|r| r.split(['(', '<']).next().unwrap());
                    if let Some(name) = fn_of("    pub fn ").or_else(|| fn_of("    pub(crate) fn ")) {
                        assert!(out.insert(name.to_string(), rel.clone()).is_none(), "Comm::{name} defined twice");
                    }
                }
            }
        }
    }
    out
}

#[test]
fn the_comm_index_names_each_methods_file() {
    let (index, code) = (indexed(), defined());
    for (name, file) in &code {
        assert_eq!(
            index.get(name),
            Some(file),
            "Comm::{name} is in comm/{file}: the index in comm/mod.rs says otherwise"
        );
    }
    for name in index.keys() {
        assert!(code.contains_key(name), "the index names Comm::{name}, which no impl Comm block defines");
    }
}
