//! Several hosts on one machine: network namespaces joined through a bridge, for tests
//! (and benchmarks) of jitccl across hosts.
//!
//! `Hosts::new(h)` makes `h` namespaces ("hosts") and one more holding the bridge; each
//! host's veth is made inside it with its other end inside the bridge's namespace, so
//! nothing is ever added to the machine's own namespace, and nothing but these namespaces
//! carries the traffic. Host `i` has the address 198.18.0.`i+1` (198.18.0.0/15 is set
//! aside for network benchmarks) on its interface [`IFNAME`], and `lo` up. Hosts of one
//! instance see only each other, so instances running at once (tests in parallel, several
//! test binaries) share addresses and ports without meeting.
//!
//! It starts rank processes in torchrun's environment ([`Hosts::ranks`]), limits a host's
//! link rate (`tc` tbf), drops a share of its packets (nftables), cuts and restores its
//! link, and reads its byte counters. Everything it made goes when it drops, also on a
//! panic; namespaces left by a process that was killed are swept by the next instance.
//! Every child is waited on with a deadline and killed after it.
//!
//! Needs root, iproute2 and nftables (`scripts/setup.sh` installs them).

#![allow(dead_code)] // each test binary uses some

use std::io::Read;
use std::marker::PhantomData;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What every namespace of the harness is named from: `<PREFIX><pid>-<instance>-<role>`.
const PREFIX: &str = "jitccl-h";
/// Each host's interface toward the bridge (names are per namespace).
pub const IFNAME: &str = "net0";
/// The rendezvous port of [`Hosts::ranks`] (ports are per namespace too).
pub const MASTER_PORT: u16 = 29500;
/// Longest any setup command may take.
const COMMAND_LIMIT: Duration = Duration::from_secs(20);

/// A set of hosts joined by a bridge; removed on drop.
pub struct Hosts {
    /// The bridge's namespace, then each host's, as far as they were made.
    made: Vec<String>,
    bridge: String,
    hosts: Vec<String>,
}

/// A host's interface counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    pub rx_bytes: u64,
    pub tx_bytes: u64,
}

/// A command that dies with the thread that starts it: a test process that is killed
/// leaves no rank running on.
fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(program);
    // SAFETY: only an async-signal-safe call between fork and exec.
    unsafe {
        c.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    c
}

/// Runs `program args`, bounded by [`COMMAND_LIMIT`]; `Err` with its stderr if it fails.
fn run(program: &str, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    let what = || format!("{program} {}", args.join(" "));
    let mut child = command(program)
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e} (scripts/setup.sh installs iproute2 and nftables)", what()))?;
    if let Some(text) = stdin {
        use std::io::Write;
        // Dropped at the end of the statement: the program sees the end of its input.
        child.stdin.take().expect("piped").write_all(text.as_bytes()).map_err(|e| format!("{}: {e}", what()))?;
    }
    let out = Output::collect(child);
    let (code, stdout, stderr) = out.finish(Instant::now() + COMMAND_LIMIT);
    match code {
        Some(0) => Ok(stdout),
        Some(c) => Err(format!("{} exited with {c}: {}", what(), stderr.trim())),
        None => Err(format!("{} did not finish within {COMMAND_LIMIT:?}: {}", what(), stderr.trim())),
    }
}

fn ip(args: &[&str]) -> Result<String, String> {
    run("ip", args, None)
}

/// Removes the namespaces of the harness whose creating process is gone (a run that was
/// killed before it could clean up).
fn sweep_stale() {
    let Ok(dir) = std::fs::read_dir("/run/netns") else { return };
    for name in dir.filter_map(|e| e.ok()?.file_name().into_string().ok()) {
        let Some(pid) = name.strip_prefix(PREFIX).and_then(|r| r.split('-').next()) else { continue };
        if pid.parse::<u32>().is_ok() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "del", &name]);
        }
    }
}

