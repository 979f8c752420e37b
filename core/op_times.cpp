#include "core/op_times.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "core/device_ops.h"

namespace pd {

namespace {

// Every entry of DeviceOps, timed (T) or passed through (P). The
// static_assert below fails when an entry is added to DeviceOps without
// being listed here.
#define PD_DEVICE_OPS_ENTRIES(T, P)                                                                            \
  P(synchronize) P(set_deterministic) P(event_record) P(event_elapsed_ms) P(event_release)    \
  P(pinned_alloc) P(pinned_free) P(upload_async) P(upload_wait_on_compute) P(upload_release)                    \
  T(gemm) T(gemm_strided_batched) T(linear_forward) T(linear_backward_input) T(linear_backward_params_accum)   \
  T(conv2d_forward) T(conv2d_backward_data) T(conv2d_backward_params_accum) T(pool2d_forward)                  \
  T(pool2d_backward) T(pool2d_forward_indexed) T(pool2d_backward_indexed) T(adaptive_avgpool2d_forward)         \
  T(adaptive_avgpool2d_backward) T(batchnorm_forward_train) T(batchnorm_forward_eval) T(batchnorm_backward)    \
  T(batchnorm_backward_eval) T(batchnorm_backward_input) T(relu_forward) T(relu_backward) T(add)               \
  T(add_relu_forward) T(scale) T(axpy) T(divide) T(round_bf16) T(gelu_forward) T(gelu_backward)                \
  T(dropout_forward) T(dropout_backward) T(add_bias_rows) T(sum_rows_accum) T(permute) T(layernorm_forward)    \
  T(layernorm_backward) T(layernorm_backward_input) T(layernorm_backward_params_accum)                          \
  T(softmax_cross_entropy) T(causal_softmax_forward) T(causal_softmax_backward) T(attention_forward)           \
  T(attention_backward) P(fused_attention_supported) T(fused_attention_forward) T(fused_attention_backward)    \
  T(embedding_forward) T(embedding_backward_accum) T(sgd_step) T(adam_step) T(sgd_step_multi)                  \
  T(adam_step_multi) T(sum_squares_multi) T(broadcast_binary) T(broadcast_binary_backward) T(reduce_sum_strided)  \
  T(unary_forward)                                                                                            \
  T(unary_backward) T(where_forward) T(where_backward) T(softmax_axis_forward) T(softmax_axis_backward)        \
  T(strided_copy) T(index_select_forward) T(index_select_backward_accum) T(linear_gelu_forward)                \
  T(gelu_backward_rounded) T(add_layernorm_forward) T(layernorm_backward_input_add) T(pack_bf16) T(unpack_bf16)   \
  T(linear_forward_bf16) T(linear_gelu_forward_bf16) T(linear_backward_input_bf16)                               \
  T(linear_backward_params_accum_bf16) T(gelu_backward_bf16) T(add_layernorm_forward_bf16)                      \
  T(layernorm_backward_input_add_bf16) T(layernorm_backward_params_accum_bf16) T(fused_attention_forward_bf16)     \
  T(fused_attention_backward_bf16) T(softmax_cross_entropy_bf16) T(relu_forward_rounded)              \
  T(add_relu_forward_rounded)

#define PD_COUNT(e) +1
constexpr int kEntries = 0 PD_DEVICE_OPS_ENTRIES(PD_COUNT, PD_COUNT);
#undef PD_COUNT
// The entries, `name`, and the padded `pool_backward_reads_tensors` and `bf16_storage_pays`.
static_assert(sizeof(DeviceOps) == (kEntries + 3) * sizeof(void (*)()),
              "a DeviceOps member is missing from PD_DEVICE_OPS_ENTRIES (core/op_times.cpp)");

enum Entry : int {
#define PD_ENUM(e) k_##e,
  PD_DEVICE_OPS_ENTRIES(PD_ENUM, PD_ENUM)
#undef PD_ENUM
};
constexpr const char* kEntryNames[] = {
#define PD_NAME(e) #e,
    PD_DEVICE_OPS_ENTRIES(PD_NAME, PD_NAME)
#undef PD_NAME
};

struct Interval {
  int entry;
  const DeviceOps* backend;
  uint64_t start, end;
};

std::atomic<bool> g_active{false};
std::mutex g_mutex;
std::vector<Interval> g_intervals;             // guarded by g_mutex
const DeviceOps* g_backends[2] = {nullptr, nullptr};  // the CPU's and the CUDA table, set before timing
thread_local int t_depth = 0;                  // > 0 inside a timed entry

// Records the outermost entry's interval; inner entries run untimed.
class EntryScope {
 public:
  EntryScope(int entry, const DeviceOps& backend)
      : entry_(entry), backend_(backend), outer_(t_depth++ == 0) {
    if (outer_) start_ = backend_.event_record();
  }
  ~EntryScope() {
    --t_depth;
    if (!outer_) return;
    const uint64_t end = backend_.event_record();
    std::lock_guard<std::mutex> lock(g_mutex);
    g_intervals.push_back({entry_, &backend_, start_, end});
  }
  EntryScope(const EntryScope&) = delete;
  EntryScope& operator=(const EntryScope&) = delete;

