// Bundles: portable, verifiable files of cache entries.
//
// Layout (all integers little-endian):
//   offset  0  8 bytes  magic "KTUNEBDL"
//   offset  8  u32      format version (kBundleFormatVersion)
//   offset 12  u64      payload length in bytes
//   offset 20  32 bytes SHA-256 of the payload
//   offset 52  payload: a serialized v1::Bundle
// Nothing may follow the payload. DecodeBundle checks all of it, then every
// entry (ValidateEntry) and that no key appears twice, before returning, so an
// import can write nothing unless the whole file is good.
// Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/op.h"

namespace ktune {

inline constexpr char kBundleMagic[8] = {'K', 'T', 'U', 'N', 'E', 'B', 'D', 'L'};
inline constexpr uint32_t kBundleFormatVersion = 1;
inline constexpr size_t kBundleHeaderBytes = 52;
inline constexpr uint64_t kMaxBundleBytes = uint64_t{256} << 20;

// SHA-256 of a payload fed in pieces, so that a bundle written or received a
// piece at a time is checked without holding it.
class PayloadDigest {
 public:
  PayloadDigest();
  ~PayloadDigest();
  PayloadDigest(const PayloadDigest&) = delete;
  PayloadDigest& operator=(const PayloadDigest&) = delete;

  void Update(std::string_view bytes);
  uint64_t bytes() const { return bytes_; }
  // The 52-byte file header for the payload fed so far (feeding may go on).
  std::string Header() const;

 private:
  struct Context;
  std::unique_ptr<Context> ctx_;
  uint64_t bytes_ = 0;
};

// Encodes a bundle a piece at a time, for bundles too large to hold: the
// payload entry by entry (take it as it grows), then the header, which names
// the payload's length and checksum. The file is Header() followed by every
// piece taken, in order: byte for byte what EncodeBundle writes for the same
// entries, so every reader of bundles reads it.
class BundleEncoder {
 public:
  BundleEncoder(const std::string& created_by, int64_t created_at_unix);

  // Appends one entry, its cubin stripped.
  void Add(const v1::Entry& entry);
  // The payload bytes added since the last call.
  std::string TakePayload();
  size_t pending_bytes() const { return pending_.size(); }
  int64_t entries() const { return entries_; }
  uint64_t payload_bytes() const { return digest_.bytes(); }
  std::string Header() const { return digest_.Header(); }

 private:
  void Append(std::string_view bytes);

  std::string pending_;
  int64_t entries_ = 0;
  PayloadDigest digest_;
};

// Encodes entries (cubins stripped) into a bundle file.
std::string EncodeBundle(const std::vector<v1::Entry>& entries, const std::string& created_by, int64_t created_at_unix);

// INVALID_ARGUMENT saying exactly what is wrong: "not a ktune bundle (bad
// magic)", "truncated: header says 812 payload bytes, file has 400", "checksum
// mismatch", "unsupported format version 7 (this ktune reads 1)", "entry 3:
// problem.n: ...", "entry 5 duplicates entry 2". Entries are numbered from 0,
// as in Bundle.entries. An entry carrying a cubin is refused (EncodeBundle
// never writes one).
// Entries are checked by their ops in `ops` (ValidateEntry).
absl::StatusOr<v1::Bundle> DecodeBundle(const OpRegistry& ops, std::string_view file);

}  // namespace ktune
