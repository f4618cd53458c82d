// Certificates made at test time with the openssl command: a CA and server
// certificates it signs, for TLS tests against a real ktuned. EC P-256 keys,
// so that making one takes milliseconds.
#pragma once

#include <catch2/catch.hpp>
#include <string>

#include "tests/e2e/daemon_process.h"

namespace ktune::testing {

struct TestCa {
  std::string cert;  // PEM file
  std::string key;
};

// A self-signed CA in `dir`/NAME.pem (key NAME.key).
inline TestCa MakeTestCa(const std::string& dir, const std::string& name) {
  TestCa ca{dir + "/" + name + ".pem", dir + "/" + name + ".key"};
  const CommandResult r =
      RunCommand("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + ca.key +
                     " -out " + ca.cert + " -days 2 -subj /CN=" + name,
                 dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return ca;
}

// A server certificate `ca` signs for localhost and 127.0.0.1 (subjectAltName),
// written to `cert_path` and `key_path`.
inline void MakeServerCert(const std::string& dir, const TestCa& ca, const std::string& cert_path,
                           const std::string& key_path) {
  const std::string csr = cert_path + ".csr", ext = cert_path + ".ext";
  const CommandResult r =
      RunCommand("printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > " + ext +
                     " && openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + key_path +
                     " -out " + csr + " -subj /CN=localhost && openssl x509 -req -in " + csr + " -CA " + ca.cert +
                     " -CAkey " + ca.key + " -CAcreateserial -out " + cert_path + " -days 2 -extfile " + ext,
                 dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
}

}  // namespace ktune::testing
