#include "tuner/gemm/gemm_wire.h"

#include "absl/strings/str_cat.h"
#include "tuner/core/wire.h"

namespace ktune {

absl::StatusOr<GemmTileConfig> GemmTileConfigFromProto(const v1::MmaSyncTile& in) {
  GemmTileConfig c;
  c.block_m = in.block_m();
  c.block_n = in.block_n();
  c.block_k = in.block_k();
  c.warps_m = in.warps_m();
  c.warps_n = in.warps_n();
  c.stages = in.stages();
  c.group_m = in.group_m();
  c.split_k = in.split_k() == 0 ? 1 : in.split_k();  // 0: written before split-K existed
  const absl::Status positive = RequirePositive("config.gemm.mma_sync.", {{"block_m", c.block_m},
                                                                          {"block_n", c.block_n},
                                                                          {"block_k", c.block_k},
                                                                          {"warps_m", c.warps_m},
                                                                          {"warps_n", c.warps_n},
                                                                          {"stages", c.stages},
                                                                          {"group_m", c.group_m},
                                                                          {"split_k", c.split_k}});
  if (!positive.ok()) return positive;
  return c;
}

v1::MmaSyncTile GemmTileConfigToProto(const GemmTileConfig& c) {
  v1::MmaSyncTile out;
  out.set_block_m(c.block_m);
  out.set_block_n(c.block_n);
  out.set_block_k(c.block_k);
  out.set_warps_m(c.warps_m);
  out.set_warps_n(c.warps_n);
  out.set_stages(c.stages);
  out.set_group_m(c.group_m);
  out.set_split_k(c.split_k);
  return out;
}

absl::StatusOr<WgmmaTileConfig> WgmmaTileConfigFromProto(const v1::WgmmaTile& in) {
  WgmmaTileConfig c;
  c.block_m = in.block_m();
  c.block_n = in.block_n();
  c.consumers = in.consumers();
  c.stages = in.stages();
  c.group_m = in.group_m();
  c.pingpong = in.pingpong();
  c.cluster_m = in.cluster_m();
  c.split_k = in.split_k() == 0 ? 1 : in.split_k();  // 0: written before split-K existed
  c.k_rows = in.k_rows() == 0 ? 1 : in.k_rows();     // 0: written before the knob existed
  c.promote = in.promote();
  c.swap_ab = in.swap_ab();
  c.tail_split = in.tail_split() == 0 ? 1 : in.tail_split();  // 0: written before the knob existed
  const absl::Status positive = RequirePositive("config.gemm.wgmma.", {{"block_m", c.block_m},
                                                                       {"block_n", c.block_n},
                                                                       {"consumers", c.consumers},
                                                                       {"cluster_m", c.cluster_m},
                                                                       {"stages", c.stages},
                                                                       {"group_m", c.group_m},
                                                                       {"split_k", c.split_k},
                                                                       {"k_rows", c.k_rows},
                                                                       {"tail_split", c.tail_split}});
  if (!positive.ok()) return positive;
  return c;
}

v1::WgmmaTile WgmmaTileConfigToProto(const WgmmaTileConfig& c) {
  v1::WgmmaTile out;
  out.set_block_m(c.block_m);
  out.set_block_n(c.block_n);
  out.set_consumers(c.consumers);
  out.set_stages(c.stages);
  out.set_group_m(c.group_m);
  out.set_pingpong(c.pingpong);
  out.set_cluster_m(c.cluster_m);
  out.set_split_k(c.split_k);
  out.set_k_rows(c.k_rows);
  out.set_promote(c.promote);
  out.set_swap_ab(c.swap_ab);
  out.set_tail_split(c.tail_split);
  return out;
}

absl::StatusOr<LaunchRecipe> OwnGemmRecipe(const v1::GemmProblem& problem, const v1::GemmConfig& config,
                                           const DeviceInfo& device) {
  switch (config.source_case()) {
    case v1::GemmConfig::kMmaSync: {
      absl::StatusOr<GemmTileConfig> c = GemmTileConfigFromProto(config.mma_sync());
      if (!c.ok()) return c.status();
      return GemmLaunchRecipe(problem, *c, device);
    }
    case v1::GemmConfig::kWgmma: {
      absl::StatusOr<WgmmaTileConfig> c = WgmmaTileConfigFromProto(config.wgmma());
      if (!c.ok()) return c.status();
      return WgmmaLaunchRecipe(problem, *c, device);
    }
    case v1::GemmConfig::kSkinny: {
      absl::StatusOr<SkinnyConfig> c = SkinnyConfigFromProto(config.skinny());
      if (!c.ok()) return c.status();
      return SkinnyLaunchRecipe(problem, *c, device);
    }
    default:
      return absl::NotFoundError("a cuBLASLt config, or none: no template of ours writes its recipe");
  }
}

absl::StatusOr<SkinnyConfig> SkinnyConfigFromProto(const v1::SkinnyTile& in) {
  SkinnyConfig c{in.warps(), in.unroll(), in.pipelined()};
  const absl::Status positive = RequirePositive("config.gemm.skinny.", {{"warps", c.warps}, {"unroll", c.unroll}});
  if (!positive.ok()) return positive;
  return c;
}

v1::SkinnyTile SkinnyConfigToProto(const SkinnyConfig& c) {
  v1::SkinnyTile out;
  out.set_warps(c.warps);
  out.set_unroll(c.unroll);
  out.set_pipelined(c.pipelined);
  return out;
}

}  // namespace ktune
