// The tuning knobs of the norm kernels. See kernel_templates/norm/ for how the
// kernel reads them and tuner/norm/norm_space.h for which combinations are legal.
#pragma once

#include <string>

namespace ktune {

struct NormConfig {
  int x_block = 1;         // rows per CTA at a time
  int r_block = 0;         // row elements covered per pass: threads_per_row * vec * chunks
  int num_warps = 4;       // warps per CTA
  int vec = 1;             // elements per vector access (16 bytes at most)
  int pipeline_depth = 1;  // 1, or 2: the next rows' loads issue before this row is reduced
  int split_size = 0;      // backward only
  bool persistent = true;  // whole row in registers (r_block >= n), else looped over r_block
  // Backward with a weight (or LayerNorm bias): thread rows of the partials'
  // reduce kernel, a power of two <= 32; 0 derives it from the partial rows.
  // Tuned after the fused kernel's winner (tuner/norm/norm_tuner.cc).
  int reduce_rows = 0;
  // Backward, persistent, one row per CTA, on sm_90: CTAs per thread-block
  // cluster (1, 2, 4 or 8) adding up their partials through distributed
  // shared memory, so the workspace holds one row per cluster. 1: no cluster.
  int cluster = 1;

  int threads() const { return num_warps * 32; }
  int threads_per_row() const { return threads() / x_block; }
  int chunks() const { return r_block / (threads_per_row() * vec); }
};

bool operator==(const NormConfig& a, const NormConfig& b);

// "xb=1 rb=4096 w=4 v=8 pd=1 persistent", stable: used in logs and tie-breaks.
std::string ToString(const NormConfig& config);

}  // namespace ktune
