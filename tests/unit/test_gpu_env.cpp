// GPU environment probing (cuda/gpu_env.hpp) and NVML monitoring (cuda/nvml_monitor.hpp): the pure
// diagnosis with made-up facts, and the real dlopen paths against a missing library and against the fake
// driver library tests/doctor/fake_driver.c (HT_FAKE_DRIVER, built by tests/cmake/doctor.cmake).
#include <catch2/catch.hpp>
#include <stdlib.h>

#include <chrono>
#include <thread>

#include "cuda/gpu_env.hpp"
#include "cuda/nvml_monitor.hpp"

using namespace ht;

namespace {
GpuEnv facts() {
  GpuEnv e;
  e.libcuda = "libcuda.so.1";
  e.driver_loaded = true;
  e.driver_version = 12040;
  e.runtime_version = 12040;
  e.init_result = 0;
  GpuDevice d;
  d.uuid = "GPU-x";
  e.devices.push_back(d);
  return e;
}
}  // namespace

TEST_CASE("gpu_env: version strings, UUID format, CUDA_VISIBLE_DEVICES parsing", "[gpu_env]") {
  CHECK(cuda_version_string(12040) == "12.4");
  CHECK(cuda_version_string(13000) == "13.0");
  CHECK(cuda_version_string(0) == "unknown");
  unsigned char b[16];
  for (int i = 0; i < 16; ++i) b[i] = static_cast<unsigned char>(i * 17);
  CHECK(format_gpu_uuid(b) == "GPU-00112233-4455-6677-8899-aabbccddeeff");
  CHECK(visible_devices_hide_all(""));
  CHECK(visible_devices_hide_all("-1"));
  CHECK(visible_devices_hide_all("NoDevFiles"));
  CHECK(visible_devices_hide_all(" "));
  CHECK_FALSE(visible_devices_hide_all("0"));
  CHECK_FALSE(visible_devices_hide_all("2,3"));
  CHECK_FALSE(visible_devices_hide_all("GPU-1234"));
  CHECK_FALSE(visible_devices_hide_all("MIG-1234"));
}

TEST_CASE("gpu_env: diagnosis of each failure", "[gpu_env]") {
  CHECK(diagnose_gpu_env(facts()).status == GpuStatus::kOk);

  GpuEnv e = facts();
  e.driver_loaded = false;
  e.load_error = "libcuda.so.1: cannot open shared object file";
  auto d = diagnose_gpu_env(e);
  CHECK(d.status == GpuStatus::kDriverMissing);
  CHECK_THAT(d.summary, Catch::Contains("libcuda.so.1: cannot open"));
  CHECK_THAT(d.fix, Catch::Contains("nvidia-smi"));

  e = facts();
  e.visible_devices_set = true;
  e.visible_devices = "";
  e.init_result = 100;
  e.devices.clear();
  d = diagnose_gpu_env(e);
  CHECK(d.status == GpuStatus::kVisibleDevicesEmpty);
  CHECK_THAT(d.fix, Catch::Contains("unset CUDA_VISIBLE_DEVICES"));

  e = facts();
  e.driver_version = 11080;
  e.runtime_version = 12040;
  d = diagnose_gpu_env(e);
  CHECK(d.status == GpuStatus::kDriverTooOld);
  CHECK_THAT(d.summary, Catch::Contains("CUDA 11.8") && Catch::Contains("12.4"));

  e = facts();
  e.init_result = 35;  // CUDA_ERROR_INSUFFICIENT_DRIVER, even in a CPU build without a runtime version
  e.runtime_version = 0;
  e.devices.clear();
  CHECK(diagnose_gpu_env(e).status == GpuStatus::kDriverTooOld);

  e = facts();
  e.driver_version = 12020;  // same major, older minor: minor version compatibility, not an error here
  CHECK(diagnose_gpu_env(e).status == GpuStatus::kOk);

  e = facts();
  e.init_result = 100;
  e.devices.clear();
  CHECK(diagnose_gpu_env(e).status == GpuStatus::kNoDevice);

  e = facts();
  e.init_result = 803;
  e.init_error = "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
  e.devices.clear();
  d = diagnose_gpu_env(e);
  CHECK(d.status == GpuStatus::kInitFailed);
  CHECK_THAT(d.fix, Catch::Contains("reboot"));
}

