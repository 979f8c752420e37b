#include "core/cuda/dnn.h"

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/cuda/allocator.h"
#include "core/cuda/check.h"
#include "core/cuda/context.h"
#include "core/cuda/window_kernels.h"

namespace pd::cuda {

namespace {

// What cuDNN's pooling computes: floor mode, each axis padded the same on
// both sides. The rest runs on window.cu's kernels.
bool pool_fits_cudnn(const Pool2dGeometry& g) { return g.pad.is_symmetric() && !g.ceil_mode; }

kernels::PoolWindow pool_window(const Pool2dGeometry& g) {
  const Pads2d& p = g.pad;
  // Pads below the window leave an input cell in every window (ONNX requires it).
  PD_CHECK(p.top < g.kernel_h && p.bottom < g.kernel_h && p.left < g.kernel_w && p.right < g.kernel_w,
           "pooling pads must be below the window size ", g.kernel_h, "x", g.kernel_w);
  kernels::PoolWindow w;
  w.planes = g.batch * g.channels;
  w.H = g.in_h;
  w.W = g.in_w;
  w.OH = g.out_h();
  w.OW = g.out_w();
  w.kernel_h = g.kernel_h;
  w.kernel_w = g.kernel_w;
  w.stride_h = g.stride_h;
  w.stride_w = g.stride_w;
  w.top = p.top;
  w.left = p.left;
  w.bottom = p.bottom;
  w.right = p.right;
  w.count_include_pad = g.count_include_pad;
  return w;
}

void pool2d_forward_direct(PoolKind kind, const Pool2dGeometry& g, const float* x, float* y) {
  const kernels::PoolWindow p = pool_window(g);
  if (kind == PoolKind::Max) return kernels::pool_max_forward(p, x, y, nullptr, context().compute);
  kernels::pool_avg_forward(p, x, y, context().compute);
}

// Max pooling's routing is recomputed from x, as cuDNN's backward does.
void pool2d_backward_direct(PoolKind kind, const Pool2dGeometry& g, const float* x, const float* dy, float* dx) {
  const kernels::PoolWindow p = pool_window(g);
  cudaStream_t s = context().compute;
  if (kind == PoolKind::Average) return kernels::pool_avg_backward(p, dy, dx, s);
  auto argmax = device_allocator().allocate(static_cast<size_t>(p.planes * p.OH * p.OW) * sizeof(int32_t));
  kernels::pool_max_forward(p, x, nullptr, static_cast<int32_t*>(argmax->data), s);
  kernels::pool_max_backward(p, static_cast<const int32_t*>(argmax->data), dy, dx, s);
}

}  // namespace

}  // namespace pd::cuda

#if defined(PIPEDREAM_HAVE_CUDNN)

namespace pd::cuda {

namespace {

// Beyond this a cuDNN algorithm's workspace is considered too large.
constexpr size_t kMaxWorkspace = size_t(1) << 30;

int to_int(int64_t v) {
  PD_CHECK(v >= 0 && v <= (int64_t(1) << 31) - 1, "dimension ", v, " exceeds cuDNN's int range");
  return static_cast<int>(v);
}

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(int64_t n, int64_t c, int64_t h, int64_t w) {
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, to_int(n), to_int(c), to_int(h),
                                           to_int(w)));
  }
  TensorDesc() { CUDNN_CHECK(cudnnCreateTensorDescriptor(&d)); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc(int64_t k, int64_t c, int64_t h, int64_t w) {
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&d));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(d, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, to_int(k), to_int(c), to_int(h),
                                           to_int(w)));
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  // cuDNN pads each axis the same before and after: g.pad is symmetric here.
  explicit ConvDesc(const Conv2dGeometry& g) {
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
    // Cross-correlation, as every DL framework (and the CPU kernel) computes.
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d, to_int(g.pad.top), to_int(g.pad.left), to_int(g.stride_h),
                                                to_int(g.stride_w), 1, 1, CUDNN_CROSS_CORRELATION,
                                                CUDNN_DATA_FLOAT));
    if (g.groups != 1) CUDNN_CHECK(cudnnSetConvolutionGroupCount(d, to_int(g.groups)));
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

