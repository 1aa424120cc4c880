// A host stand-in for the CUDA runtime calls threads_side.cu makes, for benches/gpu/cpu-check.sh:
// there the program runs on jitccl's host target (JITCCL_DEVICE=host), with "device" buffers in
// host memory and events reading the wall clock, so that its logic (counts, grouped calls, the
// check of every element) runs without a GPU. Nothing here is built for the GPU machine.
#pragma once
#include <chrono>
#include <cstdlib>
#include <type_traits>
#include <cstring>
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaStreamNonBlocking = 1, cudaEventDisableTiming = 2 };
typedef void* cudaStream_t;
typedef struct { double t; }* cudaEvent_t;
static inline const char* cudaGetErrorString(cudaError_t) { return "stub"; }
static inline cudaError_t cudaSetDevice(int) { return 0; }
static inline cudaError_t cudaMalloc(void** p, size_t n) { *p = malloc(n); return 0; }
static inline cudaError_t cudaFree(void* p) { free(p); return 0; }
static inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, int) { memcpy(d, s, n); return 0; }
static inline cudaError_t cudaMemset(void* d, int v, size_t n) { memset(d, v, n); return 0; }
static inline cudaError_t cudaDeviceSynchronize() { return 0; }
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, int) { *s = nullptr; return 0; }
static inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return 0; }
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, int) { return 0; }
static inline cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = new std::remove_pointer<cudaEvent_t>::type; return 0; }
static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, int) { return cudaEventCreate(e); }
static inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return 0; }
static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) { e->t = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); return 0; }
static inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return 0; }
static inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) { *ms = (b->t - a->t) * 1e3; return 0; }
