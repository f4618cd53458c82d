// Reading the files a user names (tuner/core/input_file.h): only regular files,
// their size checked before they are read, and never a blocking open or read.
#include "tuner/core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cache/bundle.h"
#include "tests/e2e/daemon_process.h"

namespace ktune {
namespace {

using testing::TempDir;

constexpr InputFileKind kTenBytes{"test file", 10};

void Write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

TEST_CASE("an input file is read whole when it is a regular file within its cap", "[tuner][input_file]") {
  TempDir dir;
  Write(dir.path() + "/ok", "0123456789");
  auto read = ReadInputFile(dir.path() + "/ok", kTenBytes);
  REQUIRE(read.ok());
  CHECK(*read == "0123456789");
  Write(dir.path() + "/empty", "");
  CHECK(ReadInputFile(dir.path() + "/empty", kTenBytes).value() == "");
  // Symlinks are followed (Kubernetes mounts ConfigMaps through them).
  std::filesystem::create_symlink(dir.path() + "/ok", dir.path() + "/link");
  CHECK(ReadInputFile(dir.path() + "/link", kTenBytes).value() == "0123456789");
  // The bundle cap is the bundle format's.
  CHECK(kBundleFile.max_bytes == kMaxBundleBytes);
}

TEST_CASE("an input file that is not a regular file or is too large is refused, by name, at once",
          "[tuner][input_file]") {
  TempDir dir;
  auto message = [](const absl::StatusOr<std::string>& r) {
    REQUIRE_FALSE(r.ok());
    return std::string(r.status().message());
  };
  const std::string big = dir.path() + "/big";
  Write(big, "01234567890");
  CHECK(message(ReadInputFile(big, kTenBytes)) ==
        big + ": cannot read the test file: it has 11 bytes, more than the 10 a test file may have");
  const auto missing = ReadInputFile(dir.path() + "/none", kTenBytes);
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK(message(missing) == dir.path() + "/none: cannot read the test file: no such file");
  CHECK(message(ReadInputFile(dir.path(), kBundleFile)) ==
        dir.path() + ": cannot read the bundle: it is a directory, not a regular file");
  CHECK(message(ReadInputFile("/dev/zero", kBundleFile)) ==
        "/dev/zero: cannot read the bundle: it is a character device, not a regular file");

  // A FIFO with a writer that never writes: a blocking reader would wait for
  // as long as the writer lives. The writer here gives up after 5 s, so a
  // reader that blocks fails the time check instead of hanging the test.
  const std::string fifo = dir.path() + "/fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  const int writer = open(fifo.c_str(), O_RDWR | O_NONBLOCK);
  REQUIRE(writer >= 0);
  std::atomic<bool> done{false};
  std::thread closer([&] {
    for (int i = 0; i < 500 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    close(writer);
  });
  const auto start = std::chrono::steady_clock::now();
  const auto from_fifo = ReadInputFile(fifo, kShapesFile);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  done = true;
  closer.join();
  CHECK(seconds < 2);
  CHECK(message(from_fifo) == fifo + ": cannot read the shapes file: it is a FIFO, not a regular file");
}

}  // namespace
}  // namespace ktune
