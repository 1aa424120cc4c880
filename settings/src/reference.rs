//! The table as people read it: the reference page (`docs/settings.md`) and the current
//! value of each setting with where it came from (`jitccl env`).

use std::fmt::Write;

use super::{Initial, Kind, Ranks, Scope, Setting, ALL};

impl Kind {
    /// What a value must be, in words.
    pub fn describe(&self) -> String {
        match self {
            Kind::Whole { min, max } => format!("whole number, {min}..={max}"),
            Kind::Bytes { min, max } => format!("bytes (K/M/G suffixes), {min}..={max}"),
            Kind::Seconds => format!("seconds (fractions allowed), above 0, at most {:e}", super::parse::MAX_SECONDS),
            Kind::Flag => "0 or 1".into(),
            Kind::Choice(c) => format!("one of {}", c.join(", ")),
            Kind::Text => "text".into(),
            Kind::Path => "path".into(),
            Kind::Secret => "text, never shown".into(),
            Kind::Grammar(g) => format!("list, {g}"),
        }
    }
}

impl Initial {
    /// The default, in words.
    pub fn describe(&self) -> String {
        match self {
            Initial::Whole(n) => n.to_string(),
            Initial::Seconds(s) => format!("{s} s"),
            Initial::Flag(b) => u8::from(*b).to_string(),
            Initial::Text(t) => t.to_string(),
            Initial::Computed(d) => d.to_string(),
        }
    }
}

impl Ranks {
    /// Whether ranks must agree, in words.
    pub fn describe(&self) -> &'static str {
        match self {
            Ranks::Agree => "must agree",
            Ranks::Own => "each its own",
            Ranks::RankZero => "rank 0's is used",
            Ranks::Process => "process-wide",
        }
    }
}

/// Where a setting's current value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Default,
    /// The setting's own variable.
    Var(&'static str),
    /// NCCL's name for it.
    Alias(&'static str),
}

/// A setting as this process sees it now.
#[derive(Debug, Clone)]
pub struct Current {
    pub setting: Setting,
    /// The value given, else the default in words.
    pub value: String,
    pub source: Source,
    /// Why the value given is refused, if it is.
    pub problem: Option<String>,
}

/// `settings` with their current values.
pub fn current<'a>(settings: impl IntoIterator<Item = &'a Setting>) -> Vec<Current> {
    settings
        .into_iter()
        .map(|s| match s.lookup_os() {
            None => Current { setting: *s, value: s.default.describe(), source: Source::Default, problem: None },
            Some((v, var)) => {
                let source = if var == s.name { Source::Var(var) } else { Source::Alias(var) };
                let problem = match v.to_str() {
                    Some(text) => s.check(text).err(),
                    None => Some("not valid UTF-8".into()),
                };
                let value = match s.kind {
                    Kind::Secret => "(set, not shown)".to_string(),
                    _ => v.to_string_lossy().trim().to_string(),
                };
                Current { setting: *s, value, source, problem }
            }
        })
        .collect()
}

/// `docs/settings.md`: the reference page, generated from the table.
pub fn markdown() -> String {
    let mut out = String::from(
        "# Settings\n\n\
         Generated from `settings/src/table.rs` by `jitccl env --markdown`; a test keeps the two equal.\n\
         Every variable is read under its `JITCCL_` name, else under NCCL's name where it has one (the\n\
         `JITCCL_` name wins). A `Config` field, where there is one, takes precedence over both. A bad\n\
         value is an error naming the variable and what it accepts; an empty one counts as unset.\n\
         `jitccl env` prints each setting's current value and where it came from (`--json` for programs;\n\
         the library gives the same through `jitcclSettingsJson` in `jitccl.h`, and Python as `jitccl.settings()`).\n\n\
         | variable | NCCL name | `Config` field | value | default | ranks | what |\n\
         |---|---|---|---|---|---|---|\n",
    );
    let code = |s: Option<&str>| s.map_or("—".to_string(), |s| format!("`{s}`"));
    for s in ALL.iter().filter(|s| s.scope == Scope::User) {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} | {} | {} |",
            s.name,
            code(s.nccl),
            code(s.field),
            s.kind.describe(),
            s.default.describe(),
            s.ranks.describe(),
            s.about
        );
    }
    out.push_str(
        "\n## For the test suite\n\n\
         Hooks the library reads only for tests, and variables of the test suite's own harness.\n\n\
         | variable | read by | what |\n|---|---|---|\n",
    );
    for s in ALL.iter().filter(|s| s.scope != Scope::User) {
        let by = if s.scope == Scope::Test { "the library" } else { "the tests" };
        let _ = writeln!(out, "| `{}` | {by} | {} |", s.name, s.about);
    }
    out
}

/// `rows` as a JSON array (`jitccl env --json`, `jitcclSettingsJson`): per setting its name,
/// NCCL's name, `Config` field, kind, default, ranks and scope in words, what it does, where
/// its value comes from (`"default"` or the variable read), whether it is `given`, the
/// `value` (the one given, else the default in words) and why the value is refused, if it is.
pub fn json(rows: &[Current]) -> String {
    let text = |s: &str| {
        let mut q = String::with_capacity(s.len() + 2);
        q.push('"');
        for c in s.chars() {
            match c {
                '"' => q.push_str("\\\""),
                '\\' => q.push_str("\\\\"),
                '\n' => q.push_str("\\n"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(q, "\\u{:04x}", c as u32);
                }
                c => q.push(c),
            }
        }
        q.push('"');
        q
    };
    let or_null = |s: Option<&str>| s.map_or("null".to_string(), text);
    let mut out = String::from("[");
    for (i, r) in rows.iter().enumerate() {
        let s = &r.setting;
        let scope = match s.scope {
            Scope::User => "user",
            Scope::Test => "test",
            Scope::Harness => "harness",
        };
        let source = match r.source {
            Source::Default => "default",
            Source::Var(v) | Source::Alias(v) => v,
        };
        let _ = write!(
            out,
            "{}\n{{\"name\":{},\"nccl\":{},\"field\":{},\"kind\":{},\"default\":{},\"ranks\":{},\"scope\":{},\
             \"about\":{},\"source\":{},\"given\":{},\"value\":{},\"problem\":{}}}",
            if i == 0 { "" } else { "," },
            text(s.name),
            or_null(s.nccl),
            or_null(s.field),
            text(&s.kind.describe()),
            text(&s.default.describe()),
            text(s.ranks.describe()),
            text(scope),
            text(s.about),
            text(source),
            r.source != Source::Default,
            text(&r.value),
            or_null(r.problem.as_deref()),
        );
    }
    out.push_str("\n]\n");
    out
}
