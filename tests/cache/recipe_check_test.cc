#include "cache/recipe_check.h"

#include <catch2/catch.hpp>
#include <functional>
#include <string>

#include "absl/strings/str_split.h"
#include "cache/bundle.h"
#include "cache/entry.h"
#include "tests/cache/current_entries.h"
#include "tuner/builtin_ops.h"
#include "tuner/core/wire.h"

namespace ktune {
namespace {

using testutil::CurrentEntriesOfEveryKind;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

using google::protobuf::FieldDescriptor;
using ProtoMessage = google::protobuf::Message;
using google::protobuf::Reflection;

// Gives the singular scalar `f` of `m` a value other than its own.
void ChangeScalar(ProtoMessage* m, const FieldDescriptor* f) {
  const Reflection* r = m->GetReflection();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return r->SetInt32(m, f, r->GetInt32(*m, f) + 1);
    case FieldDescriptor::CPPTYPE_INT64:
      return r->SetInt64(m, f, r->GetInt64(*m, f) + 1);
    case FieldDescriptor::CPPTYPE_UINT32:
      return r->SetUInt32(m, f, r->GetUInt32(*m, f) + 1);
    case FieldDescriptor::CPPTYPE_UINT64:
      return r->SetUInt64(m, f, r->GetUInt64(*m, f) + 1);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return r->SetFloat(m, f, r->GetFloat(*m, f) + 1);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return r->SetDouble(m, f, r->GetDouble(*m, f) + 1);
    case FieldDescriptor::CPPTYPE_BOOL:
      return r->SetBool(m, f, !r->GetBool(*m, f));
    case FieldDescriptor::CPPTYPE_STRING:
      return r->SetString(m, f, r->GetString(*m, f) + "x");
    case FieldDescriptor::CPPTYPE_ENUM: {
      const int now = r->GetEnumValue(*m, f);
      return r->SetEnumValue(m, f,
                             f->enum_type()->value(0)->number() == now ? f->enum_type()->value(1)->number()
                                                                       : f->enum_type()->value(0)->number());
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  FAIL("not a scalar: " << f->full_name());
}

// Adds one element to the repeated field `f` of `m`.
void AddElement(ProtoMessage* m, const FieldDescriptor* f) {
  const Reflection* r = m->GetReflection();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return r->AddInt32(m, f, 1);
    case FieldDescriptor::CPPTYPE_INT64:
      return r->AddInt64(m, f, 1);
    case FieldDescriptor::CPPTYPE_UINT32:
      return r->AddUInt32(m, f, 1);
    case FieldDescriptor::CPPTYPE_UINT64:
      return r->AddUInt64(m, f, 1);
    case FieldDescriptor::CPPTYPE_STRING:
      return r->AddString(m, f, "x");
    case FieldDescriptor::CPPTYPE_MESSAGE:
      r->AddMessage(m, f);
      return;
    default:
      FAIL("unexpected repeated field " << f->full_name());
  }
}

// Where in a recipe a change is made: the message holding the field.
using Locate = std::function<ProtoMessage*(v1::LaunchRecipe*)>;

// Calls check(changed, path) once for every field of the message `locate`
// finds in `base`, and of every message below it (a repeated message's first
// element), with that one field changed.
void ForEachFieldChange(const v1::LaunchRecipe& base, const Locate& locate, const std::string& path,
                        const std::function<void(const v1::LaunchRecipe&, const std::string&)>& check) {
  v1::LaunchRecipe probe = base;
  const ProtoMessage* at = locate(&probe);
  const google::protobuf::Descriptor* d = at->GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const std::string name = path + f->name();
    if (f->is_repeated()) {
      v1::LaunchRecipe changed = base;
      AddElement(locate(&changed), f);
      check(changed, name);
      if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && at->GetReflection()->FieldSize(*at, f) > 0) {
        ForEachFieldChange(
            base,
            [locate, f](v1::LaunchRecipe* r) {
              ProtoMessage* m = locate(r);
              return m->GetReflection()->MutableRepeatedMessage(m, f, 0);
            },
            name + "[0].", check);
      }
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      ForEachFieldChange(
          base,
          [locate, f](v1::LaunchRecipe* r) {
            ProtoMessage* m = locate(r);
            return m->GetReflection()->MutableMessage(m, f);
          },
          name + ".", check);
    } else {
      v1::LaunchRecipe changed = base;
      ChangeScalar(locate(&changed), f);
      check(changed, name);
    }
  }
}

