//! `jitccl topo`: the system, paths, rings and trees of a topology file; the topology and
//! graph dumps; a bad file refused with its name and line.

use std::process::{Command, Output};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/topo");

fn jitccl_topo(args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_jitccl"));
    cmd.arg("topo").args(args);
    for v in [
        "JITCCL_TOPO_FILE",
        "NCCL_TOPO_FILE",
        "JITCCL_TOPO_DUMP_FILE",
        "JITCCL_GRAPH_FILE",
        "JITCCL_GRAPH_DUMP_FILE",
        "JITCCL_HOST_ARENA",
    ] {
        cmd.env_remove(v);
    }
    cmd.envs(vars.iter().copied()).output().unwrap()
}

fn stdout(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn prints_system_paths_and_rings_of_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let graph = dir.path().join("graph.xml");
    let topo = dir.path().join("topo.xml");
    let file = format!("{FIXTURES}/hgx-h100-8gpu-8nic.xml");
    let out = jitccl_topo(
        &["--xml", &file, "--dump-xml", topo.to_str().unwrap()],
        &[("JITCCL_GRAPH_DUMP_FILE", graph.to_str().unwrap())],
    );
    let text = stdout(&out);
    assert!(text.contains("gpu 7: 0000:ea:00.0 sm 90, 18 NVLinks, numa 1"), "{text}");
    assert!(text.contains("nic 0 mlx5_0: 200 Gb/s"), "{text}");
    assert!(text.contains("NVL 370.8"), "{text}");
    assert!(text.contains("PIX 47.3"), "{text}");
    let rings: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("channel ")).collect();
    assert!(!rings.is_empty(), "{text}");
    for l in &rings {
        let ring = l.split("ring ").nth(1).unwrap().split(" |").next().unwrap();
        let mut ranks: Vec<usize> = ring.split_whitespace().map(|r| r.parse().unwrap()).collect();
        ranks.sort();
        assert_eq!(ranks, (0..8).collect::<Vec<_>>(), "{l}");
    }
    assert!(text.contains("graph: ") && text.contains("(NVL)"), "{text}");
    let g = std::fs::read_to_string(&graph).unwrap();
    assert!(g.starts_with("<graphs version=\"1\">") && g.contains("<gpu dev=\"0\" rank=\"0\"/>"), "{g}");
    // What was dumped reads back the same, and the graph file can replace the search.
    let t = std::fs::read_to_string(&topo).unwrap();
    assert_eq!(t.trim_end(), std::fs::read_to_string(&file).unwrap().trim_end());
    let again = jitccl_topo(&["--xml", topo.to_str().unwrap()], &[("JITCCL_GRAPH_FILE", graph.to_str().unwrap())]);
    let again = stdout(&again);
    assert_eq!(again.lines().filter(|l| l.trim_start().starts_with("channel ")).count(), rings.len());
}

#[test]
fn pci_only_file_plans_one_rank_per_gpu() {
    let text = stdout(&jitccl_topo(&["--xml", &format!("{FIXTURES}/ndv4-a100-pci-only.xml")], &[]));
    assert!(text.contains("gpu 7: 000c:00:00.0 sm ?"), "{text}");
    assert!(text.contains("  channel 0: ring "), "{text}");
}

#[test]
fn malformed_file_is_refused_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.xml");
    std::fs::write(&bad, "<system version=\"1\">\n  <cpu numaid=\"0\">\n  </pci>\n</system>\n").unwrap();
    let out = jitccl_topo(&["--xml", bad.to_str().unwrap()], &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:3: ", bad.display())), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn prints_the_models_pick_per_collective_and_size() {
    let file = format!("{FIXTURES}/ndv4-a100-pci-only.xml");
    let text = stdout(&jitccl_topo(&["--xml", &file, "-N", "3", "--cores", "2"], &[]));
    let head = text.lines().position(|l| l.starts_with("model picks (3 ranks")).unwrap_or_else(|| panic!("{text}"));
    let rows: Vec<Vec<&str>> = text.lines().skip(head + 2).map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows.len(), 9, "8 B to 128 MiB by 8x: {text}");
    let mut last = [0.0f64; 5];
    for row in &rows {
        assert_eq!(row.len(), 11, "bytes and (pick, us) for 5 collectives: {row:?}");
        for c in 0..5 {
            let pick: Vec<&str> = row[1 + 2 * c].split('/').collect();
            assert_eq!(pick.len(), 3, "{row:?}");
            // Only AllReduce has more than the ring (GPUs: no direct algorithms).
            assert!(c == 0 || pick[0] == "ring", "{row:?}");
            assert!(["simple", "ll", "ll128"].contains(&pick[1]), "{row:?}");
            let us: f64 = row[2 + 2 * c].parse().unwrap();
            assert!(us >= last[c], "time never falls with size: {row:?}");
            last[c] = us;
        }
    }
    // AllGather moves 2/3 of 128 MiB a rank: at most the CUDA model's 350 GB/s a rank.
    assert!(last.iter().all(|&us| us > 250.0), "128 MiB takes more than 0.25 ms (under 360 GB/s): {text}");
    assert!(text.contains("GPU constants"), "a file of GPUs plans GPU ranks: {text}");
    let bad = jitccl_topo(&["-N", "0"], &[]);
    assert!(!bad.status.success());
}

#[test]
fn host_picks_include_the_direct_algorithms_while_plain_buffers_live_in_the_arenas() {
    // Communicators run plain host buffers of one machine directly (the host arenas);
    // topo once printed only the FIFO algorithms for them.
    let picks = |env: &[(&str, &str)]| {
        let text = stdout(&jitccl_topo(&["-N", "2", "--cores", "2"], env));
        let head = text.lines().position(|l| l.starts_with("model picks (2 ranks")).unwrap_or_else(|| panic!("{text}"));
        let line = text.lines().nth(head).unwrap().to_string();
        let rows: Vec<String> = text.lines().skip(head + 2).map(str::to_string).collect();
        (line, rows)
    };
    let (line, rows) = picks(&[]);
    assert!(line.contains("host constants for 2 cores") && line.contains("direct algorithms too"), "{line}");
    let at = |rows: &[String], bytes: &str| rows.iter().find(|r| r.split_whitespace().next() == Some(bytes)).cloned();
    let row = at(&rows, "32768").unwrap_or_else(|| panic!("{rows:?}"));
    assert!(row.split_whitespace().nth(1).is_some_and(|p| p.starts_with("direct")), "32 KiB AllReduce: {row}");
    let (line, rows) = picks(&[("JITCCL_HOST_ARENA", "0")]);
    assert!(line.contains("buffers the peers do not address"), "{line}");
    assert!(rows.iter().all(|r| !r.contains("direct")), "{rows:?}");
}

#[test]
fn the_command_logs_what_detection_found_as_jitccl_debug_asks() {
    // No communicator is made here, so the command itself must start the logging.
    let out = jitccl_topo(&[], &[("JITCCL_DEBUG", "DEBUG")]);
    let _ = stdout(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("topology: detected:") && err.contains("NUMA domain(s)"), "{err}");
    let quiet = jitccl_topo(&[], &[("JITCCL_DEBUG", "WARN")]);
    let _ = stdout(&quiet);
    assert!(!String::from_utf8_lossy(&quiet.stderr).contains("topology:"));
    let bad = jitccl_topo(&[], &[("JITCCL_DEBUG", "LOUD")]);
    let _ = stdout(&bad);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("JITCCL_DEBUG='LOUD': expected one of WARN, VERSION, INFO, DEBUG, TRACE; using WARN"),
        "{err}"
    );
}
