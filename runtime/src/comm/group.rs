//! Groups (NCCL's ncclGroupStart / ncclGroupEnd): between `group_start` and the matching
//! `group_end` (nestable; the depth is per thread, as NCCL's), calls are posted, not
//! launched; the outermost end launches them together. A call that fails its checks inside
//! a group returns its error and fails the group: its end returns the first such error and
//! launches nothing, so every communicator is as before.
//!
//! Per communicator, the end launches its collectives in posted order, then its
//! point-to-point transfers: as one direct launch where their buffers are addressable
//! (`enqueue::p2p`), else scheduled in rounds as AlltoAll's: round (k, j) sends the j-th
//! transfer posted to `rank + k` and receives the j-th posted from `rank - k` (mod
//! nranks), both in one launch. Every rank runs the rounds in the same order and each round
//! pairs with the same round of its two partners, so sends and receives posted in any order
//! never deadlock, whatever their size against the FIFO.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use jitccl_codegen::{Collective, DataType};

use crate::comm::Comm;
use crate::enqueue::Call;
use crate::error::{Error, Result};
use crate::stream::{Launch, Stream};

struct Posted {
    comm: Comm,
    call: Call,
    stream: Stream,
}

#[derive(Default)]
struct Open {
    depth: usize,
    posted: Vec<Posted>,
    /// The first error of a call inside the group.
    error: Option<Error>,
}

thread_local! {
    static GROUP: RefCell<Open> = RefCell::default();
}

/// Threads with a group open: while none has, a call needs no look at its thread's group
/// (a thread-local access is a function call in a shared library, as the C API is).
static OPEN_ANYWHERE: AtomicUsize = AtomicUsize::new(0);

/// Opens a group (or a nested one) on this thread: calls are posted until the outermost
/// [`group_end`].
pub fn group_start() {
    GROUP.with_borrow_mut(|g| {
        if g.depth == 0 {
            OPEN_ANYWHERE.fetch_add(1, Ordering::Relaxed);
        }
        g.depth += 1
    });
}

/// Closes the innermost group; the outermost launches what was posted (NCCL's
/// ncclGroupEnd). Returns the first error of a call in the group (then nothing was
/// launched), or an error launching (then, as far as it can be checked beforehand,
/// nothing was: every communicator must be usable and every launch compiles first).
/// `InvalidUsage` without an open group.
pub fn group_end() -> Result<()> {
    group_end_launched().map(drop)
}

/// [`group_end`], telling what the outermost end launched: each communicator of the group
/// with the stream its calls went to (none for an inner end), for a binding that completes
/// them as its callers expect (the C API).
pub fn group_end_launched() -> Result<Vec<(Comm, Stream)>> {
    let (posted, error) = close("group_end")?;
    match error {
        Some(e) => Err(e),
        None => launch(posted),
    }
}

/// How many groups are open on this thread (0: none; 1: the next end is the outermost).
#[inline]
pub fn group_depth() -> usize {
    // This thread's own count is seen in program order: zero means not this thread either.
    match OPEN_ANYWHERE.load(Ordering::Relaxed) {
        0 => 0,
        _ => GROUP.with_borrow(|g| g.depth),
    }
}

/// Closes the innermost group: what the outermost posted, and the first error of a call in
/// it (nothing for an inner one).
fn close(name: &str) -> Result<(Vec<Posted>, Option<Error>)> {
    GROUP
        .with_borrow_mut(|g| match g.depth {
            0 => Err(Error::InvalidUsage(format!("{name} without group_start"))),
            1 => {
                g.depth = 0;
                OPEN_ANYWHERE.fetch_sub(1, Ordering::Relaxed);
                Ok(Some((std::mem::take(&mut g.posted), g.error.take())))
            }
            _ => {
                g.depth -= 1;
                Ok(None)
            }
        })
        .map(Option::unwrap_or_default)
}

/// Closes the innermost group like [`group_end`], but the outermost drops what was
/// posted instead of launching it (NCCL's ncclGroupSimulateEnd, which only estimates).
/// Returns the first error of a call in the group; `InvalidUsage` without an open group.
pub fn group_discard() -> Result<()> {
    let (posted, error) = close("group_discard")?;
    drop(posted);
    error.map_or(Ok(()), Err)
}

/// Closes the innermost group like [`group_discard`]; the outermost also returns the cost
/// model's time of what was posted (NCCL's ncclGroupSimulateEnd), in microseconds: summed
/// per communicator, as its calls run one after another, and the longest of the
/// communicators. `None` for an inner group.
pub fn group_simulate_end() -> Result<Option<f64>> {
    let outermost = group_depth() == 1;
    let (posted, error) = close("group_simulate_end")?;
    if let Some(e) = error {
        return Err(e);
    }
    if !outermost {
        return Ok(None);
    }
    let mut per_comm: Vec<(&Comm, f64)> = Vec::new();
    for Posted { comm, call, .. } in &posted {
        // As NCCL's, transfers count nothing: point to point, and the collectives carried
        // as rounds of it (AlltoAll, Gather, Scatter, AlltoAllv).
        let t = if call.coll == Collective::SendRecv || call.batch || call.moves.is_some() {
            0.0
        } else {
            comm.estimate(call.coll, call.dtype, call.count)?
        };
        match per_comm.iter_mut().find(|(c, _)| Arc::ptr_eq(&c.h, &comm.h)) {
            Some((_, sum)) => *sum += t,
            None => per_comm.push((comm, t)),
        }
    }
    Ok(Some(per_comm.iter().map(|(_, t)| *t).fold(0.0, f64::max)))
}

