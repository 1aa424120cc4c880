//! The comms of a network: a listening comm that accepts receive comms, send and receive
//! comms with their registered regions and their requests in flight.
//!
//! A comm keeps its requests in flight so that closing it (on drop) never leaves the
//! plugin a request it still works on: they are tested for a bounded time first. A request
//! outliving its comm fails its `test` instead of touching the closed comm, and a
//! registration is checked to be its comm's, so no plugin call gets a dead or foreign
//! pointer from safe code.

use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::abi::{self, Opaque};
use super::table::{CommKind, Fail};
use super::{MemKind, NetError, Session, MAX_REQUESTS};

/// How long a closing comm tests the requests still in flight: enough for a healthy peer to
/// finish a step, short enough that a dead one does not hold up destroy.
const CLOSE_GRACE: Duration = Duration::from_millis(500);

/// A listening comm (closed on drop).
pub(crate) struct ListenComm {
    session: Arc<Session>,
    raw: Opaque,
}

// SAFETY: a plugin comm is used by one thread at a time (`&mut self`), as NCCL's proxy does.
unsafe impl Send for ListenComm {}

impl ListenComm {
    pub(super) fn new(session: Arc<Session>, raw: Opaque) -> ListenComm {
        ListenComm { session, raw }
    }

    /// Accepts the peer's connection. Non-blocking: `Ok(None)` = call again.
    pub fn accept(&mut self) -> Result<Option<RecvComm>, NetError> {
        let raw = self.session.plugin.table.accept(self.raw).map_err(|f| self.session.error(f))?;
        Ok((!raw.is_null()).then(|| RecvComm(Core::new(self.session.clone(), raw, CommKind::Recv))))
    }
}

impl Drop for ListenComm {
    fn drop(&mut self) {
        if let Err(f) = self.session.plugin.table.close_listen(self.raw) {
            tracing::warn!("NET/Plugin: {}", self.session.error(f));
        }
    }
}

/// A registered region of a comm: valid until the comm closes (which deregisters it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mr {
    handle: Opaque,
    /// The comm's id: a region is only used with the comm that registered it.
    comm: u64,
}

// SAFETY: an opaque token; only its own comm passes it to the plugin.
unsafe impl Send for Mr {}
unsafe impl Sync for Mr {}

/// A request in flight.
struct Pending {
    raw: Opaque,
    /// Its `Request` was dropped before it completed: the comm tests it until it does.
    orphan: bool,
}

/// What a comm's calls change, behind one lock (its requests may be tested from wherever
/// they went).
struct State {
    inflight: Vec<Pending>,
    mrs: Vec<Opaque>,
    closed: bool,
}

/// What posting a request gave.
enum Posted {
    /// The comm has its most requests in flight.
    NoRoom,
    /// The plugin gave no request: for a send or receive, no room in the plugin; for a
    /// flush, nothing to wait for.
    Null,
    Request(Request),
}

impl Posted {
    /// A send's or receive's request, if the plugin took it.
    fn taken(self) -> Option<Request> {
        match self {
            Posted::Request(r) => Some(r),
            Posted::NoRoom | Posted::Null => None,
        }
    }
}

/// An `iflush` asked for.
pub(crate) enum Flushing {
    /// The comm has no room for another request: ask again later.
    Later,
    /// The plugin has nothing to wait for.
    Done,
    /// Done once its request is.
    Pending(Request),
}

/// A send or receive comm, shared with its requests.
struct Core {
    session: Arc<Session>,
    raw: Opaque,
    kind: CommKind,
    id: u64,
    state: Mutex<State>,
}

// SAFETY: the raw comm and requests are only passed to the plugin under `state`'s lock.
unsafe impl Send for Core {}
unsafe impl Sync for Core {}

