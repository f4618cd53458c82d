#include "client/bundle_command.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cache/bundle.h"
#include "cache/bundle_merge.h"
#include "client/answer_text.h"
#include "client/cli_util.h"
#include "google/protobuf/util/json_util.h"
#include "tuner/builtin_ops.h"
#include "tuner/core/input_file.h"
#include "tuner/core/wire.h"

namespace ktune {
namespace {

int Fail(const absl::Status& s) { return PrintError(s); }

// A bundle file, read and validated as an import would; errors name the file.
// On an error it prints why and sets *exit_code: a file that cannot be read
// at all is a usage error (the command line names something that is not a
// bundle file), one that reads but does not decode is a failure.
std::optional<v1::Bundle> LoadBundle(const std::string& path, int* exit_code) {
  absl::StatusOr<std::string> bytes = ReadInputFile(path, kBundleFile);
  if (!bytes.ok()) {
    *exit_code = PrintUsageError(bytes.status());
    return std::nullopt;
  }
  absl::StatusOr<v1::Bundle> bundle = DecodeBundle(BuiltinOps(), *bytes);
  if (!bundle.ok()) {
    *exit_code = Fail(absl::Status(bundle.status().code(), absl::StrCat(path, ": ", bundle.status().message())));
    return std::nullopt;
  }
  return *std::move(bundle);
}

std::string Date(int64_t unix_seconds) {
  return absl::FormatTime("%Y-%m-%d %H:%M", absl::FromUnixSeconds(unix_seconds), absl::UTCTimeZone());
}

void PrintReport(const v1::ImportBundleResponse& r) {
  std::printf("%-9s %-12s %-20s %-60s %s\n", "action", "compat", "device", "problem", "reason");
  for (const v1::MergeDecision& d : r.decisions()) {
    std::printf("%-9s %-12s %-20s %-60s %s\n", d.action().c_str(), d.compatibility().c_str(), d.device_name().c_str(),
                d.problem_key().c_str(), d.reason().c_str());
  }
  std::printf("%d added, %d replaced, %d kept, %d unchanged, %d rejected%s\n", r.added(), r.replaced(), r.kept(),
              r.unchanged(), r.rejected(), r.dry_run() ? " (dry run: nothing written)" : "");
}

}  // namespace

BundleCommands::BundleCommands(CLI::App* app) {
  export_cmd_ = app->add_subcommand("export", "write the daemon's entries to a bundle file");
  export_cmd_->add_option("-o,--output", output_, "bundle file to write")->required();
  export_cmd_->add_option("--op", op_, "only this op (rmsnorm.fwd, ...)");
  export_cmd_->add_option("--gpu", gpu_, "only entries tuned on this GPU kind (device name, e.g. \"NVIDIA H200\")");
  export_cmd_->add_option("--since", since_, "only entries tuned on or after this day (YYYY-MM-DD, UTC)");

  import_cmd_ = app->add_subcommand("import", "merge a bundle file into the daemon (all or nothing)");
  import_cmd_->add_option("file", file_, "bundle file")->required()->check(CLI::ExistingFile);
  import_cmd_->add_option("--policy", policy_, "when a key is taken: keep-faster, prefer-incoming or prefer-existing")
      ->check(CLI::IsMember({"keep-faster", "prefer-incoming", "prefer-existing"}))
      ->capture_default_str();
  import_cmd_->add_flag("--dry-run", dry_run_, "report what would happen, change nothing");
  import_cmd_->add_flag("--json", json_, "print the full ImportBundleResponse as JSON");

  CLI::App* bundle = app->add_subcommand("bundle", "work on bundle files offline (no daemon)");
  bundle->require_subcommand(1);
  inspect_cmd_ = bundle->add_subcommand("inspect", "validate a bundle and list its entries");
  inspect_cmd_->add_option("file", file_, "bundle file")->required();
  inspect_cmd_->add_flag("--json", json_, "print the bundle as JSON");
  merge_cmd_ = bundle->add_subcommand("merge", "merge bundles into one by a policy");
  merge_cmd_->add_option("inputs", inputs_, "bundle files, merged in order")->required()->expected(2, -1);
  merge_cmd_->add_option("-o,--output", output_, "bundle file to write")->required();
  merge_cmd_->add_option("--policy", policy_, "when a key is taken: keep-faster, prefer-incoming or prefer-existing")
      ->check(CLI::IsMember({"keep-faster", "prefer-incoming", "prefer-existing"}))
      ->capture_default_str();
  merge_cmd_->add_flag("--json", json_, "print the merge report (an ImportBundleResponse) as JSON");
}

bool BundleCommands::parsed() const {
  return export_cmd_->parsed() || import_cmd_->parsed() || inspect_cmd_->parsed() || merge_cmd_->parsed();
}

int BundleCommands::Run(Client* client) {
  if (export_cmd_->parsed()) return Export(client);
  if (import_cmd_->parsed()) return Import(client);
  if (inspect_cmd_->parsed()) return Inspect();
  if (merge_cmd_->parsed()) return Merge();
  return Fail(absl::InternalError("no bundle command parsed"));
}

int BundleCommands::Export(Client* client) {
  v1::ExportBundleRequest request;
  request.set_op(op_);
  request.set_device_name(gpu_);
  if (!since_.empty()) {
    absl::Time t;
    std::string err;
    if (!absl::ParseTime("%Y-%m-%d", since_, absl::UTCTimeZone(), &t, &err)) {
      return PrintUsageError(
          absl::InvalidArgumentError(absl::StrCat("--since: \"", since_, "\" is not a date YYYY-MM-DD (", err, ")")));
    }
    request.set_since_unix(absl::ToUnixSeconds(t));
  }
  absl::StatusOr<ExportedFile> r = ExportToFile(client, request, output_);
  if (!r.ok()) return Fail(r.status());
  std::printf("exported %lld entries (%llu bytes) to %s\n", static_cast<long long>(r->entries),
              static_cast<unsigned long long>(r->bytes), output_.c_str());
  return 0;
}

absl::StatusOr<ExportedFile> ExportToFile(Client* client, const v1::ExportBundleRequest& request,
                                          const std::string& path) {
  // Written a chunk at a time beside `path`, renamed into place only once the
  // header's length and checksum match what arrived: no size ceiling, and an
  // interrupted export leaves no file that looks whole.
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", tmp));
  auto fail = [&](absl::Status s) {
    out.close();
    std::filesystem::remove(tmp);
    return s;
  };
  const std::string placeholder(kBundleHeaderBytes, '\0');  // the header is known last
  out.write(placeholder.data(), static_cast<std::streamsize>(placeholder.size()));
  PayloadDigest digest;
  std::string header;
  ExportedFile exported;
  absl::Status streamed = client->ExportBundleStream(request, [&](const v1::ExportBundleChunk& chunk) {
    if (!header.empty()) return absl::DataLossError("the daemon sent bytes after the bundle's header");
    if (!chunk.header().empty()) {
      header = chunk.header();
      exported.entries = chunk.entries();
      return absl::OkStatus();
    }
    digest.Update(chunk.payload());
    out.write(chunk.payload().data(), static_cast<std::streamsize>(chunk.payload().size()));
    if (!out) return absl::ResourceExhaustedError(absl::StrCat("short write to ", tmp));
    return absl::OkStatus();
  });
  if (!streamed.ok()) return fail(streamed);
  if (header.empty()) return fail(absl::DataLossError("the export ended without the bundle's header"));
  // The header names the payload's length and SHA-256: checked against what
  // was received, so a lost or altered chunk is caught here, not at import.
  if (header != digest.Header()) {
    return fail(absl::DataLossError("the bundle received does not match its header (length or checksum)"));
  }
  out.seekp(0);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.flush();
  if (!out) return fail(absl::ResourceExhaustedError(absl::StrCat("short write to ", tmp)));
  out.close();
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    return fail(absl::PermissionDeniedError(absl::StrCat("cannot rename ", tmp, " to ", path, ": ", ec.message())));
  }
  exported.bytes = kBundleHeaderBytes + digest.bytes();
  return exported;
}

