//! Plugins written here against NCCL's tables (v6 and v2), driven through a tuner as a
//! communicator drives them.

use std::ffi::c_int;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};

use super::abi::{Status, V2, V6};
use super::costs::{CostTable, NVLS, SIMPLE, TREE};
use super::*;
use crate::config::Config;
use crate::plugin::logger::Logger;
use crate::tune::{Constants as Model, Key, Source, Tuner};
use jitccl_codegen::Wire;

/// A table in a static (its name is a pointer).
struct Shared<T>(T);
// SAFETY: constant tables, as a plugin library exports them.
unsafe impl<T> Sync for Shared<T> {}

fn tuner(n: usize, nch: usize, algos: &str, api: Api) -> Tuner {
    let cfg = Config {
        nchannels: Some(nch),
        algos: (!algos.is_empty()).then(|| algos.parse().unwrap()),
        ..Config::default()
    }
    .resolve(n)
    .unwrap();
    let topo = Topology::host(n, nch, 2);
    let plugin = Box::leak(Box::new(Loaded { api, label: format!("'test' (v{})", api.version()) }));
    let session = Session::start_with(plugin, 0xc0ffee, &topo).expect("the plugin starts");
    Tuner { plugin: Some(session), ..Tuner::new(topo, Model::HOST, None, &cfg) }
}

fn key(coll: Collective, bytes: usize) -> Key {
    Key { coll, bytes, elem_size: 4, commutative: true, direct: false, wire: Wire::Exact }
}

// A v6 plugin: All-reduces up to 4 KiB on Tree/LL (and NVLS, which jitccl lacks) with one
// channel, 4 KiB chunks for everything, and an error at 1 GiB.
static V6_SEEN: AtomicU64 = AtomicU64::new(0);
static V6_FINALIZED: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn init6(
    ctx: *mut Ctx, comm_id: u64, nranks: usize, nnodes: usize, _log: Logger, nvl: *mut NvlDomains, k: *mut Constants,
) -> Status {
    let nvl = *nvl;
    let seen =
        [comm_id == 0xc0ffee, nranks == 3, nnodes == 1, nvl == NvlDomains { count: 1, min_ranks: 3, max_ranks: 3 }];
    V6_SEEN.store(seen.iter().filter(|&&b| b).count() as u64, Ordering::SeqCst);
    (*k).base_latencies[TREE][0] = 1.0;
    *ctx = Box::into_raw(Box::new(7u32)).cast();
    0
}

unsafe extern "C" fn coll_info6(
    ctx: Ctx, coll: c_int, n_bytes: usize, pipe_ops: c_int, table: *mut *mut f32, n_algo: c_int, n_proto: c_int,
    reg_buff: c_int, n_channels: *mut c_int,
) -> Status {
    assert_eq!((*ctx.cast::<u32>(), pipe_ops, n_algo, n_proto, reg_buff), (7, 1, 7, 3, 0));
    let t = &mut *table.cast::<CostTable>();
    if n_bytes == 1 << 30 {
        return 5;
    }
    if coll == 4 && n_bytes <= 4096 {
        t[TREE][0] = 0.0;
        t[NVLS][SIMPLE] = 0.0;
        *n_channels = 1;
    }
    0
}

unsafe extern "C" fn chunk6(
    _ctx: Ctx, _coll: c_int, _n_bytes: usize, _algo: c_int, _proto: c_int, _nch: c_int, chunk: *mut usize,
) -> Status {
    *chunk = 4096;
    0
}

unsafe extern "C" fn finalize6(ctx: Ctx) -> Status {
    drop(Box::from_raw(ctx.cast::<u32>()));
    V6_FINALIZED.fetch_add(1, Ordering::SeqCst);
    0
}

static PLUGIN6: Shared<V6> = Shared(V6 {
    name: c"test".as_ptr(),
    init: Some(init6),
    coll_info: Some(coll_info6),
    finalize: Some(finalize6),
    chunk_size: Some(chunk6),
});