TEST_CASE("the recipe check refuses a change to any field of a recipe, naming it", "[cache][recipe]") {
  // Every field, by reflection: a field added to the wire messages that
  // CompareRecipe does not compare fails here.
  int changes = 0;
  for (const v1::Entry& entry : CurrentEntriesOfEveryKind()) {
    INFO(entry.problem().ShortDebugString() << " " << entry.config().ShortDebugString());
    absl::StatusOr<LaunchRecipe> expected =
        BuiltinOps().TemplateRecipe(entry.problem(), entry.config(), CompileOnlyTarget());
    REQUIRE(expected.ok());
    const v1::LaunchRecipe served = RecipeToProto(*expected, /*include_cubin=*/true);
    REQUIRE(CompareRecipe("", served, *expected).ok());
    ForEachFieldChange(
        served, [](v1::LaunchRecipe* r) { return r; }, "",
        [&](const v1::LaunchRecipe& changed, const std::string& path) {
          // The message names the recipe's field, and a kernel's.
          const std::vector<std::string> parts = absl::StrSplit(path, '.');
          std::string field = parts[0].substr(0, parts[0].find('['));
          if (parts[0] == "kernels[0]" && parts.size() > 1) {
            field = absl::StrCat("kernels[0].", parts[1].substr(0, parts[1].find('[')));
          }
          const absl::Status s = CompareRecipe("", changed, *expected);
          INFO(path << ": " << s.ToString());
          CHECK(absl::IsInvalidArgument(s));
          CHECK(Message(s).find("recipe." + field) == 0);
          ++changes;
        });
  }
  CHECK(changes > 100);
}

TEST_CASE("a stored recipe is the template's without its build products", "[cache][recipe]") {
  for (const v1::Entry& entry : CurrentEntriesOfEveryKind()) {
    absl::StatusOr<LaunchRecipe> expected =
        BuiltinOps().TemplateRecipe(entry.problem(), entry.config(), CompileOnlyTarget());
    REQUIRE(expected.ok());
    const v1::LaunchRecipe served = RecipeToProto(*expected, /*include_cubin=*/true);
    CHECK_FALSE(served.tensors().empty());  // the template writes its interface
    const v1::LaunchRecipe stored = StoredRecipe(served);
    CHECK(stored.tensors().empty());
    CHECK_FALSE(stored.has_cublaslt_call());
    for (const v1::KernelLaunch& k : stored.kernels()) CHECK(k.args().empty());
    CHECK(CompareStoredRecipe("", stored, *expected).ok());
    // A served recipe is not the stored form, nor a stored one the served.
    CHECK_FALSE(CompareStoredRecipe("", served, *expected).ok());
    CHECK_FALSE(CompareRecipe("", stored, *expected).ok());
    CHECK(entry.recipe().SerializeAsString() == stored.SerializeAsString());
  }
}

TEST_CASE("entries this build serves carry exactly its template's recipe", "[cache][recipe]") {
  for (const v1::Entry& entry : CurrentEntriesOfEveryKind()) {
    INFO(entry.problem().ShortDebugString() << " " << entry.config().ShortDebugString());
    REQUIRE(ValidateEntry(BuiltinOps(), entry).ok());
    REQUIRE(DecodeBundle(BuiltinOps(), EncodeBundle({entry}, "test", 1795000000)).ok());
    const bool kernels = entry.recipe().kernels_size() > 0;

    // Each change is refused at import, naming the field.
    auto refused = [&](const char* field, const std::function<void(v1::LaunchRecipe*)>& change,
                       bool interface = false) {
      v1::Entry bad = entry;
      change(bad.mutable_recipe());
      const absl::Status s = ValidateEntry(BuiltinOps(), bad);
      INFO(field << ": " << s.ToString());
      CHECK(absl::IsInvalidArgument(s));
      CHECK(Message(s).find(std::string("entry.recipe.") + field) == 0);
      // Bundles are written without lowered names (bundle_test.cc refuses one
      // that has them); every other field reaches the check.
      if (std::string(field).find("lowered_name") == std::string::npos && !interface) {
        const absl::Status decoded = DecodeBundle(BuiltinOps(), EncodeBundle({bad}, "test", 1795000000)).status();
        CHECK(Message(decoded).find(field) != std::string::npos);
      }
    };
    refused("template_hash", [](v1::LaunchRecipe* r) { r->set_template_hash(std::string(64, 'b')); });
    refused("arch", [](v1::LaunchRecipe* r) { r->set_arch("sm_90a" == r->arch() ? "sm_90" : "sm_90a"); });
    refused("nvrtc_options", [](v1::LaunchRecipe* r) { r->add_nvrtc_options("--define-macro=X"); });
    refused("nvrtc_options", [](v1::LaunchRecipe* r) { r->add_nvrtc_options("--pre-include=/etc/passwd"); });
    refused("workspace_bytes", [](v1::LaunchRecipe* r) { r->set_workspace_bytes(r->workspace_bytes() + 16); });
    refused("workspace_zeroed", [](v1::LaunchRecipe* r) { r->set_workspace_zeroed(!r->workspace_zeroed()); });
    // The interface is never stored: an entry carrying one is refused (bundles
    // are written without it, so only a forged file could carry one).
    const v1::LaunchRecipe served =
        RecipeToProto(*BuiltinOps().TemplateRecipe(entry.problem(), entry.config(), CompileOnlyTarget()), false);
    refused(
        "tensors", [&](v1::LaunchRecipe* r) { *r->mutable_tensors() = served.tensors(); }, true);
    if (kernels) {
      refused(
          "kernels[0].args", [&](v1::LaunchRecipe* r) { *r->mutable_kernels(0) = served.kernels(0); }, true);
    } else {
      refused(
          "cublaslt_call", [&](v1::LaunchRecipe* r) { *r->mutable_cublaslt_call() = served.cublaslt_call(); }, true);
    }
    if (kernels) {
      refused("template_id", [](v1::LaunchRecipe* r) {
        r->set_template_id(r->template_id() == "gemm/gemm_mma" ? "gemm/gemm_wgmma" : "gemm/gemm_mma");
      });
      refused("kernels[0].lowered_name", [](v1::LaunchRecipe* r) { r->mutable_kernels(0)->set_lowered_name("_Z1fv"); });
      refused("kernels[0].name_expression",
              [](v1::LaunchRecipe* r) { r->mutable_kernels(0)->set_name_expression("ktune::other<1>"); });
      refused("kernels[0].grid", [](v1::LaunchRecipe* r) { r->mutable_kernels(0)->set_grid(0, 7); });
      refused("kernels[0].block", [](v1::LaunchRecipe* r) { r->mutable_kernels(0)->set_block(0, 32); });
      refused("kernels[0].dynamic_smem_bytes",
              [](v1::LaunchRecipe* r) { r->mutable_kernels(0)->set_dynamic_smem_bytes(12345); });
      refused("kernels[0].params", [](v1::LaunchRecipe* r) { r->mutable_kernels(0)->add_params("extra"); });
      refused("kernels[0].programmatic_dependent", [](v1::LaunchRecipe* r) {
        r->mutable_kernels(0)->set_programmatic_dependent(!r->kernels(0).programmatic_dependent());
      });
      refused("kernels", [](v1::LaunchRecipe* r) { *r->add_kernels() = r->kernels(0); });
    } else {
      refused("template_hash", [](v1::LaunchRecipe* r) { r->set_template_hash(std::string(64, 'c')); });
      refused("cublaslt_algo", [](v1::LaunchRecipe* r) { (*r->mutable_cublaslt_algo())[3] ^= 1; });
    }
  }
}

