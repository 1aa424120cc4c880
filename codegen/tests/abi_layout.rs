//! The Rust mirrors of the kernel ABI (`jitccl_codegen::abi`) have every field at the
//! offset the kernels see: `templates/common/abi.h` compiled by the host C compiler with an
//! assertion per field, and every constant the two sides share has one value. The kernels
//! themselves assert the struct sizes only, on both targets; an offset drift of equal size
//! would pass them. (NVRTC has no `offsetof` without headers; CUDA lays structs out as the
//! host does, which is what lets kernel parameters cross from host to device at all.)

use std::mem::offset_of;

use jitccl_codegen::abi::{self, Args, Channel, Conn, Status};
use jitccl_codegen::compile::host::host_cc;

const ABI_H: &str = include_str!("../../templates/common/abi.h");
const TYPES: &str = "typedef int jc_i32; typedef long long jc_i64; typedef unsigned long long jc_u64;\n";

/// `(struct, field, offset)` for every field of every ABI struct, and the sizes.
fn facts() -> Vec<(&'static str, &'static str, usize)> {
    macro_rules! fields {
        ($out:ident, $t:ty, $c:literal: $($f:ident),+) => {
            $($out.push(($c, stringify!($f), offset_of!($t, $f)));)+
            $out.push(($c, "", size_of::<$t>()));
        };
    }
    let mut v = Vec::new();
    fields!(v, Conn, "jc_conn": buf, head, tail, sizes, slot_bytes, step, credit, peer, same_gpu);
    fields!(v, Channel, "jc_channel": ring_send, ring_recv, tree_up_send, tree_up_recv, tree_down_send,
        tree_down_recv, ring_ranks, ring_index, tree_parent, tree_nchildren, halted, sent, shifted);
    fields!(v, Status, "jc_status": code, peer, what, pad);
    fields!(v, Args, "jc_args": sendbuff, recvbuff, count, recv_count, chunk_elems, timeout_ns, channels,
        p2p_send, p2p_recv, peer_send, peer_recv, status, abort_flag, peer_failed, sym_send, sym_recv, sym_flags,
        sym_send_id, sym_recv_id, sym_send_off, sym_recv_off, scalar_f, scalar_i, spin,
        nranks, rank, root, nchannels);
    v
}

/// `(C macro, the Rust constant's value)` for every constant of `abi` that abi.h defines too.
fn constants() -> Vec<(&'static str, u64)> {
    macro_rules! consts {
        ($($c:ident),+ $(,)?) => { vec![$((concat!("JC_", stringify!($c)), abi::$c as u64)),+] };
    }
    consts! {
        STEPS, NPROTOS, MAX_TREE_ARITY, OK, ERR_ABORTED, ERR_TIMEOUT, ERR_PEER, ERR_MISMATCH, ERR_SPECIALIZED,
        WAIT_DATA, WAIT_SPACE, WAIT_BARRIER, SIZE_PROTO_SHIFT, SIZE_REF, REF_MIN, LAND_AT, LAND_WANT,
        LAND_TAG_SHIFT, SYM_CHANNELS, SYM_LINE, SYM_MAX_RANKS, SYM_P2P_WORDS, SYM_EAGER_BYTES,
        SYM_EAGER_MIN_RANKS, SYM_EAGER_HEADER, SYM_P2P_EAGER_BYTES, SYM_FLAGS_WORDS, P2P_BATCH_MAX,
    }
}

/// abi.h followed by one assertion per fact, with `assert` the target's static assertion.
fn checked_source(assert: &str) -> String {
    let mut src = format!("{TYPES}{ABI_H}\n#define JC_OFF(s, f) __builtin_offsetof(struct s, f)\n");
    for (s, f, n) in facts() {
        if f.is_empty() {
            src += &format!("{assert}(sizeof(struct {s}) == {n}, \"sizeof {s}\");\n");
        } else {
            src += &format!("{assert}(JC_OFF({s}, {f}) == {n}, \"{s}.{f} at {n}\");\n");
        }
    }
    for (c, v) in constants() {
        src += &format!("{assert}((unsigned long long)({c}) == {v}ull, \"{c} is {v}\");\n");
    }
    src
}

#[test]
fn every_field_and_shared_constant_is_what_the_kernels_see() {
    let cc = host_cc().expect("the host C compiler");
    let dir = tempfile::tempdir().unwrap();
    let src = checked_source("_Static_assert");
    let so = cc.compile(&src, "abi_layout", dir.path()).unwrap_or_else(|e| panic!("{e}"));
    assert!(so.starts_with(b"\x7fELF"));
    // The checks are real: a wrong offset, or a wrong constant, fails to compile.
    let bad = src.replace("JC_OFF(jc_args, rank) ==", "1 + JC_OFF(jc_args, rank) ==");
    assert_ne!(bad, src);
    assert!(cc.compile(&bad, "abi_layout_bad", dir.path()).is_err(), "a wrong offset must not compile");
    let bad = src.replace("(JC_REF_MIN) ==", "1 + (JC_REF_MIN) ==");
    assert_ne!(bad, src);
    assert!(cc.compile(&bad, "abi_layout_bad_constant", dir.path()).is_err(), "a wrong constant must not compile");
}
