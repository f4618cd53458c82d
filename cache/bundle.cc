#include "cache/bundle.h"

#include <openssl/evp.h>

#include <array>
#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "cache/entry.h"
#include "cache/recipe_check.h"

namespace ktune {
namespace {

constexpr size_t kMagicOffset = 0;
constexpr size_t kVersionOffset = 8;
constexpr size_t kLengthOffset = 12;
constexpr size_t kChecksumOffset = 20;
constexpr size_t kChecksumBytes = 32;
static_assert(kChecksumOffset + kChecksumBytes == kBundleHeaderBytes);
static_assert(sizeof(kBundleMagic) == kVersionOffset - kMagicOffset);

using Sha256 = std::array<unsigned char, kChecksumBytes>;

Sha256 Sha256Of(absl::string_view data) {
  Sha256 digest{};
  unsigned int size = 0;
  // One-shot EVP digest of an in-memory buffer: it fails only when OpenSSL
  // cannot allocate, and then every later use of the process fails too.
  if (EVP_Digest(data.data(), data.size(), digest.data(), &size, EVP_sha256(), nullptr) != 1 ||
      size != kChecksumBytes) {
    digest.fill(0);
  }
  return digest;
}

std::string Hex(const unsigned char* data, size_t size) {
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(data), size));
}

// Little-endian byte by byte, so the format does not depend on the host.
template <typename T>
void AppendLittleEndian(std::string* out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  }
}

template <typename T>
T ReadLittleEndian(absl::string_view data, size_t offset) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    value |= static_cast<T>(static_cast<unsigned char>(data[offset + i])) << (8 * i);
  }
  return value;
}

absl::Status Invalid(absl::string_view message) { return absl::InvalidArgumentError(message); }

}  // namespace

struct PayloadDigest::Context {
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  ~Context() { EVP_MD_CTX_free(md); }
};

// EVP calls fail only when OpenSSL cannot allocate; the header then carries
// a checksum no reader accepts, which is the safe way to fail.
PayloadDigest::PayloadDigest() : ctx_(std::make_unique<Context>()) {
  EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr);
}
PayloadDigest::~PayloadDigest() = default;

void PayloadDigest::Update(std::string_view bytes) {
  EVP_DigestUpdate(ctx_->md, bytes.data(), bytes.size());
  bytes_ += bytes.size();
}

std::string PayloadDigest::Header() const {
  Sha256 digest{};
  unsigned int size = 0;
  EVP_MD_CTX* copy = EVP_MD_CTX_new();
  if (copy == nullptr || EVP_MD_CTX_copy_ex(copy, ctx_->md) != 1 ||
      EVP_DigestFinal_ex(copy, digest.data(), &size) != 1 || size != kChecksumBytes) {
    digest.fill(0);
  }
  EVP_MD_CTX_free(copy);
  std::string header;
  header.reserve(kBundleHeaderBytes);
  header.append(kBundleMagic, sizeof(kBundleMagic));
  AppendLittleEndian<uint32_t>(&header, kBundleFormatVersion);
  AppendLittleEndian<uint64_t>(&header, bytes_);
  header.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  return header;
}

BundleEncoder::BundleEncoder(const std::string& created_by, int64_t created_at_unix) {
  // The payload is a serialized v1::Bundle: its scalar fields come first
  // (fields are written in number order), then each entry as field 4. So the
  // opening is the serialization of a Bundle without entries.
  v1::Bundle opening;
  opening.set_format_version(kBundleFormatVersion);
  opening.set_created_by(created_by);
  opening.set_created_at_unix(created_at_unix);
  Append(opening.SerializeAsString());
}

void BundleEncoder::Add(const v1::Entry& entry) {
  // A cubin, lowered names and the interface are build products of the
  // recipe (StoredRecipe): the importer compiles it and derives its interface
  // for itself rather than trusting machine code, entry points or argument
  // values from another host (entries stored by older versions still carry
  // lowered names).
  v1::Entry stripped = entry;
  *stripped.mutable_recipe() = StoredRecipe(entry.recipe());
  const std::string bytes = stripped.SerializeAsString();
  // Field 4, length-delimited: tag (4 << 3 | 2), a varint length, the bytes.
  std::string framed(1, static_cast<char>((4 << 3) | 2));
  for (uint64_t n = bytes.size();; n >>= 7) {
    if (n < 0x80) {
      framed.push_back(static_cast<char>(n));
      break;
    }
    framed.push_back(static_cast<char>((n & 0x7f) | 0x80));
  }
  Append(framed);
  Append(bytes);
  ++entries_;
}

