#include "daemon/bundle_service.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "daemon/status_mapping.h"
#include "spdlog/spdlog.h"
#include "tuner/core/safe_text.h"
#include "tuner/core/wire.h"

namespace ktune {
namespace {

constexpr int kDefaultPageSize = 1000;
constexpr int kMaxPageSize = 10000;
constexpr size_t kMaxPageTokenBytes = 4096;
constexpr uint64_t kMaxUnaryExportBytes = uint64_t{64} << 20;
constexpr int kMaxDeleteProblems = 1000;
constexpr size_t kMaxDeleteListed = 1000;

// A page token: the last key of the page and the filter it was given for,
// opaque to callers (web-safe base64). Keyset paging: the next page starts
// after that key, so no server state is kept between pages.
constexpr absl::string_view kPageTokenMagic = "ktp1";

std::string EncodePageToken(const EntryKey& last, absl::string_view scope) {
  return absl::WebSafeBase64Escape(absl::StrCat(kPageTokenMagic, "\x1e", scope, "\x1e", FlatKey(last)));
}

absl::StatusOr<EntryKey> DecodePageToken(absl::string_view token, absl::string_view scope) {
  // The token itself is never echoed: it is the caller's, of any content.
  auto bad = [](absl::string_view why) { return absl::InvalidArgumentError(absl::StrCat("page_token: ", why)); };
  if (token.size() > kMaxPageTokenBytes) return bad("too long to be a token this server gave");
  std::string raw;
  if (!absl::WebSafeBase64Unescape(token, &raw)) return bad("not a token this server gave (not base64)");
  std::vector<std::string> parts = absl::StrSplit(raw, absl::MaxSplits('\x1e', 2));
  if (parts.size() != 3 || parts[0] != kPageTokenMagic) return bad("not a token this server gave");
  if (parts[1] != scope) return bad("given for another op or stale_only; start again without a token");
  std::vector<std::string> key = absl::StrSplit(parts[2], '\x1f');
  if (key.size() != 4) return bad("not a token this server gave (no key)");
  return EntryKey{std::move(key[0]), std::move(key[1]), std::move(key[2]), std::move(key[3])};
}

// ExportBundleStream: one page of entries encoded per write, so the daemon
// holds about one chunk whatever the bundle weighs, and a caller that goes
// away stops the reading at the next page.
class PagedExportStream final : public grpc::ServerWriteReactor<v1::ExportBundleChunk> {
 public:
  using PageFn = std::function<absl::Status(std::optional<EntryKey>*, BundleEncoder*, bool*)>;

  PagedExportStream(PageFn page, std::string log_note)
      : page_(std::move(page)),
        log_note_(std::move(log_note)),
        encoder_(absl::StrCat("ktune ", KTUNE_VERSION), absl::ToUnixSeconds(absl::Now())) {
    Next();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(ToGrpcStatus(absl::CancelledError("the caller went away during the export")));
      return;
    }
    Next();
  }
  void OnDone() override { delete this; }

 private:
  static constexpr size_t kChunkBytes = size_t{1} << 20;

  void Next() {
    if (sent_header_) {
      spdlog::info("event=export_stream entries={} bytes={} {}", encoder_.entries(),
                   encoder_.payload_bytes() + kBundleHeaderBytes, log_note_);
      Finish(grpc::Status::OK);
      return;
    }
    while (!done_ && encoder_.pending_bytes() < kChunkBytes) {
      if (absl::Status s = page_(&after_, &encoder_, &done_); !s.ok()) {
        Finish(ToGrpcStatus(s));
        return;
      }
    }
    chunk_.Clear();
    if (encoder_.pending_bytes() > 0) {
      chunk_.set_payload(encoder_.TakePayload());
    } else {
      chunk_.set_header(encoder_.Header());
      chunk_.set_entries(encoder_.entries());
      sent_header_ = true;
    }
    StartWrite(&chunk_);
  }

