//! The table: every `JITCCL_*` variable, user settings first, then the test suite's.

use super::{Initial, Kind, Ranks, Scope, Setting};

/// Most channels a rank may use (each is a CTA: a thread on the host), as NCCL's MAXCHANNELS.
pub const MAX_CHANNELS: usize = 64;
/// Channels of a rank alone on its GPU by default, and the most the graph search looks for
/// unless told: NCCL's count on NVLink machines, which leaves SMs to the compute kernels a
/// training step overlaps with its collectives; separate GPUs have not run here, so more
/// waits for a measurement there. Up to `MAX_CHANNELS` may be set (`JITCCL_NCHANNELS`).
pub const GPU_CHANNELS: usize = 32;
/// Channels of each rank where ranks of one process share a GPU, within their share of its
/// SMs (`comm::init::threads`): they share one memory, where a ring kept gaining up to 64
/// CTAs a rank (docs/performance.md, "The GPU kernels").
pub const SHARED_GPU_CHANNELS: usize = 64;
/// The smallest Simple FIFO slot, and what every Simple slot is a multiple of.
pub const MIN_SIMPLE_SLOT: usize = 64;
/// The largest FIFO (all STEPS slots of one protocol): a rank's segment holds one per
/// channel and peer, so this bounds what a bad value can ask of /dev/shm.
pub const MAX_BUFFSIZE: usize = 1 << 30;
/// The smallest FIFO: its 8 slots (the kernel ABI's `STEPS`, which the runtime's `config`
/// checks against this, as the table sits below codegen) each of the smallest Simple slot.
pub const MIN_BUFFSIZE: usize = 8 * MIN_SIMPLE_SLOT;
/// The default Simple FIFO (8 slots of 128 KiB).
pub const DEFAULT_BUFFSIZE: usize = 1 << 20;
/// The default Simple FIFO of host ranks whose steps cross a network (NCCL's size): fewer,
/// larger plugin requests, fewer passes over the sockets.
pub const NET_BUFFSIZE: usize = 4 << 20;
/// The most a host rank's receive segment may take for `NET_BUFFSIZE`'s FIFOs (one per
/// channel and peer); a communicator whose segment would exceed it keeps the default.
pub const NET_SEGMENT_BUDGET: usize = 256 << 20;
/// Most sockets per net connector.
const MAX_NSOCKS: u64 = 16;
/// Most busy-poll rounds of a kernel's wait (about half a minute).
const MAX_SPIN: u64 = 1_000_000_000;

const fn user(name: &'static str, kind: Kind, default: Initial, about: &'static str) -> Setting {
    Setting { name, nccl: None, field: None, kind, default, ranks: Ranks::Process, scope: Scope::User, about }
}

/// A communicator setting: `field` of `Config` takes precedence over the variable.
const fn config(
    name: &'static str, field: &'static str, kind: Kind, default: Initial, ranks: Ranks, about: &'static str,
) -> Setting {
    Setting { field: Some(field), ranks, ..user(name, kind, default, about) }
}

const fn nccl(s: Setting, alias: &'static str) -> Setting {
    Setting { nccl: Some(alias), ..s }
}

const fn test(name: &'static str, scope: Scope, kind: Kind, about: &'static str) -> Setting {
    Setting { scope, ..user(name, kind, Initial::Computed("unset"), about) }
}

const CTAS: Kind = Kind::Whole { min: 1, max: MAX_CHANNELS as u64 };