impl Core {
    fn new(session: Arc<Session>, raw: Opaque, kind: CommKind) -> Arc<Core> {
        static IDS: AtomicU64 = AtomicU64::new(1);
        let state = State { inflight: Vec::new(), mrs: Vec::new(), closed: false };
        Arc::new(Core { session, raw, kind, id: IDS.fetch_add(1, Ordering::Relaxed), state: Mutex::new(state) })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn error(&self, f: Fail) -> NetError {
        self.session.error(f)
    }

    fn refuse(&self, call: &'static str, what: &'static str) -> NetError {
        self.error(Fail { call, code: abi::INVALID_USAGE, what })
    }

    fn reg_mr(&self, ptr: *mut u8, bytes: usize, kind: MemKind) -> Result<Mr, NetError> {
        let mut st = self.lock();
        let handle = self.session.plugin.table.reg_mr(self.raw, ptr, bytes, kind.bits()).map_err(|f| self.error(f))?;
        st.mrs.push(handle);
        Ok(Mr { handle, comm: self.id })
    }

    /// Posts a request through `post` (a send, a receive or a flush): not when the comm has
    /// no room for another.
    fn post(
        self: &Arc<Self>, call: &'static str, mr: Mr, post: impl FnOnce(Opaque) -> Result<Opaque, Fail>,
    ) -> Result<Posted, NetError> {
        if mr.comm != self.id {
            return Err(self.refuse(call, "ncclInvalidUsage: a region registered with another comm"));
        }
        let mut st = self.lock();
        self.reap_orphans(&mut st);
        if st.inflight.len() >= MAX_REQUESTS {
            return Ok(Posted::NoRoom);
        }
        let raw = post(mr.handle).map_err(|f| self.error(f))?;
        if raw.is_null() {
            return Ok(Posted::Null);
        }
        st.inflight.push(Pending { raw, orphan: false });
        let test = match call {
            "isend" => "test (isend)",
            "irecv" => "test (irecv)",
            _ => "test (iflush)",
        };
        Ok(Posted::Request(Request { core: self.clone(), raw, test, done: None }))
    }

    /// Tests the requests nobody will test any more, and forgets those that ended.
    fn reap_orphans(&self, st: &mut State) {
        let table = &self.session.plugin.table;
        st.inflight.retain(|p| !p.orphan || matches!(table.test(p.raw), Ok(None)));
    }

    /// Closes the comm: waits (bounded) for the requests in flight, deregisters the
    /// regions, closes. Later tests of its requests fail.
    fn close(&self) {
        let table = &self.session.plugin.table;
        let mut st = self.lock();
        // What a closing comm still sends may be owed to its peer; what it still receives
        // is not wanted any more.
        let grace = if self.kind == CommKind::Send { CLOSE_GRACE } else { Duration::ZERO };
        let end = Instant::now() + grace;
        crate::wait::poll(end, || {
            st.inflight.retain(|p| matches!(table.test(p.raw), Ok(None)));
            st.inflight.is_empty().then_some(())
        });
        if !st.inflight.is_empty() {
            tracing::debug!(
                "NET/Plugin: {}: closing a {:?} comm with {} request(s) still in flight",
                self.session.plugin.name,
                self.kind,
                st.inflight.len()
            );
        }
        for mh in std::mem::take(&mut st.mrs) {
            if let Err(f) = table.dereg_mr(self.raw, mh) {
                tracing::warn!("NET/Plugin: {}", self.error(f));
            }
        }
        if let Err(f) = table.close(self.kind, self.raw) {
            tracing::warn!("NET/Plugin: {}", self.error(f));
        }
        st.inflight.clear();
        st.closed = true;
    }
}

/// A comm that sends (closed on drop, after its requests are given a bounded time to end
/// and its regions are deregistered).
pub(crate) struct SendComm(Arc<Core>);

/// A comm that receives (closed on drop, as [`SendComm`]).
pub(crate) struct RecvComm(Arc<Core>);

impl SendComm {
    pub(super) fn new(session: Arc<Session>, raw: Opaque) -> SendComm {
        SendComm(Core::new(session, raw, CommKind::Send))
    }

    /// Registers memory of `kind` to send from; it must stay valid until the comm closes.
    pub fn reg_mr(&mut self, ptr: *mut u8, bytes: usize, kind: MemKind) -> Result<Mr, NetError> {
        self.0.reg_mr(ptr, bytes, kind)
    }

    /// Sends `bytes` from `data` (in a region `mr` of this comm) with `tag`. `Ok(None)` =
    /// try later (no room for another request). The data must stay valid until the request
    /// is done.
    pub fn isend(&mut self, data: *const u8, bytes: usize, tag: i32, mr: Mr) -> Result<Option<Request>, NetError> {
        let core = self.0.clone();
        let posted =
            self.0.post("isend", mr, |mh| core.session.plugin.table.isend(core.raw, data, bytes, tag as c_int, mh))?;
        Ok(posted.taken())
    }
}

impl RecvComm {
    /// Registers memory of `kind` to receive into; it must stay valid until the comm closes.
    pub fn reg_mr(&mut self, ptr: *mut u8, bytes: usize, kind: MemKind) -> Result<Mr, NetError> {
        self.0.reg_mr(ptr, bytes, kind)
    }

    /// Receives at most `bytes` into `data` (in a region `mr` of this comm) with `tag`.
    /// `Ok(None)` = try later. The buffer must stay valid until the request is done.
    pub fn irecv(&mut self, data: *mut u8, bytes: usize, tag: i32, mr: Mr) -> Result<Option<Request>, NetError> {
        let core = self.0.clone();
        let posted =
            self.0.post("irecv", mr, |mh| core.session.plugin.table.irecv(core.raw, data, bytes, tag as c_int, mh))?;
        Ok(posted.taken())
    }

    /// Flushes the `bytes` received at `data` (in a region `mr` of this comm), so that the
    /// GPU reads them, not what it held before.
    pub fn iflush(&mut self, data: *mut u8, bytes: usize, mr: Mr) -> Result<Flushing, NetError> {
        let core = self.0.clone();
        Ok(match self.0.post("iflush", mr, |mh| core.session.plugin.table.iflush(core.raw, data, bytes, mh))? {
            Posted::NoRoom => Flushing::Later,
            Posted::Null => Flushing::Done,
            Posted::Request(r) => Flushing::Pending(r),
        })
    }
}

impl Drop for SendComm {
    fn drop(&mut self) {
        self.0.close();
    }
}

impl Drop for RecvComm {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// A send, receive or flush in flight.
pub(crate) struct Request {
    core: Arc<Core>,
    raw: Opaque,
    /// The call its test is named as in errors.
    test: &'static str,
    done: Option<usize>,
}

// SAFETY: the raw request is only passed to the plugin under its comm's lock.
unsafe impl Send for Request {}

impl Request {
    /// `Ok(Some(bytes))` once done: the bytes sent, or received for a receive.
    pub fn test(&mut self) -> Result<Option<usize>, NetError> {
        if self.done.is_some() {
            return Ok(self.done);
        }
        let call = self.test;
        let mut st = self.core.lock();
        if st.closed {
            return Err(self.core.refuse(call, "ncclInvalidUsage: its comm is closed"));
        }
        let r = self.core.session.plugin.table.test(self.raw);
        if !matches!(r, Ok(None)) {
            st.inflight.retain(|p| p.raw != self.raw);
        }
        self.done = r.map_err(|f| self.core.error(Fail { call, ..f }))?;
        Ok(self.done)
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        if self.done.is_none() {
            if let Some(p) = self.core.lock().inflight.iter_mut().find(|p| p.raw == self.raw) {
                p.orphan = true;
            }
        }
    }
}
