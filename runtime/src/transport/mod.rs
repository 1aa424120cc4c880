//! Transports: where a connector's FIFO lives and how both ends reach it. Every rank owns
//! one segment holding all the FIFOs it receives on, at offsets every rank can compute
//! (`layout`); `connect` turns the segments' addresses into a rank's connector tables. In
//! one process a segment is plain memory (`p2p`: both ends share pointers); processes on a
//! host map each other's (`shm`); across hosts a proxy thread moves FIFO steps over TCP
//! between a sender's local shadow of the peer's FIFO and the peer's own (`net`).

pub(crate) mod connect;
pub(crate) mod layout;
pub(crate) mod net;
pub(crate) mod p2p;
pub(crate) mod shm;
