//! Imports only downward: every `crate::` path in the runtime's sources names a module of a
//! lower layer than the file's own, per the numbered list of layers in `src/lib.rs` (its
//! doc), which must place every top-level module exactly once; and every crate of the
//! workspace depends only on the crates below it. And one module layout style across the
//! workspace; no circle among the modules of one folder (in every crate of Rust modules).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level modules `lib.rs` declares.
fn modules(lib: &str) -> BTreeSet<String> {
    lib.lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod ").or_else(|| l.trim().strip_prefix("mod ")))
        .filter_map(|l| l.strip_suffix(';'))
        .map(str::to_string)
        .collect()
}

/// Each module's layer (1 is the top): the doc's numbered items, a module being a
/// back-quoted name followed by a colon.
fn layers(lib: &str, modules: &BTreeSet<String>) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let mut layer = 0;
    for line in lib.lines().map_while(|l| l.strip_prefix("//!")) {
        let text = line.trim_start();
        if let Some((n, _)) = text.split_once(". ").filter(|(n, _)| n.parse::<usize>().is_ok()) {
            layer = n.parse().unwrap();
        }
        if layer == 0 {
            continue;
        }
        for piece in text.split('`').skip(1).step_by(2).zip(text.split('`').skip(2).step_by(2)) {
            let (name, after) = piece;
            if after.starts_with(':') && modules.contains(name) {
                assert!(out.insert(name.to_string(), layer).is_none(), "lib.rs places `{name}` twice");
            }
        }
    }
    out
}

/// What `lib.rs` re-exports at the crate root, by name: the module it comes from (`None`
/// for another crate's).
fn reexports(lib: &str, modules: &BTreeSet<String>) -> BTreeMap<String, Option<String>> {
    let mut out = BTreeMap::new();
    for stmt in lib.split(';').filter_map(|s| s.trim().strip_prefix("pub use ")) {
        let module = stmt.split("::").next().unwrap().trim().to_string();
        let from = modules.contains(&module).then_some(module);
        let names = stmt.rsplit(['{', ':']).next().unwrap_or(stmt);
        for name in names.split([',', '}']).map(|n| n.rsplit(" as ").next().unwrap().trim()).filter(|n| !n.is_empty()) {
            out.insert(name.to_string(), from.clone());
        }
    }
    out
}

/// The first names of every `crate::` path in `code` (in a `crate::{a::X, b}` group, each
/// item's), with the line it is on. Comment lines do not count: doc links are not imports.
fn crate_paths(code: &str) -> Vec<(String, usize)> {
    let code: String =
        code.lines().map(|l| if l.trim_start().starts_with("//") { "\n" } else { l }).collect::<Vec<_>>().join("\n");
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    let mut out = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        if code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let line = code[..at].matches('\n').count() + 1;
        let rest = &code[at + "crate::".len()..];
        match rest.strip_prefix('{') {
            Some(group) => {
                let (mut depth, mut item_start) = (0, true);
                for (i, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => item_start = true,
                        c if item_start && !c.is_whitespace() => {
                            out.push((ident(&group[i..]), line));
                            item_start = false;
                        }
                        _ => {}
                    }
                }
            }
            None => out.push((ident(rest), line)),
        }
    }
    out
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_import_goes_to_a_lower_layer() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let modules = modules(&lib);
    let layers = layers(&lib, &modules);
    let unplaced: Vec<_> = modules.iter().filter(|m| !layers.contains_key(*m)).collect();
    assert!(unplaced.is_empty(), "lib.rs's list of layers does not place {unplaced:?}");
    let reexports = reexports(&lib, &modules);
    let mut files = Vec::new();
    sources(&src(), &mut files);
    let mut upward = Vec::new();
    for file in files.iter().filter(|f| !f.ends_with("src/lib.rs")) {
        let rel = file.strip_prefix(src()).unwrap();
        let first = rel.components().next().unwrap().as_os_str().to_string_lossy();
        let own = first.trim_end_matches(".rs");
        let own_layer = layers[own];
        for (name, line) in crate_paths(&std::fs::read_to_string(file).unwrap()) {
            let target = match (layers.get(&name), reexports.get(&name)) {
                (Some(_), _) => Some(name.clone()),
                (None, Some(from)) => from.clone(),
                (None, None) => panic!("{}:{line}: crate::{name} is no module nor re-export", rel.display()),
            };
            match target {
                Some(t) if t != own && layers[&t] <= own_layer => upward.push(format!(
                    "{}:{line}: {own} (layer {own_layer}) imports {t} (layer {})",
                    rel.display(),
                    layers[&t]
                )),
                _ => {}
            }
        }
    }
    assert!(upward.is_empty(), "imports that do not go down:\n{}", upward.join("\n"));
}

