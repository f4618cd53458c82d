#include "tuner/core/fingerprint.h"

#include "absl/strings/str_format.h"

namespace ktune {

std::string Arch(const DeviceInfo& d) { return absl::StrFormat("sm_%d%d", d.cc_major, d.cc_minor); }

DeviceInfo CompileOnlyTarget() {
  DeviceInfo d;
  d.name = "compile-only (sm_90 target)";
  d.cc_major = 9;
  d.cc_minor = 0;
  d.sm_count = 132;
  d.l2_bytes = 50 << 20;
  d.max_threads_per_sm = 2048;
  d.max_smem_per_block_optin = ArchSmemPerBlockOptin(d.cc_major, d.cc_minor);
  d.regs_per_sm = 65536;
  return d;
}

int ArchMaxThreadsPerSm(int cc_major, int cc_minor) {
  switch (cc_major * 10 + cc_minor) {
    case 75:
      return 1024;
    case 86:
    case 89:
    case 120:
      return 1536;
    default:
      return 2048;
  }
}

int ArchSmemPerBlockOptin(int cc_major, int cc_minor) {
  switch (cc_major * 10 + cc_minor) {
    case 70:
      return 96 << 10;
    case 75:
      return 64 << 10;
    case 80:
    case 87:
      return 163 << 10;
    case 86:
    case 89:
    case 120:
      return 99 << 10;
    case 90:
    case 100:
      return 227 << 10;
    default:
      return 0;
  }
}

std::string DeviceKey(const DeviceInfo& d) {
  return absl::StrFormat("cc=%d.%d name=%s sms=%d mem=%d driver=%d", d.cc_major, d.cc_minor, d.name, d.sm_count,
                         d.memory_bytes, d.driver_version);
}

std::string SoftwareKey(const SoftwareFingerprint& s) {
  return absl::StrFormat("tpl=%s nvrtc=%d schema=%d", s.template_hash, s.nvrtc_version, s.schema_version);
}

}  // namespace ktune
