#include "tuner/op.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace ktune {

std::string FamilyKeyText(absl::string_view entry_op, absl::string_view problem_key_at_0, absl::string_view device_key,
                          absl::string_view software_key) {
  const absl::string_view kSep("\x1f", 1);
  return absl::StrCat(entry_op, kSep, problem_key_at_0, kSep, device_key, kSep, software_key);
}

OpRegistry::OpRegistry(std::vector<std::unique_ptr<Op>> ops) : ops_(std::move(ops)) {
  for (const std::unique_ptr<Op>& op : ops_) {
    const size_t kind = static_cast<size_t>(op->problem_kind());
    if (by_kind_.size() <= kind) by_kind_.resize(kind + 1, nullptr);
    by_kind_[kind] = op.get();
  }
}

absl::StatusOr<const Op*> OpRegistry::ForProblem(const v1::Problem& problem) const {
  const size_t kind = static_cast<size_t>(problem.kind_case());
  if (kind < by_kind_.size() && by_kind_[kind] != nullptr) return by_kind_[kind];
  if (problem.kind_case() == v1::Problem::KIND_NOT_SET) {
    std::vector<const ProblemKind*> kinds;
    for (const std::unique_ptr<Op>& op : ops_) kinds.push_back(&op->kind());
    return MissingProblemError(kinds);
  }
  return absl::UnimplementedError(
      absl::StrCat("problem: kind ", static_cast<int>(problem.kind_case()), " is served by no op of this build"));
}

const Op* OpRegistry::ForEntryOp(absl::string_view entry_op) const {
  for (const std::unique_ptr<Op>& op : ops_) {
    for (const std::string& name : op->entry_ops()) {
      if (name == entry_op) return op.get();
    }
  }
  return nullptr;
}

std::vector<std::string> OpRegistry::entry_ops() const {
  std::vector<std::string> out;
  for (const std::unique_ptr<Op>& op : ops_) {
    for (std::string& name : op->entry_ops()) out.push_back(std::move(name));
  }
  return out;
}

absl::StatusOr<ProblemIdentity> Op::Key(const v1::Problem& problem) const {
  absl::StatusOr<ProblemKeyParts> key = kind().Key(problem);
  if (!key.ok()) return key.status();
  return ProblemIdentity{std::move(key->op), std::move(key->key)};
}

absl::StatusOr<ProblemIdentity> OpRegistry::Identify(const v1::Problem& problem) const {
  absl::StatusOr<const Op*> op = ForProblem(problem);
  if (!op.ok()) return op.status();
  return (*op)->Identify(problem);
}

absl::StatusOr<ProblemIdentity> OpRegistry::Key(const v1::Problem& problem) const {
  absl::StatusOr<const Op*> op = ForProblem(problem);
  if (!op.ok()) return op.status();
  return (*op)->Key(problem);
}

absl::StatusOr<SoftwareFingerprint> OpRegistry::Software(const v1::Problem& problem) const {
  absl::StatusOr<const Op*> op = ForProblem(problem);
  if (!op.ok()) return op.status();
  absl::StatusOr<ProblemIdentity> id = (*op)->Key(problem);
  if (!id.ok()) return id.status();
  return (*op)->Software(id->entry_op);
}

absl::StatusOr<LaunchRecipe> OpRegistry::TemplateRecipe(const v1::Problem& problem, const v1::Config& config,
                                                        const DeviceInfo& device) const {
  absl::StatusOr<const Op*> op = ForProblem(problem);
  if (!op.ok()) return op.status();
  return (*op)->TemplateRecipe(problem, config, device);
}

absl::Status EntryFieldError(absl::string_view prefix, absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(prefix, field, ": ", why));
}

absl::Status EntryTunerError(absl::string_view prefix, absl::string_view field_root, const absl::Status& status) {
  absl::string_view message = status.message();
  if (message.substr(0, field_root.size()) == field_root) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, message));
  }
  return absl::InvalidArgumentError(absl::StrCat(prefix, field_root, ": ", message));
}

}  // namespace ktune
