//! Registered memory for the direct algorithms: per communicator rank, the regions whose
//! every rank's part this rank addresses (its own part's address range, the base of each
//! rank's part as mapped here), looked up by address at enqueue; and the flags areas the
//! direct kernels' barriers use. Regions are made collectively (`comm::registration`), in the
//! same order on every rank, so their ids agree across ranks; the kernels check the ids
//! each rank publishes, so a call whose ranks name different regions fails, never reads
//! the wrong memory.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

/// What keeps a peer's memory mapped here.
pub(crate) type Keep = Arc<dyn Send + Sync>;

/// One registered region.
pub(crate) struct Region {
    /// The same on every rank; never 0.
    pub id: u64,
    /// This rank's part, as this process addresses it.
    pub range: Range<usize>,
    /// Per rank, the base of its part as this process addresses it.
    pub bases: Box<[*mut u8]>,
    /// `bases` where this rank's kernels read them: the same on the host, a copy in device
    /// memory on a GPU (`on_device`).
    table: *const *mut u8,
    _keep: Vec<Keep>,
}

// SAFETY: the bases are addresses of memory `_keep` (or the peers' registrations) keep
// mapped; only kernels dereference them, synchronized by their barriers.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

impl Region {
    pub(crate) fn new(id: u64, range: Range<usize>, bases: Vec<*mut u8>, keep: Vec<Keep>) -> Region {
        let bases = bases.into_boxed_slice();
        Region { id, range, table: bases.as_ptr(), bases, _keep: keep }
    }

    /// This region with its kernels reading the bases from `table` (a copy that `keep`
    /// keeps), where they cannot read this process's memory.
    pub(crate) fn on_device(mut self, table: *const *mut u8, keep: Keep) -> Region {
        self.table = table;
        self._keep.push(keep);
        self
    }

    /// The bases as this rank's kernels address them.
    pub(crate) fn kernel_bases(&self) -> *const *mut u8 {
        self.table
    }

    /// Whether all of `bytes` lies in this region.
    pub(crate) fn holds(&self, bytes: &Range<usize>) -> bool {
        self.range.start <= bytes.start && bytes.end <= self.range.end
    }
}

/// Every rank's flags area as mapped here (see `templates/common/direct.h`).
pub(crate) struct Flags {
    /// Where this rank's kernels read the per-rank addresses of the areas (as `Region`'s
    /// table).
    table: *const *mut u64,
    _areas: Box<[*mut u64]>,
    _keep: Vec<Keep>,
}

// SAFETY: as for `Region`.
unsafe impl Send for Flags {}
unsafe impl Sync for Flags {}

impl Flags {
    /// `areas` (per rank, as mapped here) for kernels that read this process's memory, or,
    /// with `table`, for kernels that read that copy of them.
    pub(crate) fn new(areas: Vec<*mut u64>, table: Option<*const *mut u64>, keep: Vec<Keep>) -> Flags {
        let areas = areas.into_boxed_slice();
        Flags { table: table.unwrap_or(areas.as_ptr()), _areas: areas, _keep: keep }
    }

    /// What kernels take as `sym_flags`: every rank's area, as they address it.
    pub(crate) fn table(&self) -> *const *mut u64 {
        self.table
    }
}

/// The send and recv regions of a call that runs a direct algorithm (kept alive by its
/// launch).
pub(crate) struct Direct {
    pub send: Arc<Region>,
    pub recv: Arc<Region>,
    pub flags: *const *mut u64,
}

// SAFETY: `flags` points into the registry's flags, which live as long as the communicator
// the launch holds.
unsafe impl Send for Direct {}
unsafe impl Sync for Direct {}

/// One rank's registered regions, by start address.
pub(crate) struct Registry {
    flags: OnceLock<Flags>,
    regions: RwLock<BTreeMap<usize, Arc<Region>>>,
    /// Every rank's host arena (`device::host::Arena`), where plain buffers live: the
    /// region of any buffer no registration holds.
    arena: OnceLock<Arc<Region>>,
    /// Whether `regions` holds any: calls on plain buffers (the arena's, or none) skip its
    /// lock, an atomic read-modify-write pair on every call otherwise.
    registered: AtomicBool,
    /// Changes (under the write lock) whenever `regions` does, so that what a thread
    /// remembers of them (`Seen`) is known to be current.
    generation: AtomicU64,
    /// Its rank's id, unique in the process for good: what a thread remembers is only
    /// ever this registry's.
    uid: u64,
    next_id: AtomicU64,
}

/// The regions that held the last call's send and recv bytes, as a thread remembers them:
/// a loop's calls on the same registered buffers then find them without the lock (the
/// lock and two map lookups showed in a small call's profile).
#[derive(Clone, Copy)]
struct Seen {
    registry: u64,
    generation: u64,
    send: (usize, usize),
    recv: (usize, usize),
}

