//! Tuning tables: rows that override the model per (collective, size range, ranks, nodes),
//! in the CSV format of NCCL's example tuner plugin (nccl:plugins/tuner/example), so stock
//! NCCL can read the same file through `NCCL_TUNER_CONFIG_FILE`:
//!
//! `collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff[,chunkBytes]`
//!
//! -1 means "any" (nNodes, nRanks, numPipeOps, regBuff) or "the model's" (channels,
//! chunkBytes). `chunkBytes` is jitccl's: NCCL's parser reads at most ten fields and
//! ignores the rest. Sizes are what NCCL calls nBytes (AllGather / ReduceScatter: the whole
//! n-block buffer), bounds inclusive; the first matching row wins, as in NCCL.
//! jitccl's other fields are `# key: value` lines, comments to NCCL: `fingerprint` (the
//! topology the table was tuned on), `nranks`, `nnodes`. Names are NCCL's (allreduce,
//! ll128, ...) plus jitccl's `oneshot`, which NCCL reads as ring.
//!
//! Rows for calls in a wire format (`Comm::wired`) are jitccl's too, so they are comments
//! to NCCL, whose exact calls they must not steer: `# wire <name>: <row>` (`# wire
//! int8b64: allreduce,0,65536,ring,simple,2,1,4,-1,-1`). A wired call looks up the rows of
//! its wire only, an exact call the plain rows only.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use jitccl_codegen::{Algorithm, Collective, Protocol, Wire};

use super::model::Topology;
use crate::settings::{MAX_CHANNELS, TUNER_CONFIG_FILE};

#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("{origin}:{line}: {reason}")]
    Row { origin: String, line: u64, reason: String },
    #[error("{origin}: {reason}")]
    File { origin: String, reason: String },
}

/// One row; `None` is NCCL's -1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub coll: Collective,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub algo: Algorithm,
    pub proto: Protocol,
    pub channels: Option<usize>,
    pub nnodes: Option<usize>,
    pub nranks: Option<usize>,
    pub pipe_ops: Option<usize>,
    pub reg_buff: Option<bool>,
    pub chunk_bytes: Option<usize>,
    /// The wire format of the calls the row is for (`Exact`: plain calls).
    pub wire: Wire,
}

impl Row {
    /// A row for `coll` in `wire` at every size on any topology, naming `algo` and `proto`,
    /// with the model's channels and chunk size.
    pub fn every_size(coll: Collective, algo: Algorithm, proto: Protocol, wire: Wire) -> Row {
        Row {
            coll,
            min_bytes: 0,
            max_bytes: u64::MAX,
            algo,
            proto,
            channels: None,
            nnodes: None,
            nranks: None,
            pipe_ops: None,
            reg_buff: None,
            chunk_bytes: None,
            wire,
        }
    }
}

/// A whole table and the topology it was tuned on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Table {
    pub fingerprint: Option<u64>,
    pub nranks: Option<usize>,
    pub nnodes: Option<usize>,
    pub rows: Vec<Row>,
}

const HEADER: &str =
    "collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff,chunkBytes";

/// NCCL's spelling of a collective in tuner files.
fn nccl_name(c: Collective) -> &'static str {
    match c {
        Collective::AllReduce => "allreduce",
        Collective::Broadcast => "broadcast",
        Collective::Reduce => "reduce",
        Collective::AllGather => "allgather",
        Collective::ReduceScatter => "reducescatter",
        Collective::SendRecv => "sendrecv",
        Collective::AllToAll => "alltoall",
        Collective::Gather => "gather",
        Collective::Scatter => "scatter",
    }
}

fn opt(v: Option<usize>) -> String {
    v.map_or_else(|| "-1".to_string(), |v| v.to_string())
}

impl Table {
    /// The CSV text (what `to_bytes` carries and files hold).
    pub fn to_csv(&self) -> String {
        let mut s = String::from("# jitccl tuning table (NCCL example-tuner CSV)\n");
        if let Some(f) = self.fingerprint {
            let _ = writeln!(s, "# fingerprint: {f:016x}");
        }
        if let Some(n) = self.nranks {
            let _ = writeln!(s, "# nranks: {n}");
        }
        if let Some(n) = self.nnodes {
            let _ = writeln!(s, "# nnodes: {n}");
        }
        let _ = writeln!(s, "# {HEADER}");
        for r in &self.rows {
            if r.wire != Wire::Exact {
                let _ = write!(s, "# wire {}: ", r.wire);
            }
            let _ = write!(
                s,
                "{},{},{},{},{},{},{},{},{},{}",
                nccl_name(r.coll),
                r.min_bytes,
                r.max_bytes,
                r.algo,
                r.proto,
                opt(r.channels),
                opt(r.nnodes),
                opt(r.nranks),
                opt(r.pipe_ops),
                r.reg_buff.map_or("-1", |b| if b { "1" } else { "0" }),
            );
            // Rows without a chunk size stay plain NCCL rows.
            if let Some(c) = r.chunk_bytes {
                let _ = write!(s, ",{c}");
            }
            s.push('\n');
        }
        s
    }

