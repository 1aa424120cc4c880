/* nccl-tests against jitccl's nccl.h, built at NCCL 2.27's API level.
 *
 * jitccl's header is NCCL 2.30.7's host API. From 2.28 on, nccl-tests also includes
 * nccl_device.h and compiles kernels on NCCL's device API (ncclDevComm, LSA and multimem
 * pointers), which jitccl does not have. Presenting the 2.27 version code compiles those
 * paths out; everything else nccl-tests calls is jitccl's 2.30 host API, and at run time it
 * reads jitccl's ncclGetVersion (2.30.7). For a build by hand (docs/guide.md, "nccl-tests")
 * this file is NCCL_HOME/include/nccl.h, with jitccl's capi/include/nccl.h copied to
 * NCCL_HOME/capi/nccl.h beside it. */
#ifndef JITCCL_NCCL_TESTS_API_H
#define JITCCL_NCCL_TESTS_API_H
#include "../capi/nccl.h"
#undef NCCL_MINOR
#undef NCCL_PATCH
#undef NCCL_VERSION_CODE
#define NCCL_MINOR 27
#define NCCL_PATCH 7
#define NCCL_VERSION_CODE NCCL_VERSION(2, 27, 7)
#endif