/// The workspace's crates from the top, as docs/architecture.md orders them: the command
/// line and the benches over the facade; the facade and the C API over the runtime; the
/// runtime over codegen; codegen over the settings; the plugins, C of their own, last.
const CRATES: [&str; 9] = [
    "jitccl-cli",
    "jitccl-benches",
    "jitccl-capi",
    "jitccl",
    "jitccl-macros",
    "jitccl-runtime",
    "jitccl-codegen",
    "jitccl-settings",
    "jitccl-plugins",
];

/// A manifest's package name and the workspace crates its `[dependencies]` and
/// `[build-dependencies]` name (not its dev-dependencies: tests may use any crate).
fn manifest(text: &str) -> (String, Vec<String>) {
    let (mut name, mut deps, mut section) = (String::new(), Vec::new(), "");
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
            continue;
        }
        let key = line.split(['=', '.']).next().unwrap_or("").trim();
        if section == "[package]" && key == "name" {
            name = line.split('"').nth(1).unwrap_or("").to_string();
        } else if (section == "[dependencies]" || section == "[build-dependencies]") && CRATES.contains(&key) {
            deps.push(key.to_string());
        }
    }
    (name, deps)
}

#[test]
fn every_crate_depends_only_on_crates_below_it() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let root = std::fs::read_to_string(workspace.join("Cargo.toml")).unwrap();
    let members = root.lines().find_map(|l| l.strip_prefix("members = ")).expect("the workspace's members");
    let folders = std::iter::once("").chain(members.split('"').skip(1).step_by(2));
    let mut seen = BTreeSet::new();
    let mut upward = Vec::new();
    for folder in folders {
        let (name, deps) = manifest(&std::fs::read_to_string(workspace.join(folder).join("Cargo.toml")).unwrap());
        let at = CRATES.iter().position(|c| *c == name);
        let at = at.unwrap_or_else(|| panic!("{name} ({folder}/) is not placed in CRATES"));
        seen.insert(name.clone());
        for dep in deps {
            if CRATES.iter().position(|c| *c == dep).unwrap() <= at {
                upward.push(format!("{name} depends on {dep}, which is not below it"));
            }
        }
    }
    assert_eq!(seen.len(), CRATES.len(), "CRATES names crates the workspace lacks: {seen:?}");
    assert!(upward.is_empty(), "crates that depend upward:\n{}", upward.join("\n"));
}

#[test]
fn manifests_are_read_as_written() {
    let text = "[package]\nname = \"jitccl-x\"\n[dependencies]\njitccl-runtime.workspace = true\nclap = \"4\"\n\
                [dev-dependencies]\njitccl-cli = { path = \"..\" }\n[build-dependencies]\njitccl = { path = \".\" }";
    assert_eq!(manifest(text), ("jitccl-x".into(), vec!["jitccl-runtime".into(), "jitccl".into()]));
}

/// The traits `code` declares (`trait X`, after nothing but `pub(..)` and `unsafe`).
fn traits_declared(code: &str) -> Vec<String> {
    let declaration = |before: &str| before.split_whitespace().all(|w| w == "unsafe" || w.starts_with("pub"));
    code.lines()
        .filter_map(|l| l.split_once("trait ").filter(|(before, _)| declaration(before)).map(|(_, after)| after))
        .map(|after| after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>())
        .filter(|name| !name.is_empty())
        .collect()
}

/// The traits `code` implements (`impl<..> Trait for`, a path's last name), with their line.
fn traits_implemented(code: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for (i, line) in code.lines().enumerate() {
        let line = line.trim_start();
        let Some(rest) = line.strip_prefix("impl").or_else(|| line.strip_prefix("unsafe impl")) else { continue };
        let Some((head, _)) = rest.split_once(" for ") else { continue };
        // Past the generics: `impl<T: A> B for` names B.
        let head = match head.strip_prefix('<') {
            Some(g) => g.split_once("> ").map_or("", |(_, t)| t),
            None => head,
        };
        let name = head.trim().split('<').next().unwrap().rsplit("::").next().unwrap();
        out.push((name.to_string(), i + 1));
    }
    out
}

fn module_of(rel: &Path) -> String {
    rel.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string()
}

