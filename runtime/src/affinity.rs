//! Where a rank's kernel threads run. As NCCL binds its threads to the CPUs near their GPU,
//! on the host target each rank's stream and CTA threads are bound to their own share of
//! the CPUs: a rank spinning on its peer then never shares a core with that peer, and no
//! migration interrupts a wait. When a machine's ranks outnumber its CPUs, rank r is bound
//! to CPU r mod n, so that the scheduler shares each CPU among a fixed few instead of
//! moving them around. Off when the process was already bound by its launcher (taskset,
//! mpirun), or with JITCCL_IGNORE_CPU_AFFINITY=1.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// A set of CPUs a rank's threads are bound to.
pub(crate) struct CpuSet {
    /// Unique per set made in this process (0 is no set).
    id: u64,
    cpus: Vec<usize>,
    /// No other rank of the machine is bound to these CPUs.
    exclusive: bool,
    mask: libc::cpu_set_t,
}

impl std::fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CPUs {:?}", self.cpus)
    }
}

/// The CPUs this process may run on, in order.
fn allowed() -> Option<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the call fills it for this thread.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer and size describe `set`.
    if unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return None;
    }
    // SAFETY: `set` is initialized; CPU_ISSET reads a bit below CPU_SETSIZE.
    Some((0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect())
}

fn online() -> usize {
    // SAFETY: sysconf has no memory effects.
    unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize
}

/// The CPUs of the `local_rank`-th of `local_nranks` ranks on this machine, or `None` when
/// its threads are better left to the scheduler (see the module comment).
pub(crate) fn for_local_rank(local_rank: usize, local_nranks: usize) -> Option<Arc<CpuSet>> {
    if crate::settings::IGNORE_CPU_AFFINITY.flag_or_warn() {
        tracing::info!("CPU binding off (JITCCL_IGNORE_CPU_AFFINITY=1)");
        return None;
    }
    let (cpus, exclusive) = match share(&allowed()?, online(), local_rank, local_nranks) {
        Ok(share) => share,
        Err(why) => {
            tracing::info!("CPU binding off: {why}");
            return None;
        }
    };
    tracing::info!(
        "local rank {local_rank} of {local_nranks}: kernel threads bound to CPUs {cpus:?}{}",
        if exclusive { "" } else { ", shared with other ranks" }
    );
    Some(Arc::new(CpuSet::new(cpus, exclusive)))
}

impl CpuSet {
    fn new(cpus: Vec<usize>, exclusive: bool) -> CpuSet {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        // SAFETY: as in `allowed`; CPU_SET writes a bit below CPU_SETSIZE.
        let mut mask: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &c in &cpus {
            unsafe { libc::CPU_SET(c, &mut mask) };
        }
        CpuSet { id: NEXT_ID.fetch_add(1, Ordering::Relaxed), cpus, exclusive, mask }
    }

    pub(crate) fn cpus(&self) -> &[usize] {
        &self.cpus
    }
}

/// A rank's equal, contiguous share of the process's CPUs `all` (of `online` on the
/// machine), and whether it has them to itself; or why it gets none.
fn share(all: &[usize], online: usize, local_rank: usize, local_nranks: usize) -> Result<(Vec<usize>, bool), String> {
    if all.len() < online {
        return Err(format!("this process is already bound to CPUs {all:?}"));
    }
    if local_rank >= local_nranks || all.is_empty() {
        return Err(format!("local rank {local_rank} of {local_nranks} on {} CPUs", all.len()));
    }
    if local_nranks > all.len() {
        return Ok((vec![all[local_rank % all.len()]], false));
    }
    let per = all.len() / local_nranks;
    Ok((all[local_rank * per..(local_rank + 1) * per].to_vec(), true))
}

/// Ranks of this process running a kernel now (see `Running`), counted only while more
/// ranks are alive than the process has CPUs (see `Live`).
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Ranks alive in this process (see `Live`).
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// The CPUs this process may run on.
fn process_cpus() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| allowed().map_or(1, |a| a.len()))
}

/// Counts one rank as alive in this process while it is held. A rank runs one kernel at a
/// time, so while no more ranks live than the process has CPUs, no more run kernels
/// either, and `Running` need not count them (an atomic read-modify-write pair per launch).
pub(crate) struct Live(());