  PageFn page_;
  const std::string log_note_;
  BundleEncoder encoder_;
  std::optional<EntryKey> after_;
  bool done_ = false;
  bool sent_header_ = false;
  v1::ExportBundleChunk chunk_;  // alive until its write completes
};

// Ends a server stream at once with `status`.
class FailedStream final : public grpc::ServerWriteReactor<v1::ExportBundleChunk> {
 public:
  explicit FailedStream(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

BundleService::BundleService(Store* store, Answers* answers, bool compile_only, WrittenFn imported)
    : store_(store), answers_(answers), compile_only_(compile_only), imported_(std::move(imported)) {}

absl::StatusOr<BundleService::ExportSelection> BundleService::SelectForExport(
    const v1::ExportBundleRequest& request) const {
  if (absl::Status s = answers_->CheckOpFilter(request.op()); !s.ok()) return s;
  if (request.since_unix() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("since_unix: must be >= 0, got ", request.since_unix()));
  }
  ExportSelection selection;
  selection.filter.op = request.op();
  selection.filter.since_unix = request.since_unix();
  selection.device_name = request.device_name();
  return selection;
}

absl::Status BundleService::ExportPage(const ExportSelection& selection, std::optional<EntryKey>* after,
                                       size_t max_bytes, BundleEncoder* encoder, bool* done) const {
  PageRequest page;
  page.after = *after;
  page.max_bytes = max_bytes;
  absl::StatusOr<Page> listed = store_->ListPage(selection.filter, page);
  if (!listed.ok()) return listed.status();
  for (const StoredEntry& e : listed->entries) {
    // The device name is inside the entry, not a column: filtered here.
    if (!selection.device_name.empty() && e.entry.device().name() != selection.device_name) continue;
    encoder->Add(e.entry);
  }
  *done = !listed->more;
  if (!listed->entries.empty()) *after = listed->entries.back().key;
  return absl::OkStatus();
}

absl::StatusOr<v1::DeleteEntriesResponse> BundleService::Delete(const v1::DeleteEntriesRequest& request) {
  if (request.problems().empty() && !request.stale()) {
    return absl::InvalidArgumentError("nothing to delete: name problems, or ask for the stale entries");
  }
  if (request.problems_size() > kMaxDeleteProblems) {
    return absl::InvalidArgumentError(
        absl::StrCat("problems: at most ", kMaxDeleteProblems, " per call, got ", request.problems_size()));
  }
  // Every problem is checked before anything is deleted.
  std::vector<EntryFilter> filters;
  for (int i = 0; i < request.problems_size(); ++i) {
    absl::StatusOr<Resolved> r = answers_->Resolve(request.problems(i));
    if (!r.ok()) {
      return absl::Status(r.status().code(), absl::StrCat("problems[", i, "]: ", r.status().message()));
    }
    EntryFilter& f = filters.emplace_back();
    f.op = r->key.op;
    f.problem_key = r->key.problem_key;
  }
  if (request.stale()) filters.emplace_back().stale = answers_->StaleFilter();
  v1::DeleteEntriesResponse report;
  report.set_dry_run(request.dry_run());
  for (const EntryFilter& f : filters) {
    const size_t room = kMaxDeleteListed - std::min<size_t>(kMaxDeleteListed, report.entries_size());
    absl::StatusOr<DeleteResult> result = answers_->entries()->Delete(f, request.dry_run(), room);
    if (!result.ok()) return result.status();
    report.set_deleted(report.deleted() + result->deleted);
    for (const EntryKey& key : result->listed) {
      v1::DeletedEntry* d = report.add_entries();
      d->set_op(key.op);
      d->set_problem_key(key.problem_key);
      d->set_device_key(key.device_key);
      d->set_software_key(key.software_key);
    }
  }
  spdlog::info("event=delete dry_run={} deleted={} problems={} stale={}", request.dry_run(), report.deleted(),
               request.problems_size(), request.stale());
  return report;
}

MergeTarget BundleService::ImportTarget() const {
  MergeTarget target;
  if (compile_only_) {
    target.not_judged_note = "compile-only daemon: no GPU to judge against, stored as bundled";
    return target;
  }
  // Judged against every GPU kind this daemon serves (bundle_merge.h).
  for (const DeviceKind& kind : answers_->kinds()) target.devices.push_back(DeviceToProto(kind.device));
  // The fingerprint this daemon would key the entry's problem under (as Resolve does).
  target.software_for = [ops = &answers_->ops()](const v1::Entry& e) -> absl::StatusOr<v1::SoftwareFingerprint> {
    absl::StatusOr<SoftwareFingerprint> software = ops->Software(e.problem());
    if (!software.ok()) {
      return absl::Status(software.status().code(),
                          absl::StrCat("not served by this daemon: ", software.status().message()));
    }
    return SoftwareToProto(*software);
  };
  return target;
}

absl::StatusOr<v1::ImportBundleResponse> BundleService::Import(const v1::ImportBundleRequest& request) {
  absl::StatusOr<v1::Bundle> bundle = DecodeBundle(answers_->ops(), request.bundle());
  if (!bundle.ok()) {
    spdlog::warn("event=import_refused error=\"{}\"", SafeText(bundle.status().message(), 1024));
    return absl::Status(bundle.status().code(),
                        absl::StrCat("bundle refused, nothing imported: ", bundle.status().message()));
  }
  if (!v1::MergePolicy_IsValid(request.policy())) {
    return absl::InvalidArgumentError(absl::StrCat("policy: unknown merge policy ", request.policy()));
  }
  const std::vector<v1::Entry> incoming(bundle->entries().begin(), bundle->entries().end());
  absl::StatusOr<MergeOutcome> merged = Merge(incoming, request.policy(), request.dry_run());
  if (!merged.ok()) return merged.status();
  v1::ImportBundleResponse report = std::move(merged->report);
  if (imported_ && !merged->written.empty()) imported_(merged->written);
  report.set_dry_run(request.dry_run());
  spdlog::info(
      "event=import dry_run={} policy={} added={} replaced={} unchanged={} kept={} "
      "rejected={}",
      request.dry_run(), MergePolicyName(request.policy()), report.added(), report.replaced(), report.unchanged(),
      report.kept(), report.rejected());
  return report;
}

absl::StatusOr<MergeOutcome> BundleService::Merge(const std::vector<v1::Entry>& incoming, v1::MergePolicy policy,
                                                  bool dry_run) {
  const MergeTarget target = ImportTarget();
  MergeOutcome outcome;
  // Plan and write under the cache's write lock, in one transaction: a tune
  // finishing meanwhile is either seen by the plan or written after it.
  absl::Status s = answers_->entries()->Update([&]() -> absl::StatusOr<std::vector<v1::Entry>> {
    // Straight from the store, not through the cache: an import's keys would
    // crowd the hot ones out of memory.
    absl::Status lookup_error;
    absl::StatusOr<MergePlan> plan =
        PlanMerge(answers_->ops(), incoming, policy, target, [&](const EntryKey& key) -> std::optional<v1::Entry> {
          absl::StatusOr<std::optional<v1::Entry>> e = store_->Get(key);
          if (!e.ok()) {
            lookup_error.Update(e.status());
            return std::nullopt;
          }
          return *std::move(e);
        });
    if (!lookup_error.ok()) return lookup_error;
    if (!plan.ok()) return plan.status();
    outcome.report = std::move(plan->report);
    if (dry_run) return std::vector<v1::Entry>();
    outcome.written = plan->writes;
    return std::move(plan->writes);
  });
  if (!s.ok()) return s;
  outcome.report.set_dry_run(dry_run);
  return outcome;
}

absl::StatusOr<v1::ListEntriesResponse> BundleService::List(const v1::ListEntriesRequest& request) const {
  if (absl::Status s = answers_->CheckOpFilter(request.op()); !s.ok()) return s;
  if (request.page_size() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("page_size: must be >= 0, got ", request.page_size()));
  }
  EntryFilter filter;
  filter.op = request.op();
  if (request.stale_only()) filter.stale = answers_->StaleFilter();
  // The token carries what it was given for, so a token reused with another
  // filter is refused rather than silently skipping or repeating entries.
  const std::string scope = absl::StrCat(request.op(), request.stale_only() ? "|stale" : "|all");
  PageRequest page;
  page.limit = request.page_size() == 0 ? kDefaultPageSize : std::min(request.page_size(), kMaxPageSize);
  if (!request.page_token().empty()) {
    absl::StatusOr<EntryKey> after = DecodePageToken(request.page_token(), scope);
    if (!after.ok()) return after.status();
    page.after = *std::move(after);
  }
  absl::StatusOr<Page> listed = store_->ListPage(filter, page);
  if (!listed.ok()) return listed.status();
  v1::ListEntriesResponse response;
  for (StoredEntry& e : listed->entries) *response.add_entries() = std::move(e.entry);
  if (listed->more) response.set_next_page_token(EncodePageToken(listed->entries.back().key, scope));
  return response;
}

absl::StatusOr<v1::ExportBundleResponse> BundleService::Export(const v1::ExportBundleRequest& request,
                                                               const std::function<bool()>& cancelled) const {
  absl::StatusOr<ExportSelection> selection = SelectForExport(request);
  if (!selection.ok()) return selection.status();
  BundleEncoder encoder(absl::StrCat("ktune ", KTUNE_VERSION), absl::ToUnixSeconds(absl::Now()));
  std::optional<EntryKey> after;
  for (bool done = false; !done;) {
    if (cancelled()) return absl::CancelledError("the caller went away");
    if (absl::Status s = ExportPage(*selection, &after, size_t{2} << 20, &encoder, &done); !s.ok()) return s;
    // One answer is one message: past the bound it is refused, not built.
    if (encoder.payload_bytes() > kMaxUnaryExportBytes) {
      return absl::FailedPreconditionError(
          absl::StrCat("the bundle is over ", kMaxUnaryExportBytes >> 20,
                       " MiB, the most one ExportBundle answer carries; use ExportBundleStream "
                       "(`ktune export` streams), or narrow it (op, device_name, since_unix)"));
    }
  }
  const std::string header = encoder.Header();
  v1::ExportBundleResponse response;
  response.set_bundle(absl::StrCat(header, encoder.TakePayload()));
  response.set_entries(static_cast<int32_t>(encoder.entries()));
  spdlog::info("event=export entries={} bytes={} op=\"{}\" gpu=\"{}\" since_unix={}", encoder.entries(),
               response.bundle().size(), SafeText(request.op()), SafeText(request.device_name()), request.since_unix());
  return response;
}

grpc::ServerWriteReactor<v1::ExportBundleChunk>* BundleService::FailedExportStream(const absl::Status& status) {
  return new FailedStream(status);
}

grpc::ServerWriteReactor<v1::ExportBundleChunk>* BundleService::ExportStream(
    const v1::ExportBundleRequest& request) const {
  absl::StatusOr<ExportSelection> selection = SelectForExport(request);
  if (!selection.ok()) return new FailedStream(selection.status());
  return new PagedExportStream(
      [this, selection = *std::move(selection)](std::optional<EntryKey>* after, BundleEncoder* encoder, bool* done) {
        return ExportPage(selection, after, size_t{1} << 20, encoder, done);
      },
      absl::StrCat("op=\"", SafeText(request.op()), "\" gpu=\"", SafeText(request.device_name()),
                   "\" since_unix=", request.since_unix()));
}

}  // namespace ktune