/// A trait of a lower layer implemented by a higher one is a call up: the lower layer
/// calls through it into code above it (as the stream once ran its launches through a
/// trait the communicator implemented). The implementations live at the trait's layer or
/// below it.
#[test]
fn no_lower_layer_calls_up_through_a_trait() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let layers = layers(&lib, &modules(&lib));
    let mut files = Vec::new();
    sources(&src(), &mut files);
    let files: Vec<_> = files
        .iter()
        .filter(|f| !f.ends_with("src/lib.rs"))
        .map(|f| (module_of(f.strip_prefix(src()).unwrap()), f, std::fs::read_to_string(f).unwrap()))
        .collect();
    let mut declared = BTreeMap::new();
    for (module, _, code) in &files {
        for name in traits_declared(code) {
            declared.insert(name, module.clone());
        }
    }
    let mut up = Vec::new();
    for (module, file, code) in &files {
        for (name, line) in traits_implemented(code) {
            match declared.get(&name) {
                Some(home) if home != module && layers[module] < layers[home] => up.push(format!(
                    "{}:{line}: {module} (layer {}) implements {home}'s trait {name} (layer {})",
                    file.strip_prefix(src()).unwrap().display(),
                    layers[module],
                    layers[home]
                )),
                _ => {}
            }
        }
    }
    assert!(up.is_empty(), "traits through which a lower layer calls up:\n{}", up.join("\n"));
}

#[test]
fn paths_and_layers_are_read_as_written() {
    let traits = "pub(crate) trait Owner: Send {\n// a trait Doc\nunsafe trait Raw {}\nlet s = \"a trait here\";";
    assert_eq!(traits_declared(traits), ["Owner", "Raw"]);
    let impls = "impl Owner for A {}\nimpl<T: Item> fmt::Display for S<T> {}\n    unsafe impl crate::x::Raw for B {}\nimpl A {}";
    let found: Vec<_> = traits_implemented(impls).into_iter().map(|(n, _)| n).collect();
    assert_eq!(found, ["Owner", "Display", "Raw"]);
    let code = "use crate::a::B;\n// crate::z::Doc\nuse crate::{\n    b::{C, D},\n    c,\n};\nlet x = crate::d::f(); jitccl_crate::e;";
    let found: Vec<_> = crate_paths(code).into_iter().map(|(n, _)| n).collect();
    assert_eq!(found, ["a", "b", "c", "d"]);
    let lib = "//! 1. `top`: above `low`;\n//!    `side`: beside it\n//! 2. `low`: (`top`'s)\n\nmod top;\nmod low;\nmod side;\npub use low::{Low as L, Other};\npub use ext::E;";
    let modules = modules(lib);
    let layers = layers(lib, &modules);
    assert_eq!(layers.into_iter().collect::<Vec<_>>(), [("low".into(), 2), ("side".into(), 1), ("top".into(), 1)]);
    let re = reexports(lib, &modules);
    assert_eq!(re["L"], Some("low".into()));
    assert_eq!(re["Other"], Some("low".into()));
    assert_eq!(re["E"], None);
}

/// One module layout style in the workspace: a module with submodules is a folder with a
/// `mod.rs`, never a file beside a folder of Rust files of the same name.
#[test]
fn no_module_file_sits_beside_its_folder() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut beside = Vec::new();
    let mut stack = vec![workspace.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() && !name.starts_with('.') && name != "target" {
                let holds_rust = std::fs::read_dir(&path)
                    .unwrap()
                    .flatten()
                    .any(|e| e.path().extension().is_some_and(|x| x == "rs"));
                if holds_rust && path.with_extension("rs").is_file() {
                    beside.push(path.with_extension("rs").strip_prefix(workspace).unwrap().display().to_string());
                }
                stack.push(path);
            }
        }
    }
    assert!(beside.is_empty(), "move these to <folder>/mod.rs (git mv): {beside:?}");
}

/// `docs/architecture.md` is the map of the code: every path it names (a back-quoted word
/// with a `/` in it) exists, read from the workspace's root or from the folder its section
/// speaks of (the runtime's modules, its targets, its transports, the templates, the plugins).
#[test]
fn every_path_the_architecture_page_names_exists() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let page = std::fs::read_to_string(workspace.join("docs/architecture.md")).unwrap();
    let bases = ["", "runtime/src", "runtime/src/device", "runtime/src/transport", "templates", "plugins", "cli/src"];
    let mut missing = Vec::new();
    for word in page.split('`').skip(1).step_by(2) {
        // Paths only: not commands, placeholders (`<coll>`) or the machine's own (`/sys`).
        if !word.contains('/') || word.contains(' ') || word.contains('<') || word.starts_with('/') {
            continue;
        }
        for path in expand(word) {
            let found = bases.iter().any(|base| matches(&workspace.join(base), &path));
            if !found {
                missing.push(path);
            }
        }
    }
    assert!(missing.is_empty(), "docs/architecture.md names paths that do not exist: {missing:?}");
}

