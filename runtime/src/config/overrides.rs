//! JITCCL_ALGO / JITCCL_PROTO in NCCL's NCCL_ALGO / NCCL_PROTO grammar: which algorithms
//! and protocols each collective may use.
//!
//! `[list];coll:list;coll:list...`: `;` separates entries, `:` a collective from its list,
//! `,` the items; a leading `^` makes the list the items to exclude. Only the first entry
//! may omit the collective (it then applies to every collective); a later entry for a
//! collective replaces what came before for that collective. Names are case-insensitive.
//! An unknown name is an error naming it: a typo never silently falls back to the default
//! (NCCL 2.24's rule).

use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;

use jitccl_codegen::{Algorithm, Collective, Protocol};

/// What an override list names: an algorithm or a protocol.
pub trait Item: Copy + Eq + fmt::Display + FromStr<Err: fmt::Display> + 'static {
    /// Every item, in bit order.
    const ALL: &'static [Self];
    /// The variable whose value these overrides are.
    const VAR: &'static str;
    /// The items `coll` has a kernel for.
    fn available(coll: Collective) -> &'static [Self];
    fn bit(self) -> u8 {
        // ALL holds every variant (at most 8), so the position exists.
        1 << Self::ALL.iter().position(|&i| i == self).unwrap_or(0)
    }
}

impl Item for Algorithm {
    const ALL: &'static [Self] = Algorithm::ALL;
    const VAR: &'static str = crate::settings::ALGO.name;
    fn available(coll: Collective) -> &'static [Self] {
        coll.algorithms()
    }
}

impl Item for Protocol {
    const ALL: &'static [Self] = Protocol::ALL;
    const VAR: &'static str = crate::settings::PROTO.name;
    fn available(_: Collective) -> &'static [Self] {
        Protocol::ALL
    }
}

/// Why an override string is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverrideError {
    #[error("empty entry #{0} (entries are separated by ';')")]
    EmptyEntry(usize),
    #[error("entry '{0}' has an empty list")]
    EmptyList(String),
    #[error("entry '{0}': only the first entry may apply to every collective; name one, as in 'allreduce:{0}'")]
    Unprefixed(String),
    #[error("entry '{entry}': {reason}")]
    Unknown { entry: String, reason: String },
}

/// A set of items (a bit per item of `T::ALL`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Set<T> {
    bits: u8,
    _t: PhantomData<T>,
}

impl<T: Item> Set<T> {
    pub fn of(items: &[T]) -> Self {
        Set { bits: items.iter().fold(0, |b, i| b | i.bit()), _t: PhantomData }
    }
    pub fn all() -> Self {
        Self::of(T::ALL)
    }
    pub fn contains(self, item: T) -> bool {
        self.bits & item.bit() != 0
    }
    pub fn is_empty(self) -> bool {
        self.bits == 0
    }
    pub fn iter(self) -> impl Iterator<Item = T> {
        T::ALL.iter().copied().filter(move |&i| self.contains(i))
    }
    fn complement(self) -> Self {
        Set { bits: Self::all().bits & !self.bits, _t: PhantomData }
    }
}

impl<T: Item> fmt::Debug for Set<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter().map(|i| i.to_string())).finish()
    }
}

impl<T: Item> fmt::Display for Set<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.iter().map(|i| i.to_string()).collect();
        f.write_str(&names.join(","))
    }
}

const NCOLLS: usize = Collective::ALL.len();

/// Per collective, the items it may use; `None` leaves the collective unrestricted.
#[derive(Clone, PartialEq, Eq)]
pub struct Overrides<T> {
    per: [Option<Set<T>>; NCOLLS],
}

/// JITCCL_ALGO's value.
pub type AlgoOverrides = Overrides<Algorithm>;
/// JITCCL_PROTO's value.
pub type ProtoOverrides = Overrides<Protocol>;

impl<T: Item> Default for Overrides<T> {
    fn default() -> Self {
        Overrides { per: [None; NCOLLS] }
    }
}

impl<T: Item> Overrides<T> {
    /// `item` for every collective that has it; the others stay unrestricted. This is the
    /// meaning of `Config::algo` / `Config::proto` (a single forced value).
    pub fn force_where_available(item: T) -> Self {
        let mut o = Self::default();
        for &c in Collective::ALL {
            if T::available(c).contains(&item) {
                o.per[c as usize] = Some(Set::of(&[item]));
            }
        }
        o
    }

    /// Restricts `coll` to `items` (replacing what was there), builder style.
    pub fn with(mut self, coll: Collective, items: &[T]) -> Self {
        self.per[coll as usize] = Some(Set::of(items));
        self
    }

    /// What `coll` may use (every item when nothing restricts it).
    pub fn allowed(&self, coll: Collective) -> Set<T> {
        self.per[coll as usize].unwrap_or_else(Set::all)
    }

    /// Whether an override restricts `coll`.
    pub fn restricts(&self, coll: Collective) -> bool {
        self.per[coll as usize].is_some_and(|s| s != Set::all())
    }

    pub fn is_empty(&self) -> bool {
        Collective::ALL.iter().all(|&c| !self.restricts(c))
    }

    /// Parses NCCL's grammar (see the module comment).
    pub fn parse(text: &str) -> Result<Self, OverrideError> {
        let mut o = Self::default();
        for (i, entry) in text.split(';').enumerate() {
            let entry = entry.trim();
            if entry.is_empty() {
                return Err(OverrideError::EmptyEntry(i + 1));
            }
            let (colls, list) = match entry.split_once(':') {
                Some((c, list)) => {
                    let coll = c.trim().parse::<Collective>().map_err(|e| unknown(entry, e))?;
                    (std::slice::from_ref(&Collective::ALL[coll as usize]), list)
                }
                None if i == 0 => (Collective::ALL, entry),
                None => return Err(OverrideError::Unprefixed(entry.to_string())),
            };
            let set = parse_list::<T>(entry, list)?;
            for &c in colls {
                o.per[c as usize] = Some(set);
            }
        }
        Ok(o)
    }
}

