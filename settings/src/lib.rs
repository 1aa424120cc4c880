//! Every environment variable jitccl reads, declared once in [`ALL`]: its name, the NCCL
//! name read as its alias (the `JITCCL_` name wins), the `Config` field that overrides it,
//! its kind and bounds, its default and whether the ranks of a communicator must agree on
//! it. Readers go through [`Setting`]'s methods, so a value is parsed one way everywhere
//! and a bad one is an error naming the variable and what it accepts. `jitccl env` prints
//! the table with current values; `docs/settings.md` is generated from it.
//!
//! The bottom of the workspace: it depends on no other jitccl crate, so that every one
//! (codegen, the runtime, which re-exports it as `jitccl::settings`, the C API and the
//! command line) reads its variables here.

pub mod parse;
mod reference;
mod table;
#[cfg(test)]
mod tests;

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

pub use reference::{current, json, markdown, Current, Source};
pub use table::*;

/// One environment variable.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    pub name: &'static str,
    /// NCCL's name for the same setting, read when `name` is not set.
    pub nccl: Option<&'static str>,
    /// The `Config` field(s) that take precedence over the variable.
    pub field: Option<&'static str>,
    pub kind: Kind,
    pub default: Initial,
    pub ranks: Ranks,
    pub scope: Scope,
    /// What it does, one sentence or two (markdown).
    pub about: &'static str,
}

/// What a value must be.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// A whole number in `min..=max`.
    Whole { min: u64, max: u64 },
    /// A byte size (`4194304`, `4M`) in `min..=max`.
    Bytes { min: u64, max: u64 },
    /// A duration in seconds, more than 0 and at most [`parse::MAX_SECONDS`].
    Seconds,
    /// 0 or 1 (also true/false, yes/no, on/off).
    Flag,
    /// One of these names, case-insensitive.
    Choice(&'static [&'static str]),
    /// Free text.
    Text,
    /// A file or folder.
    Path,
    /// Text that is never shown (`jitccl env` and errors say only whether it is set).
    Secret,
    /// A list in the grammar described here, parsed by its reader.
    Grammar(&'static str),
}

/// The value when neither the variable nor its field is set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Initial {
    Whole(u64),
    Seconds(u64),
    Flag(bool),
    /// A literal value (a choice, a name).
    Text(&'static str),
    /// Unset, or computed: what happens then.
    Computed(&'static str),
}

/// Whether the ranks of one communicator must agree on a setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranks {
    /// Part of the configuration every rank checks at init.
    Agree,
    /// Each rank may set its own.
    Own,
    /// Only rank 0's counts: it is handed to every rank.
    RankZero,
    /// Process-wide, not part of a communicator's configuration.
    Process,
}

/// Who the setting is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    User,
    /// A hook of the test suite read by the library (fault injection, strict checks).
    Test,
    /// Read by the test suite's own harness only.
    Harness,
}

/// A value a setting refused, naming the variable (or `Config` field) and what it accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SettingError {
    /// The variable that was read (the alias, if that was it) or, for a field, the setting's.
    pub var: &'static str,
    /// The setting's own (`JITCCL_`) name.
    pub setting: &'static str,
    /// The `Config` field, when the value came from it.
    pub field: Option<&'static str>,
    /// The value, as given (`None`: not valid UTF-8).
    pub value: Option<String>,
    pub problem: String,
}

impl fmt::Display for SettingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value = self.value.as_deref().map_or(String::new(), |v| format!("='{v}'"));
        match self.field {
            Some(field) => write!(f, "Config.{field} ({}){value}", self.setting)?,
            None if self.var != self.setting => write!(f, "{}{value} (read as {})", self.var, self.setting)?,
            None => write!(f, "{}{value}", self.var)?,
        }
        write!(f, ": {}", self.problem)
    }
}

/// A whole-number field type.
pub trait Whole: Copy + fmt::Display {
    fn wide(self) -> u64;
    fn narrow(v: u64) -> Self;
}

impl Whole for u64 {
    fn wide(self) -> u64 {
        self
    }
    fn narrow(v: u64) -> Self {
        v
    }
}

impl Whole for usize {
    fn wide(self) -> u64 {
        self as u64
    }
    fn narrow(v: u64) -> Self {
        // Bounds of whole settings are far below usize::MAX on every supported target.
        usize::try_from(v).unwrap_or(usize::MAX)
    }
}

