//! The side of a connector this rank receives on, over a plugin's receive comm: stores the
//! steps that arrive into the rank's own FIFO and posts its tail.
//!
//! Messages match receives in the order both are posted, so this side posts them in the
//! order the sender sends: a step's first message (its size word, with the step itself
//! where the staging slot carries it whole: `Staging::carries`) into a staging slot, then,
//! for any other Simple step, its bytes straight into the FIFO slot once the kernel has
//! freed it; only then the next step's first message. Which of the two a Simple step took,
//! the length that arrived says. Steps that came whole are copied from staging, LL and
//! LL128 steps as their readers expect (they poll flags inside the data, which the plugin
//! writes in no known order). Where the Simple slots are GPU memory that needs it
//! (`direct`), a step's bytes are flushed (`iflush`) once they have arrived, and the step
//! is posted only once the flush is done: the kernel never reads bytes the GPU may not see
//! yet. Receives complete in the order they were posted, so only the oldest is tested.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use jitccl_codegen::abi::{Conn, STEPS};

use super::super::fifo::{atomic, fits, set_size, slot, slot_ptr, store_flagged, SIMPLE};
use super::super::wire::split_size_word;
use super::{Staging, CLOSE_WORD, FAULT_WORD, WORD};
use crate::netplugin::{Flushing, Mr, RecvComm, Request};
use crate::transport::connect::Link;

pub(super) struct RecvSide {
    pub link: Link,
    fifo: Conn,
    /// The word of an LL128 line that holds its flag (`Layout::ll128_flag`).
    ll128_flag: usize,
    comm: RecvComm,
    fifo_mr: Mr,
    staging: Staging,
    /// The step whose first message is awaited next.
    next: u64,
    /// The receive of step `next`'s first message, once posted.
    first: Option<Request>,
    /// Step `next - 1`'s size word, received, until its bytes have a place; whether the
    /// step came whole.
    placing: Option<(u64, bool)>,
    /// Simple steps' bytes being received into their FIFO slots.
    bytes: VecDeque<(u64, Request)>,
    /// Each Simple step's bytes are flushed before it is posted.
    flush: bool,
    /// Simple steps whose bytes arrived, being flushed: the flush's request once posted.
    flushing: Vec<(u64, Option<Request>)>,
    /// Per slot, the size word of a step wholly in the FIFO but not posted yet.
    ready: [Option<u64>; STEPS],
    /// Steps posted to the kernel (the tail).
    posted: u64,
    /// The sender's fault message: the rank that failed first, as the sender knew it.
    pub fault: Option<usize>,
    /// The sender closed the connector in good order: nothing more comes.
    pub closed: bool,
    pub dead: bool,
}

impl RecvSide {
    pub fn new(
        link: Link, fifo: Conn, ll128_flag: usize, comm: RecvComm, fifo_mr: Mr, staging: Staging, flush: bool,
    ) -> RecvSide {
        RecvSide {
            link,
            fifo,
            ll128_flag,
            comm,
            fifo_mr,
            staging,
            next: 0,
            first: None,
            placing: None,
            bytes: VecDeque::with_capacity(STEPS),
            flush,
            flushing: Vec::with_capacity(STEPS),
            ready: [None; STEPS],
            posted: 0,
            fault: None,
            closed: false,
            dead: false,
        }
    }

    /// A step is on its way: its first message arrived but the step is not posted yet.
    pub fn mid_step(&self) -> bool {
        self.placing.is_some() || !self.bytes.is_empty() || !self.flushing.is_empty()
    }

    /// Receives what arrived and posts the receives that come next; true if anything
    /// happened.
    pub fn pump(&mut self) -> Result<bool, String> {
        let mut progressed = false;
        loop {
            let moved =
                self.complete_bytes()? | self.flushed()? | self.take_first()? | self.place()? | self.post_first()?;
            if !moved {
                break;
            }
            progressed = true;
        }
        progressed |= self.post_tail();
        Ok(progressed)
    }