pub const NCHANNELS: Setting = config(
    "JITCCL_NCHANNELS",
    "nchannels",
    CTAS,
    Initial::Computed("on the host the cores per rank, 1 to 4 (2 where ranks outnumber cores); on a GPU of its own 32; where ranks of one process share a GPU 64, or the GPU's SMs over the ranks of one process sharing it where fewer; clamped into `JITCCL_MIN_CTAS..=JITCCL_MAX_CTAS`"),
    Ranks::Agree,
    "channels (CTAs) per rank",
);
pub const MIN_CTAS: Setting = nccl(
    config("JITCCL_MIN_CTAS", "min_ctas", CTAS, Initial::Whole(1), Ranks::Agree, "fewest channels a rank uses"),
    "NCCL_MIN_CTAS",
);
pub const MAX_CTAS: Setting = nccl(
    config(
        "JITCCL_MAX_CTAS",
        "max_ctas",
        CTAS,
        Initial::Whole(MAX_CHANNELS as u64),
        Ranks::Agree,
        "most channels a rank uses",
    ),
    "NCCL_MAX_CTAS",
);
pub const ALGO: Setting = nccl(
    config(
        "JITCCL_ALGO",
        "algo, algos",
        Kind::Grammar("NCCL's: `ring,tree;allreduce:oneshot`, `allreduce:^tree`; names: ring, tree, oneshot, direct, direct_oneshot, recursive_doubling"),
        Initial::Computed("the tuner's choice"),
        Ranks::Agree,
        "the algorithms each collective may use. An unknown name fails init; a collective left with none fails with InvalidArgument (`JITCCL_ALGO=tree` leaves broadcast none: write `allreduce:tree`)",
    ),
    "NCCL_ALGO",
);
pub const PROTO: Setting = nccl(
    config(
        "JITCCL_PROTO",
        "proto, protos",
        Kind::Grammar("NCCL's: `^ll128;allreduce:ll`; names: simple, ll, ll128"),
        Initial::Computed("the tuner's choice"),
        Ranks::Agree,
        "the protocols each collective may use",
    ),
    "NCCL_PROTO",
);
pub const TUNER_CONFIG_FILE: Setting = nccl(
    config(
        "JITCCL_TUNER_CONFIG_FILE",
        "tuner_table",
        Kind::Path,
        Initial::Computed("`<cache dir>/tune/<topology fingerprint>.csv` if present"),
        Ranks::RankZero,
        "a tuning table in the CSV format of NCCL's example tuner; its rows override the cost model. A table for another topology or rank count is ignored with a warning. With a tuner plugin loaded, a file named by `NCCL_TUNER_CONFIG_FILE` alone is the plugin's",
    ),
    "NCCL_TUNER_CONFIG_FILE",
);
pub const TUNER_PLUGIN: Setting = nccl(
    user(
        "JITCCL_TUNER_PLUGIN",
        Kind::Text,
        Initial::Computed("`libnccl-tuner.so` where it loads, else none"),
        "NCCL's tuner plugin: `none`, or a comma-separated list of names (`X`: `libnccl-tuner-X.so`, else `X`) or paths, the first that loads and exports `ncclTunerPlugin_v6` .. `_v2` taken. It edits the cost model's table of each collective before the choice; one that fails to load or start is skipped with a warning. Read once per process; every rank must load the same one",
    ),
    "NCCL_TUNER_PLUGIN",
);
pub const TIMEOUT: Setting = config(
    "JITCCL_TIMEOUT",
    "timeout",
    Kind::Seconds,
    Initial::Seconds(300),
    Ranks::Agree,
    "how long a wait on a peer may go without progress before the operation fails",
);
pub const LINK_TIMEOUT: Setting = config(
    "JITCCL_LINK_TIMEOUT",
    "link_timeout",
    Kind::Seconds,
    Initial::Seconds(30),
    Ranks::Own,
    "how long a network link to a peer may carry nothing back (no acknowledgement, no answer to keepalive probes) before the operations waiting on that peer fail, naming it as unreachable; a shorter cut is survived",
);
pub const BUFFSIZE: Setting = nccl(
    config(
        "JITCCL_BUFFSIZE",
        "slot_bytes",
        Kind::Bytes { min: MIN_BUFFSIZE as u64, max: MAX_BUFFSIZE as u64 },
        Initial::Computed(
            "1048576 (1 MiB); 4194304 (4 MiB) for host ranks whose steps cross a network, where a rank's FIFOs then stay within 256 MiB (over Socket, calls that only copy keep 1 MiB's steps)",
        ),
        Ranks::Agree,
        "bytes of a Simple FIFO (8 slots), which LL and LL128 scale with",
    ),
    "NCCL_BUFFSIZE",
);
pub const NSOCKS_PERTHREAD: Setting = nccl(
    config(
        "JITCCL_NSOCKS_PERTHREAD",
        "nsocks",
        Kind::Whole { min: 1, max: MAX_NSOCKS },
        Initial::Whole(1),
        Ranks::Agree,
        "TCP sockets per connection of the network transport, for links one flow cannot fill",
    ),
    "NCCL_NSOCKS_PERTHREAD",
);
pub const NET: Setting = nccl(
    config(
        "JITCCL_NET",
        "net_name",
        Kind::Text,
        Initial::Computed("the first network plugin that initializes with a device, else Socket"),
        Ranks::Agree,
        "the network peers on other hosts use, by name (case-insensitive): `Socket` (built in) or a loaded \
         plugin's; an unknown name fails init, listing the networks available",
    ),
    "NCCL_NET",
);
pub const NET_PLUGIN: Setting = nccl(
    user(
        "JITCCL_NET_PLUGIN",
        Kind::Text,
        Initial::Computed("libnccl-net.so, if present"),
        "the network plugins to load, as NCCL: a name `X` (`libnccl-net-X.so`, else the file `X`), a path, a \
         comma-separated list tried in order, or `none`",
    ),
    "NCCL_NET_PLUGIN",
);
pub const NET_GDR_LEVEL: Setting = nccl(
    user(
        "JITCCL_NET_GDR_LEVEL",
        Kind::Grammar("a path type, nearest first: LOC, NVL, NVB, C2C, PIX, PXB, P2C, PXN, PHB, SYS; or NCCL's old numbers 0 (LOC), 1 (PIX), 2 (PXB), 3 (PHB), 4 and up (SYS)"),
        Initial::Text("P2C"),
        "the farthest path between a GPU and a network plugin's device over which the plugin moves GPU memory directly, where the device reports `NCCL_PTR_CUDA`; farther, a GPU rank's steps are staged through page-locked host memory. A device the topology cannot place counts as SYS",
    ),
    "NCCL_NET_GDR_LEVEL",
);
pub const NET_GDR_READ: Setting = nccl(
    user(
        "JITCCL_NET_GDR_READ",
        Kind::Flag,
        Initial::Computed("on from compute capability 8.0; before that only for a GPU with an NVLink peer or alone on its host"),
        "whether a network plugin's sends read GPU memory directly where the direct path applies (`JITCCL_NET_GDR_LEVEL`); 0: a GPU rank's sends are staged through page-locked host memory",
    ),
    "NCCL_NET_GDR_READ",
);
pub const NET_FORCE_FLUSH: Setting = nccl(
    user(
        "JITCCL_NET_FORCE_FLUSH",
        Kind::Flag,
        Initial::Flag(false),
        "1: every step a network plugin receives into GPU memory is flushed (`iflush`) before the kernel reads it; else only where the plugin's device asks for it (`forceFlush`, v9 and up) or the GPU's compute capability is below 9.0",
    ),
    "NCCL_NET_FORCE_FLUSH",
);
pub const COMM_NAME: Setting = config(
    "JITCCL_COMM_NAME",
    "comm_name",
    Kind::Text,
    Initial::Computed("none"),
    Ranks::Agree,
    "a name for the communicator in logs; children of a split inherit it",
);
pub const COMM_BLOCKING: Setting = nccl(
    config(
        "JITCCL_COMM_BLOCKING",
        "blocking",
        Kind::Flag,
        Initial::Flag(true),
        Ranks::Agree,
        "0: nonblocking communicators (init and every call return at once; `async_error` tells when done)",
    ),
    "NCCL_COMM_BLOCKING",
);
pub const COMM_SPLIT_SHARE_RESOURCES: Setting = nccl(
    config(
        "JITCCL_COMM_SPLIT_SHARE_RESOURCES",
        "split_share",
        Kind::Flag,
        Initial::Flag(false),
        Ranks::Agree,
        "NCCL's `splitShare`: accepted and agreed on, though a child shares nothing with its parent (kernels are process-wide anyway)",
    ),
    "NCCL_COMM_SPLIT_SHARE_RESOURCES",
);
pub const ABORT_PROPAGATE: Setting = config(
    "JITCCL_ABORT_PROPAGATE",
    "abort_propagates",
    Kind::Flag,
    Initial::Flag(false),
    Ranks::Agree,
    "1: an abort fails the peers' waits on the aborted rank at once, naming it",
);
pub const SPECIALIZE_RANKS: Setting = config(
    "JITCCL_SPECIALIZE_RANKS",
    "specialize_ranks",
    Kind::Flag,
    Initial::Computed("1 on GPUs, 0 on the host"),
    Ranks::Own,
    "1: kernels specialized for the communicator's rank count (up to 64), their loops over ranks unrolled; the same results",
);
pub const WIRE: Setting = config(
    "JITCCL_WIRE",
    "wire",
    Kind::Text,
    Initial::Text("exact"),
    Ranks::Agree,
    "the wire format of the float AllReduce, ReduceScatter, AllGather, Broadcast and Reduce calls it fits (sum or avg; \
     elements wider than its codes): `exact`, `bf16`, `fp16`, `fp8e4m3`, `fp8e5m2` or `int8`, the scaled ones with \
     `b32`..`b256`, their block (default 64), as `int8b128`; see the guide's Wire formats",
);
pub const WIRE_LOCAL: Setting = config(
    "JITCCL_WIRE_LOCAL",
    "wire_local",
    Kind::Choice(&["exact", "encode"]),
    Initial::Text("exact"),
    Ranks::Agree,
    "what a wire format does where the communicator's ranks all reach each other through memory (one host, no network \
     transport): `exact` runs its calls exactly (encoding cannot pay there; said once in the info log), `encode` runs \
     the wire's kernels anyway",
);
pub const SPIN: Setting = config(
    "JITCCL_SPIN",
    "spin",
    Kind::Whole { min: 0, max: MAX_SPIN },
    Initial::Computed("4096 for a rank with cores of its own, 32 where ranks share cores"),
    Ranks::Own,
    "busy-poll rounds (about 25 ns each) before a host wait yields its core; 0 suits a machine where other jobs keep every core busy",
);
pub const DEBUG: Setting = nccl(
    user(
        "JITCCL_DEBUG",
        Kind::Choice(&["WARN", "VERSION", "INFO", "DEBUG", "TRACE"]),
        Initial::Text("WARN"),
        "what is logged to stderr (algorithm and protocol choices and why, compiles, cache, transports); VERSION is INFO",
    ),
    "NCCL_DEBUG",
);
pub const IGNORE_CPU_AFFINITY: Setting = nccl(
    user(
        "JITCCL_IGNORE_CPU_AFFINITY",
        Kind::Flag,
        Initial::Flag(false),
        "1: do not bind each rank's kernel threads to its own share of the CPUs (by default a rank gets an equal share, or CPU `local_rank mod n` when ranks outnumber CPUs; a process already bound by its launcher is left alone)",
    ),
    "NCCL_IGNORE_CPU_AFFINITY",
);
pub const COMM_ID: Setting = nccl(
    user(
        "JITCCL_COMM_ID",
        Kind::Text,
        Initial::Computed("the launcher's `MASTER_ADDR:MASTER_PORT`, or the unique id passed"),
        "`host:port`: rank 0 runs the bootstrap root there",
    ),
    "NCCL_COMM_ID",
);
pub const MASTER_FD: Setting = user(
    "JITCCL_MASTER_FD",
    Kind::Whole { min: 0, max: i32::MAX as u64 },
    Initial::Computed("set by `jitccl launch` in rank 0 only"),
    "a socket rank 0 inherits from `jitccl launch`, bound to `MASTER_ADDR:MASTER_PORT`: rank 0's store listens on it, so the port never stands free for another process to take",
);
pub const BOOTSTRAP_TIMEOUT: Setting =
    user("JITCCL_BOOTSTRAP_TIMEOUT", Kind::Seconds, Initial::Seconds(120), "how long the bootstrap waits for ranks");
