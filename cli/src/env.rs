//! `jitccl env`: every setting with its current value and where the value comes from (its
//! default, its `JITCCL_` variable, or NCCL's name for it); `--json` prints the same as JSON
//! for programs (the Python package reads the library's copy, `jitcclSettingsJson`);
//! `--markdown` prints the reference page instead (`docs/settings.md`).

use std::process::ExitCode;

use jitccl::settings::{current, json, markdown, Scope, Source, ALL};

#[derive(clap::Args)]
pub(super) struct EnvArgs {
    /// Also list the test suite's variables.
    #[arg(long)]
    all: bool,
    /// Print the reference page of every setting (docs/settings.md) instead.
    #[arg(long, conflicts_with = "json")]
    markdown: bool,
    /// Print the settings as a JSON array (name, NCCL's name, field, kind, default, source,
    /// given, value, problem...), refused values included, and succeed.
    #[arg(long)]
    json: bool,
}

impl EnvArgs {
    /// Prints the settings; fails when a variable holds a value its setting refuses.
    pub(super) fn run(self) -> Result<ExitCode, String> {
        if self.markdown {
            print!("{}", markdown());
            return Ok(ExitCode::SUCCESS);
        }
        let rows = current(ALL.iter().filter(|s| self.all || s.scope == Scope::User));
        if self.json {
            print!("{}", json(&rows));
            return Ok(ExitCode::SUCCESS);
        }
        let width = rows.iter().map(|r| r.setting.name.len()).max().unwrap_or(0);
        let mut refused = Vec::new();
        for r in &rows {
            let source = match r.source {
                Source::Default => "default".to_string(),
                Source::Var(v) => v.to_string(),
                Source::Alias(v) => format!("{v} (NCCL's name)"),
            };
            // The defaults are written for the reference page's markdown.
            println!("{:width$}  {}  [{source}]", r.setting.name, r.value.replace('`', ""));
            if let Some(problem) = &r.problem {
                refused.push(format!("{}: {problem}", r.setting.name));
            }
        }
        match refused.is_empty() {
            true => Ok(ExitCode::SUCCESS),
            false => Err(format!("refused value(s): {}", refused.join("; "))),
        }
    }
}