    /// Simple steps whose bytes have all arrived become ready, or are flushed first; tested
    /// oldest first, up to the first still on its way.
    fn complete_bytes(&mut self) -> Result<bool, String> {
        let mut any = false;
        while let Some((_, req)) = self.bytes.front_mut() {
            if req.test().map_err(|e| e.to_string())?.is_none() {
                break;
            }
            let (k, _) = self.bytes.pop_front().expect("posted");
            if self.flush {
                self.flushing.push((k, None));
            } else {
                self.ready[slot(k)] = Some(self.pending_word(k));
            }
            any = true;
        }
        Ok(any)
    }

    /// Flushes the steps whose bytes arrived, and makes ready those whose flush is done.
    fn flushed(&mut self) -> Result<bool, String> {
        let mut any = false;
        let mut i = 0;
        while i < self.flushing.len() {
            let k = self.flushing[i].0;
            let done = match &mut self.flushing[i].1 {
                Some(req) => req.test().map_err(|e| format!("step {k}: {e}"))?.is_some(),
                None => {
                    let (_, bytes) = split_size_word(self.pending_word(k));
                    let data = slot_ptr(&self.fifo, k, SIMPLE);
                    match self.comm.iflush(data, bytes, self.fifo_mr).map_err(|e| format!("step {k}: {e}"))? {
                        Flushing::Later => break,
                        Flushing::Done => true,
                        Flushing::Pending(req) => {
                            self.flushing[i].1 = Some(req);
                            any = true;
                            false
                        }
                    }
                }
            };
            if done {
                self.flushing.remove(i);
                self.ready[slot(k)] = Some(self.pending_word(k));
                any = true;
            } else {
                i += 1;
            }
        }
        Ok(any)
    }

    /// The size word of a Simple step whose bytes are being received (kept in its staging
    /// slot, which the next step's first message does not reuse before this one is posted).
    fn pending_word(&self, k: u64) -> u64 {
        // SAFETY: the staging slot holds the word received for step k.
        u64::from_le(unsafe { self.staging.slot(slot(k)).cast::<u64>().read_unaligned() })
    }

    /// The first message of step `next`, if it arrived (not before the bytes posted ahead
    /// of it have).
    fn take_first(&mut self) -> Result<bool, String> {
        if !self.bytes.is_empty() {
            return Ok(false);
        }
        let Some(req) = self.first.as_mut() else { return Ok(false) };
        let Some(len) = req.test().map_err(|e| e.to_string())? else { return Ok(false) };
        self.first = None;
        let k = self.next;
        let stage = self.staging.slot(slot(k));
        // SAFETY: the staging slot holds what arrived, at least a word if `len` says so.
        let word = if len >= WORD { u64::from_le(unsafe { stage.cast::<u64>().read_unaligned() }) } else { 0 };
        if word == FAULT_WORD && len == 2 * WORD {
            // SAFETY: as above, two words arrived.
            let culprit = u64::from_le(unsafe { stage.add(WORD).cast::<u64>().read_unaligned() });
            self.fault = Some(culprit as usize);
            return Err(format!("rank {} reported that its communicator failed", self.link.peer));
        }
        if word == CLOSE_WORD && len == WORD {
            self.closed = true;
            return Ok(true);
        }
        let (proto, bytes) = split_size_word(word);
        // A Simple step that its slot could carry whole may still come as two messages: the
        // sender's Simple slots may be out of a host copy's reach.
        let whole = len == WORD + bytes && self.staging.carries(word);
        if len < WORD || !fits(&self.fifo, word) || !(whole || proto == SIMPLE && len == WORD) {
            return Err(format!("step {k} arrived malformed ({len} bytes, size word {word:#x})"));
        }
        self.placing = Some((word, whole));
        self.next += 1;
        Ok(true)
    }