pub const SOCKET_IFNAME: Setting = nccl(
    user(
        "JITCCL_SOCKET_IFNAME",
        Kind::Text,
        Initial::Computed("the interface that reaches the root, else the first usable one"),
        "the interfaces for bootstrap and TCP, in NCCL's syntax (`eth`, `^docker`, `=eth0`)",
    ),
    "NCCL_SOCKET_IFNAME",
);
pub const AUTH_KEY: Setting = user(
    "JITCCL_AUTH_KEY",
    Kind::Secret,
    Initial::Computed("none: a unique id made by rank 0 carries a fresh key of its own; ids every rank computes (`JITCCL_COMM_ID`, the launcher's store) are not authenticated"),
    "the job's secret, at least 16 characters (`jitccl launch` makes one): every connection proves that it knows it",
);
pub const AUTH_KEY_FILE: Setting = user(
    "JITCCL_AUTH_KEY_FILE",
    Kind::Path,
    Initial::Computed("none"),
    "a file holding the job's secret (instead of `JITCCL_AUTH_KEY`), readable by its owner only",
);
pub const TLS: Setting = config(
    "JITCCL_TLS",
    "tls",
    Kind::Flag,
    Initial::Flag(false),
    Ranks::Agree,
    "1: the bootstrap's ring (from the configuration's agreement on) and the network transport's sockets carry TLS 1.3, pinned to the job's key (needs `JITCCL_AUTH_KEY`, `JITCCL_AUTH_KEY_FILE` or a unique id made by rank 0); not with network plugins",
);
pub const TRANSPORT: Setting = user(
    "JITCCL_TRANSPORT",
    Kind::Choice(&["auto", "shm", "net"]),
    Initial::Text("auto"),
    "`auto`/`shm`: shared memory on one machine, TCP across machines; `net`: TCP everywhere",
);
pub const HOST_ARENA: Setting = user(
    "JITCCL_HOST_ARENA",
    Kind::Flag,
    Initial::Flag(true),
    "0: host buffers come from the heap, so plain buffers take the FIFO algorithms only",
);
pub const CUDA_SYNC: Setting = user(
    "JITCCL_CUDA_SYNC",
    Kind::Flag,
    Initial::Flag(false),
    "1: every CUDA launch is waited for before the next is queued (C API calls wait for the caller's stream first), as before launches became asynchronous: to compare and to fall back on; no CUDA graph capture then",
);
pub const P2P_DISABLE: Setting = nccl(
    user(
        "JITCCL_P2P_DISABLE",
        Kind::Flag,
        Initial::Flag(false),
        "1: GPU ranks of one process exchange through host-staged FIFOs even where peer access would allow direct pointers",
    ),
    "NCCL_P2P_DISABLE",
);
pub const TOPO_FILE: Setting = nccl(
    user(
        "JITCCL_TOPO_FILE",
        Kind::Path,
        Initial::Computed("detection from `/sys`"),
        "the topology as NCCL XML; what it lacks is detected",
    ),
    "NCCL_TOPO_FILE",
);
pub const TOPO_DUMP_FILE: Setting = nccl(
    user("JITCCL_TOPO_DUMP_FILE", Kind::Path, Initial::Computed("none"), "where to write the topology as NCCL XML"),
    "NCCL_TOPO_DUMP_FILE",
);
pub const GRAPH_FILE: Setting = nccl(
    user(
        "JITCCL_GRAPH_FILE",
        Kind::Path,
        Initial::Computed("a search"),
        "the rings and trees as NCCL's graph XML, instead of searching them",
    ),
    "NCCL_GRAPH_FILE",
);
pub const GRAPH_DUMP_FILE: Setting = nccl(
    user(
        "JITCCL_GRAPH_DUMP_FILE",
        Kind::Path,
        Initial::Computed("none"),
        "where to write the rings and trees as NCCL's graph XML",
    ),
    "NCCL_GRAPH_DUMP_FILE",
);
pub const CACHE_DIR: Setting = user(
    "JITCCL_CACHE_DIR",
    Kind::Path,
    Initial::Computed("`~/.cache/jitccl`"),
    "the kernel cache, read by jitccl-codegen (set but empty: no disk cache). Each entry has a `.sum` file (length, SHA-256); a damaged one is compiled again with a warning",
);
pub const NVRTC_PATH: Setting = user(
    "JITCCL_NVRTC_PATH",
    Kind::Path,
    Initial::Computed("the first usable on the loader path, in `$CUDA_HOME`, `$CUDA_PATH`, `/usr/local/cuda*`, `.deps/nvrtc`, then Python's site-packages"),
    "libnvrtc (CUDA 12 or 13), a file or a folder holding it, read by jitccl-codegen",
);
pub const NCCL_SO: Setting = user(
    "JITCCL_NCCL_SO",
    Kind::Path,
    Initial::Computed("the library shipped in the package"),
    "the `libnccl.so.2` the Python package loads (and `pip install` ships, instead of building it)",
);
pub const TORCH_NATIVE: Setting = user(
    "JITCCL_TORCH_NATIVE",
    Kind::Choice(&["auto", "0", "1"]),
    Initial::Text("auto"),
    "the PyTorch backend's C++ part (`python/jitccl/torch/_native.cpp`, compiled at first use into the kernel cache): `auto` uses it where it builds (else a warning, and the Python group alone), `0` never, `1` requires it",
);
pub const DEVICE: Setting = user(
    "JITCCL_DEVICE",
    Kind::Choice(&["auto", "host", "cuda"]),
    Initial::Text("auto"),
    "where a rank created through the C API lives: `auto` is the current CUDA device, or the host where there is none",
);

