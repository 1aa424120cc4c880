//! `examples/process_group.rs` run as a program: it serves a store and starts 3 copies
//! of itself as ranks, each checking every result; all must print `rank R ok`.

use std::process::Command;

#[path = "common/example.rs"]
mod example;
#[path = "common/programs.rs"]
mod programs;

use example::example;

#[test]
fn the_process_group_example_passes_its_checks_on_3_processes() {
    // The example bounds its ranks' lifetime itself (it kills them past its limit).
    let out = Command::new(example("process_group")).arg("3").output().expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    for r in 0..3 {
        assert!(stdout.contains(&format!("rank {r} ok")), "{stdout}");
    }
}
