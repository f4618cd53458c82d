#include "cache/entry.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "cache/recipe_check.h"
#include "tuner/core/fingerprint.h"
#include "tuner/core/launch_recipe.h"
#include "tuner/core/wire.h"  // DeviceFromProto, SoftwareFromProto
#include "tuner/op.h"

namespace ktune {
namespace {

// Bounds far beyond any real GPU or kernel: they reject corrupt or hostile
// entries (bundles come from other machines), not unusual hardware.
constexpr int kMaxCcMajor = 99;
constexpr int kMaxCcMinor = 9;
constexpr int kMaxSmCount = 100000;
constexpr size_t kMaxTextBytes = 256;  // names, ids, options, params
constexpr int kMaxKernels = 16;
constexpr int kMaxListItems = 64;  // nvrtc options, kernel params
constexpr uint64_t kMaxThreadsPerBlock = 1024;

absl::Status Bad(absl::string_view prefix, absl::string_view field, absl::string_view why) {
  return EntryFieldError(prefix, field, why);
}

// The tuner's checks already start their messages with the field path below
// the entry ("problem.n: ..."); only the prefix is added (EntryTunerError).
// Their codes vary (an unserved op is UNIMPLEMENTED for a request), but for a
// stored or imported entry any such problem is an invalid argument.
absl::Status FromTuner(absl::string_view prefix, absl::string_view field_root, const absl::Status& status) {
  return EntryTunerError(prefix, field_root, status);
}

// Printable text of bounded length. Control characters are refused because
// keys built from these strings are joined with one (FlatKey) and end up in
// logs and terminals.
absl::Status CheckText(absl::string_view prefix, absl::string_view field, const std::string& text, bool required) {
  if (text.empty()) {
    return required ? Bad(prefix, field, "must not be empty") : absl::OkStatus();
  }
  if (text.size() > kMaxTextBytes) {
    return Bad(prefix, field, absl::StrCat("must be at most ", kMaxTextBytes, " bytes, got ", text.size()));
  }
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) {
      return Bad(prefix, field, "must not contain control characters");
    }
  }
  return absl::OkStatus();
}