pub const REQUIRE_NVRTC: Setting =
    test("JITCCL_REQUIRE_NVRTC", Scope::Test, Kind::Flag, "1: tests fail, instead of skipping, without NVRTC");
pub const TEST_DIE_AT: Setting = test(
    "JITCCL_TEST_DIE_AT",
    Scope::Test,
    Kind::Text,
    "`<point>[+<ms>]`: the process kills itself at that point of init (see `bootstrap/test_hook.rs`)",
);
pub const TEST_PAUSE_AT: Setting =
    test("JITCCL_TEST_PAUSE_AT", Scope::Test, Kind::Text, "`<point>+<ms>`: the process sleeps at that point of init");
pub const BOOTSTRAP_TEST_CHILD: Setting =
    test("JITCCL_BOOTSTRAP_TEST_CHILD", Scope::Harness, Kind::Text, "the role of a bootstrap test's child process");
pub const ISOLATED_TEST: Setting = test(
    "JITCCL_ISOLATED_TEST",
    Scope::Harness,
    Kind::Text,
    "the test a test binary's child process runs alone, with the variables its parent gave it (`jitccl_plugins::in_child`)",
);
pub const REQUIRE_GPU: Setting =
    test("JITCCL_REQUIRE_GPU", Scope::Harness, Kind::Flag, "1: GPU tests fail, instead of skipping, without a GPU");
