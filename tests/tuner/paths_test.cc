#include "tuner/core/paths.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "tests/e2e/daemon_process.h"

namespace ktune {
namespace {

TEST_CASE("EnsurePrivateDir creates a missing directory 0700 and refuses one others could use", "[paths]") {
  testing::TempDir tmp;
  const std::string dir = tmp.path() + "/ktune";

  SECTION("missing: created 0700") {
    REQUIRE(EnsurePrivateDir(dir).ok());
    struct stat st {};
    REQUIRE(lstat(dir.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
    CHECK(EnsurePrivateDir(dir).ok());  // and accepted as found next time
    CHECK(CheckPrivateDir(dir).ok());
  }
  SECTION("world-writable: refused, naming it and what is wrong") {
    REQUIRE(mkdir(dir.c_str(), 0700) == 0);
    REQUIRE(chmod(dir.c_str(), 0777) == 0);
    for (const absl::Status& s : {EnsurePrivateDir(dir), CheckPrivateDir(dir)}) {
      CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
      CHECK(s.message().find(dir) != std::string::npos);
      CHECK(s.message().find("writable by others") != std::string::npos);
    }
  }
  SECTION("group-writable: refused") {
    REQUIRE(mkdir(dir.c_str(), 0700) == 0);
    REQUIRE(chmod(dir.c_str(), 0770) == 0);
    CHECK(EnsurePrivateDir(dir).message().find("writable by its group") != std::string::npos);
  }
  SECTION("a symlink, even to a private directory: refused") {
    const std::string target = tmp.path() + "/elsewhere";
    REQUIRE(mkdir(target.c_str(), 0700) == 0);
    REQUIRE(symlink(target.c_str(), dir.c_str()) == 0);
    CHECK(EnsurePrivateDir(dir).message().find("is a symlink") != std::string::npos);
    CHECK(CheckPrivateDir(dir).message().find("is a symlink") != std::string::npos);
  }
  SECTION("a file: refused") {
    { std::ofstream(dir) << "x"; }
    CHECK(EnsurePrivateDir(dir).message().find("is not a directory") != std::string::npos);
  }
  SECTION("missing, for the client: nothing to judge") { CHECK(CheckPrivateDir(dir).ok()); }
}

}  // namespace
}  // namespace ktune
