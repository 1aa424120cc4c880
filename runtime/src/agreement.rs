//! The ranks' agreement on a call, checked before any data moves. A kernel fails a call
//! whose ranks pass other counts, types or ops, but the rank that notices names only its
//! peer, and a rank that only sends may return first. So a front door that lets users
//! call collectives with their own tensors (the PyTorch backend) first all-gathers a
//! fixed-size [`Descriptor`] of each rank's call and refuses it on every rank alike, naming
//! each rank's call, when they differ.
//!
//! The descriptor carries names, not numbers, so each caller speaks its own vocabulary
//! (c10d's operations and dtypes for PyTorch) and the refusal reads in it, while the rules
//! (what is compared, how counts fold, what the refusal says) exist here only.

use std::fmt::Write as _;

use crate::comm::Comm;
use crate::device::DeviceBuffer;
use crate::error::{Error, Result};
use crate::stream::Stream;
use crate::Wire;

/// The bytes of one rank's descriptor (its all-gather moves `nranks` of them).
pub const DESCRIPTOR_BYTES: usize = 128;

/// Where each field lies in the encoded descriptor; names are NUL-padded UTF-8, the
/// numbers little-endian.
const OP: std::ops::Range<usize> = 0..32;
const DTYPE: std::ops::Range<usize> = 32..48;
const REDUCTION: std::ops::Range<usize> = 48..72;
const NCOUNTS: usize = 72;
const TOTAL: usize = 80;
const HASH: usize = 88;
const ROOT: usize = 96;
const WIRE: usize = 104;

/// One rank's call as the ranks compare it.
#[derive(Debug, Clone, Copy)]
pub struct Descriptor<'a> {
    /// The operation's name (at most 31 bytes): `allreduce`, `broadcast`, ...
    pub op: &'a str,
    /// The element type's name (at most 15 bytes), if the call has one.
    pub dtype: Option<&'a str>,
    /// The element count of each of its tensors (none: a barrier, or a call whose counts
    /// are checked otherwise).
    pub counts: &'a [u64],
    pub root: Option<usize>,
    /// The reduction's name (at most 23 bytes), if the call reduces; a factor that may
    /// differ by rank (a pre-multiplied sum's) is not part of it.
    pub reduction: Option<&'a str>,
    /// The wire format the call asks for, if any.
    pub wire: Option<Wire>,
}

