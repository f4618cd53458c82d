// Valid cache entries for tests: one realistic RMSNorm forward winner, varied
// by the caller. Any test that needs an Entry starts from MakeTestEntry() and
// changes the field under test, so the rest stays valid.
#pragma once

#include <cstdint>
#include <string>

#include "ktune/v1/ktune.pb.h"
#include "tuner/core/fingerprint.h"

namespace ktune::testutil {

inline constexpr char kTestTemplateHash[] = "3f2a9c1e5b7d4f60812a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f80";

// RMSNorm forward, bf16 in and out, [m, n], weight, default eps; measured on
// an H200 (cc 9.0, 132 SMs) with a one-kernel persistent recipe.
inline v1::Entry MakeTestEntry(int64_t m = 4096, int64_t n = 4096) {
  v1::Entry e;
  v1::NormProblem* p = e.mutable_problem()->mutable_norm();
  p->set_op(v1::RMSNORM);
  p->set_norm_pass(v1::FWD);
  p->set_m(m);
  p->set_n(n);
  p->set_input_dtype(v1::BF16);
  p->set_output_dtype(v1::BF16);
  p->set_has_weight(true);
  p->set_eps(1e-6f);

  v1::DeviceFingerprint* d = e.mutable_device();
  d->set_name("NVIDIA H200");
  d->set_cc_major(9);
  d->set_cc_minor(0);
  d->set_sm_count(132);
  d->set_memory_bytes(uint64_t{150754820096});
  d->set_driver_version(13000);

  v1::SoftwareFingerprint* s = e.mutable_software();
  s->set_template_hash(kTestTemplateHash);
  s->set_nvrtc_version(13000);
  s->set_schema_version(kSchemaVersion);

  v1::NormConfig* c = e.mutable_config()->mutable_norm();
  c->set_x_block(1);
  c->set_r_block(static_cast<int32_t>(n));
  c->set_num_warps(4);
  c->set_vec(8);
  c->set_pipeline_depth(1);
  c->set_split_size(0);
  c->set_persistent(true);

  v1::LaunchRecipe* r = e.mutable_recipe();
  r->set_template_id("norm/rmsnorm_fwd");
  r->set_template_hash(kTestTemplateHash);
  r->add_nvrtc_options("--std=c++17");
  r->add_nvrtc_options("-arch=sm_90");
  r->set_arch("sm_90");
  v1::KernelLaunch* k = r->add_kernels();
  k->set_name_expression("ktune::rmsnorm_fwd<__nv_bfloat16, __nv_bfloat16, 1, 4096, 4, 8, 1>");
  for (uint32_t g : {static_cast<uint32_t>(m), 1u, 1u}) k->add_grid(g);
  for (uint32_t b : {128u, 1u, 1u}) k->add_block(b);
  k->set_dynamic_smem_bytes(0);
  for (const char* param : {"x", "w", "y", "rstd", "M", "N", "eps"}) k->add_params(param);

  v1::Measurement* meas = e.mutable_measurement();
  meas->set_time_us(17.25);
  meas->set_spread(0.02);
  meas->set_repetitions(30);
  meas->set_throughput(3.89);
  meas->set_throughput_unit("TB/s");

  e.set_tuned_at_unix(1764400000);  // 2025-11-29
  e.set_candidates_measured(48);
  e.set_ktune_version("0.1.0");
  return e;
}

// A GEMM winner on the same H200: bf16, B as [N, K], M x N x K; its source
// the mma.sync template (cublaslt false) or a cuBLASLt algorithm.
inline v1::Entry MakeTestGemmEntry(int64_t m = 2048, int64_t n = 4096, int64_t k = 4096, bool cublaslt = false) {
  v1::Entry e = MakeTestEntry();
  v1::GemmProblem* p = e.mutable_problem()->mutable_gemm();
  p->set_m(m);
  p->set_n(n);
  p->set_k(k);
  p->set_batch(1);
  p->set_a_dtype(v1::BF16);
  p->set_b_dtype(v1::BF16);
  p->set_d_dtype(v1::BF16);
  p->set_a_layout(v1::ROW_MAJOR);
  p->set_b_layout(v1::COL_MAJOR);
  v1::LaunchRecipe* r = e.mutable_recipe();
  if (cublaslt) {
    v1::CublasLtAlgorithm* a = e.mutable_config()->mutable_gemm()->mutable_cublaslt();
    a->set_algo(std::string(64, '\x5a'));
    a->set_version(130100);
    a->set_workspace_bytes(1 << 20);
    r->Clear();
    r->set_template_id("cublaslt");
    r->set_template_hash(kTestTemplateHash);
    r->set_arch("sm_90");
    r->set_workspace_bytes(1 << 20);
    r->set_cublaslt_algo(a->algo());
  } else {
    v1::MmaSyncTile* t = e.mutable_config()->mutable_gemm()->mutable_mma_sync();
    t->set_block_m(128);
    t->set_block_n(128);
    t->set_block_k(32);
    t->set_warps_m(2);
    t->set_warps_n(2);
    t->set_stages(4);
    t->set_group_m(8);
    r->set_template_id("gemm/gemm_mma");
    v1::KernelLaunch* kl = r->mutable_kernels(0);
    kl->set_name_expression("ktune::gemm_mma<ktune::bf16, ktune::bf16, true, 0, false, 128, 128, 32, 2, 2, 4, 8>");
    kl->set_dynamic_smem_bytes(65536);
    kl->clear_params();
    for (const char* param : {"a", "b", "c", "d", "bias", "M", "N", "K", "alpha", "beta"}) kl->add_params(param);
  }
  v1::Measurement* meas = e.mutable_measurement();
  meas->set_time_us(180.0);
  meas->set_throughput(381.7);
  meas->set_throughput_unit("TFLOP/s");
  e.set_candidates_measured(24);
  return e;
}

}  // namespace ktune::testutil
