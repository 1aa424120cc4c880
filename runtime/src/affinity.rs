//! Where a rank's kernel threads run. As NCCL binds its threads to the CPUs near their GPU,
//! on the host target each rank's stream and CTA threads are bound to their own share of
//! the CPUs: a rank spinning on its peer then never shares a core with that peer, and no
//! migration interrupts a wait. Off when the ranks of one machine outnumber its CPUs, when
//! the process was already bound by its launcher (taskset, mpirun), or with
//! JITCCL_IGNORE_CPU_AFFINITY=1.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A set of CPUs a rank's threads are bound to.
pub(crate) struct CpuSet {
    /// Unique per set made in this process (0 is no set).
    id: u64,
    cpus: Vec<usize>,
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
    if std::env::var("JITCCL_IGNORE_CPU_AFFINITY").is_ok_and(|v| v == "1") {
        tracing::info!("CPU binding off (JITCCL_IGNORE_CPU_AFFINITY=1)");
        return None;
    }
    let all = allowed()?;
    if all.len() < online() {
        tracing::info!("CPU binding off: this process is already bound to CPUs {all:?}");
        return None;
    }
    if local_nranks == 0 || local_nranks > all.len() {
        tracing::info!("CPU binding off: {local_nranks} ranks share {} CPUs", all.len());
        return None;
    }
    let per = all.len() / local_nranks;
    let cpus = all[local_rank * per..(local_rank + 1) * per].to_vec();
    // SAFETY: as in `allowed`; CPU_SET writes a bit below CPU_SETSIZE.
    let mut mask: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in &cpus {
        unsafe { libc::CPU_SET(c, &mut mask) };
    }
    tracing::info!("local rank {local_rank} of {local_nranks}: kernel threads bound to CPUs {cpus:?}");
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);
    Some(Arc::new(CpuSet { id: NEXT_ID.fetch_add(1, Ordering::Relaxed), cpus, mask }))
}

thread_local! {
    /// The set this thread was last bound to, so that a thread running one rank's
    /// kernels back to back binds once, not per launch.
    static BOUND: Cell<u64> = const { Cell::new(0) };
}

/// Binds the calling thread to `set` unless it already is. Failure is logged, not fatal:
/// binding only helps speed.
pub(crate) fn bind_current(set: &CpuSet) {
    if BOUND.get() == set.id {
        return;
    }
    // SAFETY: the pointer and size describe a valid cpu_set_t; 0 is the calling thread.
    if unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set.mask) } != 0 {
        tracing::warn!("binding a kernel thread to {set:?}: {}", std::io::Error::last_os_error());
    }
    BOUND.set(set.id);
}