impl Hosts {
    /// Makes `h` hosts joined through a bridge.
    pub fn new(h: usize) -> Result<Hosts, String> {
        assert!((1..=250).contains(&h), "{h} hosts: 1 to 250");
        sweep_stale();
        static INSTANCES: AtomicUsize = AtomicUsize::new(0);
        let tag = format!("{PREFIX}{}-{}", std::process::id(), INSTANCES.fetch_add(1, Ordering::Relaxed));
        let mut hosts = Hosts {
            made: Vec::new(),
            bridge: format!("{tag}-br"),
            hosts: (0..h).map(|i| format!("{tag}-{i}")).collect(),
        };
        // Each namespace is noted as soon as it exists: a failure half way removes it too.
        let br = hosts.bridge.clone();
        ip(&["netns", "add", &br])?;
        hosts.made.push(br.clone());
        ip(&["-n", &br, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &br, "link", "set", "br0", "up"])?;
        for i in 0..h {
            let ns = hosts.hosts[i].clone();
            ip(&["netns", "add", &ns])?;
            hosts.made.push(ns.clone());
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            let port = Self::port(i);
            ip(&["-n", &ns, "link", "add", IFNAME, "type", "veth", "peer", "name", &port, "netns", &br])?;
            ip(&["-n", &br, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &br, "link", "set", &port, "up"])?;
            ip(&["-n", &ns, "addr", "add", &format!("{}/24", Self::addr_of(i)), "dev", IFNAME])?;
            ip(&["-n", &ns, "link", "set", IFNAME, "up"])?;
        }
        hosts.wait_links_up()?;
        Ok(hosts)
    }

