/* The kernel ABI shared with the runtime (runtime/src/abi.rs mirrors it field by field; the
   sizes are asserted at the end of every generated kernel). Independent of target and spec. */
#define JC_STEPS 8
#define JC_NPROTOS 3
#define JC_MAX_TREE_ARITY 3

/* Error codes a kernel returns (and records in its channel's jc_status). */
#define JC_OK 0
#define JC_ERR_ABORTED 1
#define JC_ERR_TIMEOUT 2
#define JC_ERR_PEER 3    /* the peer waited for has failed (peer_failed[peer] != 0) */
#define JC_ERR_MISMATCH 4 /* a peer's call differs: its step's tag or size, or (direct) its registered buffers, count or root */
#define JC_ERR_SPECIALIZED 5 /* the kernel is specialized for another rank count than the call's */

/* A FIFO step's size word: its bytes (the low 32 bits, what a network proxy forwards), the
   tag of the call that sent it (jc_call_tag), the protocol. LL128 flags carry the same tag
   above the step. */
#define JC_SIZE_TAG_SHIFT 32
#define JC_SIZE_PROTO_SHIFT 56
#define JC_TAG_MASK 0xffffffull
#define JC_LL128_TAG_SHIFT 40
/* Set in a size word over the built-in sockets (a connector's `proxied`): a sender's step
   passes by reference, its slot holding the address of its bytes, which stay put until the
   head passes it; a receiver's step landed where the kernel's landing said (JC_LAND_*). The
   network never carries it. */
#define JC_SIZE_REF (1ull << 60)
/* Steps of at least JC_REF_MIN bytes that only move bytes pass by reference over the
   built-in sockets (prims/host/simple.h): the copies through the FIFO cost more than the
   end-of-call wait for the socket to take them. */
#define JC_REF_MIN 8192
/* A proxied receiver's landing line (jc_conn.lands): where the step the kernel waits for may
   land (its address | its step's low bits << JC_LAND_TAG_SHIFT; 0 when none) and the size
   word it expects there. */
#define JC_LAND_AT 0
#define JC_LAND_WANT 1
#define JC_LAND_TAG_SHIFT 48

/* What a failed wait was waiting for. */
#define JC_WAIT_DATA 1  /* data from the peer (its tail / line flags) */
#define JC_WAIT_SPACE 2 /* the peer to free a FIFO slot (its head) */
#define JC_WAIT_BARRIER 3 /* direct: the peer to reach a barrier */

/* Direct algorithms: each rank's flags area holds one line of JC_SYM_LINE words per channel
   (up to JC_SYM_CHANNELS), written by that rank only: word 0 its barrier counter, then what
   it publishes of its call (see templates/common/direct.h). */
#define JC_SYM_CHANNELS 64
#define JC_SYM_LINE 16
#define JC_SYM_MAX_RANKS 64 /* direct kernels keep every rank's pointers on their stack */
/* Direct point-to-point: after the channel lines, a record of JC_SYM_P2P_WORDS words per
   peer, written by the area's rank only (see templates/algo/sendrecv_direct.h). */
#define JC_SYM_P2P (JC_SYM_CHANNELS * JC_SYM_LINE)
#define JC_SYM_P2P_WORDS 8
/* The eager area of direct AlltoAll, Gather and Scatter, after the point-to-point records:
   two halves of a header of JC_SYM_EAGER_HEADER words and up to JC_SYM_EAGER_BYTES of what a
   rank stages, written by the area's rank only (see templates/common/eager.h). */
#define JC_SYM_EAGER (JC_SYM_P2P + JC_SYM_MAX_RANKS * JC_SYM_P2P_WORDS)
#define JC_SYM_EAGER_BYTES 8192
#define JC_SYM_EAGER_MIN_RANKS 3 /* the fewest ranks at which the eager paths run */
#define JC_SYM_EAGER_HEADER 8
#define JC_SYM_EAGER_HALF (JC_SYM_EAGER_HEADER + JC_SYM_EAGER_BYTES / 8)
/* Direct point-to-point's eager slots, after it: two per peer of JC_SYM_P2P_EAGER_BYTES,
   written by the area's rank only (see templates/algo/sendrecv_direct.h). */
#define JC_SYM_P2P_EAGER (JC_SYM_EAGER + 2 * JC_SYM_EAGER_HALF)
#define JC_SYM_P2P_EAGER_BYTES 2048
#define JC_SYM_FLAGS_WORDS (JC_SYM_P2P_EAGER + JC_SYM_MAX_RANKS * 2 * JC_SYM_P2P_EAGER_BYTES / 8)
/* The most transfers of a point-to-point batch over the FIFOs (templates/algo/sendrecv_ring.h);
   larger ones run in rounds. */
#define JC_P2P_BATCH_MAX 128

/* One end of a connector. The FIFO lives with the receiver and the sender writes into it
   (same process, or shared memory), and head/tail/sizes are the same counters at both
   ends; over a network each end has its own FIFO and a proxy thread moves the posted
   steps and the consumed counts between them. */