impl Live {
    pub(crate) fn new() -> Live {
        LIVE.fetch_add(1, Ordering::Relaxed);
        Live(())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts one rank as running a kernel in this process while it is held, when it could
/// matter (see `Live`). Ranks that are merely alive do not compete for the CPUs: a process
/// may hold many communicators (a framework's process groups, `perf --compare`'s setups)
/// and run one at a time. A rank made while others run may find them uncounted until
/// their launches end: it spins where it should yield for that long, no longer.
pub(crate) struct Running(bool);

impl Running {
    pub(crate) fn new() -> Running {
        let counted = LIVE.load(Ordering::Relaxed) > process_cpus();
        if counted {
            RUNNING.fetch_add(1, Ordering::Relaxed);
        }
        Running(counted)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.0 {
            RUNNING.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Whether the calling thread runs on one of `set`'s CPUs now.
pub(crate) fn on_current_cpu(set: &CpuSet) -> bool {
    // A caller's thread that `bind_thread` bound to `set` runs there, so a blocking call
    // need not ask where (a vDSO call). Rebound since behind
    // jitccl's back, it would still be taken as there: that costs speed, never results.
    let t = THREAD.get();
    if !t.own && t.bound == set.id {
        return true;
    }
    // SAFETY: no arguments; glibc reads the CPU from rseq or the vDSO, without a system call.
    let cpu = unsafe { libc::sched_getcpu() };
    // SAFETY: CPU_ISSET reads a bit below CPU_SETSIZE, which the range check ensures.
    cpu >= 0 && (cpu as usize) < libc::CPU_SETSIZE as usize && unsafe { libc::CPU_ISSET(cpu as usize, &set.mask) }
}

/// Whether a rank bound to `cpus` has them to itself: no other rank of the machine is
/// bound there, and this process runs no more ranks (of all its communicators) than it has
/// CPUs.
pub(crate) fn has_own_cpus(cpus: Option<&CpuSet>) -> bool {
    cpus.is_some_and(|c| c.exclusive) && RUNNING.load(Ordering::Relaxed) <= process_cpus()
}

/// What a thread knows of its binding, in one thread-local (each access of one is a call in
/// a shared library such as the C API's, and every launch asks).
#[derive(Clone, Copy)]
struct Binding {
    /// The set this thread was last bound to, so that a thread running one rank's
    /// kernels back to back binds once, not per launch.
    bound: u64,
    /// The thread is one of jitccl's own (a stream's dispatcher or CTA worker).
    own: bool,
}

thread_local! {
    static THREAD: Cell<Binding> = const { Cell::new(Binding { bound: 0, own: false }) };
}

fn set_bound(id: u64) {
    THREAD.set(Binding { bound: id, ..THREAD.get() });
}

/// Marks the calling thread as jitccl's own, which `bind_current` may bind.
pub(crate) fn mark_kernel_thread() {
    THREAD.set(Binding { own: true, ..THREAD.get() });
}

/// Binds the calling thread to `set` unless it already is, or is not jitccl's own: a
/// caller's thread that runs a kernel inline (`Stream::synchronize`) keeps the binding its
/// owner chose. Failure is logged, not fatal: binding only helps speed.
#[inline]
pub(crate) fn bind_current(set: &CpuSet) {
    let t = THREAD.get();
    if t.bound != set.id && t.own {
        rebind(set);
    }
}

#[cold]
fn rebind(set: &CpuSet) {
    if let Err(e) = bind_thread(set) {
        tracing::warn!("binding a kernel thread to {set:?}: {e}");
        // Recorded all the same: one warning, not one per launch.
        set_bound(set.id);
    }
}

/// Binds the calling thread to `set`, whoever owns it.
pub(crate) fn bind_thread(set: &CpuSet) -> std::io::Result<()> {
    // SAFETY: the pointer and size describe a valid cpu_set_t; 0 is the calling thread.
    if unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set.mask) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    set_bound(set.id);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_get_disjoint_equal_shares() {
        let all: Vec<usize> = (0..8).collect();
        assert_eq!(share(&all, 8, 0, 1).unwrap(), (all.clone(), true));
        assert_eq!(share(&all, 8, 1, 2).unwrap(), (vec![4, 5, 6, 7], true));
        // 3 ranks on 8 CPUs: 2 each, the rest unused rather than shared.
        let shares: Vec<_> = (0..3).map(|r| share(&all, 8, r, 3).unwrap().0).collect();
        assert_eq!(shares, vec![vec![0, 1], vec![2, 3], vec![4, 5]]);
        // More ranks than CPUs: round robin, not exclusive.
        assert_eq!(share(&all, 8, 9, 12).unwrap(), (vec![1], false));
        assert!(share(&[2, 3], 8, 0, 1).unwrap_err().contains("already bound"));
    }

    #[test]
    fn binding_applies_to_jitccl_threads_only() {
        let all = allowed().expect("sched_getaffinity");
        let first = share(&all, all.len(), 0, all.len()).unwrap().0;
        let set = CpuSet::new(first.clone(), true);
        std::thread::spawn(move || {
            bind_current(&set);
            assert_eq!(allowed().unwrap(), all, "a thread not marked as jitccl's own stays unbound");
            mark_kernel_thread();
            bind_current(&set);
            assert_eq!(allowed().unwrap(), first);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_caller_bound_to_a_set_is_on_it_and_one_bound_elsewhere_is_not() {
        let all = allowed().expect("sched_getaffinity");
        let sets: Vec<CpuSet> = (0..all.len().min(2)).map(|r| CpuSet::new(vec![all[r]], true)).collect();
        std::thread::spawn(move || {
            for (i, set) in sets.iter().enumerate() {
                bind_thread(set).unwrap();
                assert!(on_current_cpu(set), "bound to {set:?}");
                // Another set of CPUs: asked where the thread runs, which is not there.
                let others: Vec<&CpuSet> = sets.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, s)| s).collect();
                others.iter().for_each(|o| assert!(!on_current_cpu(o), "bound to {set:?}, taken as on {o:?}"));
            }
        })
        .join()
        .unwrap();
    }
}
