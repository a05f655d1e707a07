/* A fake NVIDIA driver for tests: exports the CUDA driver API and NVML functions that
 * cuda/gpu_env.cpp and cuda/nvml_monitor.cpp look up with dlsym, with behaviour set by environment
 * variables, so the probing code runs its real dlopen path on a machine without a GPU:
 *   HT_FAKE_CUDA_DRIVER_VERSION  cuDriverGetVersion's value (default 13020 = CUDA 13.2, newer than the runtime any build here uses)
 *   HT_FAKE_CUDA_INIT            cuInit's CUresult (default 0; 100 = no device, 35 = insufficient driver)
 *   HT_FAKE_CUDA_DEVICES         device count (default 2)
 * Device i: name "Fake GPU i", UUID bytes all equal to 0xa0 + i, 80 GiB, compute capability 9.0.
 * Used through the test hooks HT_LIBCUDA / HT_LIBNVML. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

static int env_int(const char* name, int def) {
  const char* v = getenv(name);
  return v && *v ? atoi(v) : def;
}
static int ndev(void) { return env_int("HT_FAKE_CUDA_DEVICES", 2); }

int cuDriverGetVersion(int* v) { *v = env_int("HT_FAKE_CUDA_DRIVER_VERSION", 13020); return 0; }
int cuInit(unsigned flags) { (void)flags; return env_int("HT_FAKE_CUDA_INIT", 0); }
int cuDeviceGetCount(int* n) { *n = ndev(); return 0; }
int cuDeviceGet(int* d, int i) { if (i < 0 || i >= ndev()) return 101; *d = i; return 0; }
int cuDeviceGetName(char* name, int len, int d) { snprintf(name, (size_t)len, "Fake GPU %d", d); return 0; }
int cuDeviceGetUuid(unsigned char* u, int d) { memset(u, 0xa0 + d, 16); return 0; }
int cuDeviceTotalMem_v2(size_t* b, int d) { (void)d; *b = (size_t)80 << 30; return 0; }
int cuDeviceGetAttribute(int* v, int attr, int d) {
  switch (attr) {
    case 75: *v = 9; break;          /* compute capability major */
    case 76: *v = 0; break;          /* minor */
    case 33: *v = 0x10 + d; break;   /* PCI bus */
    default: *v = 0;
  }
  return 0;
}
int cuGetErrorName(int rc, const char** s) {
  *s = rc == 100 ? "CUDA_ERROR_NO_DEVICE" : rc == 35 ? "CUDA_ERROR_INSUFFICIENT_DRIVER" : "CUDA_ERROR_UNKNOWN";
  return 0;
}
int cuGetErrorString(int rc, const char** s) { (void)rc; *s = "fake driver error"; return 0; }

/* NVML: one handle per fake device, found by the UUID string gpu_env formats. */
static int handles[16];
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetHandleByUUID(const char* uuid, void** dev) {
  for (int i = 0; i < ndev() && i < 16; ++i) {
    char want[64];
    unsigned b = 0xa0 + (unsigned)i;
    snprintf(want, sizeof want, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b, b,
             b, b, b, b, b, b, b, b, b, b, b, b, b, b);
    if (!strcmp(uuid, want)) { handles[i] = i; *dev = &handles[i]; return 0; }
  }
  return 13; /* NVML_ERROR_NOT_FOUND */
}
int nvmlDeviceGetUtilizationRates(void* dev, unsigned* u) { u[0] = 40 + *(int*)dev; u[1] = 7; return 0; }
int nvmlDeviceGetMemoryInfo(void* dev, unsigned long long* m) {
  (void)dev; m[0] = 80ull << 30; m[2] = 3ull << 30; m[1] = m[0] - m[2]; return 0;
}
int nvmlDeviceGetTemperature(void* dev, int sensor, unsigned* t) { (void)dev; (void)sensor; *t = 55; return 0; }
int nvmlDeviceGetPowerUsage(void* dev, unsigned* mw) { (void)dev; *mw = 312500; return 0; }
