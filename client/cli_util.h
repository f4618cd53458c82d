// What every ktune subcommand shares: one JSON style for --json output, one
// shape for error lines, and file I/O that never leaves half a file behind.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/message.h"

namespace ktune {

// The message as indented JSON with proto field names and defaults printed.
std::string ToJson(const google::protobuf::Message& message);

// Exit codes, the same for every subcommand: 0 done, 1 failed (the daemon
// refused or could not be reached, a bundle is invalid, an output could not
// be written), 2 usage error (a flag, a value, or a file named on the command
// line that cannot be read), found before any daemon is contacted.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// Prints "ktune: error: CODE: message" on stderr; returns kExitFailure.
int PrintError(const absl::Status& status);

// Prints "ktune: error: message" on stderr; returns kExitUsage.
int PrintUsageError(const absl::Status& status);

// Writes to a temporary file beside `path`, then renames it into place: a
// reader (or an interrupted run) never sees half a file, and an output that is
// also an input is read whole before it is replaced.
absl::Status WriteFileAtomically(const std::string& path, const std::string& data);

}  // namespace ktune
