//! The network transport over a network plugin (`netplugin`): the same connectors and
//! kernels as over the built-in sockets, with the plugin moving the steps.
//!
//! Each receive connector listens on its own plugin comm (as NCCL does), and the handles
//! travel through the bootstrap; each send connector connects to its receiver's handle.
//! Both register the Simple slots they send from or receive into (in GPU memory where the
//! connector goes direct: `direct`), and a staging area for size words and small steps
//! (`send`, `recv` say what goes where). The rank's host kernels drive the plugin's requests
//! from their waits, as they drive the built-in sockets, and the proxy thread drives them
//! otherwise: a plugin offers nothing to wait on, so it polls (spins, then yields) while a
//! kernel runs or a request is in flight, and sleeps otherwise.

mod direct;
mod nearest;
mod recv;
mod send;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use jitccl_codegen::abi::STEPS;

use super::fifo::SIMPLE;
use super::proxy::{link_failed, Activity, Drive, Pace, Peers, Wake, DRAIN, FAULT_FLUSH};
use super::wire::split_size_word;
use super::Proxy;
use crate::config::Resolved;
use crate::device::HostMemory;
use crate::error::{sys, Error, Result};
use crate::fault::{Board, Notice, Seen};
use crate::netplugin::{Handle, ListenComm, MemKind, Mr, Network, HANDLE_BYTES};
use crate::transport::connect::Link;
use crate::transport::layout::Layout;
use direct::{End, Slots};
pub(crate) use direct::{Placing, Plan};
use recv::RecvSide;
use send::SendSide;

/// A size word on the wire.
const WORD: usize = 8;
/// The size word of a fault message; the culprit's rank follows it.
const FAULT_WORD: u64 = u64::MAX;
/// The size word of a close message: the connector's last.
const CLOSE_WORD: u64 = u64::MAX - 1;
/// How long a closing proxy then waits for its peers' close messages: ranks destroy a
/// communicator at moments of their own, and a peer that closes later than that leaves a
/// receive posted at close (which some plugins take as fatal). A peer known to be gone is
/// not waited for.
const FAREWELL: Duration = Duration::from_secs(10);
/// How often a rank awaiting its connections asks whether the job is lost.
const LOST_POLL: Duration = Duration::from_millis(20);
/// One published handle: sending rank, FIFO offset in the receiver's segment, whether the
/// receiver takes Simple steps whole, handle.
const ENTRY: usize = 4 + 8 + 1 + HANDLE_BYTES;

/// A registered buffer of a connector: per slot a size word and room for the largest LL
/// or LL128 step, then the connector's last message (a fault or a close). A step's first
/// message goes from or into its slot: its size word, and the step itself where the slot
/// carries it whole (`carries`).
struct Staging {
    mem: HostMemory,
    slot_bytes: usize,
    mr: Mr,
    /// Simple steps that fit a slot go whole (see `takes_whole`).
    whole: bool,
}

impl Staging {
    fn new(layout: &Layout, whole: bool, register: impl FnOnce(*mut u8, usize) -> Result<Mr>) -> Result<Staging> {
        let small = layout.slot_bytes[1..].iter().copied().max().unwrap_or(0);
        let slot_bytes = (WORD + small).next_multiple_of(64);
        let bytes = slot_bytes * STEPS + 2 * WORD;
        let mem = HostMemory::zeroed(bytes)?;
        let mr = register(mem.ptr(), bytes)?;
        Ok(Staging { mem, slot_bytes, mr, whole })
    }

    fn slot(&self, s: usize) -> *mut u8 {
        // SAFETY: s < STEPS, within the allocation.
        unsafe { self.mem.ptr().add(s * self.slot_bytes) }
    }

    fn last(&self) -> *mut u8 {
        self.slot(STEPS)
    }

    /// Whether the step of size word `word` travels whole in its first message, its bytes
    /// after the word: every LL and LL128 step (the slots are sized for them), and a Simple
    /// step that fits where this connector moves them whole; a larger or direct Simple step
    /// goes as its word, then its bytes slot to slot.
    fn carries(&self, word: u64) -> bool {
        let (proto, bytes) = split_size_word(word);
        proto != SIMPLE || (self.whole && bytes <= self.slot_bytes - WORD)
    }
}

