//! Local rank processes, shared by `jitccl launch` and `jitccl perf`: starts N copies of a
//! program the way torchrun does (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//! MASTER_ADDR, MASTER_PORT) and a fresh job secret (JITCCL_AUTH_KEY, unless the launcher's
//! environment names one), each in its own process group, and fails fast: when one exits
//! unsuccessfully (even while the others are still being started; unless the ranks are to
//! live on, [`OnFailure::KeepGoing`]), when the time runs out, or when the launcher gets
//! SIGINT, SIGTERM or SIGHUP, the ranks are terminated with their process groups. A rank also dies with the launcher (parent-death signal), so none is
//! left behind when the launcher itself is killed.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::master_port::{Reserved, MASTER_ADDR};

/// This program, to start copies of: its file as this process runs it, through
/// `/proc/self/exe` where there is one, so that a rebuild that replaces the file during a
/// long run (a tune, a perf sweep) does not take it from under the copies started later.
pub fn this_program() -> Result<std::path::PathBuf, String> {
    let own = std::path::Path::new("/proc/self/exe");
    if own.exists() {
        return Ok(own.to_path_buf());
    }
    std::env::current_exe().map_err(|e| format!("finding this program: {e}"))
}

/// How long a terminated rank gets to exit before it is killed.
const GRACE: Duration = Duration::from_secs(3);
/// How often the ranks are checked, while starting them too.
const POLL: Duration = Duration::from_millis(20);
/// The signals forwarded to the ranks.
const FORWARDED: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The most ranks one machine may start: max(1024, 4 × CPUs). More would only thrash (and
/// a typo such as `-n 100000` would exhaust the process table).
pub(super) fn max_local_ranks() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (4 * cpus).max(1024)
}

/// Value parser of a rank count (`-n`): 1 to [`max_local_ranks`].
pub(super) fn parse_nranks(s: &str) -> Result<usize, String> {
    check_nranks(s.trim().parse().map_err(|_| "expected a whole number of ranks".to_string())?)
}

fn check_nranks(n: usize) -> Result<usize, String> {
    let max = max_local_ranks();
    match n {
        0 => Err("the number of ranks must be at least 1".into()),
        n if n > max => Err(format!("at most {max} local ranks (max(1024, 4 x CPUs)) can be started")),
        n => Ok(n),
    }
}

/// Copies a child's stream to ours line by line, each line prefixed with the rank.
fn forward(rank: usize, stream: impl Read + Send + 'static, to_stderr: bool) -> JoinHandle<()> {
    std::thread::spawn(move || {
        // Lines as bytes: a rank's output need not be UTF-8, and a line it could not pass
        // would close its pipe (the rank then dies of SIGPIPE).
        let mut reader = BufReader::new(stream);
        let mut line = Vec::new();
        loop {
            // One write a line, prefix included: stdout and stderr may share a pipe.
            line.clear();
            line.extend_from_slice(format!("[{rank}] ").as_bytes());
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            let res = if to_stderr {
                std::io::stderr().lock().write_all(&line)
            } else {
                std::io::stdout().lock().write_all(&line)
            };
            if res.is_err() {
                break;
            }
        }
    })
}

/// The last forwarded signal the launcher received (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    RECEIVED.store(sig, Ordering::SeqCst);
}

/// Catches the forwarded signals, so that the launcher can pass them on to the ranks
/// instead of dying and leaving them running.
fn catch_signals() {
    for sig in FORWARDED {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(sig, &act, std::ptr::null_mut());
        }
    }
}

/// What a rank that fails does to the others.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum OnFailure {
    /// They are terminated: the job failed.
    Terminate,
    /// They run on (a job that shrinks past its dead ranks): the launcher waits for all.
    KeepGoing,
}

/// The exit code of a job run with [`OnFailure::KeepGoing`] in which some ranks failed and
/// every other one succeeded: the job lived on without them.
pub(super) const SURVIVED: u8 = 3;

/// Why the ranks stopped early.
enum Stop {
    Failed(String),
    Signal(i32),
}