    /// Gives the step just announced its place once the kernel has freed its slot: a step
    /// that came whole is copied in, any other Simple step's bytes are received into it.
    fn place(&mut self) -> Result<bool, String> {
        let Some((word, whole)) = self.placing else { return Ok(false) };
        let k = self.next - 1;
        if atomic(self.fifo.head).load(Ordering::Acquire) + (STEPS as u64) <= k {
            return Ok(false);
        }
        let (proto, bytes) = split_size_word(word);
        if proto != SIMPLE {
            // SAFETY: the slot is free (the kernel's head passed step k - STEPS), the word fits
            // the FIFO and the staging slot holds the step's bytes after its word.
            unsafe {
                let data = std::slice::from_raw_parts(self.staging.slot(slot(k)).add(WORD), bytes);
                store_flagged(&self.fifo, self.ll128_flag, k, word, data);
            }
            self.ready[slot(k)] = Some(word);
        } else if whole || bytes == 0 {
            // SAFETY: the slot is free and holds the step (it fits the FIFO); the staging
            // slot holds the step's bytes after its word. Simple readers wait for the tail.
            unsafe {
                let from = self.staging.slot(slot(k)).add(WORD);
                std::ptr::copy_nonoverlapping(from, slot_ptr(&self.fifo, k, SIMPLE), bytes);
            }
            self.ready[slot(k)] = Some(word);
        } else {
            let dst = slot_ptr(&self.fifo, k, SIMPLE);
            let Some(req) = self.comm.irecv(dst, bytes, 0, self.fifo_mr).map_err(|e| e.to_string())? else {
                return Ok(false);
            };
            self.bytes.push_back((k, req));
        }
        self.placing = None;
        Ok(true)
    }

