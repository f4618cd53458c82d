#include "cache/recipe_check.h"

#include <catch2/catch.hpp>
#include <functional>
#include <string>

#include "cache/bundle.h"
#include "cache/entry.h"
#include "tests/cache/current_entries.h"
#include "tuner/builtin_ops.h"

namespace ktune {
namespace {

using testutil::CurrentEntriesOfEveryKind;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST_CASE("the recipe check knows every field of a recipe", "[cache][recipe]") {
  // CompareRecipe names each field; a field added to the wire messages must
  // be added there (and here).
  CHECK(v1::LaunchRecipe::descriptor()->field_count() == 9);
  CHECK(v1::KernelLaunch::descriptor()->field_count() == 7);
}

TEST_CASE("entries this build serves carry exactly its template's recipe", "[cache][recipe]") {
  for (const v1::Entry& entry : CurrentEntriesOfEveryKind()) {
    INFO(entry.problem().ShortDebugString() << " " << entry.config().ShortDebugString());
    REQUIRE(ValidateEntry(BuiltinOps(), entry).ok());
    REQUIRE(DecodeBundle(BuiltinOps(), EncodeBundle({entry}, "test", 1795000000)).ok());
    const bool kernels = entry.recipe().kernels_size() > 0;

    // Each change is refused at import, naming the field.
    auto refused = [&](const char* field, const std::function<void(v1::LaunchRecipe*)>& change) {
      v1::Entry bad = entry;
      change(bad.mutable_recipe());
      const absl::Status s = ValidateEntry(BuiltinOps(), bad);
      INFO(field << ": " << s.ToString());
      CHECK(absl::IsInvalidArgument(s));
      CHECK(Message(s).find(std::string("entry.recipe.") + field) == 0);
      // Bundles are written without lowered names (bundle_test.cc refuses one
      // that has them); every other field reaches the check.
      if (std::string(field).find("lowered_name") == std::string::npos) {
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