void BundleEncoder::Append(std::string_view bytes) {
  digest_.Update(bytes);
  pending_.append(bytes.data(), bytes.size());
}

std::string BundleEncoder::TakePayload() { return std::exchange(pending_, std::string()); }

std::string EncodeBundle(const std::vector<v1::Entry>& entries, const std::string& created_by,
                         int64_t created_at_unix) {
  BundleEncoder encoder(created_by, created_at_unix);
  for (const v1::Entry& entry : entries) encoder.Add(entry);
  return absl::StrCat(encoder.Header(), encoder.TakePayload());
}

absl::StatusOr<v1::Bundle> DecodeBundle(const OpRegistry& ops, std::string_view file_bytes) {
  const absl::string_view file(file_bytes.data(), file_bytes.size());
  // The frame first, cheapest checks first: nothing is hashed or parsed until
  // the sizes are known to be consistent and bounded.
  if (file.size() < kBundleHeaderBytes) {
    return Invalid(
        absl::StrCat("truncated: ", file.size(), " bytes, shorter than the ", kBundleHeaderBytes, "-byte header"));
  }
  if (std::memcmp(file.data() + kMagicOffset, kBundleMagic, sizeof(kBundleMagic)) != 0) {
    return Invalid("not a ktune bundle (bad magic)");
  }
  const uint32_t version = ReadLittleEndian<uint32_t>(file, kVersionOffset);
  if (version != kBundleFormatVersion) {
    return Invalid(
        absl::StrCat("unsupported format version ", version, " (this ktune reads ", kBundleFormatVersion, ")"));
  }
  const uint64_t declared = ReadLittleEndian<uint64_t>(file, kLengthOffset);
  constexpr uint64_t kMaxPayloadBytes = kMaxBundleBytes - kBundleHeaderBytes;
  if (declared > kMaxPayloadBytes || file.size() > kMaxBundleBytes) {
    return Invalid(absl::StrCat("too large: header says ", declared, " payload bytes, file has ", file.size(),
                                " bytes; the limit is ", kMaxBundleBytes, " bytes in all"));
  }
  const absl::string_view payload = file.substr(kBundleHeaderBytes);
  if (payload.size() < declared) {
    return Invalid(absl::StrCat("truncated: header says ", declared, " payload bytes, file has ", payload.size()));
  }
  if (payload.size() > declared) {
    return Invalid(absl::StrCat("trailing bytes: header says ", declared, " payload bytes, file has ", payload.size()));
  }
  const Sha256 actual = Sha256Of(payload);
  const auto* expected = reinterpret_cast<const unsigned char*>(file.data() + kChecksumOffset);
  if (std::memcmp(actual.data(), expected, kChecksumBytes) != 0) {
    return Invalid(absl::StrCat("checksum mismatch: header says sha256 ", Hex(expected, kChecksumBytes),
                                ", payload has ", Hex(actual.data(), actual.size())));
  }

  v1::Bundle bundle;
  if (!bundle.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return Invalid("payload does not parse as a ktune.v1.Bundle");
  }
  // Fields this build does not know are never stored or passed on: they
  // would be kept verbatim (an entry with 50 MB of them broke every listing).
  bundle.DiscardUnknownFields();
  if (bundle.format_version() != static_cast<int32_t>(kBundleFormatVersion)) {
    return Invalid(absl::StrCat("payload format_version ", bundle.format_version(), " does not match the header's ",
                                kBundleFormatVersion));
  }

  // Entries are numbered from 0, as in the payload's repeated field.
  std::map<std::string, int> first_index_of_key;
  for (int i = 0; i < bundle.entries_size(); ++i) {
    const v1::Entry& entry = bundle.entries(i);
    const std::string prefix = absl::StrCat("entry ", i, ": ");
    if (absl::Status s = ValidateEntry(ops, entry, prefix); !s.ok()) {
      return Invalid(s.message());
    }
    // EncodeBundle never writes one, so a cubin means another writer; machine
    // code is not accepted from a file.
    if (!entry.recipe().cubin().empty()) {
      return Invalid(absl::StrCat(prefix, "recipe.cubin: bundles carry no cubins"));
    }
    absl::StatusOr<EntryKey> key = KeyOf(ops, entry);
    if (!key.ok()) return Invalid(absl::StrCat(prefix, key.status().message()));
    auto [it, inserted] = first_index_of_key.emplace(FlatKey(*key), i);
    if (!inserted) {
      return Invalid(absl::StrCat("entry ", i, " duplicates entry ", it->second, " (", key->op, " ", key->problem_key,
                                  " on ", key->device_key, ")"));
    }
  }
  return bundle;
}

}  // namespace ktune
