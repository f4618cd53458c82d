#include "tuner/compile/kernel_instance.h"

#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "kernel_templates/embedded.h"

namespace ktune {
namespace {

using Kind = TemplateParameter::Kind;

// `source` with its comments blanked out (kept as spaces, so offsets hold).
std::string WithoutComments(absl::string_view source) {
  std::string out(source);
  for (size_t i = 0; i + 1 < out.size(); ++i) {
    if (out[i] == '/' && out[i + 1] == '/') {
      while (i < out.size() && out[i] != '\n') out[i++] = ' ';
    } else if (out[i] == '/' && out[i + 1] == '*') {
      const size_t end = out.find("*/", i + 2);
      const size_t stop = end == std::string::npos ? out.size() : end + 2;
      for (; i < stop; ++i) out[i] = out[i] == '\n' ? '\n' : ' ';
    }
  }
  return out;
}

bool IsIdentChar(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_'; }

size_t SkipSpace(absl::string_view s, size_t i) {
  while (i < s.size() && absl::ascii_isspace(static_cast<unsigned char>(s[i]))) ++i;
  return i;
}

// The index just past the bracket that closes the one at `open`, counting
// `open_char`/`close_char` and parentheses; npos when unbalanced.
size_t Matching(absl::string_view s, size_t open, char open_char, char close_char) {
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    if (s[i] == open_char || s[i] == '(') ++depth;
    if (s[i] == close_char || s[i] == ')') {
      if (--depth == 0) return i + 1;
    }
  }
  return absl::string_view::npos;
}

std::string Identifier(absl::string_view s, size_t* i) {
  const size_t start = *i;
  while (*i < s.size() && IsIdentChar(s[*i])) ++*i;
  return std::string(s.substr(start, *i - start));
}

// One parameter: "typename TIn", "bool HAS_WEIGHT", "int VEC" (a default,
// "= ...", is dropped).
absl::StatusOr<TemplateParameter> ParseParameter(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text.substr(0, text.find('=')));
  const size_t space = text.find_last_of(" \t\n");
  if (space == absl::string_view::npos) return absl::InternalError(absl::StrCat("template parameter '", text, "'"));
  const absl::string_view kind = absl::StripAsciiWhitespace(text.substr(0, space));
  TemplateParameter p;
  p.name = std::string(text.substr(space + 1));
  if (kind == "typename" || kind == "class") {
    p.kind = Kind::kType;
  } else if (kind == "bool") {
    p.kind = Kind::kBool;
  } else if (kind == "int" || kind == "unsigned" || kind == "int64_t" || kind == "uint32_t") {
    p.kind = Kind::kInt;
  } else {
    return absl::InternalError(absl::StrCat("template parameter '", text, "': unknown kind '", kind, "'"));
  }
  return p;
}

absl::StatusOr<std::vector<TemplateParameter>> ParseParameterList(absl::string_view list) {
  std::vector<TemplateParameter> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '<' || c == '(') ++depth;
    if (c == '>' || c == ')') --depth;
    if (c != ',' || depth != 0) continue;
    absl::StatusOr<TemplateParameter> p = ParseParameter(list.substr(start, i - start));
    if (!p.ok()) return p.status();
    out.push_back(*std::move(p));
    start = i + 1;
  }
  return out;
}

using Declarations = std::map<std::string, std::vector<TemplateParameter>>;

// Every embedded file's kernels, parsed once; a duplicate name is an error.
const absl::StatusOr<Declarations>& AllKernels() {
  static const absl::StatusOr<Declarations>* const all = [] {
    Declarations kernels;
    for (const EmbeddedFile& file : EmbeddedTemplateFiles()) {
      const std::string path(file.path);
      auto parsed = ParseKernelTemplates(absl::string_view(file.text.data(), file.text.size()));
      if (!parsed.ok()) {
        return new absl::StatusOr<Declarations>(
            absl::InternalError(absl::StrCat("kernel_templates/", path, ": ", parsed.status().message())));
      }
      for (auto& [name, parameters] : *parsed) {
        if (!kernels.emplace(name, std::move(parameters)).second) {
          return new absl::StatusOr<Declarations>(absl::InternalError(
              absl::StrCat("kernel template ", name, " is declared twice (again in kernel_templates/", path, ")")));
        }
      }
    }
    return new absl::StatusOr<Declarations>(std::move(kernels));
  }();
  return *all;
}

}  // namespace

