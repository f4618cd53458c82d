#include "tuner/core/norm_config.h"

#include "absl/strings/str_format.h"

namespace ktune {

bool operator==(const NormConfig& a, const NormConfig& b) {
  return a.x_block == b.x_block && a.r_block == b.r_block && a.num_warps == b.num_warps && a.vec == b.vec &&
         a.pipeline_depth == b.pipeline_depth && a.split_size == b.split_size && a.persistent == b.persistent &&
         a.reduce_rows == b.reduce_rows && a.cluster == b.cluster;
}

std::string ToString(const NormConfig& c) {
  std::string s = absl::StrFormat("xb=%d rb=%d w=%d v=%d pd=%d %s", c.x_block, c.r_block, c.num_warps, c.vec,
                                  c.pipeline_depth, c.persistent ? "persistent" : "looped");
  if (c.split_size > 0) s += absl::StrFormat(" split=%d", c.split_size);
  if (c.cluster > 1) s += absl::StrFormat(" cl=%d", c.cluster);
  if (c.reduce_rows > 0) s += absl::StrFormat(" rr=%d", c.reduce_rows);
  return s;
}

}  // namespace ktune
