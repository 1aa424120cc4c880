//! The side of a connector this rank sends on, over a plugin's send comm: hands the steps
//! its kernel posts to the plugin in step order.
//!
//! A step that its staging slot carries whole (every LL and LL128 step, and a Simple step
//! that fits where both ends can take it so: `Staging::carries`) goes as one message, its
//! size word and bytes copied together into the slot (the receiver learns the protocol
//! from the word before it knows where the bytes belong). Any other Simple step goes as
//! two: the size word from the staging slot, then its bytes straight from the FIFO slot, so
//! large steps are never copied on this side. The FIFO head frees a slot once its bytes are
//! copied out or the plugin is done sending them. Requests complete in the order they were
//! posted, so only the oldest is tested.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use jitccl_codegen::abi::{Conn, STEPS};

use super::super::fifo::{atomic, fits, slot, slot_ptr, SIMPLE};
use super::super::wire::split_size_word;
use super::{Staging, CLOSE_WORD, FAULT_WORD, WORD};
use crate::netplugin::{Mr, Request, SendComm};
use crate::transport::connect::Link;

/// A message of step `step` the plugin is sending.
struct InFlight {
    step: u64,
    req: Request,
    /// The FIFO slot is free once this message is sent (a Simple step's bytes).
    frees_slot: bool,
}

pub(super) struct SendSide {
    pub link: Link,
    /// The local shadow of the receiver's FIFO.
    fifo: Conn,
    comm: SendComm,
    fifo_mr: Mr,
    staging: Staging,
    /// Steps taken out of the FIFO (their first message handed to the plugin).
    taken: u64,
    /// A Simple step whose size word is out but whose bytes the plugin has not taken yet.
    owed: Option<u64>,
    inflight: VecDeque<InFlight>,
    /// Per slot: its bytes are still needed (a Simple step not sent yet).
    held: [bool; STEPS],
    /// Per staging slot: a message from it is in flight.
    staged: [bool; STEPS],
    /// Steps whose FIFO slot is free: the head.
    freed: u64,
    /// The last message, once asked for: whether it was handed to the plugin.
    last: Option<(Last, bool)>,
    faulted: bool,
    pub dead: bool,
}

/// What a connector's last message says.
#[derive(Debug, Clone, Copy)]
enum Last {
    /// This rank's communicator failed, the rank named first.
    Fault(u64),
    /// This rank closes the connector in good order: every step it posted was sent.
    Close,
}

impl SendSide {
    pub fn new(link: Link, fifo: Conn, comm: SendComm, fifo_mr: Mr, staging: Staging) -> SendSide {
        SendSide {
            link,
            fifo,
            comm,
            fifo_mr,
            staging,
            taken: 0,
            owed: None,
            inflight: VecDeque::with_capacity(2 * STEPS + 1),
            held: [false; STEPS],
            staged: [false; STEPS],
            freed: 0,
            last: None,
            faulted: false,
            dead: false,
        }
    }

    /// Steps taken out of the FIFO.
    #[cfg(test)]
    pub fn taken(&self) -> u64 {
        self.taken
    }

    /// Every step the kernel posted has been sent.
    pub fn flushed(&self) -> bool {
        self.inflight.is_empty() && self.owed.is_none() && self.taken >= atomic(self.fifo.tail).load(Ordering::Acquire)
    }

    /// Nothing more to send at close: every posted step went out, or the fault message did
    /// (a failed communicator's steps are not owed to anyone), or the comm is gone.
    pub fn settled(&self) -> bool {
        self.dead
            || (self.faulted && self.last.is_some_and(|(_, out)| out) && self.inflight.is_empty())
            || self.flushed()
    }

    /// Tells the receiver, after what is already on its way, that this rank's communicator
    /// failed, `culprit` first; no step follows.
    pub fn report_fault(&mut self, culprit: usize) {
        if !std::mem::replace(&mut self.faulted, true) {
            self.last = Some((Last::Fault(culprit as u64), false));
        }
    }

    /// Tells the receiver, once every posted step is sent, that no step follows: its last
    /// receive then completes, and neither side closes with a receive still posted (which
    /// some plugins take as a failure of every comm sharing its endpoint).
    pub fn close(&mut self) {
        if self.last.is_none() {
            self.last = Some((Last::Close, false));
        }
    }

    /// The close message went out (or nothing more can: the comm failed or the
    /// communicator did).
    pub fn closed(&self) -> bool {
        self.dead || self.faulted || (matches!(self.last, Some((Last::Close, true))) && self.inflight.is_empty())
    }

