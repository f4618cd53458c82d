// The store's entries in bulk, as the RPCs other than GetConfig and Tune see
// them: listing in pages (ListEntries, keyset paging with a token naming its
// filter), exports (one message up to kMaxUnaryExportBytes, or a stream of
// chunks page by page), imports (the whole bundle decoded and validated, then
// merged against this GPU and this build's software in one transaction) and
// deletions (every problem resolved first, then each deletion in its own
// transaction). Nothing here knows an op: entries are checked and keyed
// through the registry (cache/, tuner/op.h).
//
// Thread-safe: every call reads or writes through the Store and EntryCache,
// which are.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/bundle.h"
#include "cache/bundle_merge.h"
#include "cache/store.h"
#include "daemon/answers.h"
#include "grpcpp/support/server_callback.h"
#include "ktune/v1/ktune.pb.h"

namespace ktune {

// Told of every entry an import wrote (the fleet store publishes them).
using WrittenFn = std::function<void(const std::vector<v1::Entry>&)>;

// What Merge did: the report, and the entries it wrote (none for a dry run).
struct MergeOutcome {
  v1::ImportBundleResponse report;
  std::vector<v1::Entry> written;
};

class BundleService {
 public:
  // Not owned; both must outlive this. `compile_only`: no GPU to judge
  // imports against (they are stored as bundled). `imported` (may be empty)
  // is called with the entries each Import wrote.
  BundleService(Store* store, Answers* answers, bool compile_only, WrittenFn imported = nullptr);

  // A page of entries in key order: INVALID_ARGUMENT for an op this daemon
  // does not serve, a negative page size or a token not given for this filter.
  absl::StatusOr<v1::ListEntriesResponse> List(const v1::ListEntriesRequest& request) const;

  // The whole selection as one bundle; FAILED_PRECONDITION past
  // kMaxUnaryExportBytes, CANCELLED once `cancelled()` says the caller left.
  absl::StatusOr<v1::ExportBundleResponse> Export(const v1::ExportBundleRequest& request,
                                                  const std::function<bool()>& cancelled) const;
  // The selection streamed page by page (the reactor deletes itself when
  // done); one that fails at once for a request that does not select.
  grpc::ServerWriteReactor<v1::ExportBundleChunk>* ExportStream(const v1::ExportBundleRequest& request) const;
  // A stream that ends at once with `status` (a refused caller).
  static grpc::ServerWriteReactor<v1::ExportBundleChunk>* FailedExportStream(const absl::Status& status);

  // The work of ImportBundle, also run by ktuned --import-bundle at start:
  // decodes and validates the whole bundle (INVALID_ARGUMENT "bundle refused,
  // nothing imported: ..."), judges each entry against this daemon's GPU and
  // software (cache/bundle_merge.h; a compile-only daemon stores them as
  // bundled), merges by the policy and writes the plan in one transaction
  // unless dry_run.
  absl::StatusOr<v1::ImportBundleResponse> Import(const v1::ImportBundleRequest& request);

  // The import check and merge of Import, for entries that come from
  // elsewhere than a bundle file (the fleet store): each entry validated
  // (ValidateEntry, so the recipe check), judged against this GPU and
  // software, merged by `policy` and written in one transaction unless
  // dry_run. Does not call `imported`.
  absl::StatusOr<MergeOutcome> Merge(const std::vector<v1::Entry>& incoming, v1::MergePolicy policy, bool dry_run);

  // The work of DeleteEntries: every problem resolved first (INVALID_ARGUMENT
  // naming it), then each deletion in its own transaction, from the store
  // and from memory.
  absl::StatusOr<v1::DeleteEntriesResponse> Delete(const v1::DeleteEntriesRequest& request);

 private:
  // What an export takes: the store's filter, and the device name, which is
  // inside each entry and so filtered after reading.
  struct ExportSelection {
    EntryFilter filter;
    std::string device_name;
  };
  absl::StatusOr<ExportSelection> SelectForExport(const v1::ExportBundleRequest& request) const;
  // Encodes the next page after `*after` (moved on) into `encoder`; `*done`
  // once no entry is left.
  absl::Status ExportPage(const ExportSelection& selection, std::optional<EntryKey>* after, size_t max_bytes,
                          BundleEncoder* encoder, bool* done) const;
  // What an import is judged against: this GPU and the software fingerprint
  // of each op here, or no GPU when compile-only.
  MergeTarget ImportTarget() const;

  Store* const store_;
  Answers* const answers_;
  const bool compile_only_;
  const WrittenFn imported_;
};

}  // namespace ktune
