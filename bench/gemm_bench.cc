// ktune_gemm_bench: tunes GEMM problems in process on the local GPU over both
// candidate sources (tuner/gemm/gemm_tuner.h) and prints, per problem, TFLOP/s of
// cuBLASLt's default choice, of the best own template candidate and of
// ktune's answer, all from one measurement (re-measured together). Peers
// outside ktune (torch.matmul) are for a Python driver to add.
//
//   ktune_gemm_bench [--shapes 8192x8192x8192,1x4096x4096] [--dtype bf16|fp8] [--b-layout nk|kn]
//                    [--paired] [--unpruned | --max-candidates N --max-model-ratio R]
//                    [--sustained-finalists N] [--head-to-head-rounds R] [--json out.json]
// --paired lets a driver time ktune's answer beside a peer in another process
// (bench/gemm_bench.py does, against torch): after each problem's tune it
// prints "paired: ready MxNxK" and reads commands on stdin, one per line:
// "time" heats the GPU with the answer for 200 ms, times 100 calls with
// events and prints "paired: us MEDIAN"; "next" goes on to the next problem.
// The driver alternates these with the peer's timings, then times each side
// in a block of its own (alternating two processes is not neutral: see
// bench/gemm_bench.py). Either way both run on a GPU in the same state, which
// the tune's own figures are not: they come from the end of a tune that kept
// the GPU busy for seconds, and under the power limit a hotter chip holds
// lower clocks.
// --unpruned times every config of the template spaces (460 wgmma configs at
// bf16 8192^3), not the model's best few; --max-candidates and
// --max-model-ratio widen the pruning instead (tuner/gemm/gemm_space.h). Both are
// for comparing configs the model ranks out, such as 2x1 clusters (charged
// twice their time), in one run.
// The JSON also names the settings of ktune's answer when it is a cuBLASLt
// algorithm, and of cuBLASLt's own pick under PyTorch's 1 MiB workspace, the
// algorithm torch._scaled_mm runs (cuBLASLt's trace showed the two alike at
// fp8 8192 x 4096 x 14336: bench/results/2026-11-30-norms-gemm-95556ee.md, "The kernel
// torch._scaled_mm runs is ktune's answer"; torch.matmul calls cuBLAS
// instead), and
// whether the two are one kernel.
// Where the tune's sustained finals ran (problems of 100 us and more,
// tuner/gemm/gemm_tuner.h), its three figures are theirs, each candidate timed
// after its own heat; the table prints every sustained finalist under the row,
// and --sustained-finalists 0 turns them off.
// --head-to-head-rounds R (default 8): where the sustained finals ran, the
// best template and cuBLASLt's default are then timed against each other in
// R rounds (tuner/gemm/gemm_tuner.h, TimeHeadToHead: each window as a sustained
// finalist's, the two of a round back to back, the order swapped every
// round), and the median of the rounds' ratios is printed beside the tune's
// figures ("head_to_head" in the JSON). The tune's own template/default
// ratio compares medians over windows seconds apart, which the power
// controller's wandering clocks move by several percent (the same bf16
// shape's ratio read 0.934-0.986x over six tunes, 0.98-0.99x interleaved:
// bench/results/2026-12-01-gemm-power-tail-split-54c97c5.md, "What the power
// limit does to the sustained finals"); this is the steadier figure for how far the template trails
// or leads cuBLASLt. 0 turns it off.
// Default shapes: issue 5's (M in {1, 16, 128, 2048, 8192} x (N, K) in
// {(4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096)}, plus 8192^3), bf16
// (fp8: e4m3 A and B with per-tensor scales, bf16 D; cuBLASLt's algorithms and
// the wgmma template).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tuner/core/gemm_problem.h"
#include "tuner/gemm/gemm_tuner.h"
#include "tuner/gpu/cublaslt.h"
#include "tuner/problem_runners.h"
#include "tuner/run/executor.h"