impl Descriptor<'_> {
    /// The fixed-size form every rank all-gathers; an error for a name too long to fit.
    pub fn encode(&self) -> Result<[u8; DESCRIPTOR_BYTES]> {
        let mut out = [0u8; DESCRIPTOR_BYTES];
        put_name(&mut out[OP], "operation", self.op)?;
        put_name(&mut out[DTYPE], "type", self.dtype.unwrap_or(""))?;
        put_name(&mut out[REDUCTION], "reduction", self.reduction.unwrap_or(""))?;
        // Many counts fold into their sum and a hash of the list: equal lists stay equal,
        // and the sum is what the refusal shows.
        let total = self.counts.iter().fold(0u64, |s, &c| s.wrapping_add(c));
        let hash = self.counts.iter().fold(FNV_OFFSET, |h, &c| {
            c.to_le_bytes().iter().fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME))
        });
        let root = self.root.map_or(-1, |r| i64::try_from(r).unwrap_or(i64::MAX));
        let wire = self.wire.map_or(0, |w| 1 + (u64::from(w.code()) << 16 | u64::from(w.block().unwrap_or(0))));
        for (at, v) in [(NCOUNTS, self.counts.len() as u64), (TOTAL, total), (HASH, hash), (WIRE, wire)] {
            out[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        out[ROOT..ROOT + 8].copy_from_slice(&root.to_le_bytes());
        Ok(out)
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn put_name(field: &mut [u8], what: &str, name: &str) -> Result<()> {
    // One byte stays NUL, so every name ends inside its field.
    if name.len() >= field.len() || name.contains('\0') {
        return Err(Error::InvalidArgument(format!(
            "the call's {what} name {name:?} must be under {} bytes, without NUL",
            field.len()
        )));
    }
    field[..name.len()].copy_from_slice(name.as_bytes());
    Ok(())
}

fn name(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

fn word(d: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(d[at..at + 8].try_into().expect("8 bytes"))
}

/// An encoded descriptor as a refusal shows it: `allreduce of 100 float32 elements,
/// ReduceOp.SUM`.
fn describe(d: &[u8]) -> String {
    let (op, dtype, reduction) = (name(&d[OP]), name(&d[DTYPE]), name(&d[REDUCTION]));
    let ncounts = word(d, NCOUNTS);
    let mut what = match (ncounts, dtype.is_empty()) {
        (0, true) => op,
        (0, false) => format!("{op} of {dtype}"),
        (_, true) => format!("{op} of {} elements", word(d, TOTAL)),
        (_, false) => format!("{op} of {} {dtype} elements", word(d, TOTAL)),
    };
    if ncounts > 1 {
        let _ = write!(what, " in {ncounts} tensors");
    }
    if let Ok(root) = usize::try_from(word(d, ROOT) as i64) {
        let _ = write!(what, ", root {root}");
    }
    if !reduction.is_empty() {
        let _ = write!(what, ", {reduction}");
    }
    if let Some(w) = word(d, WIRE).checked_sub(1) {
        let (code, block) = ((w >> 16) as u8, (w & 0xFFFF) as u16);
        match Wire::from_code(code, (block != 0).then_some(block)) {
            Ok(wire) => write!(what, ", in the {wire} wire"),
            Err(_) => write!(what, ", in wire format {code} with block {block}"),
        }
        .expect("writing to a String");
    }
    what
}

/// Whether every rank's descriptor (`every`: the all-gathered descriptors, rank by rank)
/// equals `mine`; when not, the refusal naming what each rank called, ranks that called
/// alike together.
pub fn refusal(mine: &[u8; DESCRIPTOR_BYTES], every: &[u8]) -> Option<String> {
    if every.chunks(DESCRIPTOR_BYTES).all(|d| d == mine) {
        return None;
    }
    // Grouped by descriptor: calls that read alike but differ in the order or split of
    // their tensors' counts (only the sum shows) say so.
    let mut kinds: Vec<(&[u8], String, Vec<usize>)> = Vec::new();
    for (rank, d) in every.chunks(DESCRIPTOR_BYTES).enumerate() {
        match kinds.iter_mut().find(|(k, _, _)| *k == d) {
            Some((_, _, ranks)) => ranks.push(rank),
            None => {
                let mut what = describe(d);
                if kinds.iter().any(|(_, w, _)| *w == what) {
                    what += ", the tensors' counts otherwise";
                }
                kinds.push((d, what, vec![rank]))
            }
        }
    }
    let parts: Vec<String> = kinds
        .iter()
        .map(|(_, what, ranks)| {
            let list: Vec<String> = ranks.iter().map(usize::to_string).collect();
            format!("rank{} {}: {what}", if ranks.len() > 1 { "s" } else { "" }, list.join(", "))
        })
        .collect();
    Some(format!("the ranks called it differently: {}", parts.join("; ")))
}

/// What an agreement found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every rank called the same.
    Agreed,
    /// The ranks called differently: every rank gets this same text.
    Refused(String),
}

/// One communicator's agreement: memory for the all-gather of the descriptors (on the
/// host, in the host arena, where the local peers read it in place) and a stream for it.
pub struct Agreement {
    memory: DeviceBuffer<u8>,
    stream: Stream,
}

impl std::fmt::Debug for Agreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Agreement({} bytes)", self.memory.len())
    }
}

impl Agreement {
    /// Memory and a stream for `comm`'s agreements (a blocking communicator: the verdict
    /// is needed before the call goes on).
    pub fn new(comm: &Comm) -> Result<Agreement> {
        Self::on_stream(comm, comm.device().stream()?)
    }

    /// As [`new`](Self::new), the all-gathers queued on `stream`: behind what is queued
    /// there (a process group's pending work), so that every rank runs them in the same
    /// order as the calls around them.
    pub fn on_stream(comm: &Comm, stream: Stream) -> Result<Agreement> {
        if !comm.is_blocking() {
            return Err(Error::InvalidUsage(format!(
                "{comm:?}: the ranks' agreement on a call needs a blocking communicator"
            )));
        }
        let memory = comm.device().alloc::<u8>(DESCRIPTOR_BYTES * (comm.nranks() + 1))?;
        Ok(Agreement { memory, stream })
    }

