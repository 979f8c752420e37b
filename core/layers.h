#pragma once
// Constructors of every layer of the compute core. Shapes are per sample
// (CHW for images, [T] tokens / [T, D] features for sequences); the batch
// dimension is always first at run time.
#include <cstdint>

#include "core/layer.h"

namespace pd {

// y = x W^T + b over the last dimension (any leading dims). W: [out, in].
LayerPtr make_linear(int64_t in_features, int64_t out_features, bool bias = true);
// NCHW convolution, square kernel. W: [out, in, k, k], b: [out].
LayerPtr make_conv2d(int64_t in_channels, int64_t out_channels, int kernel, int stride = 1,
                     int padding = 0, bool bias = true);
LayerPtr make_maxpool2d(int kernel, int stride = -1 /* = kernel */, int padding = 0);
LayerPtr make_avgpool2d(int kernel, int stride = -1 /* = kernel */, int padding = 0);
LayerPtr make_adaptive_avgpool2d(int out_h, int out_w);
LayerPtr make_relu();
LayerPtr make_gelu();  // tanh approximation
LayerPtr make_dropout(float p);
// Params: weight, bias [C]; buffers: running_mean, running_var [C].
LayerPtr make_batchnorm2d(int64_t channels, float eps = 1e-5f, float momentum = 0.1f);
// Over the last dimension. Params: weight, bias [D].
LayerPtr make_layernorm(int64_t dim, float eps = 1e-5f);
// Token ids [T] (I32) -> [T, D]: token embedding + learned position embedding.
LayerPtr make_embedding(int64_t vocab, int64_t dim, int64_t context);
// Causal multi-head self-attention on [T, D] with qkv and output projections.
LayerPtr make_causal_self_attention(int64_t dim, int64_t heads);
LayerPtr make_flatten();
// ResNet blocks (conv-bn-relu with identity or 1x1-conv-bn shortcut).
LayerPtr make_resnet_basic_block(int64_t in_channels, int64_t out_channels, int stride);
LayerPtr make_resnet_bottleneck_block(int64_t in_channels, int64_t mid_channels,
                                      int64_t out_channels, int stride);
// Pre-LN GPT block: x + attn(ln1(x)); x + mlp(ln2(x)) with a 4x GELU MLP.
LayerPtr make_transformer_block(int64_t dim, int64_t heads, float dropout = 0.0f);

}  // namespace pd
