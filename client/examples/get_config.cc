// A frontend's first call: ask the local ktuned for an RMSNorm forward's
// launch recipe and print how to launch it. README.md shows this file, and
// its doc test builds and runs it against a compile-only ktuned.
#include <cstdio>

#include "client/client.h"
#include "tuner/core/paths.h"

int main() {
  auto client = ktune::Client::Create(ktune::DefaultServerAddress());
  ktune::v1::GetConfigRequest request;
  ktune::v1::NormProblem* norm = request.mutable_problem()->mutable_norm();
  norm->set_op(ktune::v1::RMSNORM);
  norm->set_norm_pass(ktune::v1::FWD);
  norm->set_m(8192);
  norm->set_n(4096);
  norm->set_input_dtype(ktune::v1::BF16);
  norm->set_has_weight(true);
  request.set_policy(ktune::v1::HEURISTIC_ON_MISS);  // a miss: the model's pick now
  request.set_include_cubin(true);                   // the compiled kernel, for cuModuleLoadData

  absl::StatusOr<ktune::v1::GetConfigResponse> answer = client->GetConfig(request);
  if (!answer.ok()) {
    std::fprintf(stderr, "GetConfig: %s\n", answer.status().ToString().c_str());
    return 1;
  }
  std::printf("source %s, cubin %zu bytes\n", ktune::v1::Source_Name(answer->source()).c_str(),
              answer->recipe().cubin().size());
  for (const ktune::v1::KernelLaunch& k : answer->recipe().kernels()) {
    std::printf("kernel %s grid %u,%u,%u block %u,%u,%u smem %u\n", k.lowered_name().c_str(), k.grid(0), k.grid(1),
                k.grid(2), k.block(0), k.block(1), k.block(2), k.dynamic_smem_bytes());
  }
  return 0;
}