    /// All-gathers `call`'s descriptor over `comm` (every rank calls it) and compares: every
    /// rank gets the same verdict. An error where the all-gather fails (a peer gone, a
    /// timeout) or a name does not fit.
    pub fn check(&self, comm: &Comm, call: &Descriptor) -> Result<Verdict> {
        let n = comm.nranks();
        if self.memory.len() != DESCRIPTOR_BYTES * (n + 1) {
            return Err(Error::InvalidArgument(format!(
                "{comm:?}: this agreement was made for a communicator of {} ranks",
                self.memory.len() / DESCRIPTOR_BYTES - 1
            )));
        }
        let mine = call.encode()?;
        let (send, every) =
            (self.memory.slice(0..DESCRIPTOR_BYTES)?, self.memory.slice(DESCRIPTOR_BYTES..self.memory.len())?);
        send.copy_from_host(&mine)?;
        comm.all_gather(&send, &every, DESCRIPTOR_BYTES, &self.stream)?;
        self.stream.synchronize()?;
        Ok(match refusal(&mine, &every.to_vec()) {
            None => Verdict::Agreed,
            Some(text) => Verdict::Refused(text),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call<'a>(op: &'a str, counts: &'a [u64]) -> Descriptor<'a> {
        Descriptor { op, dtype: Some("float32"), counts, root: None, reduction: None, wire: None }
    }

    fn gathered(calls: &[Descriptor]) -> Vec<u8> {
        calls.iter().flat_map(|c| c.encode().unwrap()).collect()
    }

    #[test]
    fn equal_calls_agree_and_any_field_that_differs_refuses() {
        let base = Descriptor { root: Some(1), reduction: Some("ReduceOp.SUM"), ..call("allreduce", &[4, 5]) };
        let mine = base.encode().unwrap();
        assert_eq!(refusal(&mine, &gathered(&[base, base, base])), None);
        let int8 = Wire::from_code(5, Some(128)).unwrap();
        let others = [
            Descriptor { op: "reduce", ..base },
            Descriptor { dtype: Some("int8"), ..base },
            Descriptor { dtype: None, ..base },
            Descriptor { counts: &[5, 4], ..base },
            Descriptor { counts: &[9], ..base },
            Descriptor { root: Some(0), ..base },
            Descriptor { root: None, ..base },
            Descriptor { reduction: Some("ReduceOp.MAX"), ..base },
            Descriptor { wire: Some(int8), ..base },
        ];
        for other in others {
            let text = refusal(&mine, &gathered(&[base, other])).unwrap_or_else(|| panic!("{other:?} agreed"));
            assert!(text.starts_with("the ranks called it differently: rank 0: "), "{text}");
            // The other rank sees the same text.
            assert_eq!(refusal(&other.encode().unwrap(), &gathered(&[base, other])).as_deref(), Some(&*text));
        }
    }

    #[test]
    fn the_refusal_names_each_ranks_call_with_ranks_that_called_alike_together() {
        let a = Descriptor { reduction: Some("ReduceOp.SUM"), ..call("allreduce", &[100]) };
        let b = Descriptor { reduction: Some("ReduceOp.SUM"), ..call("allreduce", &[110]) };
        let text = refusal(&a.encode().unwrap(), &gathered(&[a, b, a])).unwrap();
        assert_eq!(
            text,
            "the ranks called it differently: ranks 0, 2: allreduce of 100 float32 elements, ReduceOp.SUM; \
             rank 1: allreduce of 110 float32 elements, ReduceOp.SUM"
        );
        let bf16 = Wire::from_code(1, None).unwrap();
        let shown = [
            (Descriptor { root: Some(3), ..call("broadcast", &[2]) }, "broadcast of 2 float32 elements, root 3"),
            (call("allgather_coalesced", &[2, 3]), "allgather_coalesced of 5 float32 elements in 2 tensors"),
            (Descriptor { dtype: None, ..call("barrier", &[]) }, "barrier"),
            (call("all_to_all", &[]), "all_to_all of float32"),
            (
                Descriptor { wire: Some(bf16), ..call("allreduce", &[8]) },
                "allreduce of 8 float32 elements, in the bf16 wire",
            ),
        ];
        for (d, what) in shown {
            let text = refusal(&a.encode().unwrap(), &gathered(&[a, d])).unwrap();
            assert!(text.ends_with(&format!("rank 1: {what}")), "{text}");
        }
    }

    #[test]
    fn names_too_long_for_their_field_are_refused() {
        let long = "x".repeat(32);
        assert!(matches!(call(&long, &[1]).encode(), Err(Error::InvalidArgument(_))));
        assert!(call(&long[..31], &[1]).encode().is_ok());
        let d = Descriptor { dtype: Some("a_type_name_of_16"), ..call("allreduce", &[1]) };
        assert!(matches!(d.encode(), Err(Error::InvalidArgument(_))));
        assert!(matches!(call("bad\0name", &[1]).encode(), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn two_thread_ranks_agree_and_refuse_alike_through_the_all_gather() {
        let comms = Comm::init_all(2, &crate::Config::default()).unwrap();
        let verdicts: Vec<(Verdict, Verdict)> = std::thread::scope(|s| {
            let handles: Vec<_> = comms
                .iter()
                .enumerate()
                .map(|(r, comm)| {
                    s.spawn(move || {
                        let agreement = Agreement::new(comm).unwrap();
                        let same = agreement.check(comm, &call("allreduce", &[4])).unwrap();
                        let counts = [4 + r as u64];
                        let differ = agreement.check(comm, &call("allreduce", &counts)).unwrap();
                        (same, differ)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let refused = Verdict::Refused(
            "the ranks called it differently: rank 0: allreduce of 4 float32 elements; \
             rank 1: allreduce of 5 float32 elements"
                .into(),
        );
        assert_eq!(verdicts, vec![(Verdict::Agreed, refused.clone()), (Verdict::Agreed, refused)]);
    }
}