pub const INIT_DEATHS_RANK: Setting =
    test("JITCCL_INIT_DEATHS_RANK", Scope::Harness, Kind::Text, "the rank of an init-deaths test's child");
pub const INIT_DEATHS_AFTER: Setting =
    test("JITCCL_INIT_DEATHS_AFTER", Scope::Harness, Kind::Text, "what an init-deaths test's child does after init");
pub const HOST_FAULTS_ROLE: Setting = test(
    "JITCCL_HOST_FAULTS_ROLE",
    Scope::Harness,
    Kind::Text,
    "the part of a host-faults test's child (`member` or `joiner`)",
);
pub const HOST_FAULTS_EXCLUDE: Setting = test(
    "JITCCL_HOST_FAULTS_EXCLUDE",
    Scope::Harness,
    Kind::Text,
    "the ranks a host-faults test's survivors shrink without",
);
pub const HOST_FAULTS_GROW_TO: Setting = test(
    "JITCCL_HOST_FAULTS_GROW_TO",
    Scope::Harness,
    Kind::Text,
    "the size a host-faults test's shrunk communicator grows to",
);
pub const HOST_FAULTS_STORE: Setting =
    test("JITCCL_HOST_FAULTS_STORE", Scope::Harness, Kind::Text, "`host:port` of a host-faults test's own store");
