// Device and software fingerprints: the environment half of a cache key.
//
// A tuned winner is only valid for the GPU it was measured on and the code that
// produced it. The device fingerprint names the GPU (compute capability, name,
// SM count, memory, driver); the software fingerprint names the kernel source
// (template text hash), the compiler (NVRTC version) and the store's schema.
#pragma once

#include <cstdint>
#include <string>

namespace ktune {

inline constexpr int kSchemaVersion = 1;

struct DeviceInfo {
  std::string name;  // "NVIDIA H200"
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  uint64_t memory_bytes = 0;
  int driver_version = 0;  // cuDriverGetVersion, e.g. 13000
  // Not part of the fingerprint; used by pruning and the measurement protocol.
  int l2_bytes = 0;
  int max_threads_per_sm = 2048;
  int max_smem_per_block_optin = 0;
  int regs_per_sm = 65536;
};

// "sm_90" for compute capability 9.0.
std::string Arch(const DeviceInfo& device);

// The device a compile-only daemon (no GPU) targets: an H100-class sm_90 part.
// Heuristic answers and compile checks use it; nothing is ever stored under it.
DeviceInfo CompileOnlyTarget();

// The most dynamic shared memory one CTA may opt into on compute capability
// major.minor, a fixed property of the architecture (CUDA C++ Programming
// Guide, "Technical Specifications per Compute Capability"); 0 for an
// architecture this version does not know. For judging configs tuned on
// another machine, whose DeviceFingerprint does not carry the limit.
int ArchSmemPerBlockOptin(int cc_major, int cc_minor);

// The most resident threads per SM on compute capability major.minor (the
// same table): 1536 on sm_86, sm_89 and sm_120, 1024 on sm_75, else 2048.
int ArchMaxThreadsPerSm(int cc_major, int cc_minor);

// Stable text, e.g. "cc=9.0 name=NVIDIA H200 sms=132 mem=150754820096 driver=13000".
std::string DeviceKey(const DeviceInfo& device);

struct SoftwareFingerprint {
  std::string template_hash;  // sha256 hex of the op's template text and includes
  int nvrtc_version = 0;      // major * 1000 + minor * 10
  int schema_version = kSchemaVersion;
};

// Stable text, e.g. "tpl=3f2a... nvrtc=13000 schema=1".
std::string SoftwareKey(const SoftwareFingerprint& software);

}  // namespace ktune
