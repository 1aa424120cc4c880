//! The side of a connector this rank receives on: stores arriving steps into the rank's own
//! FIFO.
//!
//! Each socket stays in step order (socket i carries steps i, i + n, ...); a step is taken
//! off its socket once its slot is free (the kernel has consumed the step STEPS before it:
//! until then it waits in the socket, and TCP holds the sender back), stored as soon as its
//! frame is complete, and the tail is posted only up to the first step still missing. Simple
//! steps are read straight into their slot (the tail tells the kernel when they are whole),
//! or, where the kernel waiting for the step posted where it goes (its landing line), into
//! the caller's buffer there; LL and LL128 steps gather first, as their readers poll flags
//! inside the data.

use std::sync::atomic::Ordering;

use jitccl_codegen::abi::{Conn, REF_MIN, SIZE_REF, STEPS};

use super::fifo::{atomic, clear_landing, fits, landing, posted, set_size, slot_ptr, store_flagged, SIMPLE};
use super::wire::{parse_frame_header, split_size_word, Broken, Wire, FAULT_STEP, FRAME_HEADER};
use crate::transport::connect::Link;

/// Bytes read ahead per call: several small frames at once, without staging large steps
/// (what a frame still needs beyond this is read into its destination directly).
const READ_AHEAD: usize = 4096;

/// The frame a socket is in the middle of.
struct Partial {
    step: u64,
    word: u64,
    got: usize,
    /// Where the kernel's landing line said the step goes, or null: its slot.
    land: *mut u8,
}

/// One socket's incoming stream.
struct Incoming {
    /// Bytes read ahead, `ahead[at..end]` not used yet.
    ahead: Box<[u8; READ_AHEAD]>,
    at: usize,
    end: usize,
    frame: Option<Partial>,
    /// Where an LL or LL128 step gathers.
    staging: Vec<u8>,
    /// The next step this socket carries.
    next: u64,
}

pub(super) struct RecvSide {
    pub link: Link,
    fifo: Conn,
    /// The word of an LL128 line that holds its flag (`Layout::ll128_flag`).
    ll128_flag: usize,
    pub socks: Vec<Wire>,
    incoming: Vec<Incoming>,
    /// Steps posted to the kernel (the tail).
    pub posted: u64,
    /// Of those, the steps that landed in the caller's buffer.
    pub landed: u64,
    /// The sender's fault frame: the rank that failed first, as the sender knew it.
    pub fault: Option<usize>,
    pub dead: bool,
}

impl RecvSide {
    pub fn new(link: Link, fifo: Conn, ll128_flag: usize, socks: Vec<Wire>) -> RecvSide {
        let incoming = (0..socks.len() as u64)
            .map(|next| Incoming {
                ahead: Box::new([0; READ_AHEAD]),
                at: 0,
                end: 0,
                frame: None,
                staging: Vec::new(),
                next,
            })
            .collect();
        RecvSide { link, fifo, ll128_flag, socks, incoming, posted: 0, landed: 0, fault: None, dead: false }
    }

    /// A frame arrived in part only.
    pub fn mid_frame(&self) -> bool {
        self.incoming.iter().any(|c| c.frame.is_some() || c.at < c.end)
    }

    /// Whether a pump would find nothing to do: no socket has brought anything since it ran
    /// dry, and no bytes read ahead wait (a frame whose slot the kernel may have freed
    /// since). Waiting kernels pump many times per step: this spares them the walk.
    fn idle(&self) -> bool {
        self.socks.iter().zip(&self.incoming).all(|(w, c)| w.quiet() && c.at == c.end)
    }

    /// Moves arriving steps into the FIFO; true if anything happened.
    pub fn pump(&mut self) -> Result<bool, Broken> {
        if self.idle() {
            return Ok(false);
        }
        let mut progressed = false;
        // Steps the kernel consumed: those below head + STEPS have a free slot.
        let head = atomic(self.fifo.head).load(Ordering::Acquire);
        for i in 0..self.socks.len() {
            // The peer's last steps may have come with its close: they are stored first.
            progressed |= self.receive(i, head)?;
            // What reading made a TLS session answer (nothing in the clear).
            self.socks[i].flush()?;
        }
        // Step k is stored once its socket expects a later one.
        let n = self.socks.len() as u64;
        let mut tail = self.posted;
        while self.incoming[(tail % n) as usize].next > tail {
            tail += 1;
        }
        if tail > self.posted {
            self.posted = tail;
            atomic(self.fifo.tail).store(tail, Ordering::Release);
            progressed = true;
        }
        if self.socks.iter().all(|w| w.eof) {
            return Err("closed the connection".to_string().into());
        }
        Ok(progressed)
    }