 private:
  int entry_;
  const DeviceOps& backend_;
  bool outer_;
  uint64_t start_ = 0;
};

template <class Fn>
struct FnTraits;
template <class R, class... A>
struct FnTraits<R (*)(A...)> {
  template <int Slot, int E, auto Member>
  static R timed(A... args) {
    const DeviceOps& backend = *g_backends[Slot];
    EntryScope scope(E, backend);
    return (backend.*Member)(std::forward<A>(args)...);
  }
};

template <auto Member>
using EntryFn = std::remove_cvref_t<decltype(std::declval<DeviceOps&>().*Member)>;

template <int Slot>
DeviceOps make_timed(const DeviceOps& backend) {
  DeviceOps t = backend;
#define PD_WRAP(e) \
  if (backend.e) t.e = &FnTraits<EntryFn<&DeviceOps::e>>::template timed<Slot, k_##e, &DeviceOps::e>;
#define PD_KEEP(e)
  PD_DEVICE_OPS_ENTRIES(PD_WRAP, PD_KEEP)
#undef PD_WRAP
#undef PD_KEEP
  return t;
}

}  // namespace

namespace detail {

const DeviceOps& timed_device_ops(const DeviceOps& backend) {
  // Built on first use; a backend's table outlives the process (register_device_ops).
  static const DeviceOps cpu = make_timed<0>(*g_backends[0]);
  if (&backend == g_backends[0]) return cpu;
  PD_CHECK(g_backends[1] == nullptr || g_backends[1] == &backend, "op timing: a second CUDA table");
  g_backends[1] = &backend;
  static const DeviceOps cuda = make_timed<1>(backend);
  return cuda;
}

}  // namespace detail

bool op_timing_active() { return g_active.load(std::memory_order_relaxed); }

void start_op_timing() {
  PD_CHECK(!op_timing_active(), "op timing is already on");
  g_backends[0] = &cpu_device_ops();
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_intervals.clear();
  }
  g_active.store(true);
}

std::vector<OpTime> stop_op_timing() {
  g_active.store(false);
  std::vector<Interval> intervals;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    intervals.swap(g_intervals);
  }
  std::map<int, OpTime> by_entry;
  for (const Interval& i : intervals) {
    OpTime& t = by_entry[i.entry];
    t.op = kEntryNames[i.entry];
    t.calls += 1;
    t.ms += i.backend->event_elapsed_ms(i.start, i.end);  // waits for the end event
    i.backend->event_release(i.start);
    i.backend->event_release(i.end);
  }
  std::vector<OpTime> out;
  for (auto& [entry, t] : by_entry) out.push_back(std::move(t));
  std::stable_sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
  return out;
}

}  // namespace pd