/// Whether a connector end can move Simple steps whole through its staging slots: a host
/// copy reaches its Simple slots only where they are host memory (not where they lie in GPU
/// memory, `direct`). A Simple step that fits a slot then travels as one message with its
/// size word, as LL and LL128 steps do, where both ends can: the receiver says so in its
/// published handle, and tells the two framings apart by the length that arrives.
fn takes_whole(end: &End) -> bool {
    end.slots == Slots::Host
}

/// The Simple slots of a connector end, which the plugin reads or writes (LL and LL128
/// steps go through staging), and the memory they lie in.
fn simple_slots(end: &End) -> (*mut u8, usize, MemKind) {
    let kind = if end.slots == Slots::Host { MemKind::Host } else { MemKind::Cuda };
    (end.fifo.buf[SIMPLE], end.fifo.slot_bytes[SIMPLE] as usize * STEPS, kind)
}

/// A rank's receive connectors, listening; `handles` is what its peers must be sent.
struct Listening {
    listens: Vec<(Link, ListenComm)>,
    handles: Vec<u8>,
}

/// Listens for every receive connector in `recvs`, each on its channel's device (`devices`).
fn listen(net: &Network, layout: &Layout, rank: usize, devices: &[usize], recvs: &[End]) -> Result<Listening> {
    let mut listens = Vec::with_capacity(recvs.len());
    let mut handles = Vec::with_capacity(recvs.len() * ENTRY);
    for end in recvs {
        let (link, dev) = (end.link, devices[end.link.chan]);
        let (handle, comm) = net.listen(dev).map_err(|e| {
            Error::Internal(format!(
                "rank {rank}: listening for rank {} (channel {}) on {} device {dev}: {e}",
                link.peer,
                link.chan,
                net.name()
            ))
        })?;
        handles.extend_from_slice(&(link.peer as u32).to_le_bytes());
        handles.extend_from_slice(&(layout.offset(link.chan, link.edge) as u64).to_le_bytes());
        handles.push(takes_whole(end) as u8);
        handles.extend_from_slice(&handle);
        listens.push((link, comm));
    }
    Ok(Listening { listens, handles })
}

/// The handle a receiver published for this rank's connector at FIFO `offset`, and
/// whether that receiver takes Simple steps whole.
fn handle_of(published: &[u8], rank: usize, offset: usize) -> Option<(Handle, bool)> {
    published.chunks_exact(ENTRY).find_map(|e| {
        let sender = u32::from_le_bytes(e[..4].try_into().expect("4 bytes")) as usize;
        let off = u64::from_le_bytes(e[4..12].try_into().expect("8 bytes")) as usize;
        (sender == rank && off == offset).then(|| (e[13..].try_into().expect("a handle"), e[12] == 1))
    })
}

/// What a rank's connectors need to be set up, owned by its proxy thread.
struct Setup {
    net: Network,
    layout: Layout,
    rank: usize,
    /// The device of each channel.
    devices: Vec<usize>,
    sends: Vec<End>,
    recvs: Vec<End>,
    /// The segment bases the links' FIFOs live in (shadows for the peers), as addresses.
    bases: Vec<usize>,
    deadline: Instant,
    timeout: Duration,
    /// Set by the initializing thread when it gives up: the setup stops waiting.
    abandoned: Arc<AtomicBool>,
}

/// Sends this rank's bytes to every rank and returns every rank's (an all-gather).
pub(crate) type Exchange<'a> = &'a dyn Fn(&[u8]) -> Result<Vec<Vec<u8>>>;