fn unknown(entry: &str, e: impl fmt::Display) -> OverrideError {
    OverrideError::Unknown { entry: entry.to_string(), reason: e.to_string() }
}

/// `a,b,c` or `^a,b` (everything but a and b).
fn parse_list<T: Item>(entry: &str, list: &str) -> Result<Set<T>, OverrideError> {
    let list = list.trim();
    let (exclude, list) = match list.strip_prefix('^') {
        Some(rest) => (true, rest.trim()),
        None => (false, list),
    };
    if list.is_empty() {
        return Err(OverrideError::EmptyList(entry.to_string()));
    }
    let mut items = Vec::new();
    for name in list.split(',') {
        let name = name.trim();
        if name.is_empty() {
            return Err(OverrideError::EmptyList(entry.to_string()));
        }
        items.push(name.parse::<T>().map_err(|e| unknown(entry, e))?);
    }
    let set = Set::of(&items);
    Ok(if exclude { set.complement() } else { set })
}

impl<T: Item> FromStr for Overrides<T> {
    type Err = OverrideError;
    fn from_str(s: &str) -> Result<Self, OverrideError> {
        Self::parse(s)
    }
}

/// The canonical text, one entry per restricted collective (it parses back to the same
/// value); empty when nothing is restricted.
impl<T: Item> fmt::Display for Overrides<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        for &c in Collective::ALL {
            if let Some(set) = self.per[c as usize] {
                write!(
                    f,
                    "{sep}{c}:{}",
                    if set.is_empty() { "^".to_string() + &Set::<T>::all().to_string() } else { set.to_string() }
                )?;
                sep = ";";
            }
        }
        Ok(())
    }
}

impl<T: Item> fmt::Debug for Overrides<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}='{self}'", T::VAR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Algorithm::*;
    use Collective::*;
    use Protocol::*;

    fn algos(s: &str) -> AlgoOverrides {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn global_list_applies_to_every_collective() {
        let o = algos("ring,tree");
        for &c in Collective::ALL {
            assert_eq!(o.allowed(c), Set::of(&[Ring, Tree]), "{c}");
        }
    }

    #[test]
    fn per_collective_entries_replace_the_global_list() {
        let o = algos("ring,tree;allreduce:oneshot");
        assert_eq!(o.allowed(AllReduce), Set::of(&[OneShot]));
        assert_eq!(o.allowed(Broadcast), Set::of(&[Ring, Tree]));
        let o = algos(" AllReduce : Tree ; broadcast:ring");
        assert_eq!(o.allowed(AllReduce), Set::of(&[Tree]));
        assert_eq!(o.allowed(Broadcast), Set::of(&[Ring]));
        assert!(!o.restricts(AllGather));
        assert_eq!(o.allowed(AllGather), Set::all());
        // NCCL's collective names and jitccl's both work.
        assert_eq!(algos("reducescatter:ring"), algos("reduce_scatter:ring"));
    }

    #[test]
    fn caret_excludes() {
        let p: ProtoOverrides = "^ll128".parse().unwrap();
        assert_eq!(p.allowed(AllReduce), Set::of(&[Simple, LL]));
        let p: ProtoOverrides = "^LL128;allreduce:LL128".parse().unwrap();
        assert_eq!(p.allowed(AllReduce), Set::of(&[LL128]));
        assert_eq!(p.allowed(Reduce), Set::of(&[Simple, LL]));
        let o = algos("allreduce:^ring,tree,oneshot,direct,direct_oneshot,recursive_doubling");
        assert!(o.allowed(AllReduce).is_empty());
        assert_eq!(o.to_string().parse::<AlgoOverrides>().unwrap(), o);
    }

    #[test]
    fn unknown_names_are_errors_naming_them() {
        for (s, name) in
            [("ring,nvls", "'nvls'"), ("allreduce:ring;allscatter:ring", "'allscatter'"), ("^colnet", "'colnet'")]
        {
            let e = s.parse::<AlgoOverrides>().unwrap_err().to_string();
            assert!(e.contains(name), "{s}: {e}");
        }
        let e = "ll64".parse::<ProtoOverrides>().unwrap_err().to_string();
        assert!(e.contains("'ll64'") && e.contains("simple"), "{e}");
    }

    #[test]
    fn malformed_strings_are_refused() {
        for s in ["", ";ring", "ring;;tree", "allreduce:", "allreduce:^", "ring,,tree", "ring;tree"] {
            assert!(s.parse::<AlgoOverrides>().is_err(), "{s:?} was accepted");
        }
        assert!(matches!("ring;tree".parse::<AlgoOverrides>(), Err(OverrideError::Unprefixed(_))));
    }

    #[test]
    fn display_parses_back() {
        for s in ["ring", "ring,tree;allreduce:oneshot", "allreduce:^ring", "broadcast:ring;allreduce:tree,oneshot"] {
            let o = algos(s);
            assert_eq!(algos(&o.to_string()), o, "{s} -> {o}");
        }
    }

    #[test]
    fn force_where_available_leaves_other_collectives_alone() {
        let o = AlgoOverrides::force_where_available(Tree);
        assert_eq!(o.allowed(AllReduce), Set::of(&[Tree]));
        assert!(!o.restricts(Broadcast));
        let p = ProtoOverrides::force_where_available(LL);
        assert!(Collective::ALL.iter().all(|&c| p.allowed(c) == Set::of(&[LL])));
    }
}