struct PoolDesc {
  cudnnPoolingDescriptor_t d = nullptr;
  PoolDesc(PoolKind kind, const Pool2dGeometry& g) {
    CUDNN_CHECK(cudnnCreatePoolingDescriptor(&d));
    cudnnPoolingMode_t mode = kind == PoolKind::Max ? CUDNN_POOLING_MAX_DETERMINISTIC
                              : g.count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                    : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    CUDNN_CHECK(cudnnSetPooling2dDescriptor(d, mode, CUDNN_PROPAGATE_NAN, to_int(g.kernel_h), to_int(g.kernel_w),
                                            to_int(g.pad.top), to_int(g.pad.left), to_int(g.stride_h),
                                            to_int(g.stride_w)));
  }
  ~PoolDesc() { cudnnDestroyPoolingDescriptor(d); }
  PoolDesc(const PoolDesc&) = delete;
  PoolDesc& operator=(const PoolDesc&) = delete;
};

// Descriptors and chosen algorithms for one convolution shape.
struct ConvPlan {
  TensorDesc x, y, bias;
  FilterDesc w;
  ConvDesc conv;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  cudnnMathType_t fwd_math{}, bwd_data_math{}, bwd_filter_math{};
  size_t fwd_ws = 0, bwd_data_ws = 0, bwd_filter_ws = 0;
  explicit ConvPlan(const Conv2dGeometry& g)
      : x(g.batch, g.in_channels, g.in_h, g.in_w),
        y(g.batch, g.out_channels, g.out_h(), g.out_w()),
        bias(1, g.out_channels, 1, 1),
        w(g.out_channels, g.group_in_channels(), g.kernel_h, g.kernel_w),
        conv(g) {}
};

// The geometry (pads symmetric: top and left stand for their axes) and the math modes.
using PlanKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                           int64_t, int64_t, bool, bool>;

std::mutex g_plans_mu;
std::map<PlanKey, std::unique_ptr<ConvPlan>> g_plans;

