// Reading a file a user named (a bundle, a shapes file, a model config, a
// token file): the one way ktune and ktuned read such files.
//
// A path may name anything: a FIFO nobody writes (an open() or read() that
// blocks forever, and a daemon that then never gets to its signal handling),
// /dev/zero (a read that never ends), a directory, or a regular file far
// larger than any valid input (a multi-gigabyte allocation). So the file must
// be a regular file, checked with stat() before it is opened (opening some
// devices has side effects) and with fstat() on the descriptor after (the path
// may have been swapped in between); the open never blocks (O_NONBLOCK), its
// size is checked against the kind's cap before a byte is read, and the read
// stops at the cap even if the file grows meanwhile. Symlinks are followed:
// Kubernetes mounts ConfigMaps and Secrets through them.
// Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ktune {

// What a file is (for messages: "bundle /x: ...") and how large it may be.
struct InputFileKind {
  const char* what;
  uint64_t max_bytes;
};

// The caps. A bundle's is the format's own (cache/bundle.h kMaxBundleBytes,
// repeated here because tuner/ cannot include cache/; a test checks they
// agree). The others are far above any real file: a shapes file of the
// largest list prewarm accepts is a few MB, a Hugging Face config.json tens
// of KB, a token or server list a few hundred bytes.
inline constexpr InputFileKind kBundleFile{"bundle", uint64_t{256} << 20};
inline constexpr InputFileKind kShapesFile{"shapes file", uint64_t{16} << 20};
inline constexpr InputFileKind kModelConfigFile{"model config", uint64_t{16} << 20};
inline constexpr InputFileKind kTokenFile{"token file", uint64_t{64} << 10};
inline constexpr InputFileKind kServersFile{"servers file", uint64_t{1} << 20};
inline constexpr InputFileKind kPemFile{"PEM file", uint64_t{1} << 20};

// The whole file. Errors name the path and the kind:
//   NOT_FOUND          "/x: cannot read the bundle: no such file"
//   INVALID_ARGUMENT   "/x: cannot read the bundle: it is a FIFO, not a regular file"
//                      (also a directory, a character or block device, a socket)
//   INVALID_ARGUMENT   "/x: cannot read the bundle: it has 300000000 bytes, more than
//                      the 268435456 a bundle may have"
//   PERMISSION_DENIED  "/x: cannot read the bundle: open failed: Permission denied"
absl::StatusOr<std::string> ReadInputFile(const std::string& path, const InputFileKind& kind);

}  // namespace ktune