/// The started ranks and the threads copying their output.
struct Ranks {
    on_failure: OnFailure,
    children: Vec<(usize, Child)>,
    pipes: Vec<JoinHandle<()>>,
    /// The ranks that failed, as their ends were seen (with [`OnFailure::KeepGoing`]).
    failed: Vec<(usize, String)>,
}

impl Ranks {
    /// Whether the ranks must stop: a rank has failed (unless they keep going) or a signal
    /// came; `running` counts those still running.
    fn check(&mut self, running: &mut usize) -> Option<Stop> {
        let sig = RECEIVED.load(Ordering::SeqCst);
        if sig != 0 {
            return Some(Stop::Signal(sig));
        }
        *running = 0;
        for (rank, c) in self.children.iter_mut() {
            let why = match c.try_wait() {
                Ok(None) => {
                    *running += 1;
                    continue;
                }
                Ok(Some(st)) if !st.success() => format!("rank {rank} exited with {st}"),
                Ok(Some(_)) => continue,
                Err(e) => format!("waiting for rank {rank}: {e}"),
            };
            if self.on_failure == OnFailure::Terminate {
                return Some(Stop::Failed(why));
            }
            if !self.failed.iter().any(|(r, _)| r == rank) {
                eprintln!("jitccl launch: {why}; the other ranks run on (--keep-going)");
                self.failed.push((*rank, why));
            }
        }
        None
    }

    /// Sends `sig` to every rank's process group (a rank's own children, such as the
    /// program a shell script started, would otherwise live on and hold its output open),
    /// then kills what is left after [`GRACE`].
    fn terminate(&mut self, sig: i32) {
        for (_, c) in self.children.iter() {
            // SAFETY: signalling the process group our child leads.
            unsafe { libc::kill(-(c.id() as i32), sig) };
        }
        let deadline = Instant::now() + GRACE;
        for (_, c) in self.children.iter_mut() {
            while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            // SAFETY: as above.
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
            let _ = c.wait();
        }
    }
}

/// The secret to give the ranks: a fresh one, unless the launcher's own environment has
/// JITCCL_AUTH_KEY or JITCCL_AUTH_KEY_FILE, which the ranks then inherit (set empty: the
/// job runs without a key).
fn job_secret() -> Result<Option<String>, String> {
    use jitccl::settings::{AUTH_KEY, AUTH_KEY_FILE};
    if [AUTH_KEY.name, AUTH_KEY_FILE.name].iter().any(|v| std::env::var_os(v).is_some()) {
        return Ok(None);
    }
    jitccl::auth::new_secret().map(Some).map_err(|e| e.to_string())
}

/// Starts one rank, with `secret` as its JITCCL_AUTH_KEY if given, and `master_fd` (the
/// reserved MASTER_PORT's socket) inherited. Must run on the main thread: the parent-death
/// signal fires when the *thread* that forked the child ends, and the main thread lives as
/// long as the launcher.
fn spawn(
    command: &[String], rank: usize, nproc: usize, port: u16, secret: Option<&str>, prefix_stdout: bool,
    master_fd: Option<RawFd>,
) -> std::io::Result<Child> {
    let (program, args) = command.split_first().expect("checked by the caller");
    let launcher = std::process::id() as i32;
    let mut cmd = Command::new(program);
    // An outer launcher's variables (this run inside an salloc or mpirun) would disagree
    // with the ones set here, and `init_from_env` would refuse them.
    for var in jitccl::launcher_vars() {
        cmd.env_remove(var);
    }
    cmd.args(args)
        .env("RANK", rank.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("WORLD_SIZE", nproc.to_string())
        .env("LOCAL_WORLD_SIZE", nproc.to_string())
        .env("MASTER_ADDR", MASTER_ADDR.to_string())
        .env("MASTER_PORT", port.to_string())
        .envs(secret.map(|s| (jitccl::settings::AUTH_KEY.name, s)))
        .envs(master_fd.map(|fd| (jitccl::settings::MASTER_FD.name, fd.to_string())))
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(if prefix_stdout { Stdio::piped() } else { Stdio::inherit() })
        .stderr(Stdio::piped());
    // SAFETY: prctl, fcntl, getppid and _exit are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(fd) = master_fd {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // The launcher may have died before the signal was armed.
            if libc::getppid() != launcher {
                libc::_exit(1);
            }
            Ok(())
        })
    };
    cmd.spawn()
}