/// `prims/{host,cuda}/` as the paths it stands for.
fn expand(word: &str) -> Vec<String> {
    match (word.find('{'), word.find('}')) {
        (Some(open), Some(close)) if open < close => word[open + 1..close]
            .split(',')
            .flat_map(|choice| expand(&format!("{}{choice}{}", &word[..open], &word[close + 1..])))
            .collect(),
        _ => vec![word.to_string()],
    }
}

/// Whether `path` (its components may hold `*`, and `net/wire` may leave out `.rs`) names
/// something under `base`.
fn matches(base: &Path, path: &str) -> bool {
    let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let mut here = vec![base.to_path_buf()];
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        here = here
            .iter()
            .flat_map(|dir| std::fs::read_dir(dir).into_iter().flatten().flatten())
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let stem = name.strip_suffix(".rs").filter(|_| last).unwrap_or(&name);
                glob(part, &name) || glob(part, stem)
            })
            .map(|e| e.path())
            .collect();
    }
    !here.is_empty()
}

/// `*` for any run of characters; nothing else is special.
fn glob(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, rest)) => {
            name.starts_with(head) && (0..=name.len() - head.len()).any(|i| glob(rest, &name[head.len() + i..]))
        }
    }
}

#[test]
fn architecture_paths_are_read_as_written() {
    assert_eq!(expand("prims/{host,cuda}/"), ["prims/host/", "prims/cuda/"]);
    assert!(glob("*_direct*.h", "all_reduce_direct_two.h") && !glob("*_direct*.h", "all_reduce_ring.h"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert!(matches(root, "src/lib.rs") && matches(root, "src/config/") && !matches(root, "src/nothing.rs"));
}

/// Every module path `code` names through `crate::`, `super::` or `self::` (a group
/// `crate::{a::X, b::{c, D}}` giving each of its paths), as segments relative to the crate
/// root, with its line; `module` is the path of the file's own module.
fn module_refs(code: &str, module: &[String]) -> Vec<(Vec<String>, usize)> {
    let code: String =
        code.lines().map(|l| if l.trim_start().starts_with("//") { "" } else { l }).collect::<Vec<_>>().join("\n");
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    // The paths of a `use`-like tail: `a::b::C`, `a::{b, c::D}`, ...
    fn tails(rest: &str, out: &mut Vec<Vec<String>>, prefix: Vec<String>) {
        let mut path = prefix;
        let mut s = rest;
        loop {
            let name: String = s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if name.is_empty() {
                if let Some(group) = s.strip_prefix('{') {
                    let (mut depth, mut start) = (0, 0);
                    for (i, c) in group.char_indices() {
                        match c {
                            '{' => depth += 1,
                            '}' if depth == 0 => {
                                tails(group[start..i].trim_start(), out, path.clone());
                                return;
                            }
                            '}' => depth -= 1,
                            ',' if depth == 0 => {
                                tails(group[start..i].trim_start(), out, path.clone());
                                start = i + 1;
                            }
                            _ => {}
                        }
                    }
                }
                out.push(path);
                return;
            }
            path.push(name.clone());
            match s[name.len()..].strip_prefix("::") {
                Some(next) => s = next,
                None => {
                    out.push(path);
                    return;
                }
            }
        }
    }
    let mut out = Vec::new();
    for (root, base) in [
        ("crate::", Vec::new()),
        ("super::", module[..module.len().saturating_sub(1)].to_vec()),
        ("self::", module.to_vec()),
    ] {
        for (at, _) in code.match_indices(root) {
            if code[..at].ends_with(is_ident) || code[..at].ends_with("::") {
                continue;
            }
            let line = code[..at].matches('\n').count() + 1;
            let mut found = Vec::new();
            tails(&code[at + root.len()..], &mut found, base.clone());
            out.extend(found.into_iter().map(|p| (p, line)));
        }
    }
    out
}

/// A module's path from the crate root.
type ModulePath = Vec<String>;

/// The module tree of the crate under `src`: each module's path, and each file's module.
fn module_tree(src: &Path) -> (BTreeSet<ModulePath>, Vec<(PathBuf, ModulePath)>) {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut modules = BTreeSet::new();
    let mut owned = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap();
        let mut path: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
        let last = path.pop().unwrap();
        if last != "mod.rs" && last != "lib.rs" && last != "main.rs" {
            path.push(last.trim_end_matches(".rs").to_string());
        }
        modules.insert(path.clone());
        owned.push((file, path));
    }
    (modules, owned)
}

/// The circles among the sibling modules of every folder of the crate under `src`: a file
/// of module `a` naming module `b` (or something in it), where `a` and `b` are children of
/// one module, is an edge `a -> b`; a child naming its ancestors, or a module its own
/// descendants, is not. Each circle as its members, with an edge of each for the message.
fn sibling_circles(src: &Path) -> Vec<String> {
    let (modules, files) = module_tree(src);
    // parent -> (child -> (child -> first place))
    let mut graphs: BTreeMap<Vec<String>, BTreeMap<String, BTreeMap<String, String>>> = BTreeMap::new();
    // Tests may reach anything beside what they test.
    let tests = |m: &[String]| m.iter().any(|s| s == "tests" || s.ends_with("_tests"));
    for (file, module) in files.iter().filter(|(_, m)| !tests(m)) {
        let code = std::fs::read_to_string(file).unwrap();
        for (path, line) in module_refs(&code, module) {
            // The deepest module the path names.
            let Some(target) = (0..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| modules.contains(p)) else {
                continue;
            };
            let common = module.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common == module.len() || common == target.len() {
                continue; // an ancestor or a descendant
            }
            let place = format!("{}:{line}", file.strip_prefix(src).unwrap().display());
            graphs
                .entry(module[..common].to_vec())
                .or_default()
                .entry(module[common].clone())
                .or_default()
                .entry(target[common].clone())
                .or_insert(place);
        }
    }
    let mut circles = Vec::new();
    for (parent, edges) in &graphs {
        // The strongly connected components, by reachability (a folder has few modules).
        let reaches = |from: &str| {
            let mut seen = BTreeSet::new();
            let mut stack = vec![from.to_string()];
            while let Some(n) = stack.pop() {
                for next in edges.get(&n).into_iter().flat_map(|e| e.keys()) {
                    if seen.insert(next.clone()) {
                        stack.push(next.clone());
                    }
                }
            }
            seen
        };
        let mut done = BTreeSet::new();
        for node in edges.keys() {
            if done.contains(node) {
                continue;
            }
            let from = reaches(node);
            let members: BTreeSet<String> =
                from.iter().filter(|m| *m == node || reaches(m).contains(node)).cloned().collect();
            if members.len() > 1 {
                let links: Vec<String> = members
                    .iter()
                    .flat_map(|a| {
                        edges[a]
                            .iter()
                            .filter(|(b, _)| members.contains(*b))
                            .map(move |(b, at)| format!("{a} -> {b} ({at})"))
                    })
                    .collect();
                circles.push(format!(
                    "in {}: {}",
                    if parent.is_empty() { "the crate root".into() } else { parent.join("::") },
                    links.join(", ")
                ));
            }
            done.extend(members);
        }
    }
    circles
}

#[test]
fn no_circle_among_the_modules_of_a_folder() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut circles = Vec::new();
    for krate in ["runtime/src", "capi/src", "codegen/src", "settings/src", "cli/src", "src"] {
        circles.extend(sibling_circles(&workspace.join(krate)).into_iter().map(|c| format!("{krate} {c}")));
    }
    assert!(circles.is_empty(), "modules that import each other, round a circle:\n{}", circles.join("\n"));
}