#[test]
fn a_v6_plugin_decides_where_it_edits_and_its_channels_and_chunks_apply() {
    let plain = Tuner::new(Topology::host(3, 2, 2), Model::HOST, None, &Config::default().resolve(3).unwrap());
    let t = tuner(3, 2, "", Api::V6(&PLUGIN6.0));
    assert_eq!(V6_SEEN.load(Ordering::SeqCst), 4, "init saw the communicator id, 3 ranks, 1 node, its NVL domain");

    // Its Tree/LL at cost 0 wins over the model's pick; NVLS is ignored.
    let (c, source, why) = t.decide(key(Collective::AllReduce, 1024)).unwrap();
    assert_eq!((c.algo, c.proto, c.nchannels, source), (Algorithm::Tree, Protocol::LL, 1, Source::Plugin), "{why}");
    assert_eq!(c.chunk_elems, 1024, "4 KiB chunks of f32: {why}");
    assert!(why.contains("1 channel(s) from the plugin") && why.contains("4096 B chunks"), "{why}");
    assert_ne!(plain.choose(Collective::AllReduce, 1024, 4, true).unwrap().algo, Algorithm::Tree, "the model's pick");

    // Larger: left alone, the model decides (the chunk size still applies).
    let (c, source, _) = t.decide(key(Collective::AllReduce, 1 << 20)).unwrap();
    let m = plain.choose(Collective::AllReduce, 1 << 20, 4, true).unwrap();
    assert_eq!(
        (c.algo, c.proto, c.nchannels, c.chunk_elems, source),
        (m.algo, m.proto, m.nchannels, 1024, Source::Model)
    );

    // What the overrides exclude stays out, whatever the plugin writes there.
    let ring = tuner(3, 2, "allreduce:ring", Api::V6(&PLUGIN6.0));
    let (c, _, why) = ring.decide(key(Collective::AllReduce, 1024)).unwrap();
    assert_eq!((c.algo, c.nchannels), (Algorithm::Ring, 1), "{why}");

    // A failed getCollInfo leaves the call to the model.
    let (c, source, _) = t.decide(key(Collective::AllReduce, 1 << 30)).unwrap();
    assert_eq!((c.algo, source), (plain.choose(Collective::AllReduce, 1 << 30, 4, true).unwrap().algo, Source::Model));

    let before = V6_FINALIZED.load(Ordering::SeqCst);
    drop((t, ring));
    assert_eq!(V6_FINALIZED.load(Ordering::SeqCst), before + 2, "one finalize per communicator");

    // Every rank keeps it where every rank started it; where one did not, none does.
    let t = tuner(3, 2, "", Api::V6(&PLUGIN6.0));
    let sent = std::cell::Cell::new(Vec::new());
    let t = t.agreed_on(true, |b| {
        sent.set(b.to_vec());
        Ok(vec![vec![1]; 3])
    });
    let t = t.unwrap();
    assert_eq!((sent.take(), t.plugin.is_some()), (vec![1], true));
    let before = V6_FINALIZED.load(Ordering::SeqCst);
    let t = t.agreed_on(true, |_| Ok(vec![vec![1], vec![0], vec![1]])).unwrap();
    assert!(t.plugin.is_none() && V6_FINALIZED.load(Ordering::SeqCst) == before + 1);
    assert_eq!(t.decide(key(Collective::AllReduce, 1024)).unwrap().1, Source::Model);
}

// A v2 plugin: names the algorithm and protocol the test sets.
static V2_ALGO: AtomicI32 = AtomicI32::new(-1);
static V2_PROTO: AtomicI32 = AtomicI32::new(-1);

unsafe extern "C" fn init2(_nranks: usize, _nnodes: usize, _log: Logger, ctx: *mut Ctx) -> Status {
    *ctx = std::ptr::null_mut();
    0
}

unsafe extern "C" fn coll_info2(
    _ctx: Ctx, _coll: c_int, _n_bytes: usize, collnet: c_int, nvls: c_int, _pipe_ops: c_int, algo: *mut c_int,
    proto: *mut c_int, _nch: *mut c_int,
) -> Status {
    assert_eq!((collnet, nvls), (0, 0), "jitccl has neither");
    *algo = V2_ALGO.load(Ordering::SeqCst);
    *proto = V2_PROTO.load(Ordering::SeqCst);
    0
}