TEST_CASE("an entry naming another template for its config is refused, whatever its hash", "[cache][recipe]") {
  // The bypass: a recipe of a template id or hash that is not this build's
  // skipped the comparison, yet its entry was keyed (software fingerprint) as
  // this build's and served as TUNED.
  v1::Entry entry = CurrentEntriesOfEveryKind()[0];  // rmsnorm.fwd
  v1::Entry other_id = entry;
  other_id.mutable_recipe()->set_template_id("norm/layernorm_fwd");
  CHECK(Message(ValidateEntry(BuiltinOps(), other_id)).find("entry.recipe.template_id") == 0);
  v1::Entry unknown_id = entry;
  unknown_id.mutable_recipe()->set_template_id("norm/not_a_template");
  CHECK(Message(ValidateEntry(BuiltinOps(), unknown_id)).find("entry.recipe.template_id") == 0);
  v1::Entry other_hash = entry;
  other_hash.mutable_recipe()->set_template_hash(std::string(64, 'e'));
  other_hash.mutable_recipe()->mutable_kernels(0)->set_grid(0, 1);
  CHECK(Message(ValidateEntry(BuiltinOps(), other_hash)).find("entry.recipe.template_hash") == 0);
}

TEST_CASE("entries of another build's software are kept as they are, as stale", "[cache][recipe]") {
  // Their recipe is another template text's: it cannot be re-derived here,
  // and their key never matches a lookup of this build.
  v1::Entry entry = CurrentEntriesOfEveryKind()[1];
  entry.mutable_software()->set_template_hash(std::string(64, 'b'));
  entry.mutable_recipe()->set_template_hash(std::string(64, 'b'));
  entry.mutable_recipe()->mutable_kernels(0)->set_grid(0, 3);
  CHECK(ValidateEntry(BuiltinOps(), entry).ok());
}

TEST_CASE("TemplateRecipe writes each problem's own geometry", "[cache][recipe]") {
  // The skinny kernel of 1 x 4096 x 4096 also serves N = 14336, with its grid.
  const v1::Problem small = testutil::GemmProblemOf(LinearGemm(1, 4096, 4096));
  const v1::Problem large = testutil::GemmProblemOf(LinearGemm(1, 14336, 4096));
  const v1::Config skinny = testutil::SkinnyConfigFor(large.gemm());
  absl::StatusOr<LaunchRecipe> a = BuiltinOps().TemplateRecipe(small, skinny, CompileOnlyTarget());
  absl::StatusOr<LaunchRecipe> b = BuiltinOps().TemplateRecipe(large, skinny, CompileOnlyTarget());
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->kernels[0].name_expression == b->kernels[0].name_expression);
  CHECK(b->kernels[0].grid[0] == 896);
  CHECK(VerifyRecipe(BuiltinOps(), large, skinny, RecipeToProto(*a, false), CompileOnlyTarget())
            .message()
            .find("recipe.kernels[0].grid") != std::string::npos);
  CHECK(VerifyRecipe(BuiltinOps(), large, skinny, RecipeToProto(*b, false), CompileOnlyTarget()).ok());
}

}  // namespace
}  // namespace ktune