/// The circle finder on a crate of its own: siblings naming each other through `super::`
/// and `crate::` (in a group) make a circle; a child naming its parent's items, a parent
/// its child, and tests, do not.
#[test]
fn circles_are_found_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        ("lib.rs", "mod a;\nmod b;"),
        ("a/mod.rs", "mod x;\nmod y;\nmod tests;\nuse x::X;\npub struct P;"),
        ("a/x.rs", "use super::y::Y;\nuse super::P;\npub struct X;"),
        ("a/y.rs", "use crate::{a::{x::X, P}, b};\npub struct Y;"),
        ("a/tests.rs", "use super::x::X;"),
        ("b.rs", "// crate::a::x::X in a comment\npub struct B;"),
    ];
    for (path, code) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, code).unwrap();
    }
    let circles = sibling_circles(dir.path());
    assert_eq!(circles, ["in a: x -> y (a/x.rs:1), y -> x (a/y.rs:1)"], "{circles:?}");
    let refs: Vec<_> = module_refs("use super::{p::Q, r};\nlet v = self::s::f();", &["m".into(), "n".into()])
        .into_iter()
        .map(|(p, l)| (p.join("::"), l))
        .collect();
    assert_eq!(refs, [("m::p::Q".into(), 1), ("m::r".into(), 1), ("m::n::s::f".into(), 2)]);
}