pub const TWO_HOSTS_WIRED: Setting = test(
    "JITCCL_TWO_HOSTS_WIRED",
    Scope::Harness,
    Kind::Flag,
    "1: the two-hosts test's child runs the wired ring's check (`wired_rank`)",
);
pub const TORCH_BIND: Setting =
    test("JITCCL_TORCH_BIND", Scope::Harness, Kind::Text, "the folders the PyTorch tests bind into their sandbox");
pub const TORCH_TESTS: Setting =
    test("JITCCL_TORCH_TESTS", Scope::Harness, Kind::Text, "the PyTorch tests to run, by name, comma-separated");
pub const TORCH_VICTIM: Setting =
    test("JITCCL_TORCH_VICTIM", Scope::Harness, Kind::Text, "the rank the killed-rank PyTorch test kills");
pub const TORCH_KILL_AT: Setting = test(
    "JITCCL_TORCH_KILL_AT",
    Scope::Harness,
    Kind::Text,
    "the point at which the killed-rank PyTorch test kills it",
);
pub const BIN: Setting = test(
    "JITCCL_BIN",
    Scope::Harness,
    Kind::Path,
    "the `jitccl` binary the PyTorch benchmark times beside the backend",
);
pub const EDGE_FAIL_SEND: Setting = test(
    "JITCCL_EDGE_FAIL_SEND",
    Scope::Harness,
    Kind::Text,
    "which send of the process the test network plugin `EdgeFailSend` fails (read by the plugin)",
);
pub const EDGE_INNER: Setting = test(
    "JITCCL_EDGE_INNER",
    Scope::Harness,
    Kind::Path,
    "the network plugin the test plugins forward to (read by the plugins)",
);
pub const EDGE_PCI_PATHS: Setting = test(
    "JITCCL_EDGE_PCI_PATHS",
    Scope::Harness,
    Kind::Text,
    "the test network plugin `EdgeStandIn`'s devices: one per comma-separated sysfs PCI path (read by the plugin)",
);
pub const EDGE_TRACE: Setting = test(
    "JITCCL_EDGE_TRACE",
    Scope::Harness,
    Kind::Path,
    "a file to which the test network plugin `EdgeStandIn` appends each listen's and connect's device (read by the plugin)",
);
pub const EDGE_COUNTS: Setting = test(
    "JITCCL_EDGE_COUNTS",
    Scope::Harness,
    Kind::Path,
    "a file to which the test network plugin `EdgeGpu` appends its counts (registrations by kind, iflush calls, GPU bytes) at each finalize (read by the plugin)",
);
pub const EDGE_FAIL_FLUSH: Setting = test(
    "JITCCL_EDGE_FAIL_FLUSH",
    Scope::Harness,
    Kind::Text,
    "which iflush of the process the test network plugin `EdgeGpu` fails (read by the plugin)",
);
pub const EDGE_FLUSH_TESTS: Setting = test(
    "JITCCL_EDGE_FLUSH_TESTS",
    Scope::Harness,
    Kind::Text,
    "on which test the test network plugin `EdgeGpu`'s iflush requests complete, 1 unless set (read by the plugin)",
);
pub const NVRTC13_PATH: Setting =
    test("JITCCL_NVRTC13_PATH", Scope::Harness, Kind::Path, "a CUDA 13 libnvrtc for the NVRTC 13 tests");

