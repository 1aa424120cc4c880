//! Transports: where a connector's FIFO lives and how both ends reach it. Every rank owns
//! one segment holding all the FIFOs it receives on, at offsets every rank can compute
//! (`layout`); `connect` turns the segments' addresses into a rank's connector tables. In
//! one process a segment is plain memory (`p2p`: both ends share pointers).

pub(crate) mod connect;
pub(crate) mod layout;
pub(crate) mod p2p;
pub(crate) mod shm;
