//! The logger NCCL hands its plugins (`ncclDebugLogger_t`: level, subsystem flags, file,
//! line, printf format and arguments), so that what a plugin logs goes where jitccl's own
//! log goes. The variadic function itself is C (`logger.c`, built by the runtime's
//! build.rs): it formats the message and passes the text to [`sink`].

use std::ffi::{c_char, c_int, c_ulong, CStr};
use std::sync::Once;

/// NCCL's `ncclDebugLogger_t`.
pub(crate) type Logger = unsafe extern "C" fn(c_int, c_ulong, *const c_char, c_int, *const c_char, ...);

type Sink = extern "C" fn(c_int, c_ulong, *const c_char, c_int, *const c_char);

extern "C" {
    fn jitccl_plugin_log(level: c_int, flags: c_ulong, file: *const c_char, line: c_int, fmt: *const c_char, ...);
    fn jitccl_plugin_log_sink(sink: Sink);
}

/// NCCL's log levels (`ncclDebugLogLevel`).
const LOG_VERSION: c_int = 1;
const LOG_WARN: c_int = 2;
const LOG_INFO: c_int = 3;
const LOG_ABORT: c_int = 4;
const LOG_TRACE: c_int = 5;

/// The logger to pass to a plugin's `init`.
pub(crate) fn logger() -> Logger {
    static SINK: Once = Once::new();
    // SAFETY: installs a function that lives as long as the process; the C side reads it
    // only after this (the logger is handed out below, after the Once).
    SINK.call_once(|| unsafe { jitccl_plugin_log_sink(sink) });
    jitccl_plugin_log
}

fn text<'a>(p: *const c_char, none: &'a str) -> std::borrow::Cow<'a, str> {
    if p.is_null() {
        return none.into();
    }
    // SAFETY: the C side passes NUL-terminated strings: its own buffer, or the plugin's
    // file name (`__FILE__`).
    unsafe { CStr::from_ptr(p) }.to_string_lossy()
}

/// One formatted plugin message, at the tracing level of its NCCL level; where it comes
/// from (the plugin's source file and line) shows at TRACE only, as NCCL prints it only
/// with its own file and line.
extern "C" fn sink(level: c_int, _flags: c_ulong, file: *const c_char, line: c_int, msg: *const c_char) {
    let msg = text(msg, "");
    let msg = msg.trim_end();
    match level {
        LOG_WARN => tracing::warn!("{msg}"),
        LOG_INFO | LOG_VERSION => tracing::info!("{msg}"),
        LOG_ABORT => tracing::error!("{msg}"),
        LOG_TRACE => tracing::trace!("{msg} ({}:{line})", text(file, "?")),
        // NONE and levels NCCL does not define: kept, at DEBUG.
        _ => tracing::debug!("{msg}"),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Where a test's subscriber writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn plugin_messages_are_formatted_whole_at_their_level() {
        let out = Captured::default();
        let w = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || w.clone())
            .finish();
        let long = std::ffi::CString::new("x".repeat(2000)).unwrap();
        tracing::subscriber::with_default(subscriber, || {
            let log = logger();
            // SAFETY: formats and arguments that match; a null format is tolerated.
            unsafe {
                log(LOG_INFO, 0, c"t.c".as_ptr(), 1, c"%s %d %zu".as_ptr(), c"csv".as_ptr(), -3 as c_int, 7usize);
                log(LOG_WARN, 0, std::ptr::null(), 0, c"long %s.".as_ptr(), long.as_ptr());
                log(LOG_TRACE, 0, c"plug.c".as_ptr(), 42, c"%.2f".as_ptr(), 0.5f64);
                log(LOG_INFO, 0, std::ptr::null(), 0, std::ptr::null());
            }
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].contains("INFO") && lines[0].ends_with("csv -3 7"), "{text}");
        assert!(lines[1].contains("WARN") && lines[1].ends_with(&format!("long {}.", "x".repeat(2000))), "{text}");
        assert!(lines[2].contains("TRACE") && lines[2].ends_with("0.50 (plug.c:42)"), "{text}");
    }
}
