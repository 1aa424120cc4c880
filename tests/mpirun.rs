//! `Comm::init_from_env` under a real Open MPI `mpirun`: the ranks take their rank and size
//! from OMPI_COMM_WORLD_* and meet at the JITCCL_COMM_ID passed with `-x`. The program is
//! `examples/mpi_allreduce.rs`. mpirun is a test requirement (scripts/setup.sh installs
//! it), so its absence fails the test rather than skipping it.

use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "common/example.rs"]
mod example;
#[path = "common/programs.rs"]
mod programs;

use example::example;

const NRANKS: usize = 3;
/// mpirun is killed after this long: a hung rendezvous must not hang the suite.
const LIMIT: Duration = Duration::from_secs(60);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("bind a free port").port()
}

#[test]
fn mpirun_runs_an_all_reduce() {
    let version = match Command::new("mpirun").arg("--version").output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or_default().to_string(),
        Err(e) => panic!("mpirun cannot be run ({e}): install Open MPI (scripts/setup.sh installs openmpi-bin)"),
    };
    let exe = example("mpi_allreduce");
    let dir = tempfile::tempdir().expect("temporary directory");
    // Files, not pipes: a rank left behind by a killed mpirun cannot block reading them.
    let (out_path, err_path) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let comm_id = format!("JITCCL_COMM_ID=127.0.0.1:{}", free_port());
    let n = NRANKS.to_string();
    let mut child = Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-np", &n, "-x", &comm_id])
        // Ranks give up well before LIMIT if the rendezvous fails.
        .args(["-x", "JITCCL_BOOTSTRAP_TIMEOUT=30"])
        .arg(&exe)
        .stdin(Stdio::null())
        .stdout(File::create(&out_path).expect("stdout file"))
        .stderr(File::create(&err_path).expect("stderr file"))
        .spawn()
        .expect("start mpirun");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for mpirun") {
            break Some(status);
        }
        if start.elapsed() > LIMIT {
            // SIGTERM first: mpirun passes it on to the ranks; SIGKILL would orphan them.
            // SAFETY: kill(2) on the pid of our own child, which has not been reaped.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            std::thread::sleep(Duration::from_secs(5));
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let (stdout, stderr) = (read(&out_path), read(&err_path));
    let report = format!("{version}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    let Some(status) = status else { panic!("mpirun ran past {LIMIT:?} and was killed; {report}") };
    assert!(status.success(), "mpirun failed ({status}); {report}");
    for r in 0..NRANKS {
        assert!(stdout.lines().any(|l| l.trim() == format!("rank {r} ok")), "rank {r} did not print ok; {report}");
    }
}
