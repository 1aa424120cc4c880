//! Where the NCCL-style plugins of jitccl's own were built (shared libraries in the build's
//! OUT_DIR): for tests, and for users who point `NCCL_*_PLUGIN` at them.

// --- Tuner plugins -------------------------------------------------------------------

/// The CSV tuner (`tuner-csv/csv.c`): `ncclTunerPlugin_v6` .. `_v2`, overrides from the CSV
/// file `NCCL_TUNER_CONFIG_FILE` names, in the format of NCCL's example tuner.
pub const TUNER_CSV: &str = concat!(env!("OUT_DIR"), "/libnccl-tuner-csv.so");

/// The same tuner exporting only `ncclTunerPlugin_v2`.
pub const TUNER_CSV_V2: &str = concat!(env!("OUT_DIR"), "/libnccl-tuner-csv-v2.so");