/// Every variable, in the order the reference lists them.
pub const ALL: &[Setting] = &[
    NCHANNELS,
    MIN_CTAS,
    MAX_CTAS,
    ALGO,
    PROTO,
    TUNER_CONFIG_FILE,
    TUNER_PLUGIN,
    TIMEOUT,
    LINK_TIMEOUT,
    BUFFSIZE,
    NSOCKS_PERTHREAD,
    NET,
    NET_PLUGIN,
    NET_GDR_LEVEL,
    NET_GDR_READ,
    NET_FORCE_FLUSH,
    COMM_NAME,
    COMM_BLOCKING,
    COMM_SPLIT_SHARE_RESOURCES,
    ABORT_PROPAGATE,
    SPECIALIZE_RANKS,
    WIRE,
    WIRE_LOCAL,
    SPIN,
    DEBUG,
    IGNORE_CPU_AFFINITY,
    COMM_ID,
    MASTER_FD,
    BOOTSTRAP_TIMEOUT,
    SOCKET_IFNAME,
    AUTH_KEY,
    AUTH_KEY_FILE,
    TLS,
    TRANSPORT,
    HOST_ARENA,
    P2P_DISABLE,
    CUDA_SYNC,
    TOPO_FILE,
    TOPO_DUMP_FILE,
    GRAPH_FILE,
    GRAPH_DUMP_FILE,
    CACHE_DIR,
    NVRTC_PATH,
    DEVICE,
    NCCL_SO,
    TORCH_NATIVE,
    REQUIRE_NVRTC,
    TEST_DIE_AT,
    TEST_PAUSE_AT,
    BOOTSTRAP_TEST_CHILD,
    ISOLATED_TEST,
    REQUIRE_GPU,
    INIT_DEATHS_RANK,
    INIT_DEATHS_AFTER,
    HOST_FAULTS_ROLE,
    HOST_FAULTS_EXCLUDE,
    HOST_FAULTS_GROW_TO,
    HOST_FAULTS_STORE,
    TWO_HOSTS_WIRED,
    TORCH_BIND,
    TORCH_TESTS,
    TORCH_VICTIM,
    TORCH_KILL_AT,
    BIN,
    NVRTC13_PATH,
    EDGE_FAIL_SEND,
    EDGE_INNER,
    EDGE_PCI_PATHS,
    EDGE_TRACE,
    EDGE_COUNTS,
    EDGE_FAIL_FLUSH,
    EDGE_FLUSH_TESTS,
];