/// Runs `f` inside a group: its calls launch together when it returns. An error of `f`
/// (or of a call in it) comes back and nothing is launched.
pub fn group<R>(f: impl FnOnce() -> Result<R>) -> Result<R> {
    group_start();
    let out = note(f());
    let end = group_end();
    let v = out?;
    end.map(|()| v)
}

/// Whether a group is open on this thread.
#[inline]
pub(crate) fn is_open() -> bool {
    group_depth() > 0
}

/// Passes `r` through; an error also fails the open group, if any.
pub(crate) fn note<T>(r: Result<T>) -> Result<T> {
    if let Err(e) = &r {
        GROUP.with_borrow_mut(|g| {
            if g.depth > 0 && g.error.is_none() {
                g.error = Some(e.duplicate());
            }
        });
    }
    r
}

pub(crate) fn post(comm: &Comm, call: Call, stream: &Stream) {
    GROUP.with_borrow_mut(|g| g.posted.push(Posted { comm: comm.clone(), call, stream: stream.clone() }));
}

/// One communicator's part of a group: its calls, in launch order, and their stream.
struct Batch {
    comm: Comm,
    stream: Stream,
    colls: Vec<Call>,
    p2p: Vec<Call>,
}

/// Launches what a group posted: batches per communicator, checked and (blocking mode)
/// compiled for every communicator before any is queued. Returns each communicator with
/// its stream.
fn launch(posted: Vec<Posted>) -> Result<Vec<(Comm, Stream)>> {
    let mut batches: Vec<Batch> = Vec::new();
    for Posted { comm, call, stream } in posted {
        let i = match batches.iter().position(|b| Arc::ptr_eq(&b.comm.h, &comm.h)) {
            Some(i) => i,
            None => {
                batches.push(Batch { comm, stream: stream.clone(), colls: Vec::new(), p2p: Vec::new() });
                batches.len() - 1
            }
        };
        let b = &mut batches[i];
        // One comm's kernels run one at a time: launches on two streams could take turns in
        // another order on another rank, and wait on each other.
        if !stream.same(&b.stream) {
            return Err(Error::InvalidArgument(format!(
                "a group gave {:?} operations on two streams; use one stream per communicator in a group",
                b.comm
            )));
        }
        if call.coll == Collective::SendRecv {
            b.p2p.push(call)
        } else {
            b.colls.push(call)
        }
    }
    // Blocking communicators: every launch compiled before any is queued.
    let mut ready: Vec<(Batch, Vec<Launch>)> = Vec::new();
    let mut deferred = Vec::new();
    for mut b in batches {
        let p2p = rounds(b.comm.rank(), b.comm.nranks(), std::mem::take(&mut b.p2p));
        let p2p = (!p2p.is_empty()).then(|| Call::batch(Collective::SendRecv, p2p));
        let calls = std::mem::take(&mut b.colls).into_iter().chain(p2p).collect();
        match &b.comm.h.progress {
            None => {
                let launches = b.comm.inner("group")?.prepare_all(calls, &b.stream)?;
                ready.push((b, launches));
            }
            Some(_) => {
                b.comm.async_error()?;
                deferred.push((b, calls));
            }
        }
    }
    let mut launched = Vec::with_capacity(ready.len() + deferred.len());
    for (b, launches) in ready {
        b.comm.inner("group")?.enq.enqueue_all(launches, &b.stream)?;
        launched.push((b.comm, b.stream));
    }
    for (b, calls) in deferred {
        b.comm.defer(calls, &b.stream)?;
        launched.push((b.comm, b.stream));
    }
    Ok(launched)
}

/// One side of a transfer, in bytes: (buffer, bytes, peer, what keeps the buffer alive).
type Side = (*mut u8, usize, usize, Option<Arc<dyn Send + Sync>>);

/// `p2p` (each a send, a receive or both) re-paired into the rounds of the module comment.
fn rounds(rank: usize, nranks: usize, p2p: Vec<Call>) -> Vec<Call> {
    let mut sends: Vec<Vec<Side>> = vec![Vec::new(); nranks];
    let mut recvs: Vec<Vec<Side>> = vec![Vec::new(); nranks];
    for c in p2p {
        let size = c.dtype.size();
        let [keep_send, keep_recv] = c.keep;
        // A side that moves nothing is skipped on both ranks alike (counts must match).
        if let Some(p) = c.send_peer.filter(|_| c.count > 0) {
            sends[p].push((c.send as *mut u8, c.count * size, p, keep_send));
        }
        if let Some(p) = c.recv_peer.filter(|_| c.recv_count > 0) {
            recvs[p].push((c.recv, c.recv_count * size, p, keep_recv));
        }
    }
    let mut out = Vec::new();
    for k in 0..nranks {
        let (to, from) = ((rank + k) % nranks, (rank + nranks - k) % nranks);
        let (mut s, mut r) = (std::mem::take(&mut sends[to]).into_iter(), std::mem::take(&mut recvs[from]).into_iter());
        loop {
            let (send, recv) = (s.next(), r.next());
            if send.is_none() && recv.is_none() {
                break;
            }
            out.push(pair(send, recv));
        }
    }
    out
}

/// One launch moving `send` and receiving `recv`, as bytes.
fn pair(send: Option<Side>, recv: Option<Side>) -> Call {
    let split = |s: Option<Side>| s.map_or((None, None), |(p, n, q, k)| (Some((p, n, q)), k));
    let ((send, ks), (recv, kr)) = (split(send), split(recv));
    // Each side's buffer was checked against the communicator's device when posted.
    Call::transfer(DataType::U8, send, recv, [ks, kr], [None, None], None)
}
