//! Finding and opening NCCL-style plugin libraries (network, tuner), by NCCL's naming: a
//! setting unset means `libnccl-<kind>.so`; `none` means no plugin; otherwise a
//! comma-separated list, each entry tried first as `libnccl-<kind>-<entry>.so`, then as a
//! file name or path of its own. The libraries stay loaded for the life of the process
//! (as NCCL keeps them): the tables they export are used by communicators that may outlive
//! any one owner, and unloading a library whose threads still run crashes the process.
//! `logger` is the logging function NCCL hands every plugin kind.

pub(crate) mod logger;

use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};

use rustc_hash::FxHashMap;

/// A plugin library, loaded once per process.
pub(crate) struct Library {
    /// What was asked for (the setting's entry), for logs.
    pub entry: String,
    /// The file name that loaded.
    pub file: String,
    lib: libloading::Library,
}

impl Library {
    /// The address of the exported symbol `name`, if the library has it.
    pub fn symbol(&self, name: &str) -> Option<*mut c_void> {
        // SAFETY: looking a symbol up runs no code of the library; the address is only used
        // as the table type its name promises, by the caller.
        let sym = unsafe { self.lib.get::<*mut c_void>(name) }.ok()?;
        let p = *sym;
        (!p.is_null()).then_some(p)
    }
}

/// What a plugin setting asks for: the entries in order, or none at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Request {
    /// `none`: no plugin of this kind.
    Disabled,
    /// Each entry with the file names to try for it, in order.
    Entries(Vec<(String, Vec<String>)>),
}

/// The entries of `setting` for plugins of `kind` (`net`, `tuner`): unset means the default
/// library name alone.
pub(crate) fn request(kind: &str, setting: Option<&str>) -> Request {
    let Some(s) = setting.map(str::trim).filter(|s| !s.is_empty()) else {
        let default = format!("libnccl-{kind}.so");
        return Request::Entries(vec![(default.clone(), vec![default])]);
    };
    if s.eq_ignore_ascii_case("none") {
        return Request::Disabled;
    }
    let entries = s
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| {
            let mut files = Vec::with_capacity(2);
            // A path or a full file name is only itself.
            if !e.contains('/') && !e.ends_with(".so") && !e.contains(".so.") {
                files.push(format!("libnccl-{kind}-{e}.so"));
            }
            files.push(e.to_string());
            (e.to_string(), files)
        })
        .collect();
    Request::Entries(entries)
}

/// Libraries already opened, by file name: one load per process, as NCCL does.
fn loaded() -> &'static Mutex<FxHashMap<String, &'static Library>> {
    static LOADED: OnceLock<Mutex<FxHashMap<String, &'static Library>>> = OnceLock::new();
    LOADED.get_or_init(Default::default)
}

/// Opens the library of `entry`, trying its file names in order; the error says, per file
/// name, why it did not load.
pub(crate) fn open(entry: &str, files: &[String]) -> Result<&'static Library, String> {
    let mut why = Vec::new();
    let mut cache = loaded().lock().unwrap_or_else(|p| p.into_inner());
    for file in files {
        if let Some(lib) = cache.get(file) {
            return Ok(lib);
        }
        // SAFETY: loading a plugin runs its initializers, which NCCL's plugin contract
        // allows any loader to do; the library is kept for the life of the process.
        match unsafe { libloading::Library::new(file) } {
            Ok(lib) => {
                let lib: &'static Library =
                    Box::leak(Box::new(Library { entry: entry.to_string(), file: file.clone(), lib }));
                cache.insert(file.clone(), lib);
                return Ok(lib);
            }
            Err(e) => why.push(format!("{file}: {e}")),
        }
    }
    Err(why.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(r: &Request) -> Vec<Vec<String>> {
        match r {
            Request::Entries(e) => e.iter().map(|(_, f)| f.clone()).collect(),
            Request::Disabled => panic!("disabled"),
        }
    }

    #[test]
    fn settings_name_libraries_as_nccl_does() {
        assert_eq!(files(&request("net", None)), [["libnccl-net.so"]]);
        assert_eq!(files(&request("net", Some("  "))), [["libnccl-net.so"]]);
        assert_eq!(request("tuner", Some("NONE")), Request::Disabled);
        assert_eq!(
            files(&request("net", Some("aws-ofi, /opt/p/libx.so ,liby.so.1,,"))),
            vec![
                vec!["libnccl-net-aws-ofi.so".to_string(), "aws-ofi".into()],
                vec!["/opt/p/libx.so".into()],
                vec!["liby.so.1".into()],
            ]
        );
        assert_eq!(files(&request("tuner", Some("csv"))), [["libnccl-tuner-csv.so", "csv"]]);
    }

    #[test]
    fn a_missing_library_says_which_names_were_tried() {
        let e = open("nope", &["libnccl-net-nope.so".into(), "nope".into()]).err().expect("no such library");
        assert!(e.contains("libnccl-net-nope.so: ") && e.contains("; nope: "), "{e}");
    }

    #[test]
    fn a_library_loads_once_and_finds_its_symbols() {
        let a = open("libc", &["libc.so.6".into()]).expect("libc loads");
        let b = open("libc", &["libc.so.6".into()]).expect("libc loads");
        assert!(std::ptr::eq(a, b));
        assert!(a.symbol("malloc").is_some());
        assert!(a.symbol("ncclNetPlugin_v12").is_none());
    }
}