thread_local! {
    static SEEN: Cell<Option<Seen>> = const { Cell::new(None) };
}

impl Registry {
    /// The registry of the rank whose process-unique id is `uid` (`enqueue::Rank`).
    pub(crate) fn new(uid: u64) -> Registry {
        Registry {
            flags: OnceLock::new(),
            regions: RwLock::default(),
            arena: OnceLock::new(),
            registered: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            uid,
            next_id: AtomicU64::new(0),
        }
    }
}

impl Registry {
    /// The id of the next region (collective calls take them in the same order everywhere).
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn flags(&self) -> Option<&Flags> {
        self.flags.get()
    }

    pub(crate) fn set_flags(&self, f: Flags) {
        let _ = self.flags.set(f);
    }

    /// Sets the arena region (at init, on every rank or on none).
    pub(crate) fn set_arena(&self, region: Region) {
        let _ = self.arena.set(Arc::new(region));
    }

    /// The arena region, where every rank maps every rank's arena.
    pub(crate) fn arena(&self) -> Option<&Arc<Region>> {
        self.arena.get()
    }

    pub(crate) fn insert(&self, region: Region) {
        let mut m = self.regions.write().unwrap_or_else(|e| e.into_inner());
        m.insert(region.range.start, Arc::new(region));
        self.generation.fetch_add(1, Ordering::Release);
        self.registered.store(true, Ordering::Release);
    }

    /// Removes region `id` (its launches keep it alive until they have run).
    pub(crate) fn remove(&self, start: usize, id: u64) {
        let mut m = self.regions.write().unwrap_or_else(|e| e.into_inner());
        if m.get(&start).is_some_and(|r| r.id == id) {
            m.remove(&start);
            self.generation.fetch_add(1, Ordering::Release);
        }
        self.registered.store(!m.is_empty(), Ordering::Release);
    }