namespace {

// Calls a head-to-head window times, as TimeLikeAPeer's.
constexpr int kHeadToHeadCalls = 100;

double Tflops(const ktune::v1::GemmProblem& p, double us) { return us > 0 ? ktune::GemmFlops(p) / (us * 1e6) : 0; }

// `recipe` timed as bench/gemm_bench.py times a peer: 200 ms of heat, then
// 100 calls, each between events.
absl::StatusOr<ktune::Timing> TimeLikeAPeer(ktune::CandidateExecutor* executor, const ktune::LaunchRecipe& recipe) {
  constexpr double kHeatMs = 200;
  if (absl::Status heat = ktune::HeatUp(executor, recipe, kHeatMs); !heat.ok()) return heat;
  return executor->Time(recipe, {0, 100});
}

// --paired: answers the driver's commands for one problem until "next" (or
// the end of stdin). Returns false when stdin ended.
bool ServePairedTimings(ktune::CandidateExecutor* executor, const ktune::LaunchRecipe& recipe,
                        const std::string& shape) {
  std::printf("paired: ready %s\n", shape.c_str());
  std::fflush(stdout);
  std::string command;
  while (std::getline(std::cin, command)) {
    if (command == "next") return true;
    if (command != "time") {
      std::printf("paired: error: unknown command '%s' (expected 'time' or 'next')\n", command.c_str());
    } else if (absl::StatusOr<ktune::Timing> t = TimeLikeAPeer(executor, recipe); !t.ok()) {
      std::printf("paired: error: %s\n", std::string(t.status().message()).c_str());
    } else {
      std::printf("paired: us %.4f\n", t->median_us);
    }
    std::fflush(stdout);
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ktune_gemm_bench: GEMM candidates of every source on this GPU"};
  std::string shapes_text, json_path, layout = "nk", dtype = "bf16";
  app.add_option("--shapes", shapes_text, "MxNxK,... (default: issue 5's bench shapes)");
  app.add_option("--b-layout", layout, "nk: B is [N, K] (nn.Linear); kn: B is [K, N]")
      ->check(CLI::IsMember({"nk", "kn"}));
  app.add_option("--dtype", dtype, "bf16, or fp8 (e4m3, scaled, bf16 D)")->check(CLI::IsMember({"bf16", "fp8"}));
  app.add_option("--json", json_path, "write every outcome here");
  bool paired = false;
  app.add_flag("--paired", paired, "after each tune, time the answer on request from stdin (see the header)");
  ktune::GemmTuneOptions options;
  bool unpruned = false;
  auto* all =
      app.add_flag("--unpruned", unpruned, "every template config, not the model's pick (slow: minutes a shape)");
  app.add_option("--max-candidates", options.space.max_candidates, "per template space, after pruning")
      ->check(CLI::Range(1, 10000))
      ->excludes(all);
  app.add_option("--max-model-ratio", options.space.max_model_ratio,
                 "keep configs whose model time is within this factor of the best")
      ->check(CLI::Range(1.0, 100.0))
      ->excludes(all);
  app.add_option("--sustained-finalists", options.sustained_finalists,
                 "time this many of the fastest finalists (and the best template and cuBLASLt's default) "
                 "again, each after its own heat, and let those timings decide (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 16));
  app.add_option("--sustained-rounds", options.sustained_rounds, "rounds of the sustained finals")
      ->capture_default_str()
      ->check(CLI::Range(1, 20));
  app.add_option("--sustained-heat-ms", options.sustained_heat_ms,
                 "each sustained finalist runs this long before it is timed")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10000.0));
  app.add_option("--sustained-ms", options.sustained_ms, "each sustained finalist is timed for about this long")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 10000.0));
  int head_to_head_rounds = 8;
  app.add_option("--head-to-head-rounds", head_to_head_rounds,
                 "where the sustained finals ran, time the best template against cuBLASLt's default in this "
                 "many rounds (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 50));
  CLI11_PARSE(app, argc, argv);
  options.space.pruned = !unpruned;

  std::vector<std::array<int64_t, 3>> shapes;
  if (shapes_text.empty()) {
    shapes.push_back({8192, 8192, 8192});
    for (int64_t m : {8192, 2048, 128, 16, 1}) {
      for (auto [n, k] : {std::pair<int64_t, int64_t>{4096, 4096}, {14336, 4096}, {4096, 14336}, {6144, 4096}}) {
        shapes.push_back({m, n, k});
      }
    }
  } else {
    for (absl::string_view s : absl::StrSplit(shapes_text, ',')) {
      std::vector<std::string> dims = absl::StrSplit(s, 'x');
      std::array<int64_t, 3> shape{};
      if (dims.size() != 3 || !absl::SimpleAtoi(dims[0], &shape[0]) || !absl::SimpleAtoi(dims[1], &shape[1]) ||
          !absl::SimpleAtoi(dims[2], &shape[2])) {
        std::fprintf(stderr, "error: --shapes: '%s' is not MxNxK\n", std::string(s).c_str());
        return 2;
      }
      shapes.push_back(shape);
    }
  }
  absl::StatusOr<std::unique_ptr<ktune::Device>> device = ktune::OpenCudaDevice(0);
  if (!device.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(device.status().message()).c_str());
    return 1;
  }
  // In process: a faulting candidate would end the bench (ktuned runs them in
  // its worker). cuBLASLt is opened by the executor; without it, templates only.
  std::unique_ptr<ktune::CandidateExecutor> executor = ktune::NewInProcessExecutor(device->get());
  // A handle of its own for naming algorithms (the executor's is private).
  absl::StatusOr<std::unique_ptr<ktune::CublasLt>> lt = ktune::CublasLt::Open();

  nlohmann::json rows = nlohmann::json::array();
  std::printf("%-22s | %9s | %9s %-32s | %9s %-36s | %7s | %5s | %6s\n", "M x N x K", "cuBLASLt", "template", "(best)",
              "ktune", "(answer)", "vs dflt", "cands", "tune s");
  for (const auto& [m, n, k] : shapes) {
    ktune::v1::GemmProblem p;
    p.set_m(m);
    p.set_n(n);
    p.set_k(k);
    p.set_batch(1);
    p.set_a_dtype(dtype == "fp8" ? ktune::v1::FP8_E4M3 : ktune::v1::BF16);
    p.set_b_dtype(dtype == "fp8" ? ktune::v1::FP8_E4M3 : ktune::v1::BF16);
    p.set_d_dtype(ktune::v1::BF16);
    p.set_a_layout(ktune::v1::ROW_MAJOR);
    p.set_b_layout(layout == "nk" ? ktune::v1::COL_MAJOR : ktune::v1::ROW_MAJOR);
    if (absl::Status s = ktune::ValidateGemmProblem(p); !s.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
      return 2;
    }
    absl::StatusOr<ktune::GemmTuneResult> r = ktune::TuneGemm(p, executor.get(), options);
    const std::string shape = std::to_string(m) + " x " + std::to_string(n) + " x " + std::to_string(k);
    if (!r.ok()) {
      std::printf("%-22s | error: %s\n", shape.c_str(), std::string(r.status().message()).c_str());
      continue;
    }
    const double dflt = r->cublaslt_default ? Tflops(p, r->cublaslt_default->median_us) : 0;
    const double tmpl = r->best_template ? Tflops(p, r->best_template->median_us) : 0;
    const double ours = Tflops(p, r->winner_timing.median_us);
    std::printf("%-22s | %9.1f | %9.1f %-32s | %9.1f %-36s | %6.3fx | %2d+%-2d | %6.1f\n", shape.c_str(), dflt, tmpl,
                r->best_template_name.c_str(), ours, r->winner.Name().c_str(), dflt > 0 ? ours / dflt : 0,
                r->template_candidates, r->cublaslt_candidates, r->tune_seconds);
    std::fflush(stdout);
    nlohmann::json row = {{"m", m},
                          {"n", n},
                          {"k", k},
                          {"dtype", dtype},
                          {"b_layout", layout},
                          {"cublaslt_default_tflops", dflt},
                          {"best_template_tflops", tmpl},
                          {"best_template", r->best_template_name},
                          {"ktune_tflops", ours},
                          {"ktune_answer", r->winner.Name()},
                          {"template_candidates", r->template_candidates},
                          {"cublaslt_candidates", r->cublaslt_candidates},
                          {"tune_seconds", r->tune_seconds},
                          {"outcomes", nlohmann::json::array()}};
    for (const ktune::GemmCandidateOutcome& o : r->outcomes) {
      row["outcomes"].push_back({{"name", o.name},
                                 {"status", o.status},
                                 {"median_us", o.timing.median_us},
                                 {"finalist", o.finalist},
                                 {"spread", o.timing.spread}});
      if (!o.sustained) continue;
      row["outcomes"].back()["sustained_us"] = o.sustained->median_us;
      row["outcomes"].back()["sustained_pass_range"] = o.sustained->pass_range;
      std::printf("    sustained %-44s %9.1f us %7.1f TFLOP/s (interleaved %7.1f, rounds apart %.1f%%)\n",
                  o.name.c_str(), o.sustained->median_us, Tflops(p, o.sustained->median_us),
                  Tflops(p, o.timing.median_us), 100 * o.sustained->pass_range);
    }
    if (r->tie_break) {
      const bool won = ktune::HeadToHeadFavoursFirst(*r->tie_break);
      std::printf("    tie-break    %-41s %6.3fx cuBLASLt's default (median of %zu rounds): %s\n",
                  r->tie_break_challenger.c_str(), r->tie_break->median_ratio, r->tie_break->ratios.size(),
                  won ? "won" : "lost");
      row["tie_break"] = {{"challenger", r->tie_break_challenger},
                          {"ratios", r->tie_break->ratios},
                          {"median_ratio", r->tie_break->median_ratio},
                          {"won", won}};
    }
    if (head_to_head_rounds > 0 && r->sustained && r->best_template_candidate && r->cublaslt_default_candidate) {
      absl::StatusOr<ktune::HeadToHead> h = ktune::TimeHeadToHead(
          executor.get(), r->best_template_candidate->recipe, r->cublaslt_default_candidate->recipe,
          head_to_head_rounds, options.sustained_heat_ms, kHeadToHeadCalls);
      if (!h.ok()) {
        std::printf("    head-to-head failed: %s\n", std::string(h.status().message()).c_str());
      } else {
        const auto [low, high] = std::minmax_element(h->ratios.begin(), h->ratios.end());
        std::printf("    head-to-head %-41s %6.3fx cuBLASLt's default (median of %d rounds; %.3f-%.3f)\n",
                    r->best_template_name.c_str(), h->median_ratio, head_to_head_rounds, *low, *high);
        row["head_to_head"] = {{"template", r->best_template_name},
                               {"template_us", h->a_us},
                               {"default_us", h->b_us},
                               {"ratios", h->ratios},
                               {"median_ratio", h->median_ratio}};
      }
      std::fflush(stdout);
    }
    if (lt.ok() && ktune::CublasLtCanServe(p).ok()) {
      auto text = [](const absl::StatusOr<ktune::CublasLtAlgoSettings>& s) {
        return s.ok() ? ktune::ToString(*s) : absl::StrCat("unknown: ", s.status().message());
      };
      absl::StatusOr<ktune::CublasLtAlgoSettings> answer = absl::NotFoundError("the answer is a template");
      if (r->winner.is_cublaslt()) answer = (*lt)->ReadSettings(ktune::CublasLtAlgoOf(r->winner.recipe));
      absl::StatusOr<std::vector<ktune::CublasLtAlgo>> pick =
          (*lt)->Heuristic(p, 1, ktune::kCublasLtSmallWorkspaceBytes);
      absl::StatusOr<ktune::CublasLtAlgoSettings> small_pick =
          !pick.ok()      ? absl::StatusOr<ktune::CublasLtAlgoSettings>(pick.status())
          : pick->empty() ? absl::NotFoundError("the heuristic returned nothing")
                          : (*lt)->ReadSettings(pick->front());
      row["answer_cublaslt_settings"] = text(answer);
      row["cublaslt_1mib_pick_settings"] = text(small_pick);
      row["answer_is_cublaslt_1mib_pick"] = answer.ok() && small_pick.ok() && *answer == *small_pick;
    }
    rows.push_back(row);
    if (!json_path.empty()) std::ofstream(json_path) << rows.dump(1) << "\n";  // after every problem
    if (paired && !ServePairedTimings(executor.get(), r->winner.recipe,
                                      std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k))) {
      break;  // the driver has gone
    }
  }
  return 0;
}
