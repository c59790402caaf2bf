/* A CUDA client for scripts/gpu-check/isolation.sh, through the driver API loaded at run time
 * (libcuda.so.1: no CUDA toolkit needed to build it, only a C compiler).
 *
 *   cuda_probe alloc MIB [HOLD_S]   allocate MIB MiB in 64 MiB pieces, or as much as the limit
 *                                   lets; print "allocated N MiB" and "result ok" or
 *                                   "result out-of-memory" (or the driver's error); then keep it
 *                                   for HOLD_S seconds (a co-tenant that must keep running)
 *   cuda_probe spin SECONDS         launch a spinning kernel on every SM for SECONDS and print
 *                                   "kernels K" (launches completed): under MPS its rate
 *                                   follows the client's active-thread percentage
 * Exit 0 when it ran (whatever the allocation's result), 2 when CUDA cannot be used.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void* CUcontext;
typedef void* CUmodule;
typedef void* CUfunction;
typedef unsigned long long CUdeviceptr;

static CUresult (*cuInit)(unsigned);
static CUresult (*cuDeviceGet)(CUdevice*, int);
static CUresult (*cuCtxCreate)(CUcontext*, unsigned, CUdevice);
static CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
static CUresult (*cuModuleLoadData)(CUmodule*, const void*);
static CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
static CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  unsigned, unsigned, void*, void**, void**);
static CUresult (*cuCtxSynchronize)(void);
static CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
static CUresult (*cuGetErrorName)(CUresult, const char**);

#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16

/* A kernel that spins `n` iterations (PTX, JIT-compiled by the driver). */
static const char kPtx[] =
    ".version 6.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry spin(.param .u32 n) {\n"
    "  .reg .u32 %r<4>; .reg .pred %p;\n"
    "  ld.param.u32 %r1, [n]; mov.u32 %r2, 0;\n"
    "LOOP: add.u32 %r2, %r2, 1; setp.lt.u32 %p, %r2, %r1; @%p bra LOOP;\n"
    "  ret;\n}\n";

static const char* Name(CUresult r) {
  const char* s = "unknown";
  if (cuGetErrorName != NULL) cuGetErrorName(r, &s);
  return s;
}

static int Load(void) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (lib == NULL) {
    fprintf(stderr, "cuda_probe: libcuda.so.1: %s\n", dlerror());
    return 0;
  }
#define RESOLVE(f, name) *(void**)(&f) = dlsym(lib, name)
  RESOLVE(cuInit, "cuInit");
  RESOLVE(cuDeviceGet, "cuDeviceGet");
  RESOLVE(cuCtxCreate, "cuCtxCreate_v2");
  RESOLVE(cuMemAlloc, "cuMemAlloc_v2");
  RESOLVE(cuModuleLoadData, "cuModuleLoadData");
  RESOLVE(cuModuleGetFunction, "cuModuleGetFunction");
  RESOLVE(cuLaunchKernel, "cuLaunchKernel");
  RESOLVE(cuCtxSynchronize, "cuCtxSynchronize");
  RESOLVE(cuDeviceGetAttribute, "cuDeviceGetAttribute");
  RESOLVE(cuGetErrorName, "cuGetErrorName");
  return cuInit && cuDeviceGet && cuCtxCreate && cuMemAlloc && cuModuleLoadData &&
         cuModuleGetFunction && cuLaunchKernel && cuCtxSynchronize && cuDeviceGetAttribute;
}

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
  if (argc < 3 || (strcmp(argv[1], "alloc") != 0 && strcmp(argv[1], "spin") != 0)) {
    fprintf(stderr, "usage: cuda_probe alloc MIB [HOLD_S] | spin SECONDS\n");
    return 2;
  }
  if (!Load()) return 2;
  CUdevice dev;
  CUcontext ctx;
  CUresult r = cuInit(0);
  if (r == 0) r = cuDeviceGet(&dev, 0);
  if (r == 0) r = cuCtxCreate(&ctx, 0, dev);
  if (r != 0) {
    printf("result %s\n", Name(r));
    fflush(stdout);
    return 2;
  }
  if (strcmp(argv[1], "alloc") == 0) {
    const long want = atol(argv[2]);
    long got = 0;
    CUdeviceptr p;
    r = 0;
    while (got < want) {
      const long piece = want - got < 64 ? want - got : 64;
      r = cuMemAlloc(&p, (size_t)piece << 20);
      if (r != 0) break;
      got += piece;
    }
    printf("allocated %ld MiB\nresult %s\n", got,
           r == 0 ? "ok" : (r == CUDA_ERROR_OUT_OF_MEMORY ? "out-of-memory" : Name(r)));
    fflush(stdout);
    if (argc > 3) sleep((unsigned)atoi(argv[3]));
    return 0;
  }
  CUmodule mod;
  CUfunction fn;
  int sms = 1;
  r = cuModuleLoadData(&mod, kPtx);
  if (r == 0) r = cuModuleGetFunction(&fn, mod, "spin");
  if (r == 0) r = cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  if (r != 0) {
    printf("result %s\n", Name(r));
    return 2;
  }
  unsigned n = 2000000;
  void* params[] = {&n};
  const double end = Now() + atof(argv[2]);
  long kernels = 0;
  while (Now() < end) {
    r = cuLaunchKernel(fn, (unsigned)sms * 4, 1, 1, 128, 1, 1, 0, NULL, params, NULL);
    if (r == 0) r = cuCtxSynchronize();
    if (r != 0) break;
    ++kernels;
  }
  printf("kernels %ld\nresult %s\n", kernels, r == 0 ? "ok" : Name(r));
  return 0;
}