    /// Bytes to broadcast from rank 0 (the CSV text).
    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_csv().into_bytes()
    }

    pub fn from_bytes(bytes: &[u8], origin: &str) -> Result<Table, TableError> {
        let text = std::str::from_utf8(bytes)
            .map_err(|e| TableError::File { origin: origin.to_string(), reason: format!("not UTF-8 text: {e}") })?;
        Table::parse(text, origin)
    }

    /// Parses the CSV text; `origin` (a file name) prefixes errors, with the line.
    pub fn parse(text: &str, origin: &str) -> Result<Table, TableError> {
        let mut table = Table::default();
        // Rows with their lines: the `# wire` rows come from the comments' pass, the plain
        // ones from the CSV reader's, and the table keeps the file's order.
        let mut rows: Vec<(u64, Row)> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let Some((key, value)) = line.strip_prefix('#').and_then(|l| l.split_once(':')) else { continue };
            let bad = |what: &str| TableError::Row {
                origin: origin.to_string(),
                line: i as u64 + 1,
                reason: format!("{what} '{}' is not valid", value.trim()),
            };
            match key.trim() {
                "fingerprint" => {
                    table.fingerprint = Some(u64::from_str_radix(value.trim(), 16).map_err(|_| bad("fingerprint"))?)
                }
                "nranks" => table.nranks = Some(value.trim().parse().map_err(|_| bad("nranks"))?),
                "nnodes" => table.nnodes = Some(value.trim().parse().map_err(|_| bad("nnodes"))?),
                key => {
                    let Some(wire) = key.strip_prefix("wire ") else { continue };
                    let row_error =
                        |reason: String| TableError::Row { origin: origin.to_string(), line: i as u64 + 1, reason };
                    let wire: Wire = wire.trim().parse().map_err(|e| row_error(format!("{e}")))?;
                    if wire == Wire::Exact {
                        return Err(row_error("an exact row is a plain row, not a '# wire' line".into()));
                    }
                    let fields: Vec<&str> = value.split(',').map(str::trim).collect();
                    rows.push((i as u64 + 1, Row { wire, ..parse_row(&fields).map_err(row_error)? }));
                }
            }
        }
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .comment(Some(b'#'))
            .flexible(true)
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes());
        for record in reader.records() {
            let record = record.map_err(|e| TableError::Row {
                origin: origin.to_string(),
                line: e.position().map_or(0, |p| p.line()),
                reason: e.to_string(),
            })?;
            let line = record.position().map_or(0, |p| p.line());
            let fields: Vec<&str> = record.iter().collect();
            if fields.iter().all(|f| f.is_empty()) {
                continue;
            }
            let row =
                parse_row(&fields).map_err(|reason| TableError::Row { origin: origin.to_string(), line, reason })?;
            rows.push((line, row));
        }
        rows.sort_by_key(|(line, _)| *line);
        table.rows = rows.into_iter().map(|(_, row)| row).collect();
        Ok(table)
    }

    /// Why this table does not apply to `topo`, if it does not.
    pub fn mismatch(&self, topo: &Topology) -> Option<String> {
        if let Some(n) = self.nranks.filter(|&n| n != topo.nranks) {
            return Some(format!("it was tuned for {n} ranks, this communicator has {}", topo.nranks));
        }
        if let Some(n) = self.nnodes.filter(|&n| n != topo.nnodes) {
            return Some(format!("it was tuned for {n} nodes, this communicator spans {}", topo.nnodes));
        }
        if let Some(f) = self.fingerprint.filter(|&f| f != topo.fingerprint) {
            return Some(format!("it was tuned on topology {f:016x}, this one is {}", topo.fingerprint_hex()));
        }
        None
    }

    /// The first row for `coll` in `wire` moving `bytes` on `topo` (one op) whose regBuff
    /// matches `registered`: whether the call's buffers are registered (the direct algorithms are
    /// candidates; plain buffers too where every rank maps every rank's host arena).
    pub fn lookup(
        &self, coll: Collective, bytes: usize, topo: &Topology, registered: bool, wire: Wire,
    ) -> Option<&Row> {
        let bytes = bytes as u64;
        self.rows.iter().find(|r| {
            r.coll == coll
                && r.wire == wire
                && (r.min_bytes..=r.max_bytes).contains(&bytes)
                && r.nnodes.is_none_or(|n| n == topo.nnodes)
                && r.nranks.is_none_or(|n| n == topo.nranks)
                && r.pipe_ops.is_none_or(|n| n == 1)
                && r.reg_buff.is_none_or(|b| b == registered)
        })
    }

    /// Where the table for `topo` is cached: `<cache dir>/tune/<fingerprint>.csv`.
    pub fn cache_path(topo: &Topology) -> Option<PathBuf> {
        jitccl_codegen::cache::DiskCache::from_env()
            .map(|c| c.dir().join("tune").join(format!("{}.csv", topo.fingerprint_hex())))
    }

    /// The table this process should use for `topo`: the file `configured` names
    /// (`Config::tuner_table`), else the one `JITCCL_TUNER_CONFIG_FILE` names, else the
    /// cached one. A named file that cannot be read or parsed is an error; a damaged
    /// cached one, or a table for another topology or rank count, is ignored with a
    /// warning saying why. With a tuner `plugin` loaded, a file named by NCCL's variable
    /// alone is the plugin's (NCCL's example tuner reads it), not jitccl's.
    pub(crate) fn load(
        topo: &Topology, configured: Option<&Path>, plugin: Option<&str>,
    ) -> Result<Option<Table>, TableError> {
        let named = match configured {
            Some(p) => Some((p.to_path_buf(), "Config::tuner_table")),
            None => TUNER_CONFIG_FILE.lookup_os().map(|(v, var)| (PathBuf::from(v), var)),
        };
        let named = match (named, plugin) {
            (Some((path, var)), Some(label)) if TUNER_CONFIG_FILE.nccl == Some(var) => {
                tracing::info!(
                    "tuning: {var}={} is left to tuner plugin {label}; jitccl's own table comes from {} or the cache",
                    path.display(),
                    TUNER_CONFIG_FILE.name
                );
                None
            }
            (named, _) => named,
        };
        let table = match (&named, Table::cache_path(topo)) {
            (Some((path, by)), _) => Table::read(path).map_err(|e| match e {
                TableError::File { origin, reason } => TableError::File { origin: format!("{by}={origin}"), reason },
                row => row,
            })?,
            (None, Some(path)) if path.exists() => match Table::read(&path) {
                Ok(t) => t,
                Err(e) => {
                    tracing::warn!("ignoring the cached tuning table: {e}");
                    return Ok(None);
                }
            },
            _ => {
                tracing::info!(
                    "tuning: no table for topology {} ({} unset, none cached): the cost model decides",
                    topo.fingerprint_hex(),
                    TUNER_CONFIG_FILE.name
                );
                return Ok(None);
            }
        };
        let path = named.map_or_else(|| "the cached tuning table".to_string(), |(p, _)| p.display().to_string());
        if let Some(why) = table.mismatch(topo) {
            tracing::warn!("ignoring tuning table {path}: {why}");
            return Ok(None);
        }
        tracing::info!("tuning: {path}, {} row(s), for topology {}", table.rows.len(), topo.fingerprint_hex());
        Ok(Some(table))
    }

    pub fn read(path: &Path) -> Result<Table, TableError> {
        let origin = path.display().to_string();
        let bytes =
            std::fs::read(path).map_err(|e| TableError::File { origin: origin.clone(), reason: e.to_string() })?;
        Table::from_bytes(&bytes, &origin)
    }

    /// Writes the table to `path` whole or not at all (a temporary file renamed).
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(
            ".{}.tmp-{}",
            path.file_name().and_then(|n| n.to_str()).unwrap_or("table"),
            std::process::id()
        ));
        std::fs::write(&tmp, self.to_csv())?;
        std::fs::rename(&tmp, path)
    }
}

