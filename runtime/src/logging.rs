//! JITCCL_DEBUG=WARN|INFO|DEBUG|TRACE selects what jitccl logs to stderr (default WARN),
//! like NCCL_DEBUG. A program that installed its own tracing subscriber keeps it.

use std::sync::Once;

/// Starts this logging now; communicators, the store and topology detection start it
/// themselves, so only a program that uses other parts first (the `jitccl` command) calls it.
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let level = std::env::var("JITCCL_DEBUG").unwrap_or_default().to_ascii_lowercase();
        let level = match level.as_str() {
            "" | "warn" => "warn",
            "version" | "info" => "info",
            "debug" => "debug",
            "trace" => "trace",
            other => {
                eprintln!("jitccl: JITCCL_DEBUG='{other}' is not one of WARN, INFO, DEBUG, TRACE; using WARN");
                "warn"
            }
        };
        let filter = tracing_subscriber::EnvFilter::new(format!(
            "warn,jitccl={level},jitccl_runtime={level},jitccl_codegen={level}"
        ));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            // Colour codes only for a terminal: rank output piped through `jitccl perf`
            // or into a file stays plain text.
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_target(false)
            .with_thread_names(true)
            .try_init();
    });
}
