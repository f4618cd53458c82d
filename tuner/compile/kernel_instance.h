// A kernel template's instantiation, its arguments given by the names the
// template declares them with. A search space fills a KernelInstance by name
// ("NUM_WARPS", "VEC"); the template's own declaration, read from the
// embedded text, puts them in order. So the host can neither swap two
// arguments of one kind (which would compile a different, valid kernel) nor
// miss one, and renaming or reordering a template's parameters needs no
// host change beyond the names. tests/data/template_instances.golden holds
// what every space instantiates.
// Thread-safe: the parsed declarations are immutable after first use.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tuner/core/launch_recipe.h"

namespace ktune {

struct TemplateParameter {
  enum class Kind { kType, kBool, kInt };
  Kind kind = Kind::kInt;
  std::string name;
};

// The template parameters, in declaration order, of the __global__ function
// template `kernel` ("rmsnorm_fwd") in namespace ktune, declared in one of the
// embedded template files. NOT_FOUND when no file declares it, INTERNAL when
// two do or its declaration does not parse.
absl::StatusOr<std::vector<TemplateParameter>> KernelTemplateParameters(absl::string_view kernel);

// The same, parsed from `source`: every __global__ function template in it,
// by name (exposed for tests).
absl::StatusOr<std::vector<std::pair<std::string, std::vector<TemplateParameter>>>> ParseKernelTemplates(
    absl::string_view source);

class KernelInstance {
 public:
  explicit KernelInstance(absl::string_view kernel);

  // Each sets the argument of the parameter so named; a misuse (no such
  // parameter, one of another kind, set twice) is kept and returned by
  // NameExpression.
  KernelInstance& Type(absl::string_view name, absl::string_view cxx_type);
  KernelInstance& Bool(absl::string_view name, bool value);
  KernelInstance& Int(absl::string_view name, int64_t value);

  // "ktune::<kernel><arg, arg, ...>", the arguments in declaration order; or
  // the first misuse, or INTERNAL naming a parameter never set.
  absl::StatusOr<std::string> NameExpression() const;
  // NameExpression, written to `launch->name_expression`; its error leaves
  // the launch unchanged.
  absl::Status NameInto(KernelLaunch* launch) const;

 private:
  KernelInstance& Set(absl::string_view name, TemplateParameter::Kind kind, std::string value);

  std::string kernel_;
  absl::StatusOr<std::vector<TemplateParameter>> parameters_;
  std::vector<std::optional<std::string>> values_;
  absl::Status error_;
};

}  // namespace ktune