struct jc_conn {
  char* buf[JC_NPROTOS];          /* per protocol: JC_STEPS slots of slot_bytes[p] bytes */
  jc_u64* head;                   /* steps consumed by the receiver (the sender waits on it) */
  jc_u64* tail;                   /* steps posted by the sender (Simple's receiver waits on it) */
  jc_u64* sizes;                  /* size word of each of the JC_STEPS slots, written before tail */
  jc_u64* lands;                  /* receiver, proxied: its landing line (JC_LAND_*) */
  jc_u64 slot_bytes[JC_NPROTOS];
  jc_u64 step;                    /* this end's step count; kept across launches */
  jc_u64 credit;                  /* sender: the head last read, so that a send with room
                                     does not fetch the receiver's counter line */
  jc_u64 refs;                    /* sender, proxied: the head the kernel waits for before it
                                     returns (its steps passed by reference written out) */
  jc_i32 peer;                    /* the rank at the other end, for error reports */
  jc_i32 same_gpu;                /* CUDA: 1 when the peer's kernels run on this GPU (in this
                                     process), so GPU-scope ordering reaches it */
  jc_i32 wire_plain;              /* ring: 1 when the peer shares this rank's memory, so that a
                                     wired kernel's partial sums cross as fp32 (prims' wire.h) */
  jc_i32 proxied;                 /* 1 when the host's proxy moves the steps over the built-in
                                     sockets: large moves pass by reference (JC_SIZE_REF) */
};

struct jc_channel {
  struct jc_conn ring_send;       /* to the next ring position */
  struct jc_conn ring_recv;       /* from the previous ring position */
  struct jc_conn tree_up_send;    /* to the tree parent */
  struct jc_conn tree_up_recv;    /* from the tree parent (down phase) */
  struct jc_conn tree_down_send[JC_MAX_TREE_ARITY];
  struct jc_conn tree_down_recv[JC_MAX_TREE_ARITY];
  const jc_i32* ring_ranks;       /* user rank at each ring position */
  jc_i32 ring_index;              /* this rank's ring position */
  jc_i32 tree_parent;             /* -1 at the tree root */
  jc_i32 tree_nchildren;
  jc_i32 halted;                  /* channel 0's: nonzero once a kernel of the rank failed
                                     (device memory: read at every CUDA kernel's start) */
  jc_u64 sent;                    /* sendrecv, a shift in place: this channel's send steps
                                     done, which other channels' receives wait for */
  jc_u64 shifted;                 /* channel 0's: channels done with a shift in place; the
                                     last clears every `sent` (launches may queue unseen) */
};

struct jc_status {
  jc_i32 code;                    /* JC_OK or JC_ERR_* */
  jc_i32 peer;                    /* who the failed wait was waiting on */
  jc_i32 what;                    /* JC_WAIT_* */
  jc_i32 pad;
};

struct jc_args {
  const void* sendbuff;
  void* recvbuff;
  jc_u64 count;                   /* elements; per rank for all_gather / reduce_scatter */
  jc_u64 recv_count;              /* sendrecv: elements to receive */
  jc_u64 chunk_elems;             /* elements per FIFO step, within every protocol's slot */
  jc_u64 timeout_ns;              /* longest wait without progress */
  struct jc_channel* channels;
  struct jc_conn* p2p_send;       /* sendrecv: one per channel, or null */
  struct jc_conn* p2p_recv;
  struct jc_conn* const* peer_send; /* one-shot: per rank (self included), its p2p_send */
  struct jc_conn* const* peer_recv;
  struct jc_status* status;       /* one per channel */
  const jc_i32* abort_flag;
  const jc_i32* peer_failed;      /* per rank: nonzero once that rank is known to have failed */
  char* const* sym_send;          /* direct: per rank, the base of its part of sendbuff's registration */
  char* const* sym_recv;          /* direct: the same for recvbuff */
  jc_u64* const* sym_flags;       /* direct: per rank, its flags area */
  jc_u64 sym_send_id;             /* direct: the registrations (same ids on every rank) */
  jc_u64 sym_recv_id;
  jc_u64 sym_send_off;            /* direct: byte offsets of the buffers in them */
  jc_u64 sym_recv_off;
  const jc_u64* table;            /* direct point-to-point: the transfers and this rank's regions */
  double scalar_f;                /* PreMulSum / Avg multiplier, float types */
  jc_i64 scalar_i;                /* PreMulSum multiplier, integer types */
  const void* scalar_ptr;         /* PreMulSum: where the kernel reads its multiplier (one T),
                                     instead of scalar_f / scalar_i, when not null */
  jc_u64 spin;                    /* host: busy-poll rounds before a wait yields its core */
  jc_i32 nranks;
  jc_i32 rank;
  jc_i32 root;
  jc_i32 nchannels;
  jc_i32 same_gpu;                /* CUDA: 1 when every rank's kernels run on this GPU in this
                                     process: direct barriers need only GPU scope */
  jc_i32 pad;
  int (*progress)(void*);         /* host: moves the rank's network traffic; nonzero if it did */
  void* progress_ctx;
};
