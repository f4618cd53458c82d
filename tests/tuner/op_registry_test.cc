// The Op registry (tuner/op.h): every problem kind of the wire API has its
// op, every entry op finds its op back, a problem of no kind (or of a kind
// no op serves) is a clear error, and a third op registered in a local
// registry is served, stored and answered by the cache and the daemon's
// answers without any of them knowing it.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cache/entry.h"
#include "cache/store.h"
#include "daemon/answers.h"
#include "daemon/service_metrics.h"
#include "tests/cache/current_entries.h"
#include "tests/e2e/daemon_process.h"
#include "tuner/builtin_ops.h"
#include "tuner/core/fingerprint.h"
#include "tuner/core/problem_kind.h"
#include "tuner/core/wire.h"
#include "tuner/gemm/gemm_op.h"
#include "tuner/norm/norm_op.h"
#include "tuner/op.h"
#include "tuner/run/problem_runner.h"

namespace ktune {
namespace {

std::string FakeKeyText(int64_t m, int64_t n) { return absl::StrCat("fake m=", m, " n=", n); }

// A made-up kind that borrows the GEMM message for its shape.
class FakeKind final : public ProblemKind {
 public:
  absl::string_view name() const override { return "fake"; }
  v1::Problem::KindCase problem_case() const override { return v1::Problem::kGemm; }
  v1::Config::KindCase config_case() const override { return v1::Config::kGemm; }
  absl::StatusOr<ProblemKeyParts> Key(const v1::Problem& problem) const override {
    return ProblemKeyParts{"fake.op", FakeKeyText(problem.gemm().m(), problem.gemm().n())};
  }
  std::string Describe(const v1::Problem& problem) const override { return FakeKeyText(problem.gemm().m(), 0); }
  std::string DescribeConfig(const v1::Config&) const override { return "fake"; }
  absl::Status CheckShape(const v1::Problem&) const override { return absl::OkStatus(); }
};

// A made-up family of that kind that answers a library call (no kernels:
// nothing to compile), so that it runs anywhere.
class FakeOp final : public Op {
 public:
  absl::string_view name() const override { return "fake"; }
  const ProblemKind& kind() const override { return kind_; }
  std::vector<std::string> entry_ops() const override { return {"fake.op"}; }
  absl::StatusOr<ProblemIdentity> Identify(const v1::Problem& problem) const override {
    if (problem.gemm().m() < 1) return absl::InvalidArgumentError("problem.gemm.m: must be >= 1");
    return Key(problem);
  }
  ProblemFamily Family(const v1::Problem& problem, const std::string& device_key,
                       const std::string& software_key) const override {
    return {FamilyKeyText("fake.op", FakeKeyText(0, problem.gemm().n()), device_key, software_key), problem.gemm().m()};
  }
  absl::StatusOr<SoftwareFingerprint> Software(absl::string_view) const override {
    return SoftwareFingerprint{std::string(64, 'a'), 1, kSchemaVersion};
  }
  absl::Status CheckConfig(absl::string_view prefix, const v1::Entry& entry,
                           const std::optional<DeviceInfo>&) const override {
    if (!entry.config().gemm().has_cublaslt()) return EntryFieldError(prefix, "config.gemm", "fake needs cublaslt");
    return absl::OkStatus();
  }
  absl::StatusOr<LaunchRecipe> TemplateRecipe(const v1::Problem&, const v1::Config& config,
                                              const DeviceInfo& device) const override {
    LaunchRecipe r;
    r.template_id = kCublasLtTemplateId;
    r.template_hash = std::string(64, 'b');
    r.arch = Arch(device);
    r.cublaslt_algo = config.gemm().cublaslt().algo();
    return r;
  }
  absl::StatusOr<v1::Config> HeuristicConfig(const v1::Problem&, const DeviceInfo&) const override {
    v1::Config c;
    c.mutable_gemm()->mutable_cublaslt()->set_algo(std::string(kCublasLtAlgoBytes, '\x01'));
    c.mutable_gemm()->mutable_cublaslt()->set_version(1);
    return c;
  }
  absl::StatusOr<v1::Config> NearestConfig(const v1::Problem&, const v1::Entry& nearest,
                                           const DeviceInfo&) const override {
    return nearest.config();
  }
  absl::StatusOr<OpTuneResult> Tune(const v1::Problem&, CandidateExecutor*, const OpTuneRequest&) const override {
    return absl::UnimplementedError("fake ops do not tune");
  }
  absl::StatusOr<std::unique_ptr<ProblemRunner>> NewRunner(const v1::Problem&, Device*, uint64_t,
                                                           RunnerLibraries*) const override {
    return absl::UnimplementedError("fake ops do not run");
  }
  absl::StatusOr<std::unique_ptr<ProblemRunner>> NewFakeRunner(const v1::Problem&, const DeviceInfo&) const override {
    return absl::UnimplementedError("fake ops do not run");
  }