unsafe extern "C" fn destroy2(_ctx: Ctx) -> Status {
    0
}

unsafe extern "C" fn failing_init2(_nranks: usize, _nnodes: usize, _log: Logger, _ctx: *mut Ctx) -> Status {
    3
}

static PLUGIN2: Shared<V2> =
    Shared(V2 { name: c"two".as_ptr(), init: Some(init2), coll_info: Some(coll_info2), destroy: Some(destroy2) });

#[test]
fn a_v2_plugin_names_its_choice_and_what_jitccl_lacks_is_ignored() {
    let plain = Tuner::new(Topology::host(2, 1, 2), Model::HOST, None, &Config::default().resolve(2).unwrap());
    let model = plain.choose(Collective::AllReduce, 64 << 10, 4, true).unwrap();
    let cases = [
        ((1, 0), Some((Algorithm::Ring, Protocol::LL, Source::Plugin))),
        ((0, 1), Some((Algorithm::Tree, Protocol::LL128, Source::Plugin))),
        ((4, 2), None),
        ((-1, -1), None),
        ((9, 0), None),
    ];
    for (n, ((a, p), want)) in cases.into_iter().enumerate() {
        V2_ALGO.store(a, Ordering::SeqCst);
        V2_PROTO.store(p, Ordering::SeqCst);
        let t = tuner(2, 1, "", Api::V2(&PLUGIN2.0));
        let (c, source, why) = t.decide(key(Collective::AllReduce, (64 << 10) + n)).unwrap();
        let want = want.unwrap_or((model.algo, model.proto, Source::Model));
        assert_eq!((c.algo, c.proto, source), want, "v2 asked {a}/{p}: {why}");
        // A v2 plugin that names NVLS is told why it cannot run.
        if a == 4 {
            let advice = t.plugin.as_ref().unwrap().advise(Collective::AllReduce, 100, &[]).unwrap();
            assert_eq!(advice.pick, None);
            assert!(advice.said.contains("NVLS/Simple ignored: jitccl has no NVLS algorithm"), "{}", advice.said);
        }
    }
    let failing: &'static V2 = Box::leak(Box::new(V2 { init: Some(failing_init2), ..PLUGIN2.0 }));
    let plugin = Box::leak(Box::new(Loaded { api: Api::V2(failing), label: "x".into() }));
    assert!(Session::start_with(plugin, 1, &Topology::host(2, 1, 2)).is_none(), "a failed init leaves it out");
}

#[test]
fn plans_carry_rank_zeros_plugin_and_a_rank_with_another_is_refused() {
    use crate::graph::Graph;
    use crate::tune::{from_plan, plan};
    let cfg = Config::default().resolve(2).unwrap();
    let graph = Graph::uniform(2, cfg.nchannels);
    let ours = plan(&graph, &cfg, &crate::device::Device::host(0)).unwrap();
    assert!(from_plan(&ours, &graph, &cfg).is_ok());
    // The host's plan: tag, cores, communicator id, then the plugin's identity.
    let who = identity();
    let at = 1 + 8 + 8;
    assert_eq!(&ours[at..at + 2], (who.len() as u16).to_le_bytes());
    assert_eq!(&ours[at + 2..at + 2 + who.len()], who.as_bytes());
    let other = format!("'other' (v6){who}");
    let theirs =
        [&ours[..at], &(other.len() as u16).to_le_bytes(), other.as_bytes(), &ours[at + 2 + who.len()..]].concat();
    let e = from_plan(&theirs, &graph, &cfg).unwrap_err().to_string();
    assert!(e.contains(&format!("rank 0 tunes with tuner plugin {other}, this rank with {who}")), "{e}");
    assert!(e.contains("JITCCL_TUNER_PLUGIN"), "{e}");
    // Two plans name two communicators.
    assert_ne!(ours[9..17], plan(&graph, &cfg, &crate::device::Device::host(0)).unwrap()[9..17]);
}