impl Setting {
    /// The names the setting is read under: its own, then NCCL's.
    pub fn names(&self) -> impl Iterator<Item = &'static str> {
        [Some(self.name), self.nccl].into_iter().flatten()
    }

    /// The variable's raw value and the name it was read from: this setting's name, else
    /// NCCL's. An empty or blank value counts as unset.
    pub fn lookup_os(&self) -> Option<(OsString, &'static str)> {
        self.names()
            .find_map(|n| std::env::var_os(n).filter(|v| !v.to_string_lossy().trim().is_empty()).map(|v| (v, n)))
    }

    /// The raw value under the first of [`names`](Self::names) that is set, empty included:
    /// for a setting where set but empty means something (`JITCCL_CACHE_DIR`: no disk cache).
    pub fn given_os(&self) -> Option<OsString> {
        self.names().find_map(std::env::var_os)
    }

    /// [`lookup_os`](Self::lookup_os) as text, trimmed; not valid UTF-8 is an error.
    pub fn lookup(&self) -> Result<Option<(String, &'static str)>, SettingError> {
        match self.lookup_os() {
            None => Ok(None),
            Some((v, var)) => match v.into_string() {
                Ok(s) => Ok(Some((s.trim().to_string(), var))),
                Err(_) => Err(self.refuse(var, None, "not valid UTF-8".into())),
            },
        }
    }

    /// The value as text, if set.
    pub fn text(&self) -> Result<Option<String>, SettingError> {
        Ok(self.lookup()?.map(|(v, _)| v))
    }

    /// The value as a path, if set.
    pub fn path(&self) -> Option<PathBuf> {
        self.lookup_os().map(|(v, _)| v.into())
    }

    /// The value parsed by `parse`, if set; its error is the problem reported.
    pub fn parse_with<T>(&self, parse: impl FnOnce(&str) -> Result<T, String>) -> Result<Option<T>, SettingError> {
        let Some((v, var)) = self.lookup()? else { return Ok(None) };
        let shown = (self.kind != Kind::Secret).then(|| v.clone());
        parse(&v).map(Some).map_err(|problem| self.refuse(var, shown, problem))
    }

    /// Checks a raw value against the kind (for a grammar, only that it is text).
    pub fn check(&self, v: &str) -> Result<(), String> {
        match self.kind {
            Kind::Whole { min, max } => parse::whole(v, min, max).map(drop),
            Kind::Bytes { min, max } => parse::bytes_within(v, min, max).map(drop),
            Kind::Seconds => parse::seconds(v).map(drop),
            Kind::Flag => parse::flag(v).map(drop),
            Kind::Choice(c) => parse::choice(v, c).map(drop),
            Kind::Text | Kind::Path | Kind::Secret | Kind::Grammar(_) => Ok(()),
        }
    }

    /// A whole number (or byte size): `field` if set (within bounds), else the variable,
    /// else the default.
    pub fn whole<T: Whole>(&self, field: Option<T>) -> Result<T, SettingError> {
        self.whole_opt(field)?.ok_or_else(|| self.misread("a number with a default"))
    }

    /// [`whole`](Self::whole) for a setting whose default the caller computes (`None`).
    pub fn whole_opt<T: Whole>(&self, field: Option<T>) -> Result<Option<T>, SettingError> {
        let (min, max, bytes) = match self.kind {
            Kind::Whole { min, max } => (min, max, false),
            Kind::Bytes { min, max } => (min, max, true),
            _ => return Err(self.misread("a number")),
        };
        if let Some(n) = field {
            if !(min..=max).contains(&n.wide()) {
                return Err(self.refuse_field(n, format!("expected {min}..={max}")));
            }
            return Ok(Some(n));
        }
        let n =
            self.parse_with(|v| if bytes { parse::bytes_within(v, min, max) } else { parse::whole(v, min, max) })?;
        Ok(n.or(match self.default {
            Initial::Whole(d) => Some(d),
            _ => None,
        })
        .map(T::narrow))
    }

    /// A duration: `field` if set (within bounds), else the variable, else the default.
    pub fn seconds(&self, field: Option<Duration>) -> Result<Duration, SettingError> {
        if let Some(d) = field {
            return parse::seconds_in_range(d).map_err(|p| self.refuse_field(format!("{d:?}"), p));
        }
        Ok(self.parse_with(parse::seconds)?.unwrap_or(self.default_duration()))
    }

    /// The default of a duration setting.
    pub const fn default_duration(&self) -> Duration {
        match self.default {
            Initial::Seconds(s) => Duration::from_secs(s),
            _ => panic!("not a duration setting"),
        }
    }

    /// A flag: `field` if set, else the variable, else the default.
    pub fn flag(&self, field: Option<bool>) -> Result<bool, SettingError> {
        self.flag_opt(field)?.ok_or_else(|| self.misread("a flag with a default"))
    }

    /// [`flag`](Self::flag) for a setting whose default the caller computes (`None`).
    pub fn flag_opt(&self, field: Option<bool>) -> Result<Option<bool>, SettingError> {
        if field.is_some() {
            return Ok(field);
        }
        let default = match (self.kind, self.default) {
            (Kind::Flag, Initial::Flag(b)) => Some(b),
            (Kind::Flag, Initial::Computed(_)) => None,
            _ => return Err(self.misread("a flag")),
        };
        Ok(self.parse_with(parse::flag)?.or(default))
    }

    /// A flag read where a bad value cannot be returned to the caller: it is logged, and
    /// the default holds.
    pub fn flag_or_warn(&self) -> bool {
        self.flag(None).unwrap_or_else(|e| {
            tracing::warn!("{e}; using the default");
            matches!(self.default, Initial::Flag(true))
        })
    }

    /// A choice: `field` if set, else the variable, else the default, as the table spells it.
    pub fn choice(&self, field: Option<&str>) -> Result<&'static str, SettingError> {
        let Kind::Choice(choices) = self.kind else { return Err(self.misread("a choice")) };
        if let Some(v) = field {
            return parse::choice(v, choices).map_err(|p| self.refuse_field(v, p));
        }
        match (self.parse_with(|v| parse::choice(v, choices))?, self.default) {
            (Some(c), _) => Ok(c),
            (None, Initial::Text(d)) => Ok(d),
            (None, _) => Err(self.misread("a choice with a default")),
        }
    }

    fn refuse(&self, var: &'static str, value: Option<String>, problem: String) -> SettingError {
        SettingError { var, setting: self.name, field: None, value, problem }
    }

    fn refuse_field(&self, value: impl fmt::Display, problem: String) -> SettingError {
        SettingError { var: self.name, setting: self.name, field: self.field, value: Some(value.to_string()), problem }
    }

    /// A reader that does not fit the table's kind: a bug, reported rather than panicking.
    fn misread(&self, what: &str) -> SettingError {
        self.refuse(self.name, None, format!("internal: read as {what}, but declared {:?}", self.kind))
    }
}