/// Runs `command` as `nproc` local ranks and waits for them (see the module doc). With
/// `prefix_stdout` false, the ranks' standard output passes through unchanged (for
/// programs where only rank 0 prints, such as `jitccl perf`).
pub(super) fn run_ranks(
    nproc: usize, master_port: Option<u16>, command: &[String], timeout: Option<Duration>, prefix_stdout: bool,
    on_failure: OnFailure,
) -> Result<ExitCode, String> {
    check_nranks(nproc).map_err(|e| format!("-n {nproc}: {e}"))?;
    let program = command.first().ok_or("no program to launch")?;
    // A port the user names is theirs to keep free, as with torchrun.
    let (port, mut reserved) = match master_port {
        Some(port) => (port, None),
        None => {
            let reserved = Reserved::new()?;
            (reserved.port(), Some(reserved))
        }
    };
    let secret = job_secret()?;
    catch_signals();
    let mut ranks = Ranks { on_failure, children: Vec::new(), pipes: Vec::new(), failed: Vec::new() };
    let mut running = 0;
    let mut stop = None;
    let mut checked = Instant::now();
    for rank in 0..nproc {
        let master_fd = reserved.as_ref().filter(|_| rank == 0).map(Reserved::fd);
        let spawned = spawn(command, rank, nproc, port, secret.as_deref(), prefix_stdout, master_fd);
        // Rank 0 holds the port now: a copy left here would keep its store's socket open
        // after rank 0 died (the others' connections would queue instead of being refused).
        if rank == 0 {
            drop(reserved.take());
        }
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                ranks.terminate(libc::SIGTERM);
                return Err(format!("starting rank {rank} ('{program}'): {e}"));
            }
        };
        if let Some(out) = child.stdout.take() {
            ranks.pipes.push(forward(rank, out, false));
        }
        ranks.pipes.push(forward(rank, child.stderr.take().expect("piped"), true));
        ranks.children.push((rank, child));
        // Not after every start: checking is linear in the ranks started.
        if checked.elapsed() >= POLL {
            checked = Instant::now();
            stop = ranks.check(&mut running);
            if stop.is_some() {
                break;
            }
        }
    }
    let deadline = timeout.map(|t| Instant::now() + t);
    while stop.is_none() {
        stop = ranks.check(&mut running);
        if stop.is_none() && running == 0 {
            break;
        }
        if stop.is_none() && deadline.is_some_and(|d| Instant::now() > d) {
            stop = Some(Stop::Failed(format!("timed out after {:.0} s", timeout.unwrap_or_default().as_secs_f64())));
        }
        if stop.is_none() {
            std::thread::sleep(POLL);
        }
    }
    match &stop {
        Some(Stop::Failed(_)) => ranks.terminate(libc::SIGTERM),
        Some(Stop::Signal(sig)) => ranks.terminate(*sig),
        None => {}
    }
    for p in ranks.pipes {
        let _ = p.join();
    }
    match stop {
        None if ranks.failed.is_empty() => Ok(ExitCode::SUCCESS),
        None if ranks.failed.len() < nproc => {
            let failed: Vec<String> = ranks.failed.iter().map(|(r, _)| r.to_string()).collect();
            eprintln!("jitccl launch: rank(s) {} failed; every other rank succeeded", failed.join(", "));
            Ok(ExitCode::from(SURVIVED))
        }
        None => {
            eprintln!("jitccl launch: every rank failed");
            Ok(ExitCode::FAILURE)
        }
        Some(Stop::Failed(why)) => {
            eprintln!("jitccl launch: {why}; terminated the other ranks");
            Ok(ExitCode::FAILURE)
        }
        Some(Stop::Signal(sig)) => {
            eprintln!("jitccl launch: received signal {sig}; passed it on to the ranks and ended them");
            Ok(ExitCode::from(128 + sig as u8))
        }
    }
}
