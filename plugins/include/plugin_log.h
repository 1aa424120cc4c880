/*
 * The log of the project's single-file test plugins: the host's logger (NCCL's debug
 * logger, which init hands over), silent before init.
 */
#ifndef JITCCL_PLUGIN_LOG_H
#define JITCCL_PLUGIN_LOG_H

#include "jitccl_net.h"

static ncclDebugLogger_t plugin_logger;

#define PLUGIN_LOG(level, ...) \
  do { \
    if (plugin_logger != NULL) plugin_logger(level, NCCL_LOG_SUBSYS_NET, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

#endif
