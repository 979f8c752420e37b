#pragma once
// Every Pool2dGeometry on raw host pointers, with the contracts of the
// DeviceOps pooling entries (core/device_ops.h): the core layers' case
// (square window, one stride, the same padding on every side, floor mode,
// padding counted in averages or absent) on pool_kernels.h, unchanged; the
// rest (rectangular windows, per-axis strides, per-side pads, ceil mode,
// count_include_pad = false) by plain loops over each window, planes in
// parallel. argmax as in pool_kernels.h: the in-plane index (ih * W + iw)
// of each output's maximum, the first in row-major window order on ties.
#include <cstdint>

#include "core/cpu/pool_kernels.h"
#include "core/geometry.h"

namespace pd::cpu {

// Whether g is the case pool_kernels.h takes, and its shape there.
bool pool_is_square(PoolKind kind, const Pool2dGeometry& g);
PoolShape square_pool_shape(PoolKind kind, const Pool2dGeometry& g);

// y [N, C, OH, OW]; argmax [N, C, OH, OW] written by max pooling (null for average).
void pool2d_forward_general(PoolKind kind, const Pool2dGeometry& g, const float* x, float* y, int32_t* argmax);
// dx (overwritten) from dy and, for max pooling, the forward's argmax.
void pool2d_backward_general(PoolKind kind, const Pool2dGeometry& g, const int32_t* argmax, const float* dy,
                             float* dx);

}  // namespace pd::cpu
