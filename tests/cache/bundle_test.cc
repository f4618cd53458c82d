#include "cache/bundle.h"

#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/util/message_differencer.h>
#include <openssl/evp.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "cache/recipe_check.h"
#include "tests/cache/current_entries.h"
#include "tests/cache/test_entries.h"
#include "tuner/builtin_ops.h"
#include "tuner/gemm/gemm_wire.h"
#include "tuner/gpu/cublaslt.h"

namespace ktune {
namespace {

using testutil::MakeTestEntry;

constexpr int64_t kCreatedAt = 1764400000;

std::vector<v1::Entry> ThreeEntries() {
  return {MakeTestEntry(1024, 4096), MakeTestEntry(2048, 4096), MakeTestEntry(4096, 8192)};
}

std::string Message(const absl::Status& status) { return std::string(status.message()); }

// A bundle file around an arbitrary payload, framed correctly, so that a test
// can reach the checks behind the frame.
std::string Frame(const std::string& payload, uint32_t version = kBundleFormatVersion) {
  std::string file(kBundleMagic, sizeof(kBundleMagic));
  for (int i = 0; i < 4; ++i) file.push_back(static_cast<char>(version >> (8 * i)));
  const uint64_t size = payload.size();
  for (int i = 0; i < 8; ++i) file.push_back(static_cast<char>(size >> (8 * i)));
  unsigned char digest[32];
  unsigned int digest_size = 0;
  REQUIRE(EVP_Digest(payload.data(), payload.size(), digest, &digest_size, EVP_sha256(), nullptr) == 1);
  file.append(reinterpret_cast<const char*>(digest), sizeof(digest));
  return file + payload;
}

std::string FrameBundle(const v1::Bundle& bundle) { return Frame(bundle.SerializeAsString()); }

v1::Bundle BundleOf(const std::vector<v1::Entry>& entries) {
  v1::Bundle bundle;
  bundle.set_format_version(kBundleFormatVersion);
  bundle.set_created_by("test");
  bundle.set_created_at_unix(kCreatedAt);
  for (const v1::Entry& e : entries) *bundle.add_entries() = e;
  return bundle;
}

absl::Status DecodeStatus(std::string_view file) { return DecodeBundle(BuiltinOps(), file).status(); }

TEST_CASE("Bundle: encode then decode gives the entries back", "[cache]") {
  const std::vector<v1::Entry> entries = ThreeEntries();
  const std::string file = EncodeBundle(entries, "ktune 0.1.0", kCreatedAt);

  absl::StatusOr<v1::Bundle> bundle = DecodeBundle(BuiltinOps(), file);
  INFO(bundle.status().ToString());
  REQUIRE(bundle.ok());
  CHECK(bundle->format_version() == static_cast<int32_t>(kBundleFormatVersion));
  CHECK(bundle->created_by() == "ktune 0.1.0");
  CHECK(bundle->created_at_unix() == kCreatedAt);
  REQUIRE(bundle->entries_size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(google::protobuf::util::MessageDifferencer::Equals(bundle->entries(i), entries[i]));
  }
  CHECK(EncodeBundle(entries, "ktune 0.1.0", kCreatedAt) == file);  // deterministic
}

TEST_CASE("Bundle: an empty bundle round-trips", "[cache]") {
  absl::StatusOr<v1::Bundle> bundle = DecodeBundle(BuiltinOps(), EncodeBundle({}, "ktune", kCreatedAt));
  REQUIRE(bundle.ok());
  CHECK(bundle->entries_size() == 0);
}

TEST_CASE("Bundle: the header has the documented layout", "[cache]") {
  const std::string file = EncodeBundle(ThreeEntries(), "ktune", kCreatedAt);
  REQUIRE(file.size() > kBundleHeaderBytes);
  CHECK(file.substr(0, 8) == "KTUNEBDL");
  CHECK(file.substr(8, 4) == std::string("\x01\x00\x00\x00", 4));
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) {
    length |= uint64_t{static_cast<unsigned char>(file[12 + i])} << (8 * i);
  }
  CHECK(length == file.size() - kBundleHeaderBytes);
  CHECK(Frame(file.substr(kBundleHeaderBytes)) == file);  // the checksum is SHA-256
}

TEST_CASE("Bundle: cubins are stripped on export", "[cache]") {
  std::vector<v1::Entry> entries = ThreeEntries();
  entries[1].mutable_recipe()->set_cubin(std::string(4096, '\x7f'));
  absl::StatusOr<v1::Bundle> bundle = DecodeBundle(BuiltinOps(), EncodeBundle(entries, "ktune", kCreatedAt));
  REQUIRE(bundle.ok());
  for (const v1::Entry& e : bundle->entries()) CHECK(e.recipe().cubin().empty());
}

TEST_CASE("Bundle: every truncation is refused", "[cache]") {
  const std::string file = EncodeBundle(ThreeEntries(), "ktune", kCreatedAt);
  for (size_t size = 0; size < file.size(); size += 7) {
    CAPTURE(size);
    absl::Status s = DecodeStatus(std::string_view(file).substr(0, size));
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(Message(s), Catch::StartsWith("truncated"));
  }
  absl::Status s = DecodeStatus(std::string_view(file).substr(0, file.size() - 1));
  CHECK_THAT(Message(s),
             Catch::Equals("truncated: header says " + std::to_string(file.size() - kBundleHeaderBytes) +
                           " payload bytes, file has " + std::to_string(file.size() - kBundleHeaderBytes - 1)));
  CHECK_THAT(Message(DecodeStatus("KTUNE")), Catch::Equals("truncated: 5 bytes, shorter than the 52-byte header"));
}

TEST_CASE("Bundle: every corrupted header byte and sampled payload bytes are refused", "[cache]") {
  const std::string file = EncodeBundle(ThreeEntries(), "ktune", kCreatedAt);
  std::vector<size_t> offsets;
  for (size_t i = 0; i < kBundleHeaderBytes; ++i) offsets.push_back(i);
  for (size_t i = kBundleHeaderBytes; i < file.size(); i += 11) offsets.push_back(i);
  offsets.push_back(file.size() - 1);
  for (size_t offset : offsets) {
    for (unsigned char flip : {0x01, 0x80, 0xff}) {
      CAPTURE(offset, static_cast<int>(flip));
      std::string bad = file;
      bad[offset] = static_cast<char>(static_cast<unsigned char>(bad[offset]) ^ flip);
      absl::Status s = DecodeStatus(bad);
      CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST_CASE("Bundle: each framing error says what is wrong", "[cache]") {
  const std::string file = EncodeBundle(ThreeEntries(), "ktune", kCreatedAt);

  SECTION("bad magic") {
    std::string bad = file;
    bad[0] = 'X';
    CHECK(Message(DecodeStatus(bad)) == "not a ktune bundle (bad magic)");
    CHECK(Message(DecodeStatus(std::string(200, '\0'))) == "not a ktune bundle (bad magic)");
  }
  SECTION("unsupported version") {
    std::string bad = file;
    bad[8] = 7;
    CHECK(Message(DecodeStatus(bad)) == "unsupported format version 7 (this ktune reads 1)");
    CHECK(Message(DecodeStatus(Frame(file.substr(kBundleHeaderBytes), 2))) ==
          "unsupported format version 2 (this ktune reads 1)");
  }
  SECTION("trailing bytes") {
    absl::Status s = DecodeStatus(file + "garbage");
    CHECK_THAT(Message(s), Catch::StartsWith("trailing bytes: header says") &&
                               Catch::Contains(std::to_string(file.size() - kBundleHeaderBytes + 7)));
  }
  SECTION("a declared length over the limit is refused before anything is read") {
    std::string bad = file;
    for (int i = 0; i < 8; ++i) bad[12 + i] = '\xff';
    CHECK_THAT(Message(DecodeStatus(bad)), Catch::StartsWith("too large"));
    const uint64_t just_over = kMaxBundleBytes - kBundleHeaderBytes + 1;
    for (int i = 0; i < 8; ++i) bad[12 + i] = static_cast<char>(just_over >> (8 * i));
    CHECK_THAT(Message(DecodeStatus(bad)), Catch::StartsWith("too large"));
  }
  SECTION("checksum mismatch") {
    std::string bad = file;
    bad[kBundleHeaderBytes + 3] ^= 0x20;
    CHECK_THAT(Message(DecodeStatus(bad)), Catch::StartsWith("checksum mismatch"));
  }
}

TEST_CASE("Bundle: a well-framed payload is still checked", "[cache]") {
  SECTION("a payload that does not parse") {
    CHECK(Message(DecodeStatus(Frame("\xff\xff\xff\xff not protobuf"))) ==
          "payload does not parse as a ktune.v1.Bundle");
  }
  SECTION("a payload format version that disagrees with the header") {
    v1::Bundle bundle = BundleOf(ThreeEntries());
    bundle.set_format_version(2);
    CHECK(Message(DecodeStatus(FrameBundle(bundle))) == "payload format_version 2 does not match the header's 1");
    bundle.clear_format_version();
    CHECK_THAT(Message(DecodeStatus(FrameBundle(bundle))), Catch::StartsWith("payload format_version 0"));
  }
  SECTION("an invalid entry is named by its index") {
    std::vector<v1::Entry> entries = ThreeEntries();
    entries[2].mutable_problem()->mutable_norm()->set_n(0);
    CHECK_THAT(Message(DecodeStatus(FrameBundle(BundleOf(entries)))),
               Catch::StartsWith("entry 2: problem.n: must be in [1, "));
    entries = ThreeEntries();
    entries[1].mutable_measurement()->set_time_us(-1);
    CHECK(Message(DecodeStatus(FrameBundle(BundleOf(entries)))) ==
          "entry 1: measurement.time_us: must be finite and > 0, got -1");
  }
  SECTION("a cubin is refused") {
    std::vector<v1::Entry> entries = ThreeEntries();
    entries[0].mutable_recipe()->set_cubin(
        "\x7f"
        "ELF");
    CHECK(Message(DecodeStatus(FrameBundle(BundleOf(entries)))) == "entry 0: recipe.cubin: bundles carry no cubins");
  }
  SECTION("duplicate keys") {
    std::vector<v1::Entry> entries = ThreeEntries();
    v1::Entry again = entries[0];
    again.mutable_measurement()->set_time_us(3);  // a different winner for the same key
    entries.push_back(again);
    CHECK_THAT(Message(DecodeStatus(FrameBundle(BundleOf(entries)))),
               Catch::StartsWith("entry 3 duplicates entry 0 (rmsnorm.fwd "));
  }
  SECTION("equivalent spellings of one key are duplicates too") {
    std::vector<v1::Entry> entries = ThreeEntries();
    v1::Entry again = entries[1];
    again.mutable_problem()->mutable_norm()->set_eps(0);  // the default, 1e-6
    entries.push_back(again);
    CHECK_THAT(Message(DecodeStatus(FrameBundle(BundleOf(entries)))), Catch::StartsWith("entry 3 duplicates entry 1"));
  }
}

// What this build's templates write for an entry's problem and config on the
// device it names, straight from the tuner (not through the cache's check).
std::optional<v1::LaunchRecipe> TemplatesOwnRecipe(const v1::Entry& e) {
  DeviceInfo d = DeviceFromProto(e.device());
  d.max_smem_per_block_optin = ArchSmemPerBlockOptin(d.cc_major, d.cc_minor);
  d.max_threads_per_sm = ArchMaxThreadsPerSm(d.cc_major, d.cc_minor);
  absl::StatusOr<LaunchRecipe> r = absl::NotFoundError("no recipe");
  if (e.problem().has_norm()) {
    absl::StatusOr<NormProblem> p = NormProblemFromProto(e.problem().norm());
    absl::StatusOr<NormConfig> c = NormConfigFromProto(e.config().norm());
    if (p.ok() && c.ok()) r = NormLaunchRecipe(*p, *c, d);
  } else if (e.config().gemm().has_cublaslt()) {
    const v1::CublasLtAlgorithm& a = e.config().gemm().cublaslt();
    r = CublasLtRecipe({a.algo(), a.workspace_bytes()}, a.version());
    r->arch = Arch(d);
  } else {
    r = OwnGemmRecipe(e.problem().gemm(), e.config().gemm(), d);
  }
  if (!r.ok()) return std::nullopt;
  return StoredRecipe(RecipeToProto(*r, /*include_cubin=*/false));
}

TEST_CASE("a bundle carries recipes without their interface", "[cache][bundle][recipe]") {
  for (const v1::Entry& stored : testutil::CurrentEntriesOfEveryKind()) {
    INFO(stored.problem().ShortDebugString());
    const v1::Entry entry = testutil::WithServedRecipe(stored);
    absl::StatusOr<v1::Bundle> read = DecodeBundle(BuiltinOps(), EncodeBundle({entry}, "test", kCreatedAt));
    INFO(read.status().ToString());
    REQUIRE(read.ok());
    CHECK(read->entries(0).recipe().SerializeAsString() == stored.recipe().SerializeAsString());
    CHECK(read->entries(0).recipe().tensors().empty());
  }
}

TEST_CASE("a bundle's recipe is this build's in every field, or the bundle is refused naming it",
          "[cache][bundle][recipe]") {
  // Files not written by EncodeBundle: lowered names and NVRTC options of a
  // forger's choosing.
  const v1::Entry entry = testutil::CurrentEntriesOfEveryKind()[1];  // layernorm.bwd: two kernels
  v1::Entry named = entry;
  named.mutable_recipe()->mutable_kernels(1)->set_lowered_name("_ZN5ktune11norm_bwd_fusedEv");
  CHECK_THAT(Message(DecodeStatus(FrameBundle(BundleOf({named})))),
             Catch::StartsWith("entry 0: recipe.kernels[1].lowered_name: is "));
  v1::Entry macro = entry;
  macro.mutable_recipe()->add_nvrtc_options("--define-macro=KTUNE_X=1");
  CHECK_THAT(Message(DecodeStatus(FrameBundle(BundleOf({macro})))),
             Catch::StartsWith("entry 0: recipe.nvrtc_options: is "));
  v1::Entry include = entry;
  *include.mutable_recipe()->mutable_nvrtc_options(0) = "--pre-include=/etc/passwd";
  CHECK_THAT(Message(DecodeStatus(FrameBundle(BundleOf({include})))),
             Catch::StartsWith("entry 0: recipe.nvrtc_options: is "));
  // EncodeBundle leaves out what entries stored by older versions still carry.
  absl::StatusOr<v1::Bundle> written = DecodeBundle(BuiltinOps(), EncodeBundle({named}, "test", kCreatedAt));
  REQUIRE(written.ok());
  CHECK(written->entries(0).recipe().kernels(1).lowered_name().empty());
}

TEST_CASE("no payload bit flip brings in a recipe the template does not write", "[cache][bundle][recipe]") {
  // Every bit of a bundle of norm and GEMM entries is flipped in turn and the
  // checksum recomputed, as a forger would. A flipped bundle may be refused or
  // accepted; an accepted entry that this build serves (its software
  // fingerprint is this build's) must carry exactly the recipe the template
  // writes for its (possibly flipped) problem and config. Others are stale
  // here: kept, never served.
  const std::vector<v1::Entry> entries = testutil::CurrentEntriesOfEveryKind();
  const std::string payload = BundleOf(entries).SerializeAsString();
  const google::protobuf::LogSilencer quiet;  // flipped strings are invalid UTF-8, by the thousand
  int accepted = 0, served_entries = 0, wrongly_accepted = 0;
  for (size_t bit = 0; bit < payload.size() * 8; ++bit) {
    std::string flipped = payload;
    flipped[bit / 8] = static_cast<char>(flipped[bit / 8] ^ (1 << (bit % 8)));
    absl::StatusOr<v1::Bundle> bundle = DecodeBundle(BuiltinOps(), Frame(flipped));
    if (!bundle.ok()) continue;
    ++accepted;
    for (const v1::Entry& e : bundle->entries()) {
      absl::StatusOr<SoftwareFingerprint> build = BuiltinOps().Software(e.problem());
      if (!build.ok() || SoftwareKey(SoftwareFromProto(e.software())) != SoftwareKey(*build)) continue;
      ++served_entries;
      const std::optional<v1::LaunchRecipe> want = TemplatesOwnRecipe(e);
      if (!want.has_value() || !google::protobuf::util::MessageDifferencer::Equals(*want, e.recipe())) {
        ++wrongly_accepted;
        UNSCOPED_INFO("bit " << bit << ": " << e.recipe().ShortDebugString().substr(0, 300));
      }
    }
  }
  INFO(payload.size() * 8 << " flips, " << accepted << " accepted, " << served_entries << " served entries");
  CHECK(payload.size() * 8 >= 1500);
  CHECK(accepted > 0);  // flips of measurements and provenance are harmless
  CHECK(wrongly_accepted == 0);
}

TEST_CASE("Bundle: the piecewise encoder writes the one-piece format byte for byte", "[cache][scale]") {
  std::vector<v1::Entry> entries;
  for (int64_t m : {1, 300, 70000}) entries.push_back(MakeTestEntry(m, 4096));
  entries[1].mutable_recipe()->set_cubin("machine code");  // stripped either way

  // The format as documented: the header, then a serialized v1::Bundle.
  v1::Bundle bundle;
  bundle.set_format_version(kBundleFormatVersion);
  bundle.set_created_by("test");
  bundle.set_created_at_unix(1795000000);
  for (const v1::Entry& e : entries) {
    *bundle.add_entries() = e;
    bundle.mutable_entries()->rbegin()->mutable_recipe()->clear_cubin();
  }
  const std::string payload = bundle.SerializeAsString();

  BundleEncoder encoder("test", 1795000000);
  std::string pieces;
  for (const v1::Entry& e : entries) {
    encoder.Add(e);
    pieces += encoder.TakePayload();  // taken as it grows, as a stream does
  }
  pieces += encoder.TakePayload();
  CHECK(pieces == payload);
  CHECK(encoder.entries() == 3);
  CHECK(encoder.payload_bytes() == payload.size());
  const std::string file = encoder.Header() + pieces;
  CHECK(file == EncodeBundle(entries, "test", 1795000000));
  REQUIRE(DecodeBundle(BuiltinOps(), file).ok());

  // A digest fed in arbitrary pieces gives the same header.
  PayloadDigest digest;
  for (size_t i = 0; i < payload.size(); i += 7) digest.Update(std::string_view(payload).substr(i, 7));
  CHECK(digest.Header() == encoder.Header());
}

TEST_CASE("Bundle: unknown fields in entries are dropped on decode", "[cache][scale]") {
  const v1::Entry clean = MakeTestEntry();
  std::string wire = clean.SerializeAsString();
  wire += std::string("\xc2\x3e\x05", 3) + "hello";  // field 1000, 5 bytes
  v1::Entry with_unknown;
  REQUIRE(with_unknown.ParseFromString(wire));
  REQUIRE(with_unknown.ByteSizeLong() > clean.ByteSizeLong());
  absl::StatusOr<v1::Bundle> decoded = DecodeBundle(BuiltinOps(), EncodeBundle({with_unknown}, "test", 1795000000));
  REQUIRE(decoded.ok());
  REQUIRE(decoded->entries_size() == 1);
  CHECK(decoded->entries(0).ByteSizeLong() == clean.ByteSizeLong());
  CHECK(decoded->entries(0).SerializeAsString() == clean.SerializeAsString());
}

}  // namespace
}  // namespace ktune
