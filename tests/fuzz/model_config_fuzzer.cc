// libFuzzer target: model configs as `ktune prewarm --from-model` reads them
// (Hugging Face config.json), then the problems derived from an accepted one
// for a few token counts, forward and backward.
#include <cstdint>
#include <cstdlib>

#include "client/model_shapes.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view json(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ktune::ModelConfig> config = ktune::ParseModelConfig(json, "config.json");
  if (!config.ok()) {
    if (config.status().message().empty()) std::abort();
    return 0;
  }
  for (bool backward : {false, true}) {
    ktune::ModelShapeOptions options;
    options.tokens = {1, 128, 8192};
    options.backward = backward;
    (void)ktune::DeriveModelProblems(*config, options);
  }
  return 0;
}