    /// Forgets every address in the caller's buffers that the kernel posted, once its call
    /// has failed and returned: what is still to come of a step that was landing there goes
    /// to its slot.
    pub fn release(&mut self) {
        clear_landing(&self.fifo);
        for c in &mut self.incoming {
            if let Some(f) = &mut c.frame {
                f.land = std::ptr::null_mut();
            }
        }
    }

    /// Stores the frames socket `i` has brought, as far as free slots allow (the kernel has
    /// consumed the steps below `head`); true if it brought anything.
    fn receive(&mut self, i: usize, head: u64) -> Result<bool, Broken> {
        let free = head + STEPS as u64;
        let nsocks = self.socks.len() as u64;
        let (w, c, fifo, flag) = (&mut self.socks[i], &mut self.incoming[i], &self.fifo, self.ll128_flag);
        let landed = &mut self.landed;
        let mut progressed = false;
        loop {
            let Some(f) = &mut c.frame else {
                if c.end - c.at < FRAME_HEADER {
                    c.ahead.copy_within(c.at..c.end, 0);
                    (c.end, c.at) = (c.end - c.at, 0);
                    let n = w.read(&mut c.ahead[c.end..])?;
                    if n == 0 {
                        return Ok(progressed);
                    }
                    c.end += n;
                    progressed = true;
                    continue;
                }
                let (step, word) = parse_frame_header(&c.ahead[c.at..]);
                if step == FAULT_STEP {
                    self.fault = Some(word as usize);
                    return Err(format!("reported that rank {word} failed").into());
                }
                if step != c.next || !fits(fifo, word) {
                    return Err(format!(
                        "sent a bad frame on socket {i} (step {step}, expected {}; size word {word:#x})",
                        c.next
                    )
                    .into());
                }
                if step >= free {
                    // Its slot still holds a step the kernel has not consumed.
                    return Ok(progressed);
                }
                let (proto, bytes) = split_size_word(word);
                let land = if proto == SIMPLE && bytes >= REF_MIN { landing(fifo, step, word) } else { None };
                if land.is_none() && step > head && proto == SIMPLE && bytes >= REF_MIN && posted(fifo, head).is_some()
                {
                    // The kernel lands the step it waits for: this later one waits in the
                    // socket until the kernel reaches it and says where it goes.
                    return Ok(progressed);
                }
                c.at += FRAME_HEADER;
                c.frame = Some(Partial { step, word, got: 0, land: land.unwrap_or(std::ptr::null_mut()) });
                continue;
            };
            let (proto, bytes) = split_size_word(f.word);
            let dst: &mut [u8] = if !f.land.is_null() {
                // SAFETY: the kernel waits for this very step and posted `bytes` of its
                // output there; a failed call takes the address back first (`release`).
                unsafe { std::slice::from_raw_parts_mut(f.land, bytes) }
            } else if proto == SIMPLE {
                // SAFETY: the slot is free (a frame is started only below `free`) and the
                // kernel reads it only after the tail.
                unsafe { std::slice::from_raw_parts_mut(slot_ptr(fifo, f.step, proto), bytes) }
            } else {
                c.staging.resize(bytes, 0);
                &mut c.staging
            };
            let from_ahead = (c.end - c.at).min(bytes - f.got);
            dst[f.got..f.got + from_ahead].copy_from_slice(&c.ahead[c.at..c.at + from_ahead]);
            (f.got, c.at) = (f.got + from_ahead, c.at + from_ahead);
            if f.got < bytes {
                // Everything read ahead is used up. A long rest goes straight to its place.
                (c.at, c.end) = (0, 0);
                let n = if bytes - f.got >= READ_AHEAD {
                    w.read(&mut dst[f.got..])?
                } else {
                    let n = w.read(&mut c.ahead[..])?;
                    c.end = n;
                    0
                };
                f.got += n;
                if n == 0 && c.end == 0 {
                    return Ok(progressed);
                }
                progressed = true;
                continue;
            }
            if !f.land.is_null() {
                set_size(fifo, f.step, f.word | SIZE_REF);
                *landed += 1;
            } else if proto == SIMPLE {
                set_size(fifo, f.step, f.word);
            } else {
                // SAFETY: as above; the word fits.
                unsafe { store_flagged(fifo, flag, f.step, f.word, &c.staging) };
            }
            c.next += nsocks;
            c.frame = None;
            progressed = true;
        }
    }
}