    /// Waits until every host's link reports itself up: the state turns up asynchronously
    /// (the kernel's link watch), and a program started before then finds no usable
    /// interface (libfabric's tcp provider offers none).
    fn wait_links_up(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        for ns in &self.hosts {
            while !ip(&["-n", ns, "-o", "link", "show", IFNAME])?.contains("state UP") {
                if Instant::now() > deadline {
                    return Err(format!("{ns}: {IFNAME} not up within 5 s"));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }

    /// Host `i`'s end of its link, in the bridge's namespace.
    fn port(i: usize) -> String {
        format!("p{i}")
    }

    fn addr_of(i: usize) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, 0, i as u8 + 1)
    }

    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// Host `i`'s address.
    pub fn addr(&self, i: usize) -> Ipv4Addr {
        assert!(i < self.hosts.len());
        Self::addr_of(i)
    }

    /// Host `i`'s namespace (for `ip netns exec`).
    pub fn namespace(&self, i: usize) -> &str {
        &self.hosts[i]
    }

    /// Every namespace this instance made.
    pub fn namespaces(&self) -> Vec<String> {
        self.made.clone()
    }

    /// Runs `f` on a thread inside host `i`'s network namespace: the sockets it makes
    /// belong to that host (and stay there when handed back).
    pub fn in_host<T: Send>(&self, i: usize, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.hosts[i]);
        std::thread::scope(|s| {
            s.spawn(|| {
                let ns = std::fs::File::open(&path).unwrap_or_else(|e| panic!("opening {path}: {e}"));
                // SAFETY: a plain system call on a descriptor we hold; it moves only this
                // thread, which ends with `f`.
                let r = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(r, 0, "entering {path}: {}", std::io::Error::last_os_error());
                f()
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }

    /// Limits host `i`'s link to `bits_per_s` each way (tbf on both ends); 0 lifts it.
    pub fn limit_rate(&self, i: usize, bits_per_s: u64) -> Result<(), String> {
        for (ns, dev) in [(&self.hosts[i], IFNAME.to_string()), (&self.bridge, Self::port(i))] {
            if bits_per_s == 0 {
                let _ = run("tc", &["-n", ns, "qdisc", "del", "dev", &dev, "root"], None);
                continue;
            }
            // A burst of at least one timer tick's worth of bytes, so the rate is reachable.
            let burst = (bits_per_s / 8 / 100).max(16 << 10);
            run(
                "tc",
                &[
                    "-n",
                    ns,
                    "qdisc",
                    "replace",
                    "dev",
                    &dev,
                    "root",
                    "tbf",
                    "rate",
                    &format!("{bits_per_s}bit"),
                    "burst",
                    &burst.to_string(),
                    "latency",
                    "100ms",
                ],
                None,
            )?;
        }
        Ok(())
    }

    /// The queueing disciplines on host `i`'s interface, as `tc qdisc show` says them.
    pub fn qdiscs(&self, i: usize) -> Result<String, String> {
        run("tc", &["-n", &self.hosts[i], "qdisc", "show", "dev", IFNAME], None)
    }

    /// Drops `percent` of the packets host `i` sends and receives, at random (nftables);
    /// 0 removes the rule.
    pub fn drop_share(&self, i: usize, percent: u32) -> Result<(), String> {
        assert!(percent <= 100, "{percent}%");
        // Declaring the table first makes its deletion succeed whether it existed or not.
        let mut rules = "table inet jitccl_loss {}\ndelete table inet jitccl_loss\n".to_string();
        if percent > 0 {
            // nftables compares within the range of the random number: all is a plain drop.
            let share = if percent < 100 { format!("numgen random mod 100 < {percent} ") } else { String::new() };
            rules += &format!(
                "table inet jitccl_loss {{\n\
                 chain in {{ type filter hook input priority 0; iifname \"{IFNAME}\" {share}drop; }}\n\
                 chain out {{ type filter hook output priority 0; oifname \"{IFNAME}\" {share}drop; }}\n\
                 }}\n"
            );
        }
        run("ip", &["netns", "exec", &self.hosts[i], "nft", "-f", "-"], Some(&rules)).map(drop)
    }

    /// Host `i`'s nftables rules, as `nft list ruleset` says them.
    pub fn rules(&self, i: usize) -> Result<String, String> {
        run("ip", &["netns", "exec", &self.hosts[i], "nft", "list", "ruleset"], None)
    }

    /// Cuts host `i`'s link at the bridge: what either side sends is lost, as with a cable
    /// pulled at the switch (the host's interface stays up, its connections open).
    pub fn cut(&self, i: usize) -> Result<(), String> {
        ip(&["-n", &self.bridge, "link", "set", &Self::port(i), "down"]).map(drop)
    }

    /// Restores a link [`Hosts::cut`] cut.
    pub fn restore(&self, i: usize) -> Result<(), String> {
        ip(&["-n", &self.bridge, "link", "set", &Self::port(i), "up"]).map(drop)
    }

    /// Host `i`'s interface counters.
    pub fn counters(&self, i: usize) -> Counters {
        let dev = self.in_host(i, || std::fs::read_to_string("/proc/thread-self/net/dev"));
        let dev = dev.unwrap_or_else(|e| panic!("reading host {i}'s counters: {e}"));
        let line = dev
            .lines()
            .find_map(|l| l.trim_start().strip_prefix(&format!("{IFNAME}:")))
            .unwrap_or_else(|| panic!("host {i} has no {IFNAME}:\n{dev}"));
        let f: Vec<u64> = line.split_whitespace().map(|x| x.parse().expect("a counter")).collect();
        Counters { rx_bytes: f[0], tx_bytes: f[8] }
    }

    /// Starts one process of `program args` per rank, rank `r` on host `placement[r]`, in
    /// torchrun's environment: MASTER_ADDR (rank 0's host) and MASTER_PORT, RANK,
    /// WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE (its host's ranks in rank order), and
    /// JITCCL_SOCKET_IFNAME pinned to the host's interface; then `env`.
    pub fn ranks(&self, placement: &[usize], program: &Path, args: &[&str], env: &[(&str, &str)]) -> Ranks<'_> {
        self.ranks_each(placement, program, args, |_| env.to_vec())
    }

    /// [`Hosts::ranks`], each rank `r` with the environment `env(r)`.
    pub fn ranks_each<'e>(
        &self, placement: &[usize], program: &Path, args: &[&str], env: impl Fn(usize) -> Vec<(&'e str, &'e str)>,
    ) -> Ranks<'_> {
        let world = placement.len();
        let started = Instant::now();
        let procs = placement
            .iter()
            .enumerate()
            .map(|(rank, &host)| {
                let local: Vec<usize> = (0..world).filter(|&r| placement[r] == host).collect();
                let child = command("ip")
                    .args(["netns", "exec", &self.hosts[host]])
                    .arg(program)
                    .args(args)
                    .env("MASTER_ADDR", self.addr(placement[0]).to_string())
                    .env("MASTER_PORT", MASTER_PORT.to_string())
                    .env("RANK", rank.to_string())
                    .env("WORLD_SIZE", world.to_string())
                    .env("LOCAL_RANK", local.iter().position(|&r| r == rank).expect("listed").to_string())
                    .env("LOCAL_WORLD_SIZE", local.len().to_string())
                    .env("JITCCL_SOCKET_IFNAME", format!("={IFNAME}"))
                    .envs(env(rank))
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap_or_else(|e| panic!("starting rank {rank} on host {host}: {e}"));
                Output::collect(child)
            })
            .collect();
        Ranks { procs, started, _hosts: PhantomData }
    }

    /// `h` hosts of `l` ranks each, ranks in host order (torchrun's placement).
    pub fn blocked(h: usize, l: usize) -> Vec<usize> {
        (0..h * l).map(|r| r / l).collect()
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        // Removing a namespace removes its interfaces, and so the links to it.
        for ns in self.made.drain(..).rev() {
            if let Err(e) = ip(&["netns", "del", &ns]) {
                eprintln!("hosts: could not remove namespace {ns}: {e}");
            }
        }
    }
}

/// A child whose output is read as it comes (a full pipe would stall it).
struct Output {
    child: Child,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
    ended: Option<(Option<i32>, Duration)>,
}

impl Output {
    fn collect(mut child: Child) -> Output {
        let (out, err) = (Arc::new(Mutex::new(String::new())), Arc::new(Mutex::new(String::new())));
        let reader = |mut pipe: Box<dyn Read + Send>, into: Arc<Mutex<String>>| {
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = pipe.read(&mut buf) {
                    into.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            })
        };
        let readers = vec![
            reader(Box::new(child.stdout.take().expect("piped")), out.clone()),
            reader(Box::new(child.stderr.take().expect("piped")), err.clone()),
        ];
        Output { child, out, err, readers, ended: None }
    }

