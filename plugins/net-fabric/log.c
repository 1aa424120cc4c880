/* Logging through the host's logger (NCCL's debug logger), which init hands over. */
#include <stdarg.h>
#include <stdio.h>

#include "fabric.h"

static ncclDebugLogger_t host_logger;

void fab_set_logger(ncclDebugLogger_t logger) {
  /* Any thread may log while another init (v11+: one per communicator) installs it. */
  if (logger != NULL) __atomic_store_n(&host_logger, logger, __ATOMIC_RELEASE);
}

void fab_log(ncclDebugLogLevel level, const char* file, int line, const char* fmt, ...) {
  ncclDebugLogger_t logger = __atomic_load_n(&host_logger, __ATOMIC_ACQUIRE);
  if (logger == NULL) return;
  /* The logger is variadic itself; format here so that a va_list never crosses it. */
  char text[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof text, fmt, args);
  va_end(args);
  logger(level, NCCL_LOG_SUBSYS_NET, file, line, "NET/Fabric: %s", text);
}
