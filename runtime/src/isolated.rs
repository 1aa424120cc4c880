//! Unit tests whose code under test reads the process's environment itself (a C plugin's
//! own `getenv`): the test's body runs in a child process of this test binary, alone, with
//! the variables set on the child. Setting them here instead would race every other
//! thread's reads of the environment (undefined behaviour in glibc).

use std::io::Read;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::settings;

/// A child runs one test of seconds; past this it is hung.
const LIMIT: Duration = Duration::from_secs(180);

/// Runs `body` as the test `name` of the module `module` (its `module_path!()`): in this
/// process when it is that test's child, else in a child with `vars` set (`None`: removed),
/// failing with the child's output if the child fails, does not run the test, or outlives
/// [`LIMIT`].
pub(crate) fn run(module: &str, name: &str, vars: &[(&str, Option<&str>)], body: impl FnOnce()) {
    // The test's path in this binary, without the crate's name.
    let test = format!("{}::{name}", module.split_once("::").map_or(module, |(_, m)| m));
    if settings::ISOLATED_TEST.given_os().is_some_and(|t| t == test.as_str()) {
        body();
        return;
    }
    let mut cmd = Command::new(std::env::current_exe().expect("the test binary's path"));
    cmd.args(["--exact", &test, "--nocapture", "--test-threads=1"])
        .env(settings::ISOLATED_TEST.name, &test)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (var, value) in vars {
        match value {
            Some(v) => cmd.env(var, v),
            None => cmd.env_remove(var),
        };
    }
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{test}: starting its child process: {e}"));
    // Read while the child runs, so that a full pipe cannot stall it.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_string(&mut text);
            }
            text
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let end = Instant::now() + LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child's status") {
            break Some(status);
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(10));
    };
    let (out, err) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
    match status {
        None => panic!("{test}: its child process did not end within {LIMIT:?}:\n{out}\n{err}"),
        Some(s) if !s.success() => panic!("{test}: its child process failed ({s}):\n{out}\n{err}"),
        // A name that matches no test would pass without running anything.
        Some(_) => {
            assert!(out.contains("test result: ok. 1 passed"), "{test}: its child ran no such test:\n{out}\n{err}")
        }
    }
}
