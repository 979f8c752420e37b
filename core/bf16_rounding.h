#pragma once
// The rounding points of --precision bf16 (core/precision.h, docs/design.md
// §3), shared by the layer-range runner and the composite layers. Every
// helper does nothing under FP32, so FP32 runs pay no rounding work.
#include <span>
#include <vector>

#include "core/precision.h"
#include "core/tensor.h"

namespace pd {

struct DeviceOps;
class Layer;
struct LayerContext;

// Rounds t's elements to bf16 in place (device_ops().round_bf16) when p is
// BF16 and t is a defined F32 tensor; integer tensors (token ids) are left alone.
void round_in_place_if_bf16(Precision p, Tensor& t);

// The rounding of a chain of layers (a layer range, a composite's
// sub-layers), given that the chain's input holds bf16 values. After layer
// l computed h (from bf16 values iff input_exact), rounds h unless it
// holds bf16 values already (l rounded it, or l.forward_keeps_bf16() and
// its input did) or the rounding can be left to `next` (a layer whose
// rounded output is the same for h and round(h): one pass instead of two),
// which it may only when l's context does not keep h for backward. Returns
// whether h holds bf16 values now. Under FP32 does nothing and returns true.
bool round_layer_output_if_bf16(Precision p, const Layer& l, const Layer* next, const LayerContext& ctx, Tensor& h,
                                bool input_exact);
// Backward: rounds l's input gradient g unless l.backward_keeps_bf16()
// (its output gradient holds bf16 values: every chain rounds its incoming one).
void round_layer_input_grad_if_bf16(Precision p, const Layer& l, Tensor& g);

// t itself under FP32 (or for non-F32 t); a rounded copy under BF16, for
// tensors the caller must not change (a data batch, the loss gradient).
Tensor rounded_copy_if_bf16(Precision p, const Tensor& t);

// The tensors a layer computes with: `params` itself under FP32; under BF16
// rounded copies in `storage` (the master weights are never rounded).
std::span<const Tensor> operand_params(Precision p, std::span<const Tensor> params, std::vector<Tensor>& storage);

// Whether layers that can keep their bf16 activations in bf16 storage
// (DType::BF16, the DeviceOps *_bf16 entries) do so under BF16: the same
// values and bits in half the bytes. By default where the backend says it
// pays (DeviceOps::bf16_storage_pays: the GPU, where those layers are
// memory-bound; not the CPU, whose entries unpack and pack around its FP32
// kernels); PIPEDREAM_BF16_STORAGE=1 or 0 in the environment, or a caller,
// forces it on or off everywhere (to test the CPU entries, or to measure
// the difference). One setting per process.
enum class Bf16Storage : uint8_t { WhereItPays, Always, Never };
void set_bf16_storage(Bf16Storage mode);
bool uses_bf16_storage(const DeviceOps& ops);

// A bf16 copy of t (F32) on t's device, rounded to nearest even; and an
// F32 copy of a bf16 t (exact).
Tensor packed_bf16(const Tensor& t);
Tensor unpacked_bf16(const Tensor& t);

}  // namespace pd
