#pragma once
// How activations and gradients travel between stages. Under FP32 a
// tensor goes as it is. Under --precision bf16 every F32 tensor a stage
// sends is already made of bf16 values (core/bf16_rounding.h: every layer
// output and input gradient is rounded), so it goes packed, 2 bytes an
// element, and unpacks to the same floats bit for bit: half the bytes on
// every link, without a transport knowing about bf16 (the executor sends
// device tensors over NCCL unpacked: packing runs on the host).
//
// Packed form: an I32 tensor [2 + ndim + ceil(n / 2)]: a marker word, ndim,
// the dimensions, then the elements' upper 16 bits two to a word (element
// 2i in the low half). Packing happens on the host (a device tensor is
// copied there first; staged transports stage through the host anyway).
#include "core/layer.h"
#include "core/precision.h"
#include "core/tensor.h"

namespace pd {

// t itself under FP32 or when t is not F32; the packed form under BF16.
Tensor pack_for_wire(const Tensor& t, Precision p);
// The inverse: a packed tensor back to F32 on the host; anything else as it is.
Tensor unpack_from_wire(const Tensor& t);

// What a stage keeps for a minibatch's backward, in the same packed form
// (bf16, host contexts only): every saved F32 tensor whose elements are all
// bf16 values is packed - losslessly, so backward computes the same bits -
// and the others (FP32 statistics, residual sums) stay as they are. A
// stashed activation then takes 2 bytes an element, as the profile counts it.
void pack_saved_bf16(LayerContext& ctx);
void unpack_saved_bf16(LayerContext& ctx);

}  // namespace pd
