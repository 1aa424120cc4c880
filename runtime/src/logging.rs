//! JITCCL_DEBUG=WARN|INFO|DEBUG|TRACE selects what jitccl logs to stderr (default WARN),
//! as NCCL_DEBUG (also read). A program that installed its own tracing subscriber keeps it.

use std::sync::Once;

/// Starts this logging now; communicators, the store and topology detection start it
/// themselves, so only a program that uses other parts first (the `jitccl` command) calls it.
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Logging is not up yet to report a bad value: it goes to stderr directly.
        let level = match crate::settings::DEBUG.choice(None) {
            Ok("VERSION") => "info".to_string(),
            Ok(level) => level.to_ascii_lowercase(),
            Err(e) => {
                eprintln!("jitccl: {e}; using WARN");
                "warn".to_string()
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