    /// Completes what the plugin finished, hands it what the kernel posted; true if
    /// anything happened.
    pub fn pump(&mut self) -> Result<bool, String> {
        let mut progressed = self.complete()?;
        if let Some(k) = self.owed {
            if !self.send_bytes(k)? {
                return Ok(progressed);
            }
            progressed = true;
        }
        let tail = atomic(self.fifo.tail).load(Ordering::Acquire);
        while !self.faulted && self.taken < tail {
            let k = self.taken;
            let s = slot(k);
            if self.staged[s] {
                break;
            }
            // SAFETY: sizes has STEPS entries; written before the tail we acquired.
            let word = unsafe { *self.fifo.sizes.add(s) };
            if !fits(&self.fifo, word) {
                return Err(format!("step {k} has a bad size word {word:#x}"));
            }
            let (proto, bytes) = split_size_word(word);
            let whole = self.staging.carries(word);
            let stage = self.staging.slot(s);
            // SAFETY: the staging slot is not in flight and holds a word and the bytes of a
            // step it carries; the FIFO slot holds `bytes` posted bytes until the head passes it.
            unsafe {
                stage.cast::<u64>().write_unaligned(word.to_le());
                if whole {
                    std::ptr::copy_nonoverlapping(slot_ptr(&self.fifo, k, proto), stage.add(WORD), bytes);
                }
            }
            let len = if whole { WORD + bytes } else { WORD };
            let Some(req) = self.isend(stage, len, self.staging.mr)? else { break };
            self.inflight.push_back(InFlight { step: k, req, frees_slot: false });
            self.staged[s] = true;
            self.taken += 1;
            progressed = true;
            if !whole && bytes > 0 {
                self.held[s] = true;
                self.owed = Some(k);
                if !self.send_bytes(k)? {
                    break;
                }
            }
        }
        if let Some((last, false)) = self.last {
            // A fault follows what is on its way; a close follows every posted step.
            let due = match last {
                Last::Fault(_) => self.owed.is_none(),
                Last::Close => self.flushed(),
            };
            if due {
                let words = match last {
                    Last::Fault(culprit) => [FAULT_WORD.to_le(), culprit.to_le()],
                    Last::Close => [CLOSE_WORD.to_le(), 0],
                };
                let stage = self.staging.last();
                // SAFETY: the last message's slot is the staging area's own, written once.
                unsafe { stage.cast::<[u64; 2]>().write_unaligned(words) };
                let len = if matches!(last, Last::Close) { WORD } else { 2 * WORD };
                if let Some(req) = self.isend(stage, len, self.staging.mr)? {
                    self.inflight.push_back(InFlight { step: u64::MAX, req, frees_slot: false });
                    self.last = Some((last, true));
                    progressed = true;
                }
            }
        }
        progressed |= self.free();
        Ok(progressed)
    }

    /// Hands step `k`'s Simple bytes to the plugin; false if it had no room yet.
    fn send_bytes(&mut self, k: u64) -> Result<bool, String> {
        // SAFETY: sizes has STEPS entries; the step was posted.
        let (_, bytes) = split_size_word(unsafe { *self.fifo.sizes.add(slot(k)) });
        let data = slot_ptr(&self.fifo, k, SIMPLE);
        let Some(req) = self.isend(data, bytes, self.fifo_mr)? else { return Ok(false) };
        self.inflight.push_back(InFlight { step: k, req, frees_slot: true });
        self.owed = None;
        Ok(true)
    }

    fn isend(&mut self, data: *const u8, bytes: usize, mr: Mr) -> Result<Option<Request>, String> {
        self.comm.isend(data, bytes, 0, mr).map_err(|e| e.to_string())
    }

    /// Tests the messages in flight, oldest first, up to the first not finished (a plugin
    /// completes a comm's requests in order, and each test may cost it a system call);
    /// true if any finished.
    fn complete(&mut self) -> Result<bool, String> {
        let mut any = false;
        while let Some(m) = self.inflight.front_mut() {
            if m.req.test().map_err(|e| e.to_string())?.is_none() {
                break;
            }
            let m = self.inflight.pop_front().expect("in flight");
            if m.step != u64::MAX {
                let s = slot(m.step);
                if m.frees_slot {
                    self.held[s] = false;
                } else {
                    self.staged[s] = false;
                }
            }
            any = true;
        }
        Ok(any)
    }

    /// Moves the head past the steps whose FIFO slots are no longer needed; true if it moved.
    fn free(&mut self) -> bool {
        let start = self.freed;
        // A failed communicator's kernel no longer reads the head.
        while !self.faulted && self.freed < self.taken && !self.held[slot(self.freed)] && Some(self.freed) != self.owed
        {
            self.freed += 1;
        }
        if self.freed > start {
            atomic(self.fifo.head).store(self.freed, Ordering::Release);
        }
        self.freed > start
    }
}
