//! The side of a connector this rank receives on, over a plugin's receive comm: stores the
//! steps that arrive into the rank's own FIFO and posts its tail.
//!
//! Messages match receives in the order both are posted, so this side posts them in the
//! order the sender sends: a step's first message (its size word, with the bytes of an LL
//! or LL128 step) into a staging slot, then, for a Simple step, its bytes straight into the
//! FIFO slot once the kernel has freed it; only then the next step's first message. LL and
//! LL128 steps are copied from staging as their readers expect (they poll flags inside the
//! data, which the plugin writes in no known order).

use std::sync::atomic::Ordering;

use jitccl_codegen::abi::{Conn, STEPS};

use super::super::fifo::{atomic, fits, set_size, slot, slot_ptr, store_flagged, SIMPLE};
use super::super::wire::split_size_word;
use super::{Staging, CLOSE_WORD, FAULT_WORD, WORD};
use crate::netplugin::{Mr, RecvComm, Request};
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
    /// Step `next - 1`'s size word, received, until its bytes have a place.
    placing: Option<u64>,
    /// Simple steps' bytes being received into their FIFO slots.
    bytes: Vec<(u64, Request)>,
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
    pub fn new(link: Link, fifo: Conn, ll128_flag: usize, comm: RecvComm, fifo_mr: Mr, staging: Staging) -> RecvSide {
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
            bytes: Vec::with_capacity(STEPS),
            ready: [None; STEPS],
            posted: 0,
            fault: None,
            closed: false,
            dead: false,
        }
    }

    /// A step is on its way: its first message arrived but the step is not posted yet.
    pub fn mid_step(&self) -> bool {
        self.placing.is_some() || !self.bytes.is_empty()
    }

    /// Receives what arrived and posts the receives that come next; true if anything
    /// happened.
    pub fn pump(&mut self) -> Result<bool, String> {
        let mut progressed = false;
        loop {
            let moved = self.complete_bytes()? | self.take_first()? | self.place()? | self.post_first()?;
            if !moved {
                break;
            }
            progressed = true;
        }
        progressed |= self.post_tail();
        Ok(progressed)
    }

    /// Simple steps whose bytes have all arrived become ready.
    fn complete_bytes(&mut self) -> Result<bool, String> {
        let mut any = false;
        let mut i = 0;
        while i < self.bytes.len() {
            if self.bytes[i].1.test().map_err(|e| e.to_string())?.is_some() {
                let (k, _) = self.bytes.remove(i);
                // SAFETY: sizes has STEPS entries; the kernel reads this one only after the tail.
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

    /// The first message of step `next`, if it arrived.
    fn take_first(&mut self) -> Result<bool, String> {
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
        let expect = if proto == SIMPLE { WORD } else { WORD + bytes };
        if len < WORD || !fits(&self.fifo, word) || len != expect {
            return Err(format!("step {k} arrived malformed ({len} bytes, size word {word:#x})"));
        }
        self.placing = Some(word);
        self.next += 1;
        Ok(true)
    }

    /// Gives the step just announced its place once the kernel has freed its slot: an LL or
    /// LL128 step is copied in, a Simple step's bytes are received into it.
    fn place(&mut self) -> Result<bool, String> {
        let Some(word) = self.placing else { return Ok(false) };
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
        } else if bytes == 0 {
            self.ready[slot(k)] = Some(word);
        } else {
            let dst = slot_ptr(&self.fifo, k, SIMPLE);
            let Some(req) = self.comm.irecv(dst, bytes, 0, self.fifo_mr).map_err(|e| e.to_string())? else {
                return Ok(false);
            };
            self.bytes.push((k, req));
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
