//! Tests whose code reads the process's environment itself (these plugins' own `getenv`):
//! the test's body runs in a child process of its test binary, alone, with the variables
//! set on the child. Setting them in the test's process instead would race every other
//! thread's reads of the environment (undefined behaviour in glibc).

use std::io::Read;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Names the test a child process runs (`JITCCL_ISOLATED_TEST` of jitccl's settings table).
const MARKER: &str = "JITCCL_ISOLATED_TEST";

/// A child runs one test; past this, with room for a loaded machine, it is hung.
const LIMIT: Duration = Duration::from_secs(300);

/// Runs `body` as the test `name` of the module `module` (its `module_path!()`): in this
/// process when it is that test's child, else in a child with `vars` set (`None`: removed),
/// failing with the child's output if the child fails, does not run the test, or outlives
/// [`LIMIT`].
pub fn in_child(module: &str, name: &str, vars: &[(&str, Option<&str>)], body: impl FnOnce()) {
    // The test's path in its binary, without the crate's name.
    let test = match module.split_once("::") {
        Some((_, path)) => format!("{path}::{name}"),
        None => name.to_string(),
    };
    if std::env::var_os(MARKER).is_some_and(|t| t == test.as_str()) {
        body();
        return;
    }
    let mut cmd = Command::new(std::env::current_exe().expect("the test binary's path"));
    cmd.args(["--exact", &test, "--nocapture", "--test-threads=1"])
        .env(MARKER, &test)
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
