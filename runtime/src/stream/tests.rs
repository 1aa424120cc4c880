//! What a launch holds (its buffers, its communicator) is released by the `synchronize`
//! that waited for it, whoever ran it: the caller itself (a blocking call, or a batch) or
//! the stream's thread; and the ring of slots wraps around either way.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

use jitccl_codegen::Protocol;

use super::{KernelCall, Launch, Owner, DEPTH};
use crate::device::{CtaPool, Device, KernelRef};
use crate::error::Result;

/// An owner that counts its launches, which run on the caller or only on the stream's
/// thread.
struct Counting {
    on_caller: bool,
    runs: AtomicUsize,
}

impl Owner for Counting {
    fn run(&self, _: &mut KernelCall, _: &mut CtaPool) -> Result<()> {
        self.runs.fetch_add(1, SeqCst);
        Ok(())
    }

    fn runs_on_caller(&self) -> bool {
        self.on_caller
    }
}

fn launch(owner: &Arc<Counting>, keep: &Arc<()>) -> Launch {
    Launch {
        owner: owner.clone(),
        call: KernelCall {
            kernel: KernelRef::Host(std::ptr::null()),
            // SAFETY: every field is a number or a pointer, for which zero is a value; the
            // owner above reads none of them.
            args: unsafe { std::mem::zeroed() },
            nchannels: 1,
            proto: Protocol::Simple,
            name: "test",
        },
        _keep: [Some(keep.clone()), None],
        _direct: None,
    }
}

#[test]
fn synchronize_releases_what_its_launches_held_whoever_ran_them() {
    for on_caller in [true, false] {
        let stream = Device::host(0).stream().unwrap();
        let owner = Arc::new(Counting { on_caller, runs: AtomicUsize::new(0) });
        let keep = Arc::new(());
        let total = 3 * DEPTH as usize;
        for i in 1..=total {
            stream.enqueue(launch(&owner, &keep));
            // Blocking calls for the first lap of the ring, then batches of 7.
            if i <= DEPTH as usize || i % 7 == 0 || i == total {
                stream.synchronize().unwrap();
                assert_eq!(owner.runs.load(SeqCst), i, "on the caller: {on_caller}");
                let held = Arc::strong_count(&keep) - 1;
                assert_eq!(held, 0, "on the caller: {on_caller}: launches up to {i} still hold their buffers");
                assert_eq!(Arc::strong_count(&owner), 1, "on the caller: {on_caller}: and their owner");
            }
        }
    }
}