    /// The region holding all of `bytes`, if any: a registration's (`m`, when there are
    /// any), else the arena's. Borrowed: a call takes references only if it runs a direct
    /// algorithm.
    fn find<'a>(
        &'a self, m: Option<&'a BTreeMap<usize, Arc<Region>>>, bytes: &Range<usize>,
    ) -> Option<&'a Arc<Region>> {
        let registered = m.and_then(|m| m.range(..=bytes.start).next_back()).map(|(_, r)| r).filter(|r| r.holds(bytes));
        registered.or_else(|| self.arena.get().filter(|r| r.holds(bytes)))
    }

    /// `found` applied to the regions of a call's send and recv bytes, when both are
    /// registered (and the flags areas exist).
    fn with<R>(
        &self, send: &Range<usize>, recv: &Range<usize>, found: impl FnOnce(&Arc<Region>, &Arc<Region>, &Flags) -> R,
    ) -> Option<R> {
        let flags = self.flags.get()?;
        if !self.registered.load(Ordering::Acquire) {
            return Some(found(self.find(None, send)?, self.find(None, recv)?, flags));
        }
        let m = self.regions.read().unwrap_or_else(|e| e.into_inner());
        Some(found(self.find(Some(&m), send)?, self.find(Some(&m), recv)?, flags))
    }

    /// Whether a call's send and recv bytes are both registered: the direct algorithms
    /// are candidates. Without the lock when this thread's last call here found regions
    /// holding them and none has changed since.
    pub(crate) fn holds(&self, send: &Range<usize>, recv: &Range<usize>) -> bool {
        if !self.registered.load(Ordering::Acquire) {
            return self.with(send, recv, |_, _, _| ()).is_some();
        }
        let within = |r: (usize, usize), b: &Range<usize>| r.0 <= b.start && b.end <= r.1;
        let generation = self.generation.load(Ordering::Acquire);
        let seen = SEEN.get().filter(|s| s.registry == self.uid && s.generation == generation);
        if seen.is_some_and(|s| within(s.send, send) && within(s.recv, recv)) {
            return true;
        }
        let span = |r: &Region| (r.range.start, r.range.end);
        let found =
            self.with(send, recv, |s, r, _| Seen { registry: self.uid, generation, send: span(s), recv: span(r) });
        // Remembered only if nothing changed while it was looked up: the regions found then
        // are those of `generation`.
        if let Some(f) = found.filter(|_| self.generation.load(Ordering::Acquire) == generation) {
            SEEN.set(Some(f));
        }
        found.is_some()
    }

    /// The region holding all of `bytes`, if any (and the flags areas exist).
    pub(crate) fn region_of(&self, bytes: &Range<usize>) -> Option<Arc<Region>> {
        self.with(bytes, bytes, |r, _, _| r.clone())
    }

    /// Every region this rank has (the arena's first): where a peer's buffer may lie.
    pub(crate) fn regions(&self) -> Vec<Arc<Region>> {
        let m = self.regions.read().unwrap_or_else(|e| e.into_inner());
        self.arena.get().into_iter().chain(m.values()).cloned().collect()
    }

    /// The regions of a call's send and recv bytes when both are registered.
    pub(crate) fn direct(&self, send: &Range<usize>, recv: &Range<usize>) -> Option<Direct> {
        self.with(send, recv, |s, r, f| Direct { send: s.clone(), recv: r.clone(), flags: f.table })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ids of the regions `holds` and `direct` find for a call, checking they agree.
    fn ids(reg: &Registry, send: Range<usize>, recv: Range<usize>) -> Option<(u64, u64)> {
        let found = reg.direct(&send, &recv).map(|d| (d.send.id, d.recv.id));
        assert_eq!(reg.holds(&send, &recv), found.is_some(), "holds and direct disagree on {send:?}, {recv:?}");
        found
    }

    #[test]
    fn lookups_find_the_region_holding_the_whole_range() {
        let reg = Registry::new(1);
        reg.insert(Region::new(reg.next_id(), 0..8, vec![std::ptr::null_mut()], vec![]));
        assert_eq!(ids(&reg, 0..8, 0..8), None, "no flags area: no direct algorithm");
        reg.remove(0, 1);
        reg.set_flags(Flags::new(vec![std::ptr::null_mut()], None, vec![]));
        assert_eq!(ids(&reg, 0..8, 0..8), None);
        reg.insert(Region::new(reg.next_id(), 100..200, vec![std::ptr::null_mut()], vec![]));
        reg.insert(Region::new(reg.next_id(), 300..400, vec![std::ptr::null_mut()], vec![]));
        assert_eq!(ids(&reg, 100..150, 350..400), Some((2, 3)));
        assert_eq!(ids(&reg, 150..250, 300..310), None, "crosses the end");
        assert_eq!(ids(&reg, 50..60, 300..310), None, "before every region");
        reg.remove(100, 2);
        assert_eq!(ids(&reg, 100..150, 300..310), None);
        reg.remove(300, 3);
        assert!(!reg.registered.load(Ordering::Relaxed));
        // The arena holds what no registration does, a registration inside it wins.
        reg.set_arena(Region::new(reg.next_id(), 1000..5000, vec![std::ptr::null_mut()], vec![]));
        assert_eq!(ids(&reg, 1000..1100, 4000..5000), Some((4, 4)), "the arena alone, without the lock");
        reg.insert(Region::new(reg.next_id(), 2000..3000, vec![std::ptr::null_mut()], vec![]));
        assert_eq!(ids(&reg, 1000..1100, 2000..2100), Some((4, 5)));
        assert_eq!(ids(&reg, 2500..3500, 4900..5000), Some((4, 4)), "past the registration's end: the arena's");
        assert_eq!(ids(&reg, 4900..5001, 1000..1001), None);
        reg.remove(2000, 5);
        assert!(!reg.registered.load(Ordering::Relaxed));
        assert_eq!(ids(&reg, 2000..2100, 2000..2100), Some((4, 4)));
    }

    #[test]
    fn what_a_thread_remembers_of_a_lookup_ends_with_any_change_and_is_its_registrys_alone() {
        let (reg, other) = (Registry::new(1), Registry::new(2));
        for r in [&reg, &other] {
            r.set_flags(Flags::new(vec![std::ptr::null_mut()], None, vec![]));
        }
        let region = |reg: &Registry, range: Range<usize>| Region::new(reg.next_id(), range, vec![], vec![]);
        reg.insert(region(&reg, 1000..2000));
        other.insert(region(&other, 5000..6000));
        assert!(reg.holds(&(1000..1100), &(1500..1600)));
        assert!(reg.holds(&(1200..1300), &(1900..2000)), "within the regions found last");
        assert!(!reg.holds(&(1900..2001), &(1000..1001)), "past the end of the one found last");
        assert!(reg.holds(&(1000..1100), &(1500..1600)));
        assert!(!other.holds(&(1000..1100), &(1500..1600)), "another registry's regions");
        assert!(reg.holds(&(1000..1100), &(1500..1600)));
        reg.remove(1000, 1);
        assert!(!reg.holds(&(1000..1100), &(1500..1600)), "a deregistered region");
        reg.insert(region(&reg, 1000..1200));
        assert!(reg.holds(&(1000..1100), &(1000..1100)));
        assert!(!reg.holds(&(1000..1100), &(1500..1600)), "a smaller region where one was");
        // The send and recv bytes in different regions; one of them goes.
        reg.insert(region(&reg, 3000..4000));
        assert!(reg.holds(&(3000..3100), &(1000..1100)));
        reg.remove(3000, 3);
        assert!(!reg.holds(&(3000..3100), &(1000..1100)));
    }
}
