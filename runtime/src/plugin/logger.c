/* The logger jitccl hands NCCL-style plugins: NCCL's ncclDebugLogger_t, a printf-style C
 * variadic function, which stable Rust cannot define. It formats the message and passes
 * the text to the sink the runtime installed (plugin/logger.rs), which logs it. */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*jitccl_log_sink)(int level, unsigned long flags, const char* file, int line, const char* msg);

/* Written once, before the logger is handed to any plugin. */
static jitccl_log_sink sink;

void jitccl_plugin_log_sink(jitccl_log_sink s) { sink = s; }

void jitccl_plugin_log(int level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  if (!sink || !fmt) return;
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  va_list again;
  va_copy(again, ap);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) {
    va_end(again);
    sink(level, flags, file, line, "(a plugin log message that could not be formatted)");
    return;
  }
  if ((size_t)n < sizeof small) {
    va_end(again);
    sink(level, flags, file, line, small);
    return;
  }
  /* Longer than the stack buffer: formatted again, whole. */
  char* big = malloc((size_t)n + 1);
  if (!big) {
    va_end(again);
    sink(level, flags, file, line, small);
    return;
  }
  vsnprintf(big, (size_t)n + 1, fmt, again);
  va_end(again);
  sink(level, flags, file, line, big);
  free(big);
}
