#pragma once
// The updates of Optimizer::step (core/optimizer.cpp) for parameters that
// live on a GPU: the same rules, state layout (slots per param: [momentum]
// or [m, v]) and step counting, queued through the multi-tensor DeviceOps
// entries (a few launches for all tensors).
// Optimizer::step branches here when its parameters are on CUDA.
#include <span>

#include "core/optimizer.h"

namespace pd {

// torch.optim.SGD (dampening 0); st.slots holds one momentum buffer per
// param when c.momentum != 0 (zeros on the first step, so buf = g then).
void sgd_step_on_device(const OptimizerConfig& c, std::span<Tensor> params, std::span<const Tensor> grads,
                        OptimizerState& st, float lr);

// torch.optim.Adam (decoupled = false) or AdamW (decoupled = true);
// st.slots holds [m, v] per param; st.step is incremented first.
void adam_step_on_device(const OptimizerConfig& c, bool decoupled, std::span<Tensor> params,
                         std::span<const Tensor> grads, OptimizerState& st, float lr);

}  // namespace pd