/// Sets up the connectors over `net` as `plan` routes them and starts the proxy thread that
/// moves their steps.
///
/// The thread itself listens, connects, accepts, registers and closes, so that every plugin
/// comm of a communicator is opened and closed by one thread of its own, as NCCL's proxy
/// does (some plugins keep per-thread state that comms opened on one thread share); in
/// between, the rank's host kernels also drive them, one thread at a time. `exchange` sends
/// this rank's listen handles to every rank and returns every rank's (the bootstrap's
/// all-gather); `lost` is asked now and then while connections are awaited, and its error
/// ends the setup. `bases` are the segment bases the links' FIFOs live in.
#[allow(clippy::too_many_arguments)]
pub(crate) fn start(
    net: &Network, plan: Plan, layout: &Layout, rank: usize, bases: &[*mut u8], cfg: &Resolved, exchange: Exchange,
    lost: &(dyn Fn() -> Result<()> + Sync),
) -> Result<Proxy> {
    let abandoned = Arc::new(AtomicBool::new(false));
    let Plan { choice, sends, recvs } = plan;
    for (c, &d) in choice.per_channel.iter().enumerate() {
        let dev = &net.devices()[d];
        let pci = dev.pci_path.as_deref().unwrap_or("no PCI path");
        tracing::info!("rank {rank}: channel {c} over {} device {d} ({}, {pci})", net.name(), dev.name);
    }
    tracing::info!("rank {rank}: {} devices chosen: {}", net.name(), choice.why);
    if let Some(most) = choice.per_channel.iter().map(|&d| net.devices()[d].max_recvs).max().filter(|&m| m > 1) {
        tracing::info!(
            "rank {rank}: {} offers up to {most} grouped receives; each receive connector has a comm of its own, \
             on which a step's bytes are received once its size word says where they go and the next word only \
             once the sender's kernel posts that step, so receives are posted one by one",
            net.name()
        );
    }
    let setup = Setup {
        net: net.clone(),
        layout: layout.clone(),
        rank,
        devices: choice.per_channel,
        sends,
        recvs,
        bases: bases.iter().map(|&b| b as usize).collect(),
        deadline: Instant::now() + cfg.timeout,
        timeout: cfg.timeout,
        abandoned: abandoned.clone(),
    };
    let activity = Arc::new(Activity::new(Wake::Park(std::sync::OnceLock::new())));
    let (handles_tx, handles_rx) = mpsc::channel::<Result<Vec<u8>>>();
    let (published_tx, published_rx) = mpsc::channel::<Vec<Vec<u8>>>();
    let (up_tx, up_rx) = mpsc::channel::<Result<()>>();
    let act = activity.clone();
    let thread = std::thread::Builder::new()
        .name(format!("jitccl-proxy{rank}"))
        .spawn(move || {
            if let Wake::Park(t) = &act.wake {
                let _ = t.set(std::thread::current());
            }
            let listening = match listen(&setup.net, &setup.layout, rank, &setup.devices, &setup.recvs) {
                Ok(l) => l,
                Err(e) => return drop(handles_tx.send(Err(e))),
            };
            if handles_tx.send(Ok(listening.handles.clone())).is_err() {
                return;
            }
            let Ok(published) = published_rx.recv() else { return };
            match setup.connect(listening, &published) {
                Ok((sends, recvs)) => {
                    let board = setup.layout.board(setup.bases[rank] as *mut u8);
                    let engine = Arc::new(Mutex::new(Engine::new(rank, sends, recvs, board)));
                    act.set_engine(engine.clone());
                    if up_tx.send(Ok(())).is_ok() {
                        run(rank, &engine, &act);
                    }
                    // The comms close on the thread that opened them.
                    engine.lock().unwrap_or_else(|p| p.into_inner()).close();
                }
                Err(e) => drop(up_tx.send(Err(e))),
            }
        })
        .map_err(sys("starting the proxy thread"))?;
    let proxy = Proxy::from_thread(thread, activity);
    let gone = || Error::Internal(format!("rank {rank}: the net proxy thread stopped during setup"));
    let up = (|| {
        let handles = handles_rx.recv().map_err(|_| gone())??;
        published_tx.send(exchange(&handles)?).map_err(|_| gone())?;
        loop {
            match up_rx.recv_timeout(LOST_POLL) {
                Ok(r) => return r,
                Err(mpsc::RecvTimeoutError::Timeout) => lost()?,
                Err(mpsc::RecvTimeoutError::Disconnected) => return Err(gone()),
            }
        }
    })();
    if up.is_err() {
        abandoned.store(true, Ordering::Release);
    }
    // On an error the proxy's drop waits for its thread, which gives up at once.
    up.map(|()| proxy)
}

