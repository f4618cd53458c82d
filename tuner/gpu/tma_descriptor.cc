#include "tuner/gpu/tma_descriptor.h"

#include <cuda.h>  // the CUtensorMap* enum values only

#include <string>

#include "absl/strings/str_cat.h"

namespace ktune {

absl::StatusOr<v1::TmaDescriptor> DescribeTma(const TmaTensor& t, absl::string_view tensor) {
  if (t.element_bytes != 1 && t.element_bytes != 2) {
    return absl::InvalidArgumentError(absl::StrCat("TMA elements of ", t.element_bytes, " bytes (1 or 2)"));
  }
  v1::TmaDescriptor d;
  d.set_tensor(std::string(tensor));
  // fp8 has no tensor-map type of its own; TMA only moves its bytes.
  d.set_data_type(t.element_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8);
  for (uint64_t dim : {t.inner, t.rows, t.batch}) d.add_dims(dim);
  d.add_strides_bytes(t.row_pitch * t.element_bytes);
  d.add_strides_bytes(t.batch_pitch * t.element_bytes);
  for (uint32_t box : {t.box_inner, t.box_rows, 1u}) d.add_box(box);
  for (int i = 0; i < 3; ++i) d.add_element_strides(1);
  d.set_interleave(CU_TENSOR_MAP_INTERLEAVE_NONE);
  d.set_swizzle(CU_TENSOR_MAP_SWIZZLE_128B);
  d.set_l2_promotion(CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  d.set_oob_fill(CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return d;
}

}  // namespace ktune