// Picks the first (fastest by heuristics) algorithm that succeeded, fits the
// workspace limit, matches the math mode, and is deterministic when asked.
template <class Perf>
const Perf* pick(const std::vector<Perf>& perfs, int count, bool deterministic, bool tf32) {
  for (int i = 0; i < count; ++i) {
    const Perf& p = perfs[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kMaxWorkspace) continue;
    if (deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
    if (!tf32 && (p.mathType == CUDNN_TENSOR_OP_MATH || p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
      continue;
    // Down-conversion may mean FP16, which rounds a bf16 value's exponent
    // range away: never under TF32 math alone.
    if (p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
    return &p;
  }
  return nullptr;
}

ConvPlan& plan_for(const Conv2dGeometry& g, Precision precision) {
  Context& c = context();
  PD_CHECK(g.pad.is_symmetric(), "cuDNN convolution needs the same pad before and after each axis");
  PlanKey key{
      g.batch,    g.in_channels, g.in_h,    g.in_w,     g.out_channels, g.kernel_h,      g.kernel_w,
      g.stride_h, g.stride_w,    g.pad.top, g.pad.left, g.groups,       c.deterministic, tensor_math(c, precision)};
  std::lock_guard<std::mutex> lock(g_plans_mu);
  auto it = g_plans.find(key);
  if (it != g_plans.end()) return *it->second;
  auto plan = std::make_unique<ConvPlan>(g);
  ConvPlan& p = *plan;
  const bool tf32 = tensor_math(c, precision);
  // Without --deterministic, time the algorithms on this GPU (cudnnFind*) and
  // take the fastest; with it, the heuristics' ranked list, so that every
  // process of a run picks the same algorithm whatever its timings.
  const bool measure = !c.deterministic;
  cudnnMathType_t math = tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
  CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv.d, math));
  int n = 0;
  {
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perfs(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
    if (measure)
      CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(c.cudnn, p.x.d, p.w.d, p.conv.d, p.y.d,
                                                       static_cast<int>(perfs.size()), &n, perfs.data()));
    else
      CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(c.cudnn, p.x.d, p.w.d, p.conv.d, p.y.d,
                                                         static_cast<int>(perfs.size()), &n, perfs.data()));
    const auto* best = pick(perfs, n, c.deterministic, tf32);
    PD_CHECK(best, "cuDNN offers no usable forward convolution algorithm for this shape");
    p.fwd = best->algo;
    p.fwd_math = best->mathType;
    p.fwd_ws = best->memory;
  }
  {
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perfs(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
    if (measure)
      CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(c.cudnn, p.w.d, p.y.d, p.conv.d, p.x.d,
                                                            static_cast<int>(perfs.size()), &n, perfs.data()));
    else
      CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(c.cudnn, p.w.d, p.y.d, p.conv.d, p.x.d,
                                                              static_cast<int>(perfs.size()), &n, perfs.data()));
    const auto* best = pick(perfs, n, c.deterministic, tf32);
    PD_CHECK(best, "cuDNN offers no usable backward-data convolution algorithm for this shape");
    p.bwd_data = best->algo;
    p.bwd_data_math = best->mathType;
    p.bwd_data_ws = best->memory;
  }
  {
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perfs(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
    if (measure)
      CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(c.cudnn, p.x.d, p.y.d, p.conv.d, p.w.d,
                                                              static_cast<int>(perfs.size()), &n, perfs.data()));
    else
      CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(c.cudnn, p.x.d, p.y.d, p.conv.d, p.w.d,
                                                                static_cast<int>(perfs.size()), &n, perfs.data()));
    const auto* best = pick(perfs, n, c.deterministic, tf32);
    PD_CHECK(best, "cuDNN offers no usable backward-filter convolution algorithm for this shape");
    p.bwd_filter = best->algo;
    p.bwd_filter_math = best->mathType;
    p.bwd_filter_ws = best->memory;
  }
  // CUDNN_DEFAULT_MATH permits TF32 on Ampere and later: without TF32 every
  // algorithm runs in FMA (true FP32) math.
  if (!tf32) p.fwd_math = p.bwd_data_math = p.bwd_filter_math = CUDNN_FMA_MATH;
  // The heuristics' memory figure is advisory; ask for the exact sizes.
  CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv.d, p.fwd_math));
  CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(c.cudnn, p.x.d, p.w.d, p.conv.d, p.y.d, p.fwd, &p.fwd_ws));
  CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv.d, p.bwd_data_math));
  CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(c.cudnn, p.w.d, p.y.d, p.conv.d, p.x.d, p.bwd_data,
                                                           &p.bwd_data_ws));
  CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv.d, p.bwd_filter_math));
  CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(c.cudnn, p.x.d, p.y.d, p.conv.d, p.w.d, p.bwd_filter,
                                                             &p.bwd_filter_ws));
  return *(g_plans[key] = std::move(plan));
}

// Workspace from the caching allocator, ordered on the compute stream: it
// may be reused by later work as soon as this storage is dropped.
std::shared_ptr<Storage> workspace(size_t bytes) {
  return bytes ? device_allocator().allocate(bytes) : nullptr;
}

const float kOne = 1.0f, kZero = 0.0f;

// cuDNN pads symmetrically: a convolution with other pads runs unpadded on
// a zero-padded copy of x (the same output size, the same sums).
Conv2dGeometry on_padded_input(const Conv2dGeometry& g) {
  Conv2dGeometry s = g;
  s.in_h = g.in_h + g.pad.top + g.pad.bottom;
  s.in_w = g.in_w + g.pad.left + g.pad.right;
  s.pad = Pads2d{};
  return s;
}
std::shared_ptr<Storage> padded_input(const Conv2dGeometry& g, const float* x) {
  const Conv2dGeometry s = on_padded_input(g);
  auto xp = workspace(static_cast<size_t>(s.batch * s.in_channels * s.in_h * s.in_w) * sizeof(float));
  kernels::pad_planes(g.batch * g.in_channels, g.in_h, g.in_w, g.pad.top, g.pad.left, g.pad.bottom, g.pad.right, x,
                      static_cast<float*>(xp->data), context().compute);
  return xp;
}

}  // namespace

void conv2d_forward(Precision precision, const Conv2dGeometry& g, const float* x, const float* w, const float* bias,
                    float* y) {
  if (!g.pad.is_symmetric()) {
    auto xp = padded_input(g, x);
    return conv2d_forward(precision, on_padded_input(g), static_cast<const float*>(xp->data), w, bias, y);
  }
  ConvPlan& p = plan_for(g, precision);
  Context& c = context();
  auto ws = workspace(p.fwd_ws);
  CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv.d, p.fwd_math));
  CUDNN_CHECK(cudnnConvolutionForward(c.cudnn, &kOne, p.x.d, x, p.w.d, w, p.conv.d, p.fwd, ws ? ws->data : nullptr,
                                      p.fwd_ws, &kZero, p.y.d, y));
  if (bias) CUDNN_CHECK(cudnnAddTensor(c.cudnn, &kOne, p.bias.d, bias, &kOne, p.y.d, y));
}

