//! NCCL 2.30's C API (`include/nccl.h`) served by jitccl, built as `libnccl.so.2`: C and
//! C++ programs link it, Python loads it with ctypes, PyTorch takes it with `LD_PRELOAD`.
//! Every NCCL function is exported twice, as `ncclX` and as its profiling twin `pncclX`;
//! jitccl's own (`jitcclX`, `include/jitccl.h`) once.
//!
//! - `types`: the C types and values (results, data types, ops, the config struct);
//! - `status`: NCCL's result codes from jitccl's errors, and the last-error texts;
//! - `handle`: what an `ncclComm_t` points to, and where a rank's device comes from;
//! - `init`, `lifecycle`: creating, splitting, shrinking and ending communicators;
//! - `calls`: the collectives and point to point, on the caller's buffers;
//! - `group`: ncclGroupStart / End / SimulateEnd, and completing calls in host mode;
//! - `memory`: ncclMemAlloc, buffer and window registration;
//! - `refused`: what jitccl does not have: each says so, none claims success;
//! - `wire`: jitccl's extension header `include/jitccl.h`, wire formats in C;
//! - `agree`: `jitcclAgree`, the ranks' check that they make the same call;
//! - `process_group`: jitccl.h's process group (the runtime's), its jobs and works.
//!
//! The safety contract of every export is NCCL's documented one: pointers name memory of
//! the sizes the call implies, handles come from this library and are not used after
//! they are destroyed.
#![allow(non_snake_case, clippy::missing_safety_doc)]

extern crate jitccl_runtime as jitccl;

/// Exports `$p` (the implementation) and `$n` calling it: NCCL's `pncclX` / `ncclX` pair.
macro_rules! export {
    ($(#[$m:meta])* $n:ident / $p:ident ($($a:ident : $t:ty),* $(,)?) -> $r:ty $body:block) => {
        $(#[$m])*
        #[no_mangle]
        pub unsafe extern "C" fn $p($($a: $t),*) -> $r $body

        $(#[$m])*
        #[no_mangle]
        pub unsafe extern "C" fn $n($($a: $t),*) -> $r {
            $p($($a),*)
        }
    };
}

mod agree;
mod calls;
mod group;
mod handle;
mod init;
mod lifecycle;
mod memory;
mod process_group;
mod refused;
mod settings;
mod status;
mod types;
mod wire;
