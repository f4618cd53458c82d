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

// Prints "ktune: error: CODE: message" on stderr; returns the exit code 1.
int PrintError(const absl::Status& status);

// The whole file, or NOT_FOUND naming it.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Writes to a temporary file beside `path`, then renames it into place: a
// reader (or an interrupted run) never sees half a file, and an output that is
// also an input is read whole before it is replaced.
absl::Status WriteFileAtomically(const std::string& path, const std::string& data);

}  // namespace ktune