    /// Whether it has exited (noting when, counted from `since`).
    fn poll(&mut self, since: Instant) -> bool {
        if self.ended.is_none() {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.ended = Some((status.code(), since.elapsed()));
            }
        }
        self.ended.is_some()
    }

    /// Waits until `limit`, kills it if it still runs; (exit code, None if killed or by a
    /// signal; stdout; stderr).
    fn finish(mut self, limit: Instant) -> (Option<i32>, String, String) {
        let since = Instant::now();
        while !self.poll(since) && Instant::now() < limit {
            std::thread::sleep(Duration::from_millis(10));
        }
        let code = self.ended.and_then(|(c, _)| c);
        self.stop();
        let (out, err) = (self.out.lock().unwrap().clone(), self.err.lock().unwrap().clone());
        (code, out, err)
    }

    fn stop(&mut self) {
        if self.ended.is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        // The pipes close with the process (it starts no children of its own).
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The rank processes of [`Hosts::ranks`]; killed when dropped, before their hosts go.
pub struct Ranks<'h> {
    procs: Vec<Output>,
    started: Instant,
    _hosts: PhantomData<&'h Hosts>,
}

/// How a rank process ended.
#[derive(Debug)]
pub struct RankEnd {
    pub rank: usize,
    /// Its exit code; None if it was killed at the deadline or died of a signal.
    pub code: Option<i32>,
    /// When it ended, from the start of the ranks; None if it was killed.
    pub after: Option<Duration>,
    pub stdout: String,
    pub stderr: String,
}

impl RankEnd {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

impl std::fmt::Display for RankEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rank {} (exit {:?} after {:?}):\n{}{}", self.rank, self.code, self.after, self.stdout, self.stderr)
    }
}

impl Ranks<'_> {
    /// Waits until `rank`'s output (stdout or stderr) contains `text`, or it exits, or
    /// `limit` passes; whether the text came.
    pub fn wait_for(&mut self, rank: usize, text: &str, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        loop {
            let p = &mut self.procs[rank];
            if p.out.lock().unwrap().contains(text) || p.err.lock().unwrap().contains(text) {
                return true;
            }
            if p.poll(self.started) || Instant::now() > end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The process id of `rank` (`ip netns exec` runs the program in its own place).
    pub fn pid(&self, rank: usize) -> u32 {
        self.procs[rank].child.id()
    }

    /// Time since the ranks were started (what [`RankEnd::after`] counts from).
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The ranks that have exited by now.
    pub fn exited(&mut self) -> Vec<usize> {
        let started = self.started;
        (0..self.procs.len()).filter(|&r| self.procs[r].poll(started)).collect()
    }

    /// Waits for every rank, up to `limit` from now, killing those still running then.
    pub fn finish(self, limit: Duration) -> Vec<RankEnd> {
        let end = Instant::now() + limit;
        let started = self.started;
        let mut procs = self.procs;
        // Note every exit as it happens, so that `after` says when each one ended.
        while Instant::now() < end && !procs.iter_mut().all(|p| p.poll(started)) {
            std::thread::sleep(Duration::from_millis(10));
        }
        procs
            .into_iter()
            .enumerate()
            .map(|(rank, p)| {
                let after = p.ended.map(|(_, t)| t);
                let (code, stdout, stderr) = p.finish(Instant::now());
                RankEnd { rank, code, after, stdout, stderr }
            })
            .collect()
    }
}
