//! The search result in NCCL's graph XML: `<graphs><graph id pattern nchannels speedintra
//! speedinter typeintra typeinter …><channel><net dev/><gpu dev rank/>…<net dev/></channel>`.
//! A file describes one host (as NCCL writes it); loading applies its channel orders to
//! every host, matching ranks by device. A CPU rank is written `<cpu numaid rank/>`.
//! `JITCCL_GRAPH_FILE` replaces the search, `JITCCL_GRAPH_DUMP_FILE` records it.

use std::path::Path as FsPath;

use super::search::{hosts_of, nearest_nic, search, HostRanks, Plan};
use super::types::{Device, GlobalSystem, Graph, SearchParams};
use crate::settings;
use crate::topo::xml::{self, bad_attr, float_attr, num_attr, Element};
use crate::topo::{read_file, write_file, PathType, TopoError};

/// NCCL's graph patterns.
const PATTERN_BALANCED_TREE: u64 = 1;
const PATTERN_RING: u64 = 4;

/// The graph file of `JITCCL_GRAPH_FILE` when set, else a search; the result is written to
/// `JITCCL_GRAPH_DUMP_FILE` (as `dump_host` sees it) when that is set.
pub fn search_or_load(global: &GlobalSystem, params: &SearchParams, dump_host: usize) -> Result<Graph, TopoError> {
    let graph = match settings::GRAPH_FILE.path() {
        Some(p) => Graph::from_xml_file(&p, global)?,
        None => search(global, params)?,
    };
    if let Some(p) = settings::GRAPH_DUMP_FILE.path() {
        write_file(&p, &to_xml(&graph, global, dump_host))?;
    }
    Ok(graph)
}

impl Graph {
    /// The channels on host `host` (an index into `global.hosts`), as NCCL graph XML.
    pub fn to_xml(&self, global: &GlobalSystem, host: usize) -> String {
        to_xml(self, global, host)
    }

    /// The graph in NCCL graph XML file `path`, applied to `global`'s ranks.
    pub fn from_xml_file(path: impl AsRef<FsPath>, global: &GlobalSystem) -> Result<Graph, TopoError> {
        let path = path.as_ref();
        from_xml_str(&path.display().to_string(), &read_file(path)?, global)
    }

    /// The graph in XML `text` (`file` names it in errors), applied to `global`'s ranks.
    pub fn from_xml_str(file: &str, text: &str, global: &GlobalSystem) -> Result<Graph, TopoError> {
        from_xml_str(file, text, global)
    }
}

/// The channels of `graph` on host `host` (an index into `global.hosts`), as graph XML.
fn to_xml(graph: &Graph, global: &GlobalSystem, host: usize) -> String {
    let multi = graph.nhosts > 1;
    let mut channels = Vec::new();
    for ch in &graph.channels {
        let mine: Vec<usize> =
            ch.ring.iter().copied().filter(|&r| global.ranks.get(r).is_some_and(|p| p.host == host)).collect();
        let mut el = Element::new("channel");
        let net = |r: Option<&usize>| r.and_then(|&r| ch.nic.get(r).copied().flatten());
        if let Some(dev) = net(mine.first()).filter(|_| multi) {
            el.children.push(Element::new("net").with("dev", dev));
        }
        for &r in &mine {
            el.children.push(match global.ranks[r].device {
                Device::Gpu(dev) => Element::new("gpu").with("dev", dev).with("rank", r),
                Device::Numa(id) => Element::new("cpu").with("numaid", id).with("rank", r),
            });
        }
        if let Some(dev) = net(mine.last()).filter(|_| multi) {
            el.children.push(Element::new("net").with("dev", dev));
        }
        channels.push(el);
    }
    let graph_el = |id: u32, pattern: u64| {
        let mut g = Element::new("graph")
            .with("id", id)
            .with("pattern", pattern)
            .with("crossnic", 0)
            .with("nchannels", graph.channels.len())
            .with("speedintra", fmt_bw(graph.bw_intra))
            .with("speedinter", fmt_bw(graph.bw_inter))
            .with("latencyinter", 0)
            .with("typeintra", graph.type_intra)
            .with("typeinter", graph.type_inter)
            .with("samechannels", 0);
        g.children = channels.clone();
        g
    };
    let mut root = Element::new("graphs").with("version", 1);
    root.children = vec![graph_el(0, PATTERN_RING), graph_el(1, PATTERN_BALANCED_TREE)];
    xml::write(&root)
}