impl Setup {
    /// Connects every send connector to the handle its receiver published for it
    /// (`published[q]`: rank q's), accepts every receive connector, registers their memory.
    fn connect(&self, listening: Listening, published: &[Vec<u8>]) -> Result<(Vec<SendSide>, Vec<RecvSide>)> {
        let (net, layout, rank) = (&self.net, &self.layout, self.rank);
        let name = net.name().to_string();
        let failed =
            |what: String| move |e: crate::netplugin::NetError| Error::Internal(format!("rank {rank}: {what}: {e}"));
        let mut handles = Vec::with_capacity(self.sends.len());
        let mut whole = Vec::with_capacity(self.sends.len());
        for e in &self.sends {
            let l = &e.link;
            let offset = layout.offset(l.chan, l.edge);
            let h = handle_of(&published[l.peer], rank, offset).ok_or_else(|| {
                Error::Internal(format!(
                    "rank {rank}: rank {} published no {name} handle for this rank's channel {}",
                    l.peer, l.chan
                ))
            })?;
            handles.push(h.0);
            whole.push(h.1 && takes_whole(e));
        }
        let mut send_comms: Vec<Option<_>> = self.sends.iter().map(|_| None).collect();
        let mut listens: Vec<(Link, Option<ListenComm>, Option<_>)> =
            listening.listens.into_iter().map(|(l, c)| (l, Some(c), None)).collect();
        loop {
            let mut moved = false;
            for (i, l) in self.sends.iter().map(|e| &e.link).enumerate() {
                if send_comms[i].is_some() {
                    continue;
                }
                let dev = self.devices[l.chan];
                let what = format!("connecting to rank {} (channel {}) over {name}", l.peer, l.chan);
                // The same handle each time: a plugin may keep its progress in it.
                if let Some(c) = net.connect(dev, &mut handles[i]).map_err(failed(what))? {
                    send_comms[i] = Some(c);
                    moved = true;
                }
            }
            for (l, listen, comm) in listens.iter_mut().filter(|(_, _, c)| c.is_none()) {
                let what = format!("accepting rank {} (channel {}) over {name}", l.peer, l.chan);
                if let Some(c) = listen.as_mut().expect("listening").accept().map_err(failed(what))? {
                    *comm = Some(c);
                    // A listen serves one connection.
                    *listen = None;
                    moved = true;
                }
            }
            let missing =
                send_comms.iter().filter(|c| c.is_none()).count() + listens.iter().filter(|l| l.2.is_none()).count();
            if missing == 0 {
                break;
            }
            if self.abandoned.load(Ordering::Acquire) {
                return Err(Error::Internal(format!("rank {rank}: {name} connection setup abandoned")));
            }
            if Instant::now() > self.deadline {
                let (peer, chan) = self
                    .sends
                    .iter()
                    .zip(&send_comms)
                    .find(|(_, c)| c.is_none())
                    .map(|(e, _)| &e.link)
                    .or_else(|| listens.iter().find(|l| l.2.is_none()).map(|l| &l.0))
                    .map(|l| (l.peer, l.chan))
                    .expect("a connection is missing");
                return Err(Error::Timeout {
                    op: format!("{name} connection setup ({missing} connection(s) missing)"),
                    rank,
                    channel: chan,
                    peer: peer as i32,
                    waiting: "a connection with",
                    timeout_s: self.timeout.as_secs_f64(),
                });
            }
            if !moved {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        let register = |what: &str, l: &Link, r: std::result::Result<Mr, crate::netplugin::NetError>| {
            r.map_err(|e| {
                Error::Internal(format!(
                    "rank {rank}: registering {what} for rank {} (channel {}): {e}",
                    l.peer, l.chan
                ))
            })
        };
        let mut send_sides = Vec::with_capacity(self.sends.len());
        for ((end, comm), whole) in self.sends.iter().zip(send_comms).zip(whole) {
            let (mut comm, l) = (comm.expect("connected"), end.link);
            let (ptr, bytes, kind) = simple_slots(end);
            let fifo_mr = register("the FIFO", &l, comm.reg_mr(ptr, bytes, kind))?;
            let staging =
                Staging::new(layout, whole, |p, b| register("staging memory", &l, comm.reg_mr(p, b, MemKind::Host)))?;
            send_sides.push(SendSide::new(l, end.fifo, comm, fifo_mr, staging));
        }
        let mut recv_sides = Vec::with_capacity(listens.len());
        for (end, (l, _, comm)) in self.recvs.iter().zip(listens) {
            let mut comm = comm.expect("accepted");
            let (ptr, bytes, kind) = simple_slots(end);
            let fifo_mr = register("the FIFO", &l, comm.reg_mr(ptr, bytes, kind))?;
            let staging = Staging::new(layout, takes_whole(end), |p, b| {
                register("staging memory", &l, comm.reg_mr(p, b, MemKind::Host))
            })?;
            let flush = end.slots == (Slots::Gpu { flush: true });
            recv_sides.push(RecvSide::new(l, end.fifo, layout.ll128_flag, comm, fifo_mr, staging, flush));
        }
        let direct = |ends: &[End]| ends.iter().filter(|e| e.slots != Slots::Host).count();
        tracing::info!(
            "rank {rank}: net transport up over {name} (plugin {}, v{}), {} send and {} receive connector(s) on \
             device(s) {:?}, {} and {} of them direct to GPU memory",
            net.library(),
            net.version(),
            send_sides.len(),
            recv_sides.len(),
            self.devices.iter().collect::<std::collections::BTreeSet<_>>(),
            direct(&self.sends),
            direct(&self.recvs),
        );
        Ok((send_sides, recv_sides))
    }
}

/// What a rank's proxy moves over the plugin: its connectors' two sides, and what it has
/// noted of its peers.
struct Engine {
    rank: usize,
    sends: Vec<SendSide>,
    recvs: Vec<RecvSide>,
    board: Board,
    peers: Peers,
    /// When this rank's communicator failed (a fault message went to the peers).
    fault_at: Option<Instant>,
}

// SAFETY: the raw FIFO pointers in the sides stay valid while the communicator (which owns
// both the segments and the proxy) lives, and are accessed with the same atomics as kernels;
// the engine is used by one thread at a time (its lock). A plugin comm is then driven by
// more than the thread that opened it, one thread at a time, as NCCL drives it (its proxy
// service thread connects, its progress thread moves the data).
unsafe impl Send for Engine {}

impl Engine {
    fn new(rank: usize, sends: Vec<SendSide>, recvs: Vec<RecvSide>, board: Board) -> Engine {
        let peers = Peers::new(sends.iter().map(|s| s.link.peer).chain(recvs.iter().map(|r| r.link.peer)));
        Engine { rank, sends, recvs, board, peers, fault_at: None }
    }

    /// Completes what the plugin finished and hands it what comes next; true if anything
    /// moved.
    fn pass(&mut self, act: &Activity) -> bool {
        let Engine { rank, sends, recvs, board, peers, fault_at } = self;
        let rank = *rank;
        peers.note_due(board);
        let mut progressed = false;
        let fault = act.fault.swap(0, Ordering::AcqRel);
        if fault > 0 {
            *fault_at = Some(Instant::now());
            sends.iter_mut().for_each(|s| s.report_fault(fault - 1));
        }
        for s in sends.iter_mut().filter(|s| !s.dead) {
            match s.pump() {
                Ok(p) => progressed |= p,
                Err(why) => {
                    let lost = !s.flushed();
                    link_failed(rank, "to", s.link, &why, lost);
                    if lost {
                        link_lost(board, rank, s.link.peer);
                    }
                    peers.closed(s.link.peer);
                    s.dead = true;
                }
            }
        }
        for r in recvs.iter_mut().filter(|r| !r.dead) {
            match r.pump() {
                Ok(p) => progressed |= p,
                Err(why) => {
                    link_failed(rank, "from", r.link, &why, r.mid_step() || r.fault.is_some());
                    match r.fault {
                        Some(culprit) => board.note(r.link.peer, Notice::reported(culprit)),
                        None if r.mid_step() => link_lost(board, rank, r.link.peer),
                        None => peers.closed(r.link.peer),
                    }
                    r.dead = true;
                }
            }
        }
        // A plugin may never finish a send to a peer that stopped receiving: the fault is
        // reported as far as it could be.
        let flushed = sends.iter().all(SendSide::settled) || fault_at.is_some_and(|t| t.elapsed() > FAULT_FLUSH);
        if fault_at.is_some() && !act.fault_sent.load(Ordering::Relaxed) && flushed {
            act.fault_sent.store(true, Ordering::Release);
        }
        progressed
    }

    /// Requests are in flight that only polling completes: a step on its way out, or one
    /// on its way in (the receive always posted for the next step's first message does not
    /// count: it may wait for the peer's next call).
    fn outstanding(&self) -> bool {
        self.sends.iter().any(|s| !s.dead && !s.flushed()) || self.recvs.iter().any(|r| !r.dead && r.mid_step())
    }

    /// Closes every comm.
    fn close(&mut self) {
        self.recvs.clear();
        self.sends.clear();
    }
}

impl Drive for Engine {
    fn drive(&mut self, act: &Activity) -> std::io::Result<bool> {
        Ok(self.pass(act))
    }

    fn settled(&self) -> bool {
        self.sends.iter().all(SendSide::settled)
    }

    /// A plugin's connectors are never proxied (`Conn::proxied`): every step goes through
    /// the FIFOs, and nothing points into a caller's buffer.
    fn release(&mut self) {}
}

/// The proxy thread: passes of the engine while no host kernel drives it, then the drain
/// and the goodbyes at close.
fn run(rank: usize, engine: &Mutex<Engine>, act: &Activity) {
    let mut pace = Pace::polled();
    let mut drain_until = None;
    let mut farewell_until = None;
    loop {
        let Some(mut e) = pace.lock(engine, act) else { continue };
        let mut busy = pace.busy(act);
        if act.stop.load(Ordering::Acquire) {
            busy = true;
            let until = *drain_until.get_or_insert_with(|| Instant::now() + DRAIN);
            let flushed = e.settled();
            if !flushed && Instant::now() > until {
                tracing::warn!("rank {rank}: closing with posted steps its peers never took");
                return;
            }
            // Then each side says goodbye, and waits (bounded) for its peers' last messages,
            // so that no receive is still posted when its comm closes: a failed
            // communicator's last message is its fault message, which its peers answer with
            // theirs.
            if flushed {
                let farewell = *farewell_until.get_or_insert_with(|| Instant::now() + FAREWELL);
                e.sends.iter_mut().for_each(SendSide::close);
                let gone = |q: usize| e.board.get(q).is_some_and(|n| n.is_gone());
                let done = e.sends.iter().all(|s| s.closed() || gone(s.link.peer))
                    && e.recvs.iter().all(|r| r.dead || r.closed || gone(r.link.peer));
                if done || Instant::now() > farewell {
                    if !done {
                        let unsaid: Vec<usize> = e.sends.iter().filter(|s| !s.closed()).map(|s| s.link.peer).collect();
                        let unheard: Vec<usize> =
                            e.recvs.iter().filter(|r| !r.dead && !r.closed).map(|r| r.link.peer).collect();
                        tracing::debug!(
                            "rank {rank}: closing before every peer said goodbye (goodbye not sent to ranks \
                             {unsaid:?}, not heard from ranks {unheard:?})"
                        );
                    }
                    return;
                }
            }
        }
        let progressed = e.pass(act);
        let outstanding = e.outstanding();
        let gone = e.peers.any_gone();
        drop(e);
        if pace.driven(progressed, act) {
            continue;
        }
        if let Some(wait) = pace.after(progressed, busy || outstanding, gone, act) {
            std::thread::park_timeout(wait);
            act.sleeping.store(false, Ordering::Relaxed);
        }
    }
}

/// Steps between this rank and `peer` are lost: whatever this rank's kernels wait on now
/// or later fails, naming the peer, and the communicator's failure then reaches the others.
fn link_lost(board: &Board, rank: usize, peer: usize) {
    for q in (0..board.nranks()).filter(|&q| q != rank) {
        board.note(q, Notice { culprit: peer, seen: Seen::LinkLost });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sender_finds_the_handle_its_receiver_published_for_it() {
        let mut published = Vec::new();
        for (sender, offset, whole, fill) in [(1u32, 4096u64, 1u8, 7u8), (2, 4096, 0, 8), (1, 8192, 0, 9)] {
            published.extend_from_slice(&sender.to_le_bytes());
            published.extend_from_slice(&offset.to_le_bytes());
            published.push(whole);
            published.extend_from_slice(&[fill; HANDLE_BYTES]);
        }
        assert_eq!(handle_of(&published, 1, 4096), Some(([7; HANDLE_BYTES], true)));
        assert_eq!(handle_of(&published, 2, 4096), Some(([8; HANDLE_BYTES], false)));
        assert_eq!(handle_of(&published, 1, 8192), Some(([9; HANDLE_BYTES], false)));
        assert_eq!(handle_of(&published, 3, 4096), None);
        assert_eq!(handle_of(&published[..ENTRY - 1], 1, 4096), None);
    }
}