void conv2d_backward_data(Precision precision, const Conv2dGeometry& g, const float* w, const float* dy, float* dx) {
  if (!g.pad.is_symmetric()) {
    const Conv2dGeometry s = on_padded_input(g);
    auto dxp = workspace(static_cast<size_t>(s.batch * s.in_channels * s.in_h * s.in_w) * sizeof(float));
    conv2d_backward_data(precision, s, w, dy, static_cast<float*>(dxp->data));
    kernels::crop_planes(g.batch * g.in_channels, g.in_h, g.in_w, g.pad.top, g.pad.left, g.pad.bottom, g.pad.right,
                         static_cast<const float*>(dxp->data), dx, context().compute);
    return;
  }
  ConvPlan& p = plan_for(g, precision);
  Context& c = context();
  auto ws = workspace(p.bwd_data_ws);
  CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv.d, p.bwd_data_math));
  CUDNN_CHECK(cudnnConvolutionBackwardData(c.cudnn, &kOne, p.w.d, w, p.y.d, dy, p.conv.d, p.bwd_data,
                                           ws ? ws->data : nullptr, p.bwd_data_ws, &kZero, p.x.d, dx));
}

void conv2d_backward_params_accum(Precision precision, const Conv2dGeometry& g, const float* x, const float* dy,
                                  float* dw, float* dbias) {
  if (!g.pad.is_symmetric()) {
    auto xp = padded_input(g, x);
    return conv2d_backward_params_accum(precision, on_padded_input(g), static_cast<const float*>(xp->data), dy, dw,
                                        dbias);
  }
  ConvPlan& p = plan_for(g, precision);
  Context& c = context();
  auto ws = workspace(p.bwd_filter_ws);
  CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv.d, p.bwd_filter_math));
  // beta = 1: gradients accumulate, as Layer::backward promises.
  CUDNN_CHECK(cudnnConvolutionBackwardFilter(c.cudnn, &kOne, p.x.d, x, p.y.d, dy, p.conv.d, p.bwd_filter,
                                             ws ? ws->data : nullptr, p.bwd_filter_ws, &kOne, p.w.d, dw));
  if (dbias) CUDNN_CHECK(cudnnConvolutionBackwardBias(c.cudnn, &kOne, p.y.d, dy, &kOne, p.bias.d, dbias));
}

void pool2d_forward(PoolKind kind, const Pool2dGeometry& g, const float* x, float* y) {
  if (!pool_fits_cudnn(g)) return pool2d_forward_direct(kind, g, x, y);
  Context& c = context();
  PoolDesc pool(kind, g);
  TensorDesc xd(g.batch, g.channels, g.in_h, g.in_w), yd(g.batch, g.channels, g.out_h(), g.out_w());
  CUDNN_CHECK(cudnnPoolingForward(c.cudnn, pool.d, &kOne, xd.d, x, &kZero, yd.d, y));
}

void pool2d_backward(PoolKind kind, const Pool2dGeometry& g, const float* x, const float* y, const float* dy,
                     float* dx) {
  if (!pool_fits_cudnn(g)) return pool2d_backward_direct(kind, g, x, dy, dx);
  Context& c = context();
  PoolDesc pool(kind, g);
  TensorDesc xd(g.batch, g.channels, g.in_h, g.in_w), yd(g.batch, g.channels, g.out_h(), g.out_w());
  CUDNN_CHECK(cudnnPoolingBackward(c.cudnn, pool.d, &kOne, yd.d, y, yd.d, dy, xd.d, x, &kZero, xd.d, dx));
}

namespace {

void check_bn_eps(float eps) {
  if (eps < CUDNN_BN_MIN_EPSILON)
    throw UserError(cat("batch norm eps ", eps, " is below cuDNN's minimum ", CUDNN_BN_MIN_EPSILON));
}

}  // namespace