int BundleCommands::Import(Client* client) {
  absl::StatusOr<std::string> data = ReadInputFile(file_, kBundleFile);
  if (!data.ok()) return PrintUsageError(data.status());
  v1::ImportBundleRequest request;
  request.set_bundle(*std::move(data));
  request.set_policy(*ParseMergePolicy(policy_));  // checked by the flag
  request.set_dry_run(dry_run_);
  absl::StatusOr<v1::ImportBundleResponse> r = client->ImportBundle(request);
  if (!r.ok()) return Fail(r.status());
  if (json_) {
    std::printf("%s\n", ToJson(*r).c_str());
    return 0;
  }
  std::printf("%s %s (policy %s)\n", dry_run_ ? "dry run of importing" : "imported", file_.c_str(), policy_.c_str());
  PrintReport(*r);
  return 0;
}

int BundleCommands::Inspect() {
  int exit_code = kExitFailure;
  std::optional<v1::Bundle> bundle = LoadBundle(file_, &exit_code);
  if (!bundle.has_value()) return exit_code;
  if (json_) {
    std::printf("%s\n", ToJson(*bundle).c_str());
    return 0;
  }
  std::map<std::string, int> by_op;
  for (const v1::Entry& e : bundle->entries()) {
    absl::StatusOr<EntryKey> key = KeyOf(BuiltinOps(), e);
    ++by_op[key.ok() ? key->op : "?"];
  }
  std::printf("bundle       %s (valid: checksum and every entry)\n", file_.c_str());
  std::printf("format       %d\n", bundle->format_version());
  std::printf("created by   %s\n", bundle->created_by().c_str());
  std::printf("created at   %s UTC\n", Date(bundle->created_at_unix()).c_str());
  std::printf("entries      %d\n", bundle->entries_size());
  for (const auto& [op, n] : by_op) std::printf("  %-11s %d\n", op.c_str(), n);
  if (bundle->entries_size() == 0) return 0;
  std::printf("\n%-36s %-16s %-7s %-7s %-16s %10s %7s  %-16s %-9s %s\n", "problem", "device", "arch", "driver",
              "template", "time_us", "spread", "tuned_at (UTC)", "by", "notes");
  for (const v1::Entry& e : bundle->entries()) {
    std::printf("%-36s %-16s sm_%d%d   %-7d %-16s %10.2f %6.1f%%  %-16s %-9s %s\n",
                DescribeProblem(e.problem()).c_str(), e.device().name().c_str(), e.device().cc_major(),
                e.device().cc_minor(), e.device().driver_version(), e.software().template_hash().substr(0, 16).c_str(),
                e.measurement().time_us(), 100 * e.measurement().spread(), Date(e.tuned_at_unix()).c_str(),
                e.ktune_version().c_str(), e.needs_revalidation() ? "needs revalidation" : "");
  }
  return 0;
}

int BundleCommands::Merge() {
  // Every input is validated before anything is written.
  std::vector<NamedEntries> inputs;
  for (const std::string& path : inputs_) {
    int exit_code = kExitFailure;
    std::optional<v1::Bundle> bundle = LoadBundle(path, &exit_code);
    if (!bundle.has_value()) return exit_code;
    inputs.push_back({path, {bundle->entries().begin(), bundle->entries().end()}});
  }
  absl::StatusOr<MergedBundles> merged = MergeOffline(BuiltinOps(), inputs, *ParseMergePolicy(policy_));
  if (!merged.ok()) return Fail(merged.status());
  const std::string bytes =
      EncodeBundle(merged->entries, absl::StrCat("ktune ", KTUNE_VERSION), absl::ToUnixSeconds(absl::Now()));
  if (absl::Status s = WriteFileAtomically(output_, bytes); !s.ok()) return Fail(s);
  if (json_) {
    std::printf("%s\n", ToJson(merged->report).c_str());
    return 0;
  }
  std::printf("merged %zu bundles into %s: %zu entries (policy %s)\n", inputs.size(), output_.c_str(),
              merged->entries.size(), policy_.c_str());
  PrintReport(merged->report);
  return 0;
}

}  // namespace ktune
