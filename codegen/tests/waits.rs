//! The kernels' bounded wait (`templates/common/ctx.h`) on the host target, with the
//! interleavings a real run hits only by chance made deterministic: the prelude's acquire
//! load is wrapped so that the peer acts right after the waiter's n-th look.

use jitccl_codegen::compile::host::host_cc;

const HOST_H: &str = include_str!("../../templates/prelude/host.h");
const ABI_H: &str = include_str!("../../templates/common/abi.h");
const CTX_H: &str = include_str!("../../templates/common/ctx.h");

/// `jc_test_wait(after, post, &code, &peer)`: waits for a counter to reach 1 from peer 1;
/// right after the waiter's `after`-th look the peer is marked failed (as the watcher
/// marks a process that exited), having first posted the counter if `post`. Returns the
/// wait's result and what it recorded in the channel status.
fn harness() -> String {
    format!(
        r#"#define jc_load_acquire jc_load_acquire_real
{HOST_H}
#undef jc_load_acquire
static jc_u64* jc_hook_p;
static jc_i32* jc_hook_failed;
static long jc_hook_after, jc_hook_post;
static jc_u64 jc_load_acquire(const jc_u64* p) {{
  jc_u64 v = jc_load_acquire_real(p);
  if (p == jc_hook_p && jc_hook_after > 0 && --jc_hook_after == 0) {{
    if (jc_hook_post) *jc_hook_p = 1;
    *jc_hook_failed = 1;
  }}
  return v;
}}
{ABI_H}
typedef float T;
typedef float C;
{CTX_H}
__attribute__((visibility("default"))) int jc_test_wait(long after, long post, int* code, int* peer) {{
  static jc_u64 counter;
  static jc_i32 failed[2], abort_flag;
  static struct jc_status status[1];
  struct jc_args a;
  memset(&a, 0, sizeof a);
  a.status = status;
  a.abort_flag = &abort_flag;
  a.peer_failed = failed;
  a.timeout_ns = 10000000000ull;
  a.spin = 1ull << 40;
  counter = 0;
  failed[1] = 0;
  memset(status, 0, sizeof status);
  jc_hook_p = &counter;
  jc_hook_failed = &failed[1];
  jc_hook_after = after;
  jc_hook_post = post;
  struct jc_ctx x = {{ &a, 0, 0, 0 }};
  int e = jc_wait_ge(&x, &counter, 1, 1, JC_WAIT_DATA);
  *code = status[0].code;
  *peer = status[0].peer;
  return e;
}}
"#
    )
}

type WaitFn = unsafe extern "C" fn(i64, i64, *mut i32, *mut i32) -> i32;

#[test]
fn a_peer_that_posts_then_exits_between_a_look_and_the_check_still_counts() {
    let cc = host_cc().expect("the host C compiler");
    let dir = tempfile::tempdir().unwrap();
    let so = cc.compile(&harness(), "waits", dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("waits_test.so");
    std::fs::write(&path, so).unwrap();
    // SAFETY: the library just built from the harness; its one function has this signature.
    let lib = unsafe { libloading::Library::new(&path) }.unwrap();
    let wait: libloading::Symbol<WaitFn> = unsafe { lib.get(b"jc_test_wait") }.unwrap();
    let run = |after: i64, post: bool| {
        let (mut code, mut peer) = (-1, -1);
        // SAFETY: plain integers and two out-pointers to locals.
        let e = unsafe { wait(after, post as i64, &mut code, &mut peer) };
        (e, code, peer)
    };
    // The look before a check (every 256th) saw the old value, then the peer posted and
    // exited: the check finds it failed, but what it posted must still end the wait well.
    // (The wait used to report JC_ERR_PEER here, failing a collective that had completed.)
    assert_eq!(run(256, true), (0, 0, 0), "posted before it failed");
    assert_eq!(run(100, true), (0, 0, 0), "posted between two checks");
    // A peer that failed without posting still fails the wait, naming it.
    assert_eq!(run(256, false), (3, 3, 1), "JC_ERR_PEER, recorded, peer 1");
    assert_eq!(run(1, false), (3, 3, 1));
}
