//! The agreement on the configuration at init: every rank sends its resolved configuration
//! field by field, and a mismatch names the field and which ranks hold which value (a
//! whole-struct comparison would only say "different", leaving the user to diff two dumps).

use super::Resolved;
use crate::error::{Error, Result};
use crate::settings::{Ranks, Setting, ALL};

/// The setting of a `Config` field.
fn setting_of(field: &str) -> Option<&'static Setting> {
    ALL.iter().find(|s| s.field.is_some_and(|f| f.split(", ").any(|f| f == field)))
}

impl Resolved {
    /// The fields every rank must agree on, as (name, value): those whose setting says so
    /// (a field the table lacks counts as one to agree on).
    fn fields(&self) -> Vec<(&'static str, String)> {
        self.values().into_iter().filter(|(name, _)| setting_of(name).is_none_or(|s| s.ranks == Ranks::Agree)).collect()
    }

    /// What this rank sends: one `name=value` line per field (Debug escapes newlines).
    pub(crate) fn encode(&self) -> Vec<u8> {
        self.fields().iter().map(|(n, v)| format!("{n}={v}\n")).collect::<String>().into_bytes()
    }

    /// Checks that every rank's encoded configuration (`all`, by rank) equals this one; the
    /// error names the first field that differs and the ranks holding each value.
    pub(crate) fn agree(&self, rank: usize, all: &[Vec<u8>]) -> Result<()> {
        let decoded: Vec<Vec<(String, String)>> = all.iter().map(|b| decode(b)).collect();
        for (name, _) in self.fields() {
            let value = |q: usize| decoded[q].iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
            let mut values: Vec<(Option<&str>, Vec<usize>)> = Vec::new();
            for q in 0..all.len() {
                match values.iter_mut().find(|(v, _)| *v == value(q)) {
                    Some((_, ranks)) => ranks.push(q),
                    None => values.push((value(q), vec![q])),
                }
            }
            if values.len() > 1 {
                let held: Vec<String> = values
                    .iter()
                    .map(|(v, ranks)| format!("{} on rank(s) {ranks:?}", v.unwrap_or("(not sent)")))
                    .collect();
                let var = setting_of(name).map(|s| format!(" ({})", s.name)).unwrap_or_default();
                return Err(Error::InvalidUsage(format!(
                    "the ranks were given different configurations: Config.{name}{var} is {} (seen from rank {rank})",
                    held.join(", ")
                )));
            }
        }
        Ok(())
    }
}

fn decode(b: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(b)
        .lines()
        .filter_map(|l| l.split_once('=').map(|(n, v)| (n.to_string(), v.to_string())))
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::error::Error;

    #[test]
    fn a_mismatch_names_the_field_and_the_ranks() {
        let base = Config { nchannels: Some(2), ..Config::default() };
        let a = base.resolve(3).unwrap();
        let b = Config { max_ctas: Some(3), ..base }.resolve(3).unwrap();
        let all = vec![a.encode(), b.encode(), a.encode()];
        assert!(a.agree(0, &[a.encode(), a.encode()]).is_ok());
        let e = a.agree(0, &all).unwrap_err();
        let Error::InvalidUsage(m) = e else { panic!("{e}") };
        assert!(
            m.contains("Config.max_ctas (JITCCL_MAX_CTAS) is")
                && m.contains("64 on rank(s) [0, 2]")
                && m.contains("3 on rank(s) [1]"),
            "{m}"
        );
    }

    #[test]
    fn every_field_has_a_setting_and_only_agreed_ones_are_sent() {
        let r = Config::default().resolve(2).unwrap();
        for (name, _) in r.values() {
            assert!(super::setting_of(name).is_some(), "Config.{name} has no setting in the table");
        }
        let sent: Vec<_> = r.fields().into_iter().map(|(n, _)| n).collect();
        assert!(sent.contains(&"algos") && sent.contains(&"slot_bytes") && sent.contains(&"max_ctas"), "{sent:?}");
        assert!(!sent.contains(&"spin") && !sent.contains(&"tuner_table"), "{sent:?}");
    }

    #[test]
    fn spin_is_bounded_and_each_ranks_own() {
        let spin = |n| Config { spin: Some(n), ..Config::default() }.resolve(2);
        let e = spin(1_000_000_001).unwrap_err().to_string();
        assert!(e.contains("JITCCL_SPIN"), "{e}");
        let (a, b) = (spin(0).unwrap(), spin(100).unwrap());
        assert!(a.agree(0, &[a.encode(), b.encode()]).is_ok(), "ranks may spin differently");
    }

    #[test]
    fn cta_bounds_are_checked_and_net_names_spelled() {
        let c = |min, max, n| Config { min_ctas: min, max_ctas: max, nchannels: n, ..Config::default() }.resolve(2);
        assert_eq!(
            c(Some(3), Some(5), None).unwrap().nchannels.clamp(3, 5),
            c(Some(3), Some(5), None).unwrap().nchannels
        );
        assert_eq!(c(Some(6), None, None).unwrap().nchannels, 6, "the default is raised to min_ctas");
        assert_eq!(c(None, Some(1), None).unwrap().nchannels, 1, "and lowered to max_ctas");
        for (min, max, n, needle) in [
            (Some(0), None, None, "min_ctas"),
            (None, Some(65), None, "max_ctas"),
            (Some(4), Some(2), None, "above max_ctas"),
            (Some(2), Some(3), Some(4), "outside min_ctas"),
        ] {
            let e = c(min, max, n).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        }
        let net = |n: &str| Config { net_name: Some(n.into()), ..Config::default() }.resolve(2).unwrap().net_name;
        assert_eq!(net(" socket ").as_deref(), Some("Socket"), "the built-in's spelling");
        assert_eq!(net("Libfabric").as_deref(), Some("Libfabric"), "a plugin's name, checked at init");
        assert_eq!(net("  "), None, "blank: no name asked");
    }
}