absl::StatusOr<std::vector<std::pair<std::string, std::vector<TemplateParameter>>>> ParseKernelTemplates(
    absl::string_view source) {
  const std::string text = WithoutComments(source);
  const absl::string_view s = text;
  std::vector<std::pair<std::string, std::vector<TemplateParameter>>> out;
  for (size_t at = s.find("template"); at != absl::string_view::npos; at = s.find("template", at + 1)) {
    if ((at > 0 && IsIdentChar(s[at - 1])) || (at + 8 < s.size() && IsIdentChar(s[at + 8]))) continue;
    size_t i = SkipSpace(s, at + 8);
    if (i >= s.size() || s[i] != '<') continue;
    const size_t close = Matching(s, i, '<', '>');
    if (close == absl::string_view::npos) return absl::InternalError("unbalanced template parameter list");
    const absl::string_view list = s.substr(i + 1, close - i - 2);
    i = SkipSpace(s, close);
    if (s.substr(i, 10) != "__global__") continue;  // not a kernel
    i = SkipSpace(s, i + 10);
    if (s.substr(i, 4) != "void") return absl::InternalError("a __global__ template that does not return void");
    i = SkipSpace(s, i + 4);
    // Attributes (__launch_bounds__(...), __cluster_dims__(...)), then the name.
    std::string name = Identifier(s, &i);
    while (absl::StartsWith(name, "__")) {
      i = SkipSpace(s, i);
      if (i < s.size() && s[i] == '(') i = Matching(s, i, '(', ')');
      if (i == absl::string_view::npos) return absl::InternalError(absl::StrCat("unbalanced ", name, "(...)"));
      i = SkipSpace(s, i);
      name = Identifier(s, &i);
    }
    if (name.empty()) return absl::InternalError("a __global__ template without a name");
    absl::StatusOr<std::vector<TemplateParameter>> parameters = ParseParameterList(list);
    if (!parameters.ok()) {
      return absl::InternalError(absl::StrCat("kernel ", name, ": ", parameters.status().message()));
    }
    out.emplace_back(std::move(name), *std::move(parameters));
  }
  return out;
}

absl::StatusOr<std::vector<TemplateParameter>> KernelTemplateParameters(absl::string_view kernel) {
  const absl::StatusOr<Declarations>& all = AllKernels();
  if (!all.ok()) return all.status();
  auto it = all->find(std::string(kernel));
  if (it == all->end()) {
    return absl::NotFoundError(absl::StrCat("no kernel template ", kernel, " in kernel_templates/"));
  }
  return it->second;
}

KernelInstance::KernelInstance(absl::string_view kernel)
    : kernel_(kernel), parameters_(KernelTemplateParameters(kernel)) {
  if (parameters_.ok()) values_.resize(parameters_->size());
}

KernelInstance& KernelInstance::Set(absl::string_view name, Kind kind, std::string value) {
  if (!error_.ok() || !parameters_.ok()) return *this;
  for (size_t i = 0; i < parameters_->size(); ++i) {
    const TemplateParameter& p = (*parameters_)[i];
    if (p.name != name) continue;
    if (p.kind != kind) {
      error_ = absl::InternalError(absl::StrCat(kernel_, ": template parameter ", name, " is not of the kind given"));
    } else if (values_[i].has_value()) {
      error_ = absl::InternalError(absl::StrCat(kernel_, ": template parameter ", name, " given twice"));
    } else {
      values_[i] = std::move(value);
    }
    return *this;
  }
  error_ = absl::InternalError(absl::StrCat(kernel_, " has no template parameter ", name));
  return *this;
}

KernelInstance& KernelInstance::Type(absl::string_view name, absl::string_view cxx_type) {
  return Set(name, Kind::kType, std::string(cxx_type));
}

KernelInstance& KernelInstance::Bool(absl::string_view name, bool value) {
  return Set(name, Kind::kBool, value ? "true" : "false");
}

KernelInstance& KernelInstance::Int(absl::string_view name, int64_t value) {
  return Set(name, Kind::kInt, absl::StrCat(value));
}

absl::StatusOr<std::string> KernelInstance::NameExpression() const {
  if (!parameters_.ok()) return parameters_.status();
  if (!error_.ok()) return error_;
  std::vector<absl::string_view> args;
  for (size_t i = 0; i < values_.size(); ++i) {
    if (!values_[i].has_value()) {
      return absl::InternalError(
          absl::StrCat(kernel_, ": template parameter ", (*parameters_)[i].name, " was not given"));
    }
    args.push_back(*values_[i]);
  }
  return absl::StrCat("ktune::", kernel_, "<", absl::StrJoin(args, ", "), ">");
}

absl::Status KernelInstance::NameInto(KernelLaunch* launch) const {
  absl::StatusOr<std::string> name = NameExpression();
  if (!name.ok()) return name.status();
  launch->name_expression = *std::move(name);
  return absl::OkStatus();
}

}  // namespace ktune