    /// Posts the receive of step `next`'s first message, once the step before it is placed.
    fn post_first(&mut self) -> Result<bool, String> {
        if self.first.is_some() || self.placing.is_some() || self.fault.is_some() || self.closed {
            return Ok(false);
        }
        // The staging slot was last used by step next - STEPS, whose word a Simple step
        // keeps there until it is posted.
        if self.next >= self.posted + STEPS as u64 {
            return Ok(false);
        }
        let stage = self.staging.slot(slot(self.next));
        match self.comm.irecv(stage, self.staging.slot_bytes, 0, self.staging.mr).map_err(|e| e.to_string())? {
            Some(req) => {
                self.first = Some(req);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Posts the tail up to the first step not wholly in the FIFO.
    fn post_tail(&mut self) -> bool {
        let start = self.posted;
        while let Some(word) = self.ready[slot(self.posted)].take() {
            set_size(&self.fifo, self.posted, word);
            self.posted += 1;
        }
        if self.posted > start {
            atomic(self.fifo.tail).store(self.posted, Ordering::Release);
        }
        self.posted > start
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use jitccl_codegen::abi::ll128_flag_word;

    use super::super::send::SendSide;
    use super::*;
    use crate::device::HostMemory;
    use crate::netplugin::{self, MemKind, Network, SendComm};
    use crate::settings;
    use crate::transport::layout::{Edge, Layout};

    /// Every wait of these tests.
    const LIMIT: Duration = Duration::from_secs(30);

    /// A send side and a receive side over a connected pair of `net`'s comms, with host FIFOs
    /// of `layout`; `whole`: whether each side (sender, receiver) moves Simple steps whole
    /// through staging, as where its Simple slots are host memory (the receiver's flag is the
    /// one it publishes, the sender's what it makes of it); `flush`: the receiver flushes each
    /// Simple step.
    fn pair(
        net: &Network, layout: &Layout, shadow: &HostMemory, own: &HostMemory, whole: (bool, bool), flush: bool,
    ) -> (SendSide, RecvSide) {
        let (handle, mut listen) = net.listen(0).expect("listen");
        let mut h = handle;
        let end = Instant::now() + LIMIT;
        let (mut send, mut recv): (Option<SendComm>, Option<RecvComm>) = (None, None);
        while send.is_none() || recv.is_none() {
            assert!(Instant::now() < end, "no connection");
            if send.is_none() {
                send = net.connect(0, &mut h).expect("connect");
            }
            if recv.is_none() {
                recv = listen.accept().expect("accept");
            }
        }
        let (mut send, mut recv) = (send.unwrap(), recv.unwrap());
        let link = Link { peer: 1, chan: 0, edge: Edge::Ring };
        let tx = layout.end(shadow.ptr(), 0, Edge::Ring, 1);
        let rx = layout.end(own.ptr(), 0, Edge::Ring, 0);
        let simple = layout.slot_bytes[SIMPLE] * STEPS;
        let smr = send.reg_mr(tx.buf[SIMPLE], simple, MemKind::Host).unwrap();
        let rmr = recv.reg_mr(rx.buf[SIMPLE], simple, MemKind::Host).unwrap();
        let sst = Staging::new(layout, whole.0, |p, b| Ok(send.reg_mr(p, b, MemKind::Host).unwrap())).unwrap();
        let rst = Staging::new(layout, whole.1, |p, b| Ok(recv.reg_mr(p, b, MemKind::Host).unwrap())).unwrap();
        let sender = SendSide::new(link, tx, send, smr, sst);
        let receiver = RecvSide::new(Link { peer: 0, ..link }, rx, layout.ll128_flag, recv, rmr, rst, flush);
        (sender, receiver)
    }

    fn pattern(k: u64, bytes: usize) -> Vec<u8> {
        (0..bytes).map(|i| (k as usize * 13 + i * 5 + 1) as u8).collect()
    }

    /// Posts step `k` of `bytes` in protocol `proto` on the sender's FIFO, as its kernel would.
    fn post(tx: &Conn, k: u64, proto: usize, bytes: usize) {
        // SAFETY: the slot is free (the caller waited for the head) and holds `bytes`.
        unsafe {
            std::ptr::copy_nonoverlapping(pattern(k, bytes).as_ptr(), slot_ptr(tx, k, proto), bytes);
            *tx.sizes.add(slot(k)) = (proto as u64) << 56 | bytes as u64;
        }
        atomic(tx.tail).store(k + 1, Ordering::Release);
    }

    /// Pumps both sides until the receiver fails, within [`LIMIT`] (else panics with
    /// `unnoticed`); its error.
    fn receiver_fails(tx: &mut SendSide, rx: &mut RecvSide, unnoticed: &str) -> String {
        let end = Instant::now() + LIMIT;
        loop {
            assert!(Instant::now() < end, "{unnoticed}");
            tx.pump().unwrap();
            if let Err(e) = rx.pump() {
                return e;
            }
        }
    }

    /// Runs the test `name` in a child process where the GPU stand-in plugin's flushes
    /// complete on their `tests`-th test and its `fail`-th flush fails (0: none), with its
    /// counts written to `counts`: it reads these from the environment.
    fn with_edge_gpu(name: &str, tests: u32, fail: u64, counts: Option<&str>, body: impl FnOnce()) {
        let (tests, fail) = (tests.to_string(), fail.to_string());
        let vars = [
            (settings::EDGE_FLUSH_TESTS.name, Some(tests.as_str())),
            (settings::EDGE_FAIL_FLUSH.name, Some(fail.as_str())),
            (settings::EDGE_COUNTS.name, counts),
        ];
        jitccl_plugins::in_child(module_path!(), name, &vars, body);
    }

    const FLUSH_LAYOUT: Layout = Layout {
        nranks: 2,
        nchannels: 1,
        slot_bytes: [16 << 10, 4 << 10, 8 << 10],
        ll128_flag: ll128_flag_word(false),
    };

    /// The GPU stand-in's network and a connected pair over it on `shadow` and `own` (of
    /// [`FLUSH_LAYOUT`]), whose receiver flushes each Simple step, with their FIFOs.
    fn flushing_pair(shadow: &HostMemory, own: &HostMemory) -> (Network, SendSide, RecvSide, Conn, Conn) {
        let net = netplugin::of_library(jitccl_plugins::EDGE_GPU, 0x9f1);
        let (tx, rx) = pair(&net, &FLUSH_LAYOUT, shadow, own, (false, false), true);
        let (txf, rxf) =
            (FLUSH_LAYOUT.end(shadow.ptr(), 0, Edge::Ring, 1), FLUSH_LAYOUT.end(own.ptr(), 0, Edge::Ring, 0));
        (net, tx, rx, txf, rxf)
    }

    /// Through the project's GPU stand-in plugin (on host memory here, its flushes counted the
    /// same): a step is posted to the kernel only once its flush is done.
    #[test]
    fn a_received_step_is_posted_only_after_its_flush() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let counts = Some(file.path().to_str().expect("a UTF-8 temporary path"));
        // Flushes that complete on their 4th test: each step's tail waits for them.
        with_edge_gpu("a_received_step_is_posted_only_after_its_flush", 4, 0, counts, || {
            let mem = || HostMemory::zeroed(FLUSH_LAYOUT.segment_bytes()).unwrap();
            let (shadow, own) = (mem(), mem());
            let (net, mut tx, mut rx, txf, rxf) = flushing_pair(&shadow, &own);
            let steps = 2 * STEPS as u64;
            let (mut posted, mut consumed) = (0u64, 0u64);
            let end = Instant::now() + LIMIT;
            while consumed < steps {
                assert!(Instant::now() < end, "stuck at {posted} posted, {consumed} consumed");
                if posted < steps && atomic(txf.head).load(Ordering::Acquire) + (STEPS as u64) > posted {
                    post(&txf, posted, SIMPLE, 1000 + posted as usize);
                    posted += 1;
                }
                tx.pump().unwrap();
                rx.pump().unwrap();
                // Whatever the tail shows has been flushed: no posted step is still flushing.
                let tail = atomic(rxf.tail).load(Ordering::Acquire);
                assert!(rx.flushing.iter().all(|(k, _)| *k >= tail), "a step was posted before its flush ended");
                while consumed < tail {
                    let bytes = 1000 + consumed as usize;
                    // SAFETY: the tail passed the slot: it holds the step.
                    let got = unsafe { std::slice::from_raw_parts(slot_ptr(&rxf, consumed, SIMPLE), bytes) };
                    assert!(got == pattern(consumed, bytes), "step {consumed} arrived damaged");
                    consumed += 1;
                    atomic(rxf.head).store(consumed, Ordering::Release);
                }
            }
            drop((tx, rx, net));
            let path = settings::EDGE_COUNTS.path().expect("the counts file, given to this child");
            let counts = std::fs::read_to_string(path).unwrap();
            let last = counts.lines().last().unwrap_or_default().to_string();
            assert!(last.contains(&format!(" iflush {steps} ")), "one flush per step: {counts}");
            assert!(last.contains(" regmr_cuda 0 "), "host memory registered as such: {counts}");
        });
    }

    /// A flush that fails fails the link, naming the call, with that step never posted.
    #[test]
    fn a_failed_flush_fails_the_link() {
        // The first flush of the child process fails.
        with_edge_gpu("a_failed_flush_fails_the_link", 1, 1, None, || {
            let mem = || HostMemory::zeroed(FLUSH_LAYOUT.segment_bytes()).unwrap();
            let (shadow, own) = (mem(), mem());
            let (_net, mut tx, mut rx, txf, rxf) = flushing_pair(&shadow, &own);
            post(&txf, 0, SIMPLE, 4096);
            let e = receiver_fails(&mut tx, &mut rx, "the failed flush went unnoticed");
            assert!(e.contains("step 0: EdgeGpu: iflush failed with 2 (ncclSystemError)"), "{e}");
            assert!(rx.mid_step(), "a step was on its way: the link is lost, not closed");
            assert_eq!(atomic(rxf.tail).load(Ordering::Acquire), 0, "the step whose flush failed was posted");
        });
    }

    /// Over the Fabric plugin on loopback, steps of every kind (Simple steps that fit a
    /// staging slot, exactly fill one, are larger or empty; LL; LL128) arrive whole and in
    /// order under each framing the two ends can agree on: small Simple steps as one message
    /// where both ends' Simple slots are host memory (the sender's slot is free as soon as
    /// the step is taken), as two where either end's are not (held until the plugin has sent
    /// them). A receiver that cannot take a Simple step whole refuses one as malformed rather
    /// than copy it into its slots.
    #[test]
    fn simple_steps_go_whole_only_where_both_ends_take_them_so() {
        // In a child process, where libfabric reads that it stays on loopback.
        jitccl_plugins::in_child(
            module_path!(),
            "simple_steps_go_whole_only_where_both_ends_take_them_so",
            &[("FI_TCP_IFACE", Some("lo"))],
            || {
                let layout = Layout {
                    nranks: 2,
                    nchannels: 1,
                    slot_bytes: [16 << 10, 2 << 10, 4 << 10],
                    ll128_flag: ll128_flag_word(false),
                };
                let mem = || HostMemory::zeroed(layout.segment_bytes()).unwrap();
                let net = netplugin::of_library(jitccl_plugins::FABRIC, 0xf4a);
                // A staging slot carries a word and the largest LL128 step.
                let room = (WORD + (4usize << 10)).next_multiple_of(64) - WORD;
                let shapes = [
                    (SIMPLE, 1000),
                    (1, 512),
                    (SIMPLE, 16 << 10),
                    (SIMPLE, 0),
                    (2, 1024),
                    (SIMPLE, room),
                    (SIMPLE, room + 8),
                ];
                let shape = |k: u64| shapes[k as usize % shapes.len()];
                for whole in [(true, true), (false, true), (false, false)] {
                    let (shadow, own) = (mem(), mem());
                    let (mut tx, mut rx) = pair(&net, &layout, &shadow, &own, whole, false);
                    let (txf, rxf) =
                        (layout.end(shadow.ptr(), 0, Edge::Ring, 1), layout.end(own.ptr(), 0, Edge::Ring, 0));
                    let steps = 2 * STEPS as u64 + 3;
                    let (mut posted, mut consumed) = (0u64, 0u64);
                    let end = Instant::now() + LIMIT;
                    while consumed < steps {
                        assert!(Instant::now() < end, "{whole:?}: stuck at {posted} posted, {consumed} consumed");
                        // One step at a time, so that the head shows whether the step's slot was
                        // freed the moment it was taken.
                        if posted < steps && atomic(txf.head).load(Ordering::Acquire) == posted {
                            let (proto, bytes) = shape(posted);
                            post(&txf, posted, proto, bytes);
                            while tx.taken() == posted {
                                assert!(Instant::now() < end, "{whole:?}: step {posted} never taken");
                                tx.pump().unwrap();
                            }
                            let freed = atomic(txf.head).load(Ordering::Acquire) > posted;
                            let two = proto == SIMPLE && bytes > 0 && !(whole.0 && bytes <= room);
                            assert_eq!(freed, !two, "{whole:?}: step {posted} ({bytes} B) freed as it was taken");
                            posted += 1;
                        }
                        tx.pump().unwrap();
                        rx.pump().unwrap();
                        while consumed < atomic(rxf.tail).load(Ordering::Acquire) {
                            let (proto, bytes) = shape(consumed);
                            // SAFETY: the tail passed the slot: it holds the step.
                            let got = unsafe {
                                assert_eq!(*rxf.sizes.add(slot(consumed)), (proto as u64) << 56 | bytes as u64);
                                std::slice::from_raw_parts(slot_ptr(&rxf, consumed, proto), bytes)
                            };
                            assert!(got == pattern(consumed, bytes), "{whole:?}: step {consumed} arrived damaged");
                            consumed += 1;
                            atomic(rxf.head).store(consumed, Ordering::Release);
                        }
                    }
                }
                // Ends that disagree: the receiver's slots out of a host copy's reach.
                let (shadow, own) = (mem(), mem());
                let (mut tx, mut rx) = pair(&net, &layout, &shadow, &own, (true, false), false);
                let txf = layout.end(shadow.ptr(), 0, Edge::Ring, 1);
                post(&txf, 0, SIMPLE, 1000);
                let e = receiver_fails(&mut tx, &mut rx, "the whole step went unnoticed");
                assert!(e.contains("step 0 arrived malformed (1008 bytes"), "{e}");
                assert_eq!(atomic(layout.end(own.ptr(), 0, Edge::Ring, 0).tail).load(Ordering::Acquire), 0);
            },
        );
    }
}
