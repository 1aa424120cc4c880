//! Writes the kernel template with its algorithm chosen among the files of
//! `templates/algo/`: `templates/kernel.c` holds a comment where the choice goes, and this
//! puts an `{% if %}` chain over every `<collective>_<algorithm>.h` there in its place, so
//! that a new algorithm's file is included without editing the root template.
//!
//! Out: `$OUT_DIR/kernel_template.rs`, a `kernel_source!` call with the whole template as a
//! literal (askama takes a template's text only as a literal), and the list of the files.

use std::fmt::Write as _;
use std::path::Path;
use std::{env, fs};

/// The comment of `templates/kernel.c` that the chain replaces, from its first characters
/// to the end of the comment.
const PLACE: &str = "{# The algorithm, templates/algo/";

fn main() {
    let templates = Path::new(env!("CARGO_MANIFEST_DIR")).join("../templates");
    let root = templates.join("kernel.c");
    let algo = templates.join("algo");
    println!("cargo:rerun-if-changed={}", root.display());
    println!("cargo:rerun-if-changed={}", algo.display());

    let mut stems: Vec<String> = fs::read_dir(&algo)
        .unwrap_or_else(|e| panic!("reading {}: {e}", algo.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "h"))
        .map(|p| p.file_stem().and_then(|s| s.to_str()).expect("a file name in UTF-8").to_string())
        .collect();
    stems.sort();

    let mut chain = String::new();
    for (i, stem) in stems.iter().enumerate() {
        let keyword = if i == 0 { "if" } else { "else if" };
        write!(chain, "{{% {keyword} algo_file == \"{stem}\" %}}{{% include \"algo/{stem}.h\" %}}").unwrap();
    }
    chain += "{% endif %}";

    let text = fs::read_to_string(&root).unwrap_or_else(|e| panic!("reading {}: {e}", root.display()));
    let start = text.find(PLACE).unwrap_or_else(|| panic!("{} has no comment starting {PLACE:?}", root.display()));
    let end = start + text[start..].find("#}").expect("the comment ends") + 2;
    // Askama drops a template file's final newline but keeps a literal's.
    let rest = text[end..].strip_suffix('\n').unwrap_or(&text[end..]);
    let template = format!("{}{chain}{rest}", &text[..start]);

    let mut out = format!("kernel_source!({template:?});\n");
    writeln!(out, "/// The files of `templates/algo/`, without `.h`.").unwrap();
    writeln!(out, "pub(crate) const ALGO_FILES: &[&str] = &{stems:?};").unwrap();
    let dest = Path::new(&env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("kernel_template.rs");
    fs::write(&dest, out).unwrap_or_else(|e| panic!("writing {}: {e}", dest.display()));
}
