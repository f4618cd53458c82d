// SHA-256 as lowercase hex: template hashes, library versions in
// fingerprints, bundle checksums. Thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace ktune {

// Lowercase hex SHA-256 of data.
std::string Sha256Hex(std::string_view data);

}  // namespace ktune