/// -1 or a number in `range`.
fn field(
    fields: &[&str], i: usize, name: &str, range: std::ops::RangeInclusive<usize>,
) -> Result<Option<usize>, String> {
    let Some(v) = fields.get(i).copied() else { return Ok(None) };
    if v == "-1" {
        return Ok(None);
    }
    v.parse::<usize>()
        .ok()
        .filter(|n| range.contains(n))
        .map(Some)
        .ok_or_else(|| format!("{name} '{v}' is neither -1 nor {}..={}", range.start(), range.end()))
}

fn parse_row(f: &[&str]) -> Result<Row, String> {
    if !(8..=11).contains(&f.len()) {
        return Err(format!("{} fields; expected 8 to 11: {HEADER}", f.len()));
    }
    let coll: Collective = f[0].parse().map_err(|e| format!("{e}"))?;
    if coll == Collective::SendRecv {
        return Err("sendrecv is not tuned by tables (NCCL's format has no point-to-point)".into());
    }
    let bytes =
        |i: usize, name: &str| f[i].parse::<u64>().map_err(|_| format!("{name} '{}' is not a byte count", f[i]));
    let (min_bytes, max_bytes) = (bytes(1, "min_bytes")?, bytes(2, "max_bytes")?);
    if min_bytes > max_bytes {
        return Err(format!("min_bytes {min_bytes} is above max_bytes {max_bytes}"));
    }
    let algo: Algorithm = f[3].parse().map_err(|e| format!("{e}"))?;
    if !coll.algorithms().contains(&algo) {
        return Err(format!("{coll} has no {algo} algorithm"));
    }
    let proto: Protocol = f[4].parse().map_err(|e| format!("{e}"))?;
    let reg_buff = match f.get(9).copied() {
        None | Some("-1") => None,
        Some("0") => Some(false),
        Some("1") => Some(true),
        Some(v) => return Err(format!("regBuff '{v}' is not -1, 0 or 1")),
    };
    Ok(Row {
        coll,
        min_bytes,
        max_bytes,
        algo,
        proto,
        channels: field(f, 5, "channels", 1..=MAX_CHANNELS)?,
        nnodes: field(f, 6, "nNodes", 1..=usize::MAX)?,
        nranks: field(f, 7, "nRanks", 1..=usize::MAX)?,
        pipe_ops: field(f, 8, "numPipeOps", 1..=usize::MAX)?,
        reg_buff,
        chunk_bytes: field(f, 10, "chunkBytes", 1..=usize::MAX)?,
        wire: Wire::Exact,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topo(n: usize) -> Topology {
        Topology::host(n, 2, 2)
    }

    fn sample() -> Table {
        let row = |coll, min_bytes, max_bytes, algo, proto| Row {
            coll,
            min_bytes,
            max_bytes,
            algo,
            proto,
            channels: None,
            nnodes: Some(1),
            nranks: Some(4),
            pipe_ops: None,
            reg_buff: None,
            chunk_bytes: None,
            wire: Wire::Exact,
        };
        Table {
            fingerprint: Some(topo(4).fingerprint),
            nranks: Some(4),
            nnodes: Some(1),
            rows: vec![
                row(Collective::AllReduce, 0, 4095, Algorithm::OneShot, Protocol::LL),
                Row {
                    channels: Some(2),
                    chunk_bytes: Some(4096),
                    ..row(Collective::AllReduce, 4096, u64::MAX, Algorithm::Ring, Protocol::Simple)
                },
                Row {
                    nranks: None,
                    reg_buff: Some(false),
                    pipe_ops: Some(1),
                    ..row(Collective::AllGather, 0, 1 << 20, Algorithm::Ring, Protocol::LL128)
                },
                Row {
                    wire: Wire::Int8 { block: 128 },
                    channels: Some(1),
                    ..row(Collective::AllReduce, 0, 1 << 20, Algorithm::Tree, Protocol::Simple)
                },
            ],
        }
    }

    #[test]
    fn written_tables_read_back_identically() {
        let t = sample();
        let text = t.to_csv();
        assert_eq!(Table::parse(&text, "x").unwrap(), t, "{text}");
        assert_eq!(Table::from_bytes(&t.to_bytes(), "x").unwrap(), t);
        // A plain NCCL row: no chunk column, ten fields.
        assert!(text.contains("\nallreduce,0,4095,oneshot,ll,-1,1,4,-1,-1\n"), "{text}");
        // A wired row: a comment to NCCL.
        assert!(text.contains("\n# wire int8b128: allreduce,0,1048576,tree,simple,1,1,4,-1,-1\n"), "{text}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        t.write(&path).unwrap();
        assert_eq!(Table::read(&path).unwrap(), t);
    }

    #[test]
    fn stock_nccl_rows_parse() {
        let t = Table::parse(
            "# comment\nallreduce,0,65536,tree,simple,2,1,-1\n\nbroadcast, 0, 100, ring, LL128, -1, -1, -1, -1\n",
            "f",
        )
        .unwrap();
        assert_eq!(t.rows.len(), 2);
        assert_eq!((t.rows[0].algo, t.rows[0].channels, t.rows[0].nranks), (Algorithm::Tree, Some(2), None));
        assert_eq!(t.rows[1].proto, Protocol::LL128);
        assert_eq!(t.fingerprint, None);
    }

    #[test]
    fn lookup_takes_the_first_matching_row() {
        let t = sample();
        let top = topo(4);
        let look = |coll, bytes, topo: &Topology, reg| t.lookup(coll, bytes, topo, reg, Wire::Exact);
        assert_eq!(look(Collective::AllReduce, 100, &top, false).unwrap().algo, Algorithm::OneShot);
        assert_eq!(look(Collective::AllReduce, 4096, &top, true).unwrap().algo, Algorithm::Ring);
        assert!(look(Collective::AllReduce, 100, &topo(3), false).is_none(), "rows for 4 ranks matched 3");
        assert!(look(Collective::AllGather, 100, &topo(3), false).is_some());
        assert!(look(Collective::AllGather, 100, &topo(3), true).is_none(), "a regBuff 0 row");
        assert!(look(Collective::Broadcast, 100, &top, false).is_none());
        // A wired call takes its wire's rows only.
        let int8 = |block| Wire::Int8 { block };
        assert_eq!(t.lookup(Collective::AllReduce, 100, &top, false, int8(128)).unwrap().algo, Algorithm::Tree);
        assert!(t.lookup(Collective::AllReduce, 100, &top, false, int8(64)).is_none(), "another block");
        assert!(t.lookup(Collective::AllReduce, 100, &top, false, Wire::Bf16).is_none());
    }

    #[test]
    fn tables_for_another_topology_say_why_they_do_not_apply() {
        let t = sample();
        assert_eq!(t.mismatch(&topo(4)), None);
        let why = t.mismatch(&topo(2)).unwrap();
        assert!(why.contains("4 ranks") && why.contains("has 2"), "{why}");
        let why = t.mismatch(&Topology::host(4, 2, 8)).unwrap();
        assert!(
            why.contains("topology") && why.contains(&t.fingerprint.map(|f| format!("{f:016x}")).unwrap()),
            "{why}"
        );
    }

    #[test]
    fn malformed_rows_are_refused_with_file_and_line() {
        let cases = [
            ("allreduce,0,10,ring,simple,1,1", "7 fields"),
            ("allreduce,0,10,ring,simple,1,1,2,-1,-1,-1,9", "12 fields"),
            ("allscatter,0,10,ring,simple,1,1,2", "'allscatter'"),
            ("allreduce,ten,10,ring,simple,1,1,2", "min_bytes 'ten'"),
            ("allreduce,10,0,ring,simple,1,1,2", "above max_bytes"),
            ("broadcast,0,10,tree,simple,1,1,2", "broadcast has no tree"),
            ("allreduce,0,10,nvls,simple,1,1,2", "'nvls'"),
            ("allreduce,0,10,ring,ll64,1,1,2", "'ll64'"),
            ("allreduce,0,10,ring,simple,0,1,2", "channels '0'"),
            ("allreduce,0,10,ring,simple,99,1,2", "channels '99'"),
            ("allreduce,0,10,ring,simple,1,1,2,-1,2", "regBuff '2'"),
            ("sendrecv,0,10,ring,simple,1,1,2", "sendrecv"),
        ];
        for (row, why) in cases {
            let text = format!("# fingerprint: 00000000000000ab\nallreduce,0,1,ring,simple,-1,-1,-1\n{row}\n");
            let e = Table::parse(&text, "tab.csv").unwrap_err().to_string();
            assert!(e.starts_with("tab.csv:3: ") && e.contains(why), "{row}: {e}");
        }
        let e = Table::parse("# nranks: many\n", "h.csv").unwrap_err().to_string();
        assert!(e.starts_with("h.csv:1: ") && e.contains("'many'"), "{e}");
        let e = Table::from_bytes(&[0xff, 0xfe], "b.csv").unwrap_err().to_string();
        assert!(e.contains("b.csv") && e.contains("UTF-8"), "{e}");
    }
}
