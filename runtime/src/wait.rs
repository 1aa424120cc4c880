//! How every wait of the host side spends its time, in one place: busy-poll, yield the
//! core, then park (sleep) — and for how long each.
//!
//! Three kinds of thread wait:
//! - a **kernel** waiting on a peer (a FIFO step, an LL flag) polls `spin_budget` rounds
//!   with a pause instruction, then yields its core for `JC_RELAX_YIELDS` rounds, then
//!   sleeps `JC_RELAX_SLEEP_NS` per round (the host prelude's `jc_relax`, which gets the
//!   budget through the launch arguments and the rest as its constants). Every 256th
//!   round also checks abort, peer failure and the timeout, so the wait stays bounded
//!   whatever the policy. While the machine is busy with other work it skips the yields
//!   (below);
//! - a stream's **dispatcher** with nothing to run, and a **caller** waiting for queued
//!   launches to finish, `poll` for `POLL`: `POLL_SPINS` busy rounds, then yields; then
//!   they park on a condition variable until woken;
//! - a caller of `Stream::synchronize` whose launches the dispatcher has not started runs
//!   them itself (`stream::run`), so that a blocking collective is one thread's work, with
//!   no hand-off or wake-up between threads: its waits are the kernel's. While calls are
//!   blocking (each synchronize ran the one launch before it), a new launch does not wake
//!   the dispatcher; it dozes, waking after `DEFER` and then ever less often (up to
//!   `DEFER_MAX`) to take launches left unstarted across two wake-ups (so none waits longer
//!   than `DEFER_MAX` + `DEFER`);
//! - a caller that finds its stream's ring of launches full runs the queued launches itself
//!   likewise, where the rank is bound to one CPU that the caller and the dispatcher share:
//!   waiting there only hands that core back and forth. It runs them up to a launch index
//!   that is a multiple of the ring's size, so that ranks stop queuing to run at the same
//!   launch and none waits in a kernel while its peer queues. The dispatcher then dozes as
//!   above.
//!
//! Spinning wins when the thread waited for is running on another core: a hand-off then
//! costs a cache-line transfer instead of a system call and a wake-up. It loses when the
//! waited-for thread needs the very core the waiter spins on, which is the case when ranks
//! outnumber cores. So a rank that has cores of its own spins long and one that shares spins
//! briefly (`spin_budget`), or not at all where each round of its wait polls its sockets.
//! `JITCCL_SPIN` (`Config::spin`) sets the budget outright: 0 yields at once, for ranks
//! known to share their cores.
//!
//! Yielding hands the core to whatever else is runnable there. When that is a peer rank,
//! it runs until it waits in turn, microseconds. When it is another job (a busy loop, a
//! compiler), the yield can cost that job's whole time slice, milliseconds, and a ring,
//! whose ranks must run at the same time to move a step, then advances a step per slice,
//! losing far more to the load than MPI and oneCCL do. A sleeping waiter instead frees the core and, having slept, runs ahead of the busy
//! job as soon as it wakes. So a kernel times its yields: two that each kept it off the
//! core for over `JC_SLOW_YIELD_NS` (1 ms) within `JC_BUSY_SPELL_NS` (100 ms) start a spell
//! of that length in which its waits go from spinning straight to sleeping; after it,
//! yields are tried (and timed) again. The state is per compiled kernel, shared by its
//! threads. Beside a busy loop per core this keeps rings moving; without the load nothing
//! changes (docs/performance.md, "Host AllReduce beside OpenMPI and oneCCL", loaded).

use std::time::{Duration, Instant};

use crate::affinity::{self, CpuSet};

/// How soon a stream's dozing dispatcher first wakes by itself to look for launches that
/// their callers left queued (`stream::run`), and how soon it looks again at one it found.
pub(crate) const DEFER: Duration = Duration::from_micros(200);

/// The longest doze: while it finds nothing to take, a dozing dispatcher wakes ever less
/// often, up to this, so that blocking calls longer than `DEFER` are not each cut by its
/// wake-up on their core (a fixed `DEFER` cost such calls context switches), and so that
/// beside other jobs each wake-up, which can hand the core to them, is rare. A launch
/// nobody synchronizes starts within this plus `DEFER`.
pub(crate) const DEFER_MAX: Duration = Duration::from_micros(6400);

/// Wake-ups in a row that find its stream idle (nothing queued, nothing run by callers
/// since) after which a dozing dispatcher sleeps until woken: a process holding many
/// communicators (process groups, `perf --compare`'s setups) would otherwise have every
/// idle stream's thread wake thousands of times a second, and each wake-up takes a core
/// from a running rank.
pub(crate) const DOZES: u32 = 3;

/// Busy rounds of `poll` before it starts yielding.
const POLL_SPINS: u32 = 64;

/// How long an idle dispatcher, or a caller waiting for it, polls before it parks: a
/// launch or completion within this window is picked up without a futex round trip (a few
/// microseconds each).
pub(crate) const POLL: Duration = Duration::from_micros(20);

/// Polls `ready` until it gives a value or `end` passes: spinning first, for a hand-off
/// between two running threads, then yielding the core, for when they share one.
pub(crate) fn poll<T>(end: Instant, mut ready: impl FnMut() -> Option<T>) -> Option<T> {
    let mut polls = 0u32;
    loop {
        if let Some(v) = ready() {
            return Some(v);
        }
        if polls < POLL_SPINS {
            polls += 1;
            std::hint::spin_loop();
        } else if Instant::now() >= end {
            return None;
        } else {
            std::thread::yield_now();
        }
    }
}

/// Busy-poll rounds a kernel's wait makes before it starts yielding its core (each round
/// is a pause instruction, tens of nanoseconds): `set` if the
/// configuration sets it, else many for a rank with CPUs of its own, so that hand-offs
/// between two running ranks cost no system call, and few for ranks that share CPUs, by
/// their machine's rank count or because this process is running more kernels (of several
/// ranks) than it has CPUs, so that the peer they wait for gets to run; none for those if
/// the kernel `drives_network` (moves its rank's network traffic, sockets or a plugin's
/// requests, from its waits): each of its rounds then polls the network, a system call, so
/// that even a few rounds keep the peer off the core for far longer than the pauses they
/// stand for. Taken when a launch starts running.
pub(crate) fn spin_budget(set: Option<u64>, cpus: Option<&CpuSet>, drives_network: bool) -> u64 {
    match set {
        Some(n) => n,
        None if affinity::has_own_cpus(cpus) => 4096,
        None if drives_network => 0,
        None => 32,
    }
}