 private:
  FakeKind kind_;
};

v1::Problem GemmProblem(int64_t m) {
  v1::Problem p;
  p.mutable_gemm()->set_m(m);
  p.mutable_gemm()->set_n(4096);
  p.mutable_gemm()->set_k(4096);
  return p;
}

}  // namespace

TEST_CASE("BuiltinOps: every problem kind of the wire API has its op", "[tuner][op]") {
  const google::protobuf::OneofDescriptor* kinds = v1::Problem::descriptor()->FindOneofByName("kind");
  REQUIRE(kinds != nullptr);
  REQUIRE(kinds->field_count() >= 2);
  for (int i = 0; i < kinds->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = kinds->field(i);
    v1::Problem problem;
    problem.GetReflection()->MutableMessage(&problem, field);
    INFO(field->name());
    absl::StatusOr<const Op*> op = BuiltinOps().ForProblem(problem);
    REQUIRE(op.ok());
    CHECK(static_cast<int>((*op)->problem_kind()) == field->number());
  }
}

TEST_CASE("ProblemKinds: the light registry names the kinds BuiltinOps serves, in order", "[tuner][op]") {
  // The client's list (tuner/core/problem_kinds.cc) and the ops
  // (tuner/builtin_ops.cc) are two lines to edit for a new op: a kind
  // registered in one and not the other fails here.
  const std::vector<const ProblemKind*>& kinds = ProblemKinds();
  REQUIRE(kinds.size() == BuiltinOps().ops().size());
  for (size_t i = 0; i < kinds.size(); ++i) {
    INFO(kinds[i]->name());
    CHECK(&BuiltinOps().ops()[i]->kind() == kinds[i]);
  }
  // Every oneof case of Problem and of Config has its kind, and text.
  const google::protobuf::OneofDescriptor* problems = v1::Problem::descriptor()->FindOneofByName("kind");
  const google::protobuf::OneofDescriptor* configs = v1::Config::descriptor()->FindOneofByName("kind");
  REQUIRE(problems != nullptr);
  REQUIRE(configs != nullptr);
  CHECK(problems->field_count() == static_cast<int>(kinds.size()));
  CHECK(configs->field_count() == static_cast<int>(kinds.size()));
  for (int i = 0; i < configs->field_count(); ++i) {
    v1::Config config;
    config.GetReflection()->MutableMessage(&config, configs->field(i));
    INFO(configs->field(i)->name());
    REQUIRE(KindOf(config) != nullptr);
    CHECK(KindOf(config)->name() == configs->field(i)->name());
  }
  for (int i = 0; i < problems->field_count(); ++i) {
    v1::Problem problem;
    problem.GetReflection()->MutableMessage(&problem, problems->field(i));
    INFO(problems->field(i)->name());
    REQUIRE(KindOf(problem) != nullptr);
    CHECK(KindOf(problem)->name() == problems->field(i)->name());
  }
  CHECK(KindOf(v1::Problem()) == nullptr);
  CHECK(ProblemKeyOf(v1::Problem()).status().message() == "problem: missing (set one of: norm, gemm)");
}

TEST_CASE("ProblemKinds: the op's key is its kind's, the one spelling clients use", "[tuner][op]") {
  v1::Problem norm;
  norm.mutable_norm()->set_op(v1::RMSNORM);
  norm.mutable_norm()->set_norm_pass(v1::FWD);
  norm.mutable_norm()->set_m(8);
  norm.mutable_norm()->set_n(4096);
  norm.mutable_norm()->set_input_dtype(v1::BF16);
  for (const v1::Problem& problem : {norm, testutil::GemmProblemOf(LinearGemm(16, 4096, 4096))}) {
    absl::StatusOr<ProblemKeyParts> client = ProblemKeyOf(problem);
    absl::StatusOr<ProblemIdentity> daemon = BuiltinOps().Key(problem);
    REQUIRE(client.ok());
    REQUIRE(daemon.ok());
    CHECK(client->op == daemon->entry_op);
    CHECK(client->key == daemon->problem_key);
  }
}

TEST_CASE("BuiltinOps: every entry op finds its op", "[tuner][op]") {
  const std::vector<std::string> expected = {"rmsnorm.fwd", "rmsnorm.bwd", "layernorm.fwd", "layernorm.bwd", "gemm"};
  CHECK(BuiltinOps().entry_ops() == expected);
  for (const std::unique_ptr<Op>& op : BuiltinOps().ops()) {
    for (const std::string& entry_op : op->entry_ops()) {
      INFO(entry_op);
      CHECK(BuiltinOps().ForEntryOp(entry_op) == op.get());
      // This build has every template: each entry op has its software.
      CHECK(op->Software(entry_op).ok());
    }
  }
  CHECK(BuiltinOps().ForEntryOp("softmax.fwd") == nullptr);
  CHECK(BuiltinOps().ForEntryOp("") == nullptr);
}

TEST_CASE("OpRegistry: a problem of no kind, or of a kind no op serves, is a clear error", "[tuner][op]") {
  absl::StatusOr<const Op*> none = BuiltinOps().ForProblem(v1::Problem());
  CHECK(none.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(none.status().message() == "problem: missing (set one of: norm, gemm)");

  std::vector<std::unique_ptr<Op>> norm_only;
  norm_only.push_back(MakeNormOp());
  const OpRegistry ops(std::move(norm_only));
  absl::StatusOr<const Op*> gemm = ops.ForProblem(GemmProblem(16));
  CHECK(gemm.status().code() == absl::StatusCode::kUnimplemented);
  CHECK(ops.ForProblem(v1::Problem()).status().message() == "problem: missing (set one of: norm)");
  CHECK(ops.ForEntryOp("gemm") == nullptr);
  CHECK(ops.Identify(GemmProblem(16)).status().code() == absl::StatusCode::kUnimplemented);
}

TEST_CASE("OpRegistry: the builtin ops key and check their problems", "[tuner][op]") {
  absl::StatusOr<ProblemIdentity> id = BuiltinOps().Identify(testutil::GemmProblemOf(LinearGemm(16, 4096, 4096)));
  REQUIRE(id.ok());
  CHECK(id->entry_op == "gemm");
  CHECK(BuiltinOps().Identify(GemmProblem(0)).status().code() == absl::StatusCode::kInvalidArgument);
  const Op* gemm = BuiltinOps().ForEntryOp("gemm");
  REQUIRE(gemm != nullptr);
  // Entries that differ only in M share a family, positioned by M.
  const ProblemFamily a = gemm->Family(testutil::GemmProblemOf(LinearGemm(16, 4096, 4096)), "dev", "sw");
  const ProblemFamily b = gemm->Family(testutil::GemmProblemOf(LinearGemm(2048, 4096, 4096)), "dev", "sw");
  CHECK(a.family_key == b.family_key);
  CHECK(a.position == 16);
  CHECK(b.position == 2048);
}

TEST_CASE("A third op in a local registry is stored and answered with no op code in cache/ or daemon/",
          "[tuner][op][daemon]") {
  std::vector<std::unique_ptr<Op>> list;
  list.push_back(MakeNormOp());
  list.push_back(std::make_unique<FakeOp>());  // serves the GEMM message in this registry
  const OpRegistry ops(std::move(list));
  CHECK(ops.entry_ops().back() == "fake.op");

  testing::TempDir dir;
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(ops, dir.path() + "/cache.db");
  REQUIRE(store.ok());
  ServiceMetrics metrics(ops, /*compile_only=*/true);
  Answers answers(ops, store->get(), /*kernel_cache=*/nullptr, GroupByKind({}), &metrics);

  // Resolved through the fake op: its key, its software.
  absl::StatusOr<Resolved> r = answers.Resolve(GemmProblem(64));
  REQUIRE(r.ok());
  CHECK(r->key.op == "fake.op");
  CHECK(r->key.problem_key == "fake m=64 n=4096");
  CHECK(answers.Resolve(GemmProblem(0)).status().message() == "problem.gemm.m: must be >= 1");
  CHECK(answers.CheckOpFilter("fake.op").ok());
  CHECK(answers.CheckOpFilter("gemm").message() ==
        "op: unknown op 'gemm' (expected rmsnorm.fwd, rmsnorm.bwd, layernorm.fwd, layernorm.bwd or fake.op)");

  // A miss: the op's heuristic config, with its recipe.
  v1::GetConfigResponse heuristic;
  absl::StatusOr<GetConfigAnswer> answered = answers.AnswerUntuned(*r, /*nearest_on_miss=*/true, false, &heuristic);
  REQUIRE(answered.ok());
  CHECK(*answered == GetConfigAnswer::kHeuristic);
  CHECK(heuristic.source() == v1::HEURISTIC);
  CHECK(heuristic.recipe().template_id() == kCublasLtTemplateId);

  // Stored as an entry of its op (validated, keyed and indexed by family
  // through the registry), then a hit, and the nearest answer of another M.
  v1::Entry entry;
  *entry.mutable_problem() = GemmProblem(64);
  *entry.mutable_device() = DeviceToProto(CompileOnlyTarget());
  *entry.mutable_software() = heuristic.software();
  *entry.mutable_config() = heuristic.config();
  *entry.mutable_recipe() = heuristic.recipe();
  entry.mutable_measurement()->set_time_us(3);
  entry.mutable_measurement()->set_repetitions(20);
  entry.set_tuned_at_unix(1795000000);
  entry.set_candidates_measured(1);
  INFO(ValidateEntry(ops, entry).ToString());
  REQUIRE(ValidateEntry(ops, entry).ok());
  REQUIRE(answers.entries()->Insert(entry).ok());
  std::shared_ptr<const ServedEntry> hit = answers.entries()->Lookup(r->key);
  REQUIRE(hit != nullptr);
  REQUIRE(hit->answer.ok());
  CHECK(hit->answer->source() == v1::TUNED);

  absl::StatusOr<Resolved> other = answers.Resolve(GemmProblem(100));
  REQUIRE(other.ok());
  v1::GetConfigResponse nearest;
  answered = answers.AnswerUntuned(*other, /*nearest_on_miss=*/true, false, &nearest);
  REQUIRE(answered.ok());
  CHECK(*answered == GetConfigAnswer::kNearest);
  CHECK(nearest.tuned_for().gemm().m() == 64);

  // The builtin registry refuses the same entry: it is not a GEMM entry there.
  CHECK_FALSE(ValidateEntry(BuiltinOps(), entry).ok());
}

}  // namespace ktune
