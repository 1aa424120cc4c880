//! A network plugin that fails mid-call: the project's edge plugin `EdgeFailSend` forwards
//! to the libfabric plugin but fails one send of the process (`JITCCL_EDGE_FAIL_SEND`) and
//! every later test on that comm. Every rank's call fails, each naming a peer, and none
//! reports success for the call that lost data. Ranks are threads of a child process
//! (`JITCCL_TRANSPORT=net`, loopback), whose sends alone the count counts.

use std::time::{Duration, Instant};

use jitccl::{Comm, Config, Error, Op, UniqueId};

#[test]
fn a_send_failing_inside_the_plugin_fails_every_rank_naming_a_peer() {
    // The plugin and jitccl read these from the environment: set on a child process, not
    // in this one.
    let vars = [
        ("JITCCL_TRANSPORT", Some("net")),
        ("NCCL_NET_PLUGIN", Some(jitccl_plugins::EDGE_FAILSEND)),
        ("JITCCL_EDGE_INNER", Some(jitccl_plugins::FABRIC)),
        ("FI_PROVIDER", Some("tcp")),
        ("FI_TCP_IFACE", Some("lo")),
        // Past init's and the first calls' sends: the failure comes mid-sweep.
        ("JITCCL_EDGE_FAIL_SEND", Some("60")),
    ];
    jitccl_plugins::in_child(
        module_path!(),
        "a_send_failing_inside_the_plugin_fails_every_rank_naming_a_peer",
        &vars,
        || {
            let n = 3;
            let timeout = Duration::from_secs(20);
            let id = UniqueId::new().unwrap();
            let cfg = Config {
                net_name: Some("EdgeFailSend".into()),
                nchannels: Some(1),
                timeout: Some(timeout),
                ..Config::default()
            };
            let outcomes: Vec<(usize, Result<(), Error>, Instant)> = std::thread::scope(|s| {
                let (id, cfg) = (&id, &cfg);
                let hs: Vec<_> = (0..n)
                    .map(|r| {
                        s.spawn(move || {
                            let comm = Comm::init_rank(id, n, r, cfg).expect("init over the plugin");
                            let stream = comm.device().stream().unwrap();
                            let count = 16 << 10;
                            let buf = comm.device().alloc_from(&vec![1.0f32; count]).unwrap();
                            let mut done = 0;
                            for _ in 0..100 {
                                let call = comm
                                    .all_reduce(&buf, &buf, count, Op::Sum, &stream)
                                    .and_then(|()| stream.synchronize());
                                if let Err(e) = call {
                                    return (done, Err(e), Instant::now());
                                }
                                done += 1;
                                // Every call that reported success summed what every rank sent.
                                let want = 3f32.powi(done as i32);
                                assert!(
                                    buf.to_vec().iter().all(|&v| v == want),
                                    "rank {r}: call {done} reported success with wrong data"
                                );
                            }
                            (done, Ok(()), Instant::now())
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            for (r, (done, outcome, _)) in outcomes.iter().enumerate() {
                match outcome {
                    Ok(()) => panic!("rank {r}: all {done} calls succeeded though the plugin failed a send"),
                    Err(e) => {
                        let named = match e {
                            Error::PeerFailed { peer, .. } => *peer >= 0,
                            Error::Timeout { peer, .. } => *peer >= 0,
                            _ => false,
                        };
                        assert!(named, "rank {r} failed after {done} calls without naming a peer: {e}");
                    }
                }
            }
            // From the first rank's failure to the last's, well inside the operation timeout: the
            // failed link fails its rank at once, and that failure reaches the others (not each
            // rank timing out on its own). Init and the calls before the failure are not counted:
            // they take what the machine's load makes them take.
            let first = outcomes.iter().map(|o| o.2).min().unwrap();
            let spread = outcomes.iter().map(|o| o.2 - first).max().unwrap();
            assert!(spread < timeout / 2, "the failure took {spread:?} to reach every rank");
        },
    );
}