/// Bandwidths with the precision NCCL writes, without trailing noise.
fn fmt_bw(bw: f64) -> String {
    let s = format!("{:.3}", if bw.is_finite() { bw } else { 0.0 });
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn from_xml_str(file: &str, text: &str, global: &GlobalSystem) -> Result<Graph, TopoError> {
    let root = xml::parse(file, text)?;
    let malformed = |el: &Element, reason: String| TopoError::Malformed { file: file.into(), line: el.line, reason };
    if root.name != "graphs" {
        return Err(malformed(&root, format!("the root element is <{}>, expected <graphs>", root.name)));
    }
    let graphs: Vec<&Element> = root.children_named("graph").collect();
    let mut ring_graph = None;
    for g in &graphs {
        if num_attr(file, g, "pattern")? == Some(PATTERN_RING) && ring_graph.is_none() {
            ring_graph = Some(*g);
        }
    }
    let g = ring_graph.or(graphs.first().copied()).ok_or_else(|| malformed(&root, "no <graph>".into()))?;
    let hosts = hosts_of(global)?;
    let ptype = |key: &str| match g.get(key) {
        None => Ok(PathType::Loc),
        Some(v) => PathType::parse(v).ok_or_else(|| bad_attr(file, g, key, "not a path type")),
    };
    let (type_intra, type_inter) = (ptype("typeintra")?, ptype("typeinter")?);
    let bw_intra = float_attr(file, g, "speedintra")?.unwrap_or(0.0);
    let bw_inter = if hosts.len() > 1 { float_attr(file, g, "speedinter")?.unwrap_or(0.0) } else { 0.0 };
    let plan = Plan { hosts: &hosts, found: &[], base: 1, nranks: global.ranks.len() };
    let mut channels = Vec::new();
    for (c, ch) in g.children_named("channel").enumerate() {
        let mut devices = Vec::new();
        let mut nets = Vec::new();
        for el in &ch.children {
            match el.name.as_str() {
                "gpu" => devices.push(Device::Gpu(req_u32(file, el, "dev")?)),
                "cpu" => devices.push(Device::Numa(req_u32(file, el, "numaid")?)),
                "net" => nets.push(req_u32(file, el, "dev")?),
                _ => {}
            }
        }
        let mut orders = Vec::new();
        let mut nic = vec![None; global.ranks.len()];
        for (h, host) in hosts.iter().enumerate() {
            let order = host_order(global, host, &devices)
                .ok_or_else(|| malformed(ch, format!("channel {c} does not list each rank of host {h} once")))?;
            let usage = vec![0; host.sys.nics.len()];
            for (k, &r) in order.iter().enumerate() {
                let l = host.ranks.iter().position(|&x| x == r).unwrap_or(0);
                let listed = if k == 0 {
                    nets.first()
                } else if k + 1 == order.len() {
                    nets.last()
                } else {
                    None
                };
                let listed = listed.copied().filter(|d| host.sys.nics.iter().any(|n| n.dev == *d));
                nic[r] = listed.or_else(|| nearest_nic(host, l, &usage).map(|i| host.sys.nics[i].dev));
            }
            orders.push(order);
        }
        let bw = if hosts.len() > 1 { bw_intra.min(bw_inter) } else { bw_intra };
        channels.push(plan.finish(c, &orders, nic, bw));
    }
    if channels.is_empty() {
        return Err(malformed(g, "the graph has no <channel>".into()));
    }
    let (nranks, nhosts) = (global.ranks.len(), hosts.len());
    Ok(Graph {
        nranks,
        nhosts,
        channels,
        bw_intra,
        bw_inter,
        lat_inter: 0.0,
        type_intra,
        type_inter,
        steps: 0,
        fallback: false,
    })
}

fn req_u32(file: &str, el: &Element, key: &str) -> Result<u32, TopoError> {
    let v = num_attr(file, el, key)?.ok_or_else(|| bad_attr(file, el, key, "missing"))?;
    u32::try_from(v).map_err(|_| bad_attr(file, el, key, "too large"))
}

/// The host's ranks in the order of `devices`, when it lists each of them exactly once.
fn host_order(global: &GlobalSystem, host: &HostRanks, devices: &[Device]) -> Option<Vec<usize>> {
    if devices.len() != host.ranks.len() {
        return None;
    }
    let mut order = Vec::new();
    for d in devices {
        let r = host.ranks.iter().copied().find(|&r| global.ranks[r].device == *d && !order.contains(&r))?;
        order.push(r);
    }
    Some(order)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topo::System;

    fn h100() -> GlobalSystem {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/topo");
        GlobalSystem::one_rank_per_device(System::from_xml_file(format!("{dir}/hgx-h100-8gpu-8nic.xml")).unwrap())
    }

    #[test]
    fn write_read_write_is_stable() {
        let global = h100();
        let g = search(&global, &SearchParams::default()).unwrap();
        let text = to_xml(&g, &global, 0);
        assert!(text.starts_with("<graphs version=\"1\">\n  <graph id=\"0\" pattern=\"4\""), "{text}");
        let back = from_xml_str("g.xml", &text, &global).unwrap();
        assert_eq!(back.nchannels(), g.nchannels());
        for (a, b) in back.channels.iter().zip(&g.channels) {
            assert_eq!((&a.ring, &a.tree, &a.nic), (&b.ring, &b.tree, &b.nic));
        }
        assert_eq!(to_xml(&back, &global, 0), text);
    }

    #[test]
    fn bad_graph_files_are_refused_with_line() {
        let global = h100();
        let e = from_xml_str(
            "g.xml",
            "<graphs>\n<graph pattern=\"4\">\n<channel><gpu dev=\"0\"/></channel>\n</graph>\n</graphs>",
            &global,
        );
        let e = e.unwrap_err().to_string();
        assert!(e.starts_with("g.xml:3: channel 0 does not list"), "{e}");
        let e = from_xml_str("g.xml", "<graphs>\n<graph/>\n</graphs>", &global).unwrap_err().to_string();
        assert!(e.starts_with("g.xml:2: the graph has no"), "{e}");
        let e = from_xml_str("g.xml", "<graphs><graph typeintra=\"XYZ\"/></graphs>", &global).unwrap_err().to_string();
        assert!(e.contains("typeintra=\"XYZ\""), "{e}");
    }
}
