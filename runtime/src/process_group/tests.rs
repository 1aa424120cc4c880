//! The in-flight queue's edges, on groups of threads' communicators without a watchdog
//! (so that nothing retires an operation behind the test's back): a job that queued a call
//! before it failed; operations that ran before the group broke; a wait without a deadline
//! while launches of another communicator hold the stream; a failure on the stream before
//! the group was made.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::inflight::Shared;
use super::{ProcessGroup, Work};
use crate::comm::Comm;
use crate::config::Config;
use crate::error::Error;
use crate::op::Op;
use crate::stream::Stream;

const LONG: Duration = Duration::from_secs(60);

/// `n` ranks' communicators (threads of this process).
fn comms(n: usize) -> Vec<Comm> {
    Comm::init_all(n, &Config { nchannels: Some(1), timeout: Some(LONG), ..Config::default() }).unwrap()
}

/// A group over `comm` on `stream`, without a watchdog.
fn group(comm: &Comm, stream: Stream) -> ProcessGroup {
    ProcessGroup { shared: Arc::new(Shared::new(comm.clone(), stream, LONG)), watchdog: None }
}

fn stream_of(comm: &Comm) -> Stream {
    comm.device().stream().unwrap()
}

/// A stream of `comm`'s device with an all_reduce of `other` (rank 0 of a communicator
/// whose rank 1 never calls) queued on it first.
fn stream_behind(comm: &Comm, other: &Comm) -> Stream {
    let stream = stream_of(comm);
    let x = other.device().alloc_from(&[1f32]).unwrap();
    other.all_reduce(&x, &x, 1, Op::Sum, &stream).unwrap();
    stream
}

/// A job that queued its all_reduce and then failed (a caller's mistake on rank 0, a
/// panic on rank 1): its work stays in flight until the all_reduce has run (the caller
/// keeps its memory until then), then fails with the job's error.
#[test]
fn a_job_that_failed_after_queuing_a_call_ends_once_the_call_ran() {
    let cs = comms(2);
    let gs: Vec<ProcessGroup> = cs.iter().map(|c| group(c, stream_of(c))).collect();
    let bufs: Vec<_> = (0..2).map(|r| cs[r].device().alloc_from(&[r as i32 + 1; 4]).unwrap()).collect();
    let b = bufs[0].clone();
    let w0 = gs[0].submit("two_calls", None, move |c, s| {
        c.all_reduce(&b, &b, 4, Op::Sum, s)?;
        Err(Error::InvalidArgument("the second call".into()))
    });
    assert!(!w0.is_completed(), "its all_reduce waits for rank 1: {w0:?}");
    let b = bufs[1].clone();
    let w1 = gs[1].submit("two_calls", None, move |c, s| {
        c.all_reduce(&b, &b, 4, Op::Sum, s)?;
        panic!("the second call")
    });
    let e = w0.wait(LONG).unwrap_err();
    assert!(matches!(&e, Error::InvalidArgument(m) if m == "the second call"), "{e}");
    let e = w1.wait(LONG).unwrap_err();
    assert!(matches!(&e, Error::Internal(m) if m.contains("two_calls #1: queuing the operation panicked")), "{e}");
    assert_eq!(bufs.iter().map(|b| b.to_vec()).collect::<Vec<_>>(), [[3; 4], [3; 4]]);
    // A caller's mistake before any call ends its work at once.
    let w = gs[0].submit("refused", None, |_, _| Err(Error::InvalidArgument("bad count".into())));
    assert!(w.is_completed() && w.error().is_some());
}

/// An operation the stream has run but nobody has retired yet ends well when a later one
/// breaks the group (rank 0) or the group is aborted (rank 1).
#[test]
fn operations_run_before_the_group_broke_end_well() {
    let cs = comms(2);
    let gs: Vec<ProcessGroup> = cs.iter().map(|c| group(c, stream_of(c))).collect();
    let firsts: Vec<Work> = gs
        .iter()
        .map(|g| {
            let b = g.comm().device().alloc_from(&[1u8; 8]).unwrap();
            g.all_reduce(&b, Op::Max)
        })
        .collect();
    for g in &gs {
        let s = &g.shared.stream;
        assert!(s.wait_for(s.mark(), Instant::now() + LONG, false));
    }
    let broke = gs[0].submit("breaks", None, |c, _| Err(Error::Aborted { op: "breaks".into(), rank: c.rank() }));
    gs[1].abort();
    for (r, w) in firsts.iter().enumerate() {
        assert!(w.is_success(), "rank {r}: {w:?}: {:?}", w.error().map(|e| e.to_string()));
    }
    let e = broke.error().expect("the breaking operation failed").to_string();
    assert!(e.contains("breaks #2"), "{e}");
}

/// A wait without a deadline notices that `abort` failed its work, although launches of
/// another communicator queued before it on the same stream still hold the stream.
#[test]
fn a_wait_without_a_deadline_ends_when_the_group_is_aborted() {
    let (cs, others) = (comms(2), comms(2));
    let stream = stream_behind(&cs[0], &others[0]);
    // Long enough for the stream's thread to take it (a waiter then cannot run it itself).
    assert!(!stream.wait_for(stream.mark(), Instant::now() + Duration::from_millis(200), false));
    let g = group(&cs[0], stream.clone());
    let b = cs[0].device().alloc_from(&[1f32; 4]).unwrap();
    let w = g.all_reduce(&b, Op::Sum);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let w = w.clone();
        s.spawn(move || tx.send((w.wait(Duration::MAX), Instant::now())).unwrap());
        std::thread::sleep(Duration::from_millis(100));
        let t0 = Instant::now();
        g.abort();
        let got = rx.recv_timeout(Duration::from_secs(2));
        // Either way the waiter ends: the other communicator's all_reduce stops.
        others[0].abort();
        let (res, at) = got.expect("the wait ended within 2 s of the abort");
        let e = res.unwrap_err().to_string();
        assert!(e.contains("aborted"), "{e}");
        assert!(at - t0 < Duration::from_secs(1), "{:?}", at - t0);
    });
}

/// A launch that failed on the stream before the group was made (another communicator's)
/// is not the group's operations' failure.
#[test]
fn a_failure_on_the_stream_before_the_group_is_not_its_own() {
    let (cs, others) = (comms(2), comms(2));
    let stream = stream_behind(&cs[0], &others[0]);
    others[0].abort();
    assert!(stream.synchronize().is_err(), "the aborted all_reduce failed");
    let gs = [group(&cs[0], stream), group(&cs[1], stream_of(&cs[1]))];
    let bufs: Vec<_> = (0..2).map(|r| cs[r].device().alloc_from(&[r as i64 + 1; 2]).unwrap()).collect();
    let works: Vec<Work> = gs.iter().zip(&bufs).map(|(g, b)| g.all_reduce(b, Op::Sum)).collect();
    for w in &works {
        w.wait(LONG).unwrap_or_else(|e| panic!("{w:?}: {e}"));
    }
    assert_eq!(bufs[0].to_vec(), [3, 3]);
}
