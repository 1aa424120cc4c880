//! Transports: how a connector's FIFO reaches the peer. In one process (`p2p`) both ends
//! simply share the receiver's memory.

pub(crate) mod p2p;