bool IsSha256Hex(const std::string& text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

absl::Status CheckSha256Hex(absl::string_view prefix, absl::string_view field, const std::string& text) {
  if (IsSha256Hex(text)) return absl::OkStatus();
  return Bad(prefix, field,
             absl::StrCat("must be 64 lowercase hex digits (sha256), got \"", text.substr(0, 80),
                          text.size() > 80 ? "...\"" : "\""));
}

absl::Status CheckDevice(absl::string_view prefix, const v1::DeviceFingerprint& device) {
  if (absl::Status s = CheckText(prefix, "device.name", device.name(), /*required=*/true); !s.ok()) {
    return s;
  }
  if (device.cc_major() < 1 || device.cc_major() > kMaxCcMajor) {
    return Bad(prefix, "device.cc_major", absl::StrCat("must be in [1, ", kMaxCcMajor, "], got ", device.cc_major()));
  }
  if (device.cc_minor() < 0 || device.cc_minor() > kMaxCcMinor) {
    return Bad(prefix, "device.cc_minor", absl::StrCat("must be in [0, ", kMaxCcMinor, "], got ", device.cc_minor()));
  }
  if (device.sm_count() < 1 || device.sm_count() > kMaxSmCount) {
    return Bad(prefix, "device.sm_count", absl::StrCat("must be in [1, ", kMaxSmCount, "], got ", device.sm_count()));
  }
  if (device.driver_version() < 0) {
    return Bad(prefix, "device.driver_version", absl::StrCat("must be >= 0, got ", device.driver_version()));
  }
  return absl::OkStatus();
}

absl::Status CheckSoftware(absl::string_view prefix, const v1::SoftwareFingerprint& software) {
  if (absl::Status s = CheckSha256Hex(prefix, "software.template_hash", software.template_hash()); !s.ok()) {
    return s;
  }
  if (software.nvrtc_version() < 1) {
    return Bad(prefix, "software.nvrtc_version", absl::StrCat("must be >= 1, got ", software.nvrtc_version()));
  }
  // A newer schema is accepted: its key simply never matches this version's
  // lookups, so such an entry is stale here rather than wrong.
  if (software.schema_version() < 1) {
    return Bad(prefix, "software.schema_version", absl::StrCat("must be >= 1, got ", software.schema_version()));
  }
  return absl::OkStatus();
}

// The device an entry was tuned on, as far as configs and recipes go: its
// fingerprint, plus the limits it does not carry, from the architecture
// (shared memory per CTA, threads per SM), so that the templates judge and
// write the entry's config as they did there. nullopt for an architecture
// this version does not know (nothing there can be judged).
std::optional<DeviceInfo> TunedOn(const v1::DeviceFingerprint& fingerprint) {
  DeviceInfo device = DeviceFromProto(fingerprint);
  device.max_smem_per_block_optin = ArchSmemPerBlockOptin(device.cc_major, device.cc_minor);
  device.max_threads_per_sm = ArchMaxThreadsPerSm(device.cc_major, device.cc_minor);
  if (device.max_smem_per_block_optin == 0) return std::nullopt;
  return device;
}

absl::Status CheckKernel(absl::string_view prefix, const std::string& field, const v1::KernelLaunch& kernel) {
  if (absl::Status s = CheckText(prefix, field + ".name_expression", kernel.name_expression(),
                                 /*required=*/true);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckText(prefix, field + ".lowered_name", kernel.lowered_name(), /*required=*/false); !s.ok()) {
    return s;
  }
  if (kernel.grid_size() != 3) {
    return Bad(prefix, field + ".grid", absl::StrCat("must have 3 values, got ", kernel.grid_size()));
  }
  if (kernel.block_size() != 3) {
    return Bad(prefix, field + ".block", absl::StrCat("must have 3 values, got ", kernel.block_size()));
  }
  uint64_t threads = 1;
  for (int d = 0; d < 3; ++d) {
    if (kernel.grid(d) < 1) {
      return Bad(prefix, absl::StrCat(field, ".grid[", d, "]"), "must be >= 1, got 0");
    }
    if (kernel.block(d) < 1) {
      return Bad(prefix, absl::StrCat(field, ".block[", d, "]"), "must be >= 1, got 0");
    }
    threads *= kernel.block(d);
    if (threads > kMaxThreadsPerBlock) break;  // before a third factor could overflow
  }
  if (threads > kMaxThreadsPerBlock) {
    return Bad(prefix, field + ".block", absl::StrCat("must have at most ", kMaxThreadsPerBlock, " threads"));
  }
  if (kernel.params_size() > kMaxListItems) {
    return Bad(prefix, field + ".params",
               absl::StrCat("must have at most ", kMaxListItems, " items, got ", kernel.params_size()));
  }
  for (int i = 0; i < kernel.params_size(); ++i) {
    if (absl::Status s =
            CheckText(prefix, absl::StrCat(field, ".params[", i, "]"), kernel.params(i), /*required=*/true);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status CheckRecipe(absl::string_view prefix, const v1::LaunchRecipe& recipe,
                         const v1::DeviceFingerprint& device) {
  if (absl::Status s = CheckText(prefix, "recipe.template_id", recipe.template_id(), /*required=*/true); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckSha256Hex(prefix, "recipe.template_hash", recipe.template_hash()); !s.ok()) {
    return s;
  }
  // The winner was measured on `device`, so it was compiled for that device's
  // architecture; the "a" suffix names the arch-specific Hopper/Blackwell target.
  const std::string arch = absl::StrCat("sm_", device.cc_major(), device.cc_minor());
  if (recipe.arch() != arch && recipe.arch() != arch + "a") {
    return Bad(prefix, "recipe.arch",
               absl::StrCat("must be \"", arch, "\" or \"", arch, "a\" for a cc ", device.cc_major(), ".",
                            device.cc_minor(), " device, got \"", recipe.arch().substr(0, 32), "\""));
  }
  if (recipe.nvrtc_options_size() > kMaxListItems) {
    return Bad(prefix, "recipe.nvrtc_options",
               absl::StrCat("must have at most ", kMaxListItems, " items, got ", recipe.nvrtc_options_size()));
  }
  for (int i = 0; i < recipe.nvrtc_options_size(); ++i) {
    if (absl::Status s = CheckText(prefix, absl::StrCat("recipe.nvrtc_options[", i, "]"), recipe.nvrtc_options(i),
                                   /*required=*/true);
        !s.ok()) {
      return s;
    }
  }
  if (recipe.template_id() == kCublasLtTemplateId) {  // a library call: no kernels
    if (recipe.kernels_size() != 0) return Bad(prefix, "recipe.kernels", "must be empty for a cuBLASLt call");
    if (recipe.cublaslt_algo().size() != kCublasLtAlgoBytes) {
      return Bad(prefix, "recipe.cublaslt_algo",
                 absl::StrCat("must be ", kCublasLtAlgoBytes, " bytes, got ", recipe.cublaslt_algo().size()));
    }
    return absl::OkStatus();
  }
  if (!recipe.cublaslt_algo().empty()) {
    return Bad(prefix, "recipe.cublaslt_algo", "must be empty for a kernel recipe");
  }
  if (recipe.kernels_size() < 1 || recipe.kernels_size() > kMaxKernels) {
    return Bad(prefix, "recipe.kernels",
               absl::StrCat("must have 1 to ", kMaxKernels, " kernels, got ", recipe.kernels_size()));
  }
  for (int i = 0; i < recipe.kernels_size(); ++i) {
    if (absl::Status s = CheckKernel(prefix, absl::StrCat("recipe.kernels[", i, "]"), recipe.kernels(i)); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// An entry keyed under this build's software fingerprint is served by this
// build, so its recipe must be exactly the one this build's template writes
// for its problem and config on its device, in its stored form
// (VerifyStoredRecipe): every field, the
// template id and hash, the NVRTC options and the kernels' names included.
// An entry of another software fingerprint (another template text, NVRTC or
// schema) is stale here: kept and listed, never served (its key cannot match
// a lookup of this build), and its recipe, another build's, cannot be
// re-derived, so only its form is checked.
absl::Status CheckRecipeIsBuilds(const OpRegistry& ops, absl::string_view prefix, const v1::Entry& entry) {
  const absl::StatusOr<SoftwareFingerprint> build = ops.Software(entry.problem());
  if (!build.ok()) return absl::OkStatus();  // an op this build does not serve: never served
  if (SoftwareKey(SoftwareFromProto(entry.software())) != SoftwareKey(*build)) return absl::OkStatus();
  const std::optional<DeviceInfo> device = TunedOn(entry.device());
  if (!device.has_value()) {
    return Bad(prefix, "device",
               absl::StrCat("sm_", entry.device().cc_major(), entry.device().cc_minor(),
                            " is an architecture this build does not know, so it cannot check the recipe"));
  }
  return VerifyStoredRecipe(ops, entry.problem(), entry.config(), entry.recipe(), *device, std::string(prefix));
}

absl::Status CheckMeasurement(absl::string_view prefix, const v1::Measurement& m) {
  if (!std::isfinite(m.time_us()) || m.time_us() <= 0) {
    return Bad(prefix, "measurement.time_us", absl::StrCat("must be finite and > 0, got ", m.time_us()));
  }
  if (!std::isfinite(m.spread()) || m.spread() < 0) {
    return Bad(prefix, "measurement.spread", absl::StrCat("must be finite and >= 0, got ", m.spread()));
  }
  if (m.repetitions() < 1) {
    return Bad(prefix, "measurement.repetitions", absl::StrCat("must be >= 1, got ", m.repetitions()));
  }
  if (!std::isfinite(m.throughput()) || m.throughput() < 0) {
    return Bad(prefix, "measurement.throughput", absl::StrCat("must be finite and >= 0, got ", m.throughput()));
  }
  return CheckText(prefix, "measurement.throughput_unit", m.throughput_unit(),
                   /*required=*/false);
}

}  // namespace

bool operator==(const EntryKey& a, const EntryKey& b) {
  return a.op == b.op && a.problem_key == b.problem_key && a.device_key == b.device_key &&
         a.software_key == b.software_key;
}

absl::Status ValidateEntry(const OpRegistry& ops, const v1::Entry& entry) {
  return ValidateEntry(ops, entry, "entry.");
}

absl::Status ValidateEntry(const OpRegistry& ops, const v1::Entry& entry, std::string_view prefix_text) {
  const absl::string_view prefix(prefix_text.data(), prefix_text.size());
  // First, before anything else looks at it: the size is what a hostile
  // entry attacks with (unknown fields are kept by the parser until dropped).
  const size_t cubin = entry.recipe().cubin().size();
  const size_t bytes = entry.ByteSizeLong();
  if (bytes > cubin && bytes - cubin > kMaxEntryBytes) {
    std::string what;
    if (absl::StatusOr<EntryKey> key = KeyOf(ops, entry); key.ok()) {
      what = absl::StrCat(" (", key->op, " ", key->problem_key, ")");
    }
    return Bad(prefix, "size",
               absl::StrCat(bytes - cubin, " bytes serialized", what, ", over the ", kMaxEntryBytes,
                            "-byte cap for one entry (unknown fields are dropped before this check)"));
  }
  absl::StatusOr<const Op*> op = ops.ForProblem(entry.problem());
  if (!op.ok()) return FromTuner(prefix, "problem", op.status());
  if (absl::Status s = (*op)->Identify(entry.problem()).status(); !s.ok()) return FromTuner(prefix, "problem", s);
  if (!entry.has_device()) return Bad(prefix, "device", "missing");
  if (absl::Status s = CheckDevice(prefix, entry.device()); !s.ok()) return s;
  if (!entry.has_software()) return Bad(prefix, "software", "missing");
  if (absl::Status s = CheckSoftware(prefix, entry.software()); !s.ok()) return s;
  if (absl::Status s = (*op)->CheckConfig(prefix, entry, TunedOn(entry.device())); !s.ok()) return s;
  if (!entry.has_recipe()) return Bad(prefix, "recipe", "missing");
  if (absl::Status s = CheckRecipe(prefix, entry.recipe(), entry.device()); !s.ok()) return s;
  if (absl::Status s = CheckRecipeIsBuilds(ops, prefix, entry); !s.ok()) return s;
  if (!entry.has_measurement()) return Bad(prefix, "measurement", "missing");
  if (absl::Status s = CheckMeasurement(prefix, entry.measurement()); !s.ok()) return s;
  if (entry.tuned_at_unix() <= 0) {
    return Bad(prefix, "tuned_at_unix", absl::StrCat("must be > 0, got ", entry.tuned_at_unix()));
  }
  if (entry.candidates_measured() < 1) {
    return Bad(prefix, "candidates_measured", absl::StrCat("must be >= 1, got ", entry.candidates_measured()));
  }
  return CheckText(prefix, "ktune_version", entry.ktune_version(), /*required=*/false);
}

absl::StatusOr<EntryKey> KeyOf(const OpRegistry& ops, const v1::Entry& entry) {
  // Keys are built by the op from the decoded problem, not the raw proto, so
  // that equivalent spellings (output dtype unspecified vs. equal to the
  // input, eps 0 vs. the default) land on one key.
  absl::StatusOr<ProblemIdentity> problem = ops.Key(entry.problem());
  if (!problem.ok()) return FromTuner("entry.", "problem", problem.status());
  return EntryKey{problem->entry_op, problem->problem_key, DeviceKey(DeviceFromProto(entry.device())),
                  SoftwareKey(SoftwareFromProto(entry.software()))};
}

std::string FlatKey(const EntryKey& key) {
  // ValidateEntry refuses control characters in every text that reaches a key,
  // so the unit separator cannot occur inside a part.
  constexpr absl::string_view kSep("\x1f", 1);
  return absl::StrCat(key.op, kSep, key.problem_key, kSep, key.device_key, kSep, key.software_key);
}

absl::StatusOr<ProblemFamily> FamilyOf(const OpRegistry& ops, const v1::Entry& entry) {
  absl::StatusOr<EntryKey> key = KeyOf(ops, entry);
  if (!key.ok()) return key.status();
  absl::StatusOr<const Op*> op = ops.ForProblem(entry.problem());
  if (!op.ok()) return op.status();
  return (*op)->Family(entry.problem(), key->device_key, key->software_key);
}

}  // namespace ktune
