//! The side of a connector this rank sends on: forwards the steps its kernel posts to the
//! local shadow of the receiver's FIFO.
//!
//! Steps are dealt round-robin over the connector's sockets (step k on socket k % n) and
//! written straight from their FIFO slots, or from the caller's buffer for a step the
//! kernel passed by reference (its slot holds the address), all ready frames of a socket in
//! one call. A
//! slot is counted free (the FIFO head) once its step is wholly written, in step order.
//! Nothing bounds what is written beyond TCP's own flow control: the receiver takes a
//! step off its socket only once the step's slot is free, so the window in flight is the
//! FIFO plus both sockets' buffers, which TCP sizes to the link (a window of the FIFO
//! alone, returned as credits that queue behind the peer's own data on a busy link, left
//! a rate-limited link half idle). Nothing comes back but the peer's close.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::sync::atomic::Ordering;

use jitccl_codegen::abi::{Conn, SIZE_REF, STEPS};

use super::fifo::{atomic, fits, slot, SIMPLE};
use super::wire::{frame_header, split_size_word, Broken, Wire, FAULT_STEP, FRAME_HEADER};
use crate::transport::connect::Link;

/// A step on its way out: header, then its bytes in the FIFO slot or the caller's buffer.
struct Frame {
    step: u64,
    header: [u8; FRAME_HEADER],
    data: *const u8,
    len: usize,
    /// `data` is in the caller's buffer (the step went by reference).
    by_ref: bool,
    /// The frame's own copy of its bytes, once the call that passed them failed.
    owned: Option<Box<[u8]>>,
}

pub(super) struct SendSide {
    pub link: Link,
    /// The local shadow of the receiver's FIFO.
    fifo: Conn,
    pub socks: Vec<Wire>,
    /// Per socket, the frames not wholly written yet, oldest first, and how many bytes of
    /// the oldest are.
    out: Vec<(VecDeque<Frame>, usize)>,
    /// Steps taken out of the FIFO into `out`.
    pub taken: u64,
    /// Steps wholly written: the FIFO head.
    freed: u64,
    /// Of the steps taken, those passed by reference.
    pub by_ref: u64,
    /// A fault frame is queued: no step is taken out any more.
    faulted: bool,
    /// The connection failed; the connector is no longer served.
    pub dead: bool,
}

impl SendSide {
    pub fn new(link: Link, fifo: Conn, socks: Vec<Wire>) -> SendSide {
        let out = socks.iter().map(|_| (VecDeque::with_capacity(STEPS), 0)).collect();
        SendSide { link, fifo, socks, out, taken: 0, freed: 0, by_ref: 0, faulted: false, dead: false }
    }

    /// Every step the kernel posted has been handed to the OS.
    pub fn flushed(&self) -> bool {
        self.sent() && self.taken >= atomic(self.fifo.tail).load(Ordering::Acquire)
    }

    /// Every frame queued has been handed to the OS (through the TLS session, if any).
    fn sent(&self) -> bool {
        self.out.iter().all(|(q, _)| q.is_empty()) && !self.socks.iter().any(Wire::pending)
    }

    /// Nothing more to send at close: every posted step went out, or the fault frame did
    /// (a failed communicator's steps are not owed to anyone), or the connection is gone.
    pub fn settled(&self) -> bool {
        self.dead || (self.faulted && self.sent()) || self.flushed()
    }

    /// Whether a pump would find nothing to do: the kernel posted nothing new, every
    /// socket with frames queued takes no more for now, and the peer sent nothing (its
    /// close). Waiting kernels pump many times per step: this spares them the walk.
    fn idle(&self) -> bool {
        self.socks[0].quiet()
            && self.out.iter().zip(&self.socks).all(|((q, _), w)| q.is_empty() || w.blocked())
            && self.taken >= atomic(self.fifo.tail).load(Ordering::Acquire)
    }