TEST_CASE("gpu_env: probing a missing driver library", "[gpu_env]") {
  GpuEnv e = probe_gpu_env("libht_no_such_driver.so.1");
  CHECK_FALSE(e.driver_loaded);
  CHECK_THAT(e.load_error, Catch::Contains("libht_no_such_driver.so.1"));
  CHECK(e.devices.empty());
  CHECK(diagnose_gpu_env(e).status == GpuStatus::kDriverMissing);
}

TEST_CASE("gpu_env: probing the fake driver through dlopen", "[gpu_env]") {
  setenv("HT_FAKE_CUDA_DEVICES", "3", 1);
  // A driver newer than the runtime of any build (CPU-only, or CUDA 13.0), so the diagnosis is OK.
  setenv("HT_FAKE_CUDA_DRIVER_VERSION", "13020", 1);
  setenv("HT_FAKE_CUDA_INIT", "0", 1);
  GpuEnv e = probe_gpu_env(HT_FAKE_DRIVER);
  REQUIRE(e.driver_loaded);
  CHECK(e.driver_version == 13020);
  CHECK(e.init_result == 0);
  REQUIRE(e.devices.size() == 3);
  CHECK(e.devices[1].name == "Fake GPU 1");
  CHECK(e.devices[1].uuid == "GPU-a1a1a1a1-a1a1-a1a1-a1a1-a1a1a1a1a1a1");
  CHECK(e.devices[2].total_memory_bytes == (80ull << 30));
  CHECK(e.devices[0].cc_major == 9);
  CHECK(e.devices[0].pci_bus_id == "0000:10:00.0");
  CHECK(diagnose_gpu_env(e).status == GpuStatus::kOk);

  setenv("HT_FAKE_CUDA_INIT", "100", 1);
  e = probe_gpu_env(HT_FAKE_DRIVER);
  CHECK(e.init_result == 100);
  CHECK_THAT(e.init_error, Catch::Contains("CUDA_ERROR_NO_DEVICE"));
  CHECK(diagnose_gpu_env(e).status == GpuStatus::kNoDevice);

  setenv("HT_FAKE_CUDA_INIT", "35", 1);
  setenv("HT_FAKE_CUDA_DRIVER_VERSION", "10020", 1);
  e = probe_gpu_env(HT_FAKE_DRIVER);
  auto d = diagnose_gpu_env(e);
  CHECK(d.status == GpuStatus::kDriverTooOld);
  CHECK_THAT(d.summary, Catch::Contains("CUDA 10.2"));
  unsetenv("HT_FAKE_CUDA_INIT");
  unsetenv("HT_FAKE_CUDA_DRIVER_VERSION");
  unsetenv("HT_FAKE_CUDA_DEVICES");
}

TEST_CASE("nvml: absent library gives an inactive monitor and empty snapshots", "[gpu_env][nvml]") {
  setenv("HT_LIBNVML", "libht_no_such_nvml.so.1", 1);
  NvmlMonitor m("GPU-whatever");
  CHECK_FALSE(m.active());
  CHECK_THAT(m.reason(), Catch::Contains("libht_no_such_nvml.so.1"));
  CHECK_FALSE(m.snapshot().valid);
  CHECK(m.snapshot().fields().empty());
  unsetenv("HT_LIBNVML");
}

TEST_CASE("nvml: sampling the fake device on a background thread", "[gpu_env][nvml]") {
  setenv("HT_LIBNVML", HT_FAKE_DRIVER, 1);
  {
    NvmlMonitor bad("GPU-not-there");
    CHECK_FALSE(bad.active());
    CHECK_THAT(bad.reason(), Catch::Contains("GPU-not-there"));
  }
  NvmlMonitor m("GPU-a1a1a1a1-a1a1-a1a1-a1a1-a1a1a1a1a1a1", 5);
  REQUIRE(m.active());
  auto t0 = std::chrono::steady_clock::now();
  while (m.snapshot().samples < 3 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  NvmlSnapshot s = m.snapshot();
  CHECK(s.valid);
  CHECK(s.samples >= 3);  // the thread keeps sampling
  CHECK(s.gpu_util_pct == 41);  // fake: 40 + device index
  CHECK(s.mem_util_pct == 7);
  CHECK(s.memory_used_bytes == (3ull << 30));
  CHECK(s.memory_total_bytes == (80ull << 30));
  CHECK(s.temperature_c == 55);
  CHECK(s.power_w == Approx(312.5));
  auto f = s.fields();
  REQUIRE(f.size() == 6);
  CHECK(f[0].first == "gpu_util_pct");
  CHECK(f[5].first == "gpu_power_w");
  unsetenv("HT_LIBNVML");
}