void batchnorm_forward_train(int64_t n, int64_t ch, int64_t h, int64_t w, const float* x, const float* gamma,
                             const float* beta, float momentum, float eps, float* running_mean, float* running_var,
                             float* save_mean, float* save_invstd, float* y) {
  check_bn_eps(eps);
  Context& c = context();
  TensorDesc xd(n, ch, h, w), pd;
  CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(pd.d, xd.d, CUDNN_BATCHNORM_SPATIAL));
  CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(c.cudnn, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, xd.d, x, xd.d,
                                                     y, pd.d, gamma, beta, momentum, running_mean, running_var, eps,
                                                     save_mean, save_invstd));
}

void batchnorm_forward_eval(int64_t n, int64_t ch, int64_t h, int64_t w, const float* x, const float* gamma,
                            const float* beta, const float* running_mean, const float* running_var, float eps,
                            float* y) {
  check_bn_eps(eps);
  Context& c = context();
  TensorDesc xd(n, ch, h, w), pd;
  CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(pd.d, xd.d, CUDNN_BATCHNORM_SPATIAL));
  CUDNN_CHECK(cudnnBatchNormalizationForwardInference(c.cudnn, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, xd.d, x,
                                                      xd.d, y, pd.d, gamma, beta, running_mean, running_var, eps));
}

void batchnorm_backward(int64_t n, int64_t ch, int64_t h, int64_t w, const float* x, const float* dy,
                        const float* gamma, const float* save_mean, const float* save_invstd, float eps, float* dx,
                        float* dgamma_accum, float* dbeta_accum) {
  check_bn_eps(eps);
  Context& c = context();
  TensorDesc xd(n, ch, h, w), pd;
  CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(pd.d, xd.d, CUDNN_BATCHNORM_SPATIAL));
  // Data gradient overwrites (beta 0); parameter gradients accumulate (beta 1).
  CUDNN_CHECK(cudnnBatchNormalizationBackward(c.cudnn, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, &kOne, &kOne, xd.d, x,
                                              xd.d, dy, xd.d, dx, pd.d, gamma, dgamma_accum, dbeta_accum, eps,
                                              save_mean, save_invstd));
}

size_t conv_plan_count() {
  std::lock_guard<std::mutex> lock(g_plans_mu);
  return g_plans.size();
}

void clear_conv_plans() {
  std::lock_guard<std::mutex> lock(g_plans_mu);
  g_plans.clear();
}

}  // namespace pd::cuda

#else  // no cuDNN: the backend still builds; these operations refuse to run.

namespace pd::cuda {

namespace {
[[noreturn]] void no_cudnn() {
  throw UserError("this pipedream was built without cuDNN: convolution, pooling and batch norm need it on GPU");
}
}  // namespace

void conv2d_forward(Precision, const Conv2dGeometry&, const float*, const float*, const float*, float*) { no_cudnn(); }
void conv2d_backward_data(Precision, const Conv2dGeometry&, const float*, const float*, float*) { no_cudnn(); }
void conv2d_backward_params_accum(Precision, const Conv2dGeometry&, const float*, const float*, float*, float*) {
  no_cudnn();
}
void pool2d_forward(PoolKind kind, const Pool2dGeometry& g, const float* x, float* y) {
  if (pool_fits_cudnn(g)) no_cudnn();
  pool2d_forward_direct(kind, g, x, y);
}
void pool2d_backward(PoolKind kind, const Pool2dGeometry& g, const float* x, const float*, const float* dy, float* dx) {
  if (pool_fits_cudnn(g)) no_cudnn();
  pool2d_backward_direct(kind, g, x, dy, dx);
}
void batchnorm_forward_train(int64_t, int64_t, int64_t, int64_t, const float*, const float*, const float*, float,
                             float, float*, float*, float*, float*, float*) { no_cudnn(); }
void batchnorm_forward_eval(int64_t, int64_t, int64_t, int64_t, const float*, const float*, const float*,
                            const float*, const float*, float, float*) { no_cudnn(); }
void batchnorm_backward(int64_t, int64_t, int64_t, int64_t, const float*, const float*, const float*, const float*,
                        const float*, float, float*, float*, float*) { no_cudnn(); }
size_t conv_plan_count() { return 0; }
void clear_conv_plans() {}

}  // namespace pd::cuda

#endif
