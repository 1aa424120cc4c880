//! The loader against stand-in tables of Rust functions (`standin`: the choice, each
//! version's init and finalize, the properties), and against the C plugins of the
//! `jitccl-plugins` crate (`plugins`: libraries found by the setting, bytes moved with
//! every version, comms closed with requests in flight).

mod plugins;
mod standin;
