// How a TmaTensor (tuner/gpu/device.h) is encoded as a CUtensorMap, as the
// wire's TmaDescriptor: the one statement of the encoding, which
// CudaDevice::EncodeTma follows and recipes hand to generic launchers, so
// the descriptor a caller encodes is the one the tuner measured with.
//
// Rank 3, innermost first: dims {inner, rows, batch}, byte strides
// {row_pitch, batch_pitch} x element bytes, box {box_inner, box_rows, 1},
// element strides 1; bfloat16, or uint8 for fp8 (TMA only moves its bytes);
// 128-byte swizzle, 256-byte L2 promotion, no interleave, no OOB fill (zeros).
// Thread-safe: pure functions.
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/gpu/device.h"

namespace ktune {

// The descriptor of `t` whose base is the tensor named `tensor` (t.base is
// not part of it). INVALID_ARGUMENT for elements of other than 1 or 2 bytes.
absl::StatusOr<v1::TmaDescriptor> DescribeTma(const TmaTensor& t, absl::string_view tensor);

}  // namespace ktune
