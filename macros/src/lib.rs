//! Procedural macros for jitccl (custom reductions arrive with `#[reduction]`).