    /// Moves posted steps out; true if anything happened.
    pub fn pump(&mut self) -> Result<bool, Broken> {
        if self.idle() {
            return Ok(false);
        }
        self.watch_close()?;
        let mut progressed = false;
        let tail = atomic(self.fifo.tail).load(Ordering::Acquire);
        let n = self.socks.len() as u64;
        while !self.faulted && self.taken < tail {
            let k = self.taken;
            let s = slot(k);
            // SAFETY: sizes has STEPS entries; written before the tail we acquired.
            let marked = unsafe { *self.fifo.sizes.add(s) };
            let (word, by_ref) = (marked & !SIZE_REF, marked & SIZE_REF != 0);
            let (proto, len) = split_size_word(word);
            if !fits(&self.fifo, word) || (by_ref && proto != SIMPLE) {
                return Err(format!("step {k} has a bad size word {marked:#x}").into());
            }
            // SAFETY: the slot holds `len` posted bytes of protocol `proto`, or for a step
            // by reference the address of its bytes in the caller's buffer, and stays
            // untouched until the head passes it, as do those bytes (the kernel returns only
            // once the head passed them; a call that fails first has them copied, `release`).
            let data = unsafe {
                let at = self.fifo.buf[proto].add(s * self.fifo.slot_bytes[proto] as usize);
                if by_ref {
                    *(at as *const *const u8)
                } else {
                    at as *const u8
                }
            };
            let header = frame_header(k, word);
            self.by_ref += by_ref as u64;
            self.out[(k % n) as usize].0.push_back(Frame { step: k, header, data, len, by_ref, owned: None });
            self.taken += 1;
        }
        for i in 0..self.socks.len() {
            self.write(i)?;
        }
        let freed = self.out.iter().filter_map(|(q, _)| q.front().map(|f| f.step)).min().unwrap_or(self.taken);
        if freed > self.freed && !self.faulted {
            self.freed = freed;
            // Written out: the kernel may refill the slots.
            atomic(self.fifo.head).store(freed, Ordering::Release);
            progressed = true;
        }
        Ok(progressed)
    }

    /// Queues a fault frame naming `culprit` after the frames already queued; the
    /// communicator has failed, so no step follows it.
    pub fn report_fault(&mut self, culprit: usize) {
        if !std::mem::replace(&mut self.faulted, true) {
            let header = frame_header(FAULT_STEP, culprit as u64);
            self.out[0].0.push_back(Frame {
                step: FAULT_STEP,
                header,
                data: std::ptr::NonNull::dangling().as_ptr(),
                len: 0,
                by_ref: false,
                owned: None,
            });
        }
    }

    /// Copies the bytes of the steps still to be written that are in the caller's buffers,
    /// once their call has failed and returned: the caller may reuse those buffers.
    pub fn release(&mut self) {
        for f in self.out.iter_mut().flat_map(|(q, _)| q.iter_mut()).filter(|f| f.by_ref) {
            // SAFETY: the bytes stay put until the failed call returns, which waits for this.
            let own: Box<[u8]> = unsafe { std::slice::from_raw_parts(f.data, f.len) }.into();
            f.data = own.as_ptr();
            (f.owned, f.by_ref) = (Some(own), false);
        }
    }

    /// Fails once the peer has closed the connection (it sends nothing on it).
    fn watch_close(&mut self) -> Result<(), Broken> {
        let mut buf = [0u8; 64];
        if self.socks[0].read(&mut buf)? > 0 {
            return Err("sent bytes on a connection it only receives on".to_string().into());
        }
        // A peer closes all its sockets together: socket 0 notices for the connector.
        if self.socks[0].eof {
            return Err("closed the connection".to_string().into());
        }
        Ok(())
    }

    /// Writes socket `i`'s frames until it takes no more.
    fn write(&mut self, i: usize) -> Result<(), Broken> {
        self.socks[i].flush()?;
        let (queue, done) = &mut self.out[i];
        while !queue.is_empty() {
            let mut bufs = [IoSlice::new(&[]); 2 * STEPS];
            // At most a FIFO's steps are queued, and a fault frame: the rest goes next call.
            let frames = queue.len().min(STEPS);
            for (j, f) in queue.iter().take(frames).enumerate() {
                let skip = if j == 0 { *done } else { 0 };
                // SAFETY: see `pump`: the slot stays put until the frame is written.
                let data = unsafe { std::slice::from_raw_parts(f.data, f.len) };
                bufs[2 * j] = IoSlice::new(&f.header[skip.min(FRAME_HEADER)..]);
                bufs[2 * j + 1] = IoSlice::new(&data[skip.saturating_sub(FRAME_HEADER)..]);
            }
            let mut n = self.socks[i].write(&bufs[..2 * frames])?;
            if n == 0 {
                break;
            }
            while let Some(f) = queue.front() {
                let left = FRAME_HEADER + f.len - *done;
                if n < left {
                    *done += n;
                    break;
                }
                n -= left;
                *done = 0;
                queue.pop_front();
            }
        }
        Ok(())
    }
}
