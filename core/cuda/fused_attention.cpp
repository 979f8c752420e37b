#include "core/cuda/fused_attention.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "core/cuda/allocator.h"
#include "core/cuda/check.h"
#include "core/cuda/context.h"
#include "core/cuda/fused_attention_layout.h"
#include "core/cuda/kernels.h"
#include "core/error.h"

#if defined(PIPEDREAM_HAVE_CUDNN)

namespace pd::cuda {

namespace {

// --- errors: every failure names the call, the descriptor and the attribute ---

std::string cudnn_failure(const char* call, const std::string& where, cudnnStatus_t st) {
  char last[2048] = {0};
  cudnnGetLastErrorString(last, sizeof last);
  return cat("cuDNN fused attention: ", call, "(", where, ") returned ", cudnnGetErrorString(st), " (status ",
             static_cast<int>(st), ")", last[0] ? cat("; cudnnGetLastErrorString: ", last) : std::string());
}

void check(cudnnStatus_t st, const char* call, const std::string& where) {
  if (st != CUDNN_STATUS_SUCCESS) throw RuntimeFailure(cudnn_failure(call, where, st));
}

// An owned backend descriptor; `what` names it in error messages.
class Desc {
 public:
  Desc(cudnnBackendDescriptorType_t type, std::string what) : what_(std::move(what)) {
    check(cudnnBackendCreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor", what_);
  }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  const std::string& what() const { return what_; }
  void set(cudnnBackendAttributeName_t attr, const char* attr_name, cudnnBackendAttributeType_t type,
           int64_t count, const void* value) {
    check(cudnnBackendSetAttribute(d_, attr, type, count, value), "cudnnBackendSetAttribute",
          cat(what_, ", ", attr_name));
  }
  void finalize() { check(cudnnBackendFinalize(d_), "cudnnBackendFinalize", what_); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
  std::string what_;
};

#define PD_SET(desc, attr, type, count, value) (desc).set(attr, #attr, type, count, value)

// Unique ids of the tensors bound in the variant packs.
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kScale, kNegInf, kOne, kDO, kDQ, kDK, kDV, kSoftmaxSum, kDQAccum,
  kFirstVirtual = 100,
};

// What a graph is built for: plans on the process's GPU, or (graph_only)
// just the finalised operation graph, which needs no GPU - the check that
// every descriptor is well-formed (fused_attention_graph_errors).
struct Target {
  cudnnHandle_t handle = nullptr;
  bool graph_only = false;
};

// A built plan (or the reason there is none) and what keeps it alive.
struct PlanEntry {
  std::vector<std::unique_ptr<Desc>> parts;  // tensors, operations, graph, engine config
  std::unique_ptr<Desc> plan;
  int64_t workspace = 0;
  std::string info;  // "engine N, workspace W bytes" or the refusal
};

// Builds one operation graph, op by op, the way cuDNN's fused-attention
// pattern matcher expects it (the same graphs cudnn-frontend lowers its
// SDPA nodes to for cuDNN 9.x before the unified SDPA operation).
class GraphBuilder {
 public:
  explicit GraphBuilder(std::string name) : name_(std::move(name)) {}

  cudnnBackendDescriptor_t tensor(int64_t uid, cudnnDataType_t type, const View4& v, const char* label) {
    return make_tensor(uid, type, v, false, false, label);
  }
  // A host scalar passed by value at execution (FP32, broadcast).
  cudnnBackendDescriptor_t scalar(int64_t uid, const char* label) {
    return make_tensor(uid, CUDNN_DATA_FLOAT, View4{{1, 1, 1, 1}, {1, 1, 1, 1}, 0}, false, true, label);
  }
  cudnnBackendDescriptor_t virt(cudnnDataType_t type, const View4& v, const char* label) {
    return make_tensor(next_virtual_++, type, v, true, false, label);
  }

  void pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t math, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y,
                 const char* label, int64_t axis = -1) {
    Desc& pw = own(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, cat(label, " pointwise descriptor"));
    PD_SET(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    PD_SET(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math);
    if (mode == CUDNN_POINTWISE_GEN_INDEX) PD_SET(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    pw.finalize();
    Desc& op = own(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, cat(label, " pointwise operation"));
    cudnnBackendDescriptor_t pwd = pw.get();
    PD_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pwd);
    PD_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b) PD_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    if (t) PD_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
    PD_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    const float alpha = 1.0f;
    PD_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &alpha);
    PD_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &alpha);
    add_op(op);
  }
  void unary(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y, const char* label) {
    pointwise(mode, CUDNN_DATA_FLOAT, x, nullptr, nullptr, y, label);
  }
  void binary(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
              cudnnBackendDescriptor_t y, const char* label) {
    pointwise(mode, CUDNN_DATA_FLOAT, x, b, nullptr, y, label);
  }

  // c = a b over the last two dimensions, batched over the first two; FP32 accumulation.
  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c, const char* label) {
    Desc& mm = own(CUDNN_BACKEND_MATMUL_DESCRIPTOR, cat(label, " matmul descriptor"));
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    PD_SET(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    mm.finalize();
    Desc& op = own(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, cat(label, " matmul operation"));
    cudnnBackendDescriptor_t mmd = mm.get();
    PD_SET(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    PD_SET(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    PD_SET(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    PD_SET(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mmd);
    add_op(op);
  }

  // y = reduction of x over the dimensions where y has extent 1.
  void reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y,
                 const char* label) {
    Desc& rd = own(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, cat(label, " reduction descriptor"));
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    PD_SET(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    PD_SET(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    rd.finalize();
    Desc& op = own(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, cat(label, " reduction operation"));
    cudnnBackendDescriptor_t rdd = rd.get();
    PD_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    PD_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    PD_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rdd);
    add_op(op);
  }

  // y is x under other dimensions/strides (here: a transposed view).
  void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y, const char* label) {
    Desc& op = own(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, cat(label, " reshape operation"));
    PD_SET(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    PD_SET(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    add_op(op);
  }

  // Finalises the graph and keeps the first engine configuration of
  // cuDNN's heuristics (mode A, then the fallback list) whose plan builds.
  // Throws RuntimeFailure listing every refusal.
  PlanEntry build(Target target) {
    PlanEntry e;
    auto graph = std::make_unique<Desc>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, cat(name_, " operation graph"));
    PD_SET(*graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops_.size()),
           ops_.data());
    if (target.handle) PD_SET(*graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &target.handle);
    graph->finalize();
    if (target.graph_only) {
      e.info = cat(name_, ": operation graph of ", ops_.size(), " operations finalised");
      return e;
    }
    std::string refusals;
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      const char* mode_name = mode == CUDNN_HEUR_MODE_A ? "heuristics mode A" : "heuristics fallback";
      try {
        Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, cat(name_, " ", mode_name));
        cudnnBackendDescriptor_t g = graph->get();
        PD_SET(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g);
        PD_SET(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
        heur.finalize();
        int64_t count = 0;
        check(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                       &count, nullptr),
              "cudnnBackendGetAttribute", cat(heur.what(), ", CUDNN_ATTR_ENGINEHEUR_RESULTS count"));
        if (count <= 0) {
          refusals += cat("\n  ", mode_name, ": no engine configuration");
          continue;
        }
        std::vector<std::unique_ptr<Desc>> cfgs;
        std::vector<cudnnBackendDescriptor_t> raw;
        for (int64_t i = 0; i < count; ++i) {
          cfgs.push_back(std::make_unique<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, cat(name_, " engine config ", i)));
          raw.push_back(cfgs.back()->get());
        }
        int64_t got = 0;
        check(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                       count, &got, raw.data()),
              "cudnnBackendGetAttribute", cat(heur.what(), ", CUDNN_ATTR_ENGINEHEUR_RESULTS"));
        if (got <= 0) {
          char last[1024] = {0};
          cudnnGetLastErrorString(last, sizeof last);
          refusals += cat("\n  ", mode_name, ": ", count, " engine configurations counted, ", got, " returned",
                          last[0] ? cat(" (", last, ")") : std::string());
        }
        for (int64_t i = 0; i < got && i < count; ++i) {
          try {
            auto plan = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR,
                                               cat(name_, " execution plan (", mode_name, " config ", i, ")"));
            PD_SET(*plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &target.handle);
            PD_SET(*plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw[i]);
            plan->finalize();
            int64_t n = 0;
            check(cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                           &n, &e.workspace),
                  "cudnnBackendGetAttribute", cat(plan->what(), ", CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE"));
            e.info = cat(name_, ": ", mode_name, " config ", i, " of ", got, ", engine ", engine_index(raw[i]),
                         ", workspace ", e.workspace, " bytes, cuDNN runtime ", cudnnGetVersion());
            e.plan = std::move(plan);
            e.parts = std::move(keep_);
            e.parts.push_back(std::move(graph));
            for (auto& c : cfgs) e.parts.push_back(std::move(c));
            return e;
          } catch (const RuntimeFailure& f) {
            refusals += cat("\n  ", f.what());
          }
        }
      } catch (const RuntimeFailure& f) {
        refusals += cat("\n  ", f.what());
      }
    }
    throw RuntimeFailure(cat(name_, ": no cuDNN engine builds this graph:", refusals));
  }

 private:
  Desc& own(cudnnBackendDescriptorType_t type, std::string what) {
    keep_.push_back(std::make_unique<Desc>(type, cat(name_, ": ", what)));
    return *keep_.back();
  }
  void add_op(Desc& op) {
    op.finalize();
    ops_.push_back(op.get());
  }
  cudnnBackendDescriptor_t make_tensor(int64_t uid, cudnnDataType_t type, const View4& v, bool is_virtual,
                                       bool by_value, const char* label) {
    Desc& t = own(CUDNN_BACKEND_TENSOR_DESCRIPTOR, cat("tensor ", label, " (uid ", uid, ")"));
    const int64_t alignment = 16;
    PD_SET(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    PD_SET(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, v.dim.data());
    PD_SET(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, v.stride.data());
    PD_SET(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    PD_SET(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    PD_SET(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) PD_SET(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    t.finalize();
    return t.get();
  }
  // The engine's global index, for diagnostics only (-1 when unreadable).
  static int64_t engine_index(cudnnBackendDescriptor_t cfg) {
    cudnnBackendDescriptor_t engine = nullptr;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) != CUDNN_STATUS_SUCCESS) return -1;
    int64_t n = 0, index = -1;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine) ==
        CUDNN_STATUS_SUCCESS)
      cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);
    cudnnBackendDestroyDescriptor(engine);
    return index;
  }

  std::string name_;
  int64_t next_virtual_ = kFirstVirtual;
  std::vector<std::unique_ptr<Desc>> keep_;
  std::vector<cudnnBackendDescriptor_t> ops_;
};

// Two spellings of the same graph, tried in order: the one cudnn-frontend
// 1.x lowers its SDPA nodes to for cuDNN 9 (INT32 indices; in the backward
// the mask applied after subtracting the stats), and the one of NVIDIA's
// earlier backend-API flash-attention sample (FP32 indices; mask first).
struct GraphForm {
  const char* name;
  cudnnDataType_t index_type;
  bool mask_before_stats;
};
constexpr GraphForm kGraphForms[] = {{"frontend form", CUDNN_DATA_INT32, false},
                                     {"sample form", CUDNN_DATA_FLOAT, true}};

// Keeps entries where row >= column of a [B, H, T, T] score tensor and puts
// -inf elsewhere (top-left aligned causal mask), as gen-index + compare +
// select - the form cuDNN's flash engines recognise.
cudnnBackendDescriptor_t causal_mask(GraphBuilder& g, const GraphForm& form, const AttentionShape& s,
                                     cudnnBackendDescriptor_t scores, cudnnBackendDescriptor_t neg_inf,
                                     const char* label) {
  const View4 sv = scores_view(s);
  auto row = g.virt(form.index_type, sv, "row index");
  auto col = g.virt(form.index_type, sv, "column index");
  auto keep = g.virt(CUDNN_DATA_BOOLEAN, sv, "causal keep");
  auto masked = g.virt(CUDNN_DATA_FLOAT, sv, label);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, scores, nullptr, nullptr, row, "gen row index", 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, scores, nullptr, nullptr, col, "gen column index", 3);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, nullptr, keep, "row >= column");
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, scores, neg_inf, keep, masked, "causal select");
  return masked;
}

// O = softmax(causal(scale Q Kᵀ)) V; stats = max + log(sum exp) per row.
PlanEntry build_forward(const AttentionShape& s, const GraphForm& form, Target target) {
  GraphBuilder g(cat("fused attention forward [batch ", s.batch, ", T ", s.T, ", heads ", s.heads, ", head_dim ",
                     s.head_dim, "] (", form.name, ")"));
  const View4 sv = scores_view(s), rv = row_stats_view(s);
  auto q = g.tensor(kQ, CUDNN_DATA_BFLOAT16, qkv_part_view(s, 0), "Q");
  auto kt = g.tensor(kK, CUDNN_DATA_BFLOAT16, transposed(qkv_part_view(s, 1)), "K transposed");
  auto v = g.tensor(kV, CUDNN_DATA_BFLOAT16, qkv_part_view(s, 2), "V");
  auto o = g.tensor(kO, CUDNN_DATA_BFLOAT16, output_view(s), "O");
  auto stats = g.tensor(kStats, CUDNN_DATA_FLOAT, rv, "stats");
  auto scale = g.scalar(kScale, "scale");
  auto neg_inf = g.scalar(kNegInf, "-inf");

  auto s1 = g.virt(CUDNN_DATA_FLOAT, sv, "Q Kt");
  g.matmul(q, kt, s1, "bmm1 Q Kt");
  auto s2 = g.virt(CUDNN_DATA_FLOAT, sv, "scaled scores");
  g.binary(CUDNN_POINTWISE_MUL, s1, scale, s2, "attn scale");
  auto s3 = causal_mask(g, form, s, s2, neg_inf, "masked scores");
  auto max = g.virt(CUDNN_DATA_FLOAT, rv, "row max");
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, s3, max, "softmax max");
  auto centred = g.virt(CUDNN_DATA_FLOAT, sv, "scores - max");
  g.binary(CUDNN_POINTWISE_SUB, s3, max, centred, "softmax sub");
  auto e = g.virt(CUDNN_DATA_FLOAT, sv, "exp");
  g.unary(CUDNN_POINTWISE_EXP, centred, e, "softmax exp");
  auto sum = g.virt(CUDNN_DATA_FLOAT, rv, "row sum");
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum, "softmax sum");
  auto log_sum = g.virt(CUDNN_DATA_FLOAT, rv, "log row sum");
  g.unary(CUDNN_POINTWISE_LOG, sum, log_sum, "softmax log");
  g.binary(CUDNN_POINTWISE_ADD, max, log_sum, stats, "softmax stats");
  auto p = g.virt(CUDNN_DATA_BFLOAT16, sv, "P");  // bmm2's A operand in the I/O type
  g.binary(CUDNN_POINTWISE_DIV, e, sum, p, "softmax div");
  g.matmul(p, v, o, "bmm2 P V");
  return g.build(target);
}

// dQ, dK, dV from dO, recomputing P from Q, K and the forward's stats.
// deterministic: dQ is written by its matmul directly (cuDNN's dP-workspace
// variant, no atomics); otherwise through an FP32 accumulator the kernel
// adds into from several thread blocks, then an identity to bf16.
PlanEntry build_backward(const AttentionShape& s, bool deterministic, const GraphForm& form, Target target) {
  GraphBuilder g(cat("fused attention backward [batch ", s.batch, ", T ", s.T, ", heads ", s.heads, ", head_dim ",
                     s.head_dim, deterministic ? ", deterministic" : "", "] (", form.name, ")"));
  const View4 sv = scores_view(s), rv = row_stats_view(s);
  View4 pt = transposed(sv);
  auto q = g.tensor(kQ, CUDNN_DATA_BFLOAT16, qkv_part_view(s, 0), "Q");
  auto kt = g.tensor(kK, CUDNN_DATA_BFLOAT16, transposed(qkv_part_view(s, 1)), "K transposed");
  auto vt = g.tensor(kV, CUDNN_DATA_BFLOAT16, transposed(qkv_part_view(s, 2)), "V transposed");
  auto o = g.tensor(kO, CUDNN_DATA_BFLOAT16, output_view(s), "O");
  auto d_o = g.tensor(kDO, CUDNN_DATA_BFLOAT16, output_view(s), "dO");
  auto stats = g.tensor(kStats, CUDNN_DATA_FLOAT, rv, "stats");
  auto dq = g.tensor(kDQ, CUDNN_DATA_BFLOAT16, qkv_part_view(s, 0), "dQ");
  auto dk = g.tensor(kDK, CUDNN_DATA_BFLOAT16, qkv_part_view(s, 1), "dK");
  auto dv = g.tensor(kDV, CUDNN_DATA_BFLOAT16, qkv_part_view(s, 2), "dV");
  auto softmax_sum = g.tensor(kSoftmaxSum, CUDNN_DATA_FLOAT, rv, "softmax sum");
  auto scale = g.scalar(kScale, "scale");
  auto neg_inf = g.scalar(kNegInf, "-inf");
  auto one = g.scalar(kOne, "one");

  // softmax_sum = rowsum(dO * O)
  View4 dotv = output_view(s);
  dotv.stride = {s.heads * s.T * s.head_dim, s.T * s.head_dim, s.heads * s.head_dim, 1};
  auto dot = g.virt(CUDNN_DATA_FLOAT, dotv, "dO * O");
  g.binary(CUDNN_POINTWISE_MUL, d_o, o, dot, "mul dO O");
  auto dot_sum = g.virt(CUDNN_DATA_FLOAT, rv, "rowsum dO * O");
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, dot, dot_sum, "reduce dO O");
  g.binary(CUDNN_POINTWISE_MUL, dot_sum, one, softmax_sum, "softmax sum (no dropout)");

  // P = exp(causal(scale Q Kt) - stats)
  auto s1 = g.virt(CUDNN_DATA_FLOAT, sv, "Q Kt");
  g.matmul(q, kt, s1, "matmul Q Kt");
  auto s2 = g.virt(CUDNN_DATA_FLOAT, sv, "scaled scores");
  g.binary(CUDNN_POINTWISE_MUL, s1, scale, s2, "attn scale");
  auto s4 = g.virt(CUDNN_DATA_FLOAT, sv, "scores - stats");
  if (form.mask_before_stats) {
    auto s3 = causal_mask(g, form, s, s2, neg_inf, "masked scores");
    g.binary(CUDNN_POINTWISE_SUB, s3, stats, s4, "sub stats");
  } else {
    auto s3 = g.virt(CUDNN_DATA_FLOAT, sv, "scores - stats (unmasked)");
    g.binary(CUDNN_POINTWISE_SUB, s2, stats, s3, "sub stats");
    s4 = causal_mask(g, form, s, s3, neg_inf, "masked scores - stats");
  }
  auto p = g.virt(CUDNN_DATA_FLOAT, sv, "P");
  g.unary(CUDNN_POINTWISE_EXP, s4, p, "exp");

  // dV = Pᵀ dO
  auto p_t = g.virt(CUDNN_DATA_BFLOAT16, pt, "P transposed");
  g.reshape(p, p_t, "reshape P");
  g.matmul(p_t, d_o, dv, "matmul Pt dO");

  // dS = P * (dO Vᵀ - softmax_sum) * scale
  auto dp = g.virt(CUDNN_DATA_FLOAT, sv, "dP");
  g.matmul(d_o, vt, dp, "matmul dO Vt");
  auto dp_centred = g.virt(CUDNN_DATA_FLOAT, sv, "dP - softmax sum");
  g.binary(CUDNN_POINTWISE_SUB, dp, softmax_sum, dp_centred, "sub dP softmax sum");
  auto ds_unscaled = g.virt(CUDNN_DATA_FLOAT, sv, "dS unscaled");
  g.binary(CUDNN_POINTWISE_MUL, dp_centred, p, ds_unscaled, "mul dP P");
  auto ds = g.virt(CUDNN_DATA_FLOAT, sv, "dS");
  g.binary(CUDNN_POINTWISE_MUL, ds_unscaled, scale, ds, "mul dS scale");

  // dK = dSᵀ Q
  auto ds_t = g.virt(CUDNN_DATA_BFLOAT16, pt, "dS transposed");
  g.reshape(ds, ds_t, "reshape dS");
  g.matmul(ds_t, q, dk, "matmul dSt Q");

  // dQ = dS K
  auto k = g.virt(CUDNN_DATA_BFLOAT16, qkv_part_view(s, 1), "K");
  g.reshape(kt, k, "reshape K");
  if (deterministic) {
    g.matmul(ds, k, dq, "matmul dS K");
  } else {
    auto dq_accum = g.tensor(kDQAccum, CUDNN_DATA_FLOAT, dense_heads_view(s), "dQ accumulator");
    g.matmul(ds, k, dq_accum, "matmul dS K");
    g.unary(CUDNN_POINTWISE_IDENTITY, dq_accum, dq, "identity dQ");
  }
  return g.build(target);
}

// --- plan cache ---

std::mutex g_plans_mutex;
std::map<FusedPlanKey, std::shared_ptr<PlanEntry>> g_plans;

std::string describe_shape(const AttentionShape& s) {
  return cat("batch ", s.batch, ", T ", s.T, ", heads ", s.heads, ", head_dim ", s.head_dim);
}

// The cached entry for a key, built on first use. A refused build is cached
// with plan == nullptr and reported once on stderr.
std::shared_ptr<PlanEntry> plan_for(const AttentionShape& s, FusedPass pass, bool deterministic) {
  const FusedPlanKey key = fused_plan_key(s, pass, deterministic);
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  auto it = g_plans.find(key);
  if (it != g_plans.end()) return it->second;
  auto e = std::make_shared<PlanEntry>();
  std::string problem = fused_attention_shape_problem(s);
  if (problem.empty()) {
    for (const GraphForm& form : kGraphForms) {
      try {
        const Target gpu{context().cudnn, false};
        *e = pass == FusedPass::Forward ? build_forward(s, form, gpu) : build_backward(s, key.deterministic, form, gpu);
        break;
      } catch (const std::exception& f) {
        problem += cat(problem.empty() ? "" : "\n", f.what());
      }
    }
  }
  if (e->plan && !problem.empty()) e->info += cat("; an earlier graph form was refused: ", problem);
  if (!e->plan) {
    e->info = cat(problem, " [cuDNN runtime ", cudnnGetVersion(), "]");
    std::fprintf(stderr,
                 "pipedream: cuDNN fused attention unavailable for %s (%s), using the unfused attention kernels: "
                 "%s\n",
                 describe_shape(s).c_str(), pass == FusedPass::Forward ? "forward" : "backward", e->info.c_str());
  }
  g_plans.emplace(key, e);
  return e;
}

std::shared_ptr<PlanEntry> require_plan(const AttentionShape& s, FusedPass pass, bool deterministic) {
  std::shared_ptr<PlanEntry> e = plan_for(s, pass, deterministic);
  if (!e->plan)
    throw RuntimeFailure(cat("fused attention called for ", describe_shape(s),
                             " although cuDNN cannot run it (check fused_attention_supported first): ", e->info));
  return e;
}

// Device scratch from the caching allocator (stream-ordered reuse on the compute stream).
struct Buffer {
  std::shared_ptr<Storage> s;
  explicit Buffer(size_t bytes) : s(bytes ? device_allocator().allocate(bytes) : nullptr) {}
  template <class T> T* as() const { return s ? static_cast<T*>(s->data) : nullptr; }
};

void execute(const PlanEntry& p, const std::vector<std::pair<int64_t, void*>>& bindings) {
  Buffer workspace(static_cast<size_t>(p.workspace));
  std::vector<int64_t> uids;
  std::vector<void*> ptrs;
  for (const auto& [uid, ptr] : bindings) {
    uids.push_back(uid);
    ptrs.push_back(ptr);
  }
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, cat(p.info, ": variant pack"));
  void* ws = workspace.as<void>();
  PD_SET(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data());
  PD_SET(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()),
         ptrs.data());
  PD_SET(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  pack.finalize();
  check(cudnnBackendExecute(context().cudnn, p.plan->get(), pack.get()), "cudnnBackendExecute", p.info);
}

float softmax_scale(int64_t head_dim) { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }

// What masked scores are set to: -inf, except before cuDNN 9.1, whose
// kernels wanted the lowest finite float (as cudnn-frontend does).
float mask_value() {
  return cudnnGetVersion() < 91000 ? std::numeric_limits<float>::lowest() : -std::numeric_limits<float>::infinity();
}

}  // namespace

bool fused_attention_supported(int64_t batch, int64_t T, int64_t heads, int64_t head_dim) {
  const AttentionShape s{batch, T, heads, head_dim};
  const bool det = context().deterministic;
  return plan_for(s, FusedPass::Forward, det)->plan && plan_for(s, FusedPass::Backward, det)->plan;
}

void fused_attention_forward_bf16(int64_t batch, int64_t T, int64_t heads, int64_t head_dim, const uint16_t* qkv,
                                  uint16_t* att, float* stats) {
  const AttentionShape s{batch, T, heads, head_dim};
  const std::shared_ptr<PlanEntry> p = require_plan(s, FusedPass::Forward, false);
  uint16_t* base = const_cast<uint16_t*>(qkv);  // cuDNN's variant pack takes void*; it only reads q, k, v
  float scale = softmax_scale(head_dim), neg_inf = mask_value();
  execute(*p, {{kQ, base + qkv_part_view(s, 0).offset},
              {kK, base + qkv_part_view(s, 1).offset},
              {kV, base + qkv_part_view(s, 2).offset},
              {kO, att},
              {kStats, stats},
              {kScale, &scale},
              {kNegInf, &neg_inf}});
}

void fused_attention_backward_bf16(int64_t batch, int64_t T, int64_t heads, int64_t head_dim, const uint16_t* qkv,
                                   const uint16_t* att, const float* stats, const uint16_t* datt, uint16_t* dqkv) {
  const AttentionShape s{batch, T, heads, head_dim};
  const bool det = context().deterministic;
  const std::shared_ptr<PlanEntry> p = require_plan(s, FusedPass::Backward, det);
  const cudaStream_t st = context().compute;
  const int64_t n_att = batch * T * heads * head_dim, n_rows = batch * heads * T;
  Buffer softmax_sum(static_cast<size_t>(n_rows) * sizeof(float));
  Buffer dq_accum(det ? 0 : static_cast<size_t>(n_att) * sizeof(float));
  // cuDNN >= 9.6 clears the accumulator itself; clearing it here costs one memset and holds for any version.
  if (!det) CUDA_CHECK(cudaMemsetAsync(dq_accum.as<void>(), 0, static_cast<size_t>(n_att) * sizeof(float), st));
  uint16_t* in = const_cast<uint16_t*>(qkv);  // read only, as att, datt and stats
  float scale = softmax_scale(head_dim), neg_inf = mask_value(), one = 1.0f;
  std::vector<std::pair<int64_t, void*>> bindings = {
      {kQ, in + qkv_part_view(s, 0).offset},    {kK, in + qkv_part_view(s, 1).offset},
      {kV, in + qkv_part_view(s, 2).offset},    {kO, const_cast<uint16_t*>(att)},
      {kDO, const_cast<uint16_t*>(datt)},       {kStats, const_cast<float*>(stats)},
      {kDQ, dqkv + qkv_part_view(s, 0).offset}, {kDK, dqkv + qkv_part_view(s, 1).offset},
      {kDV, dqkv + qkv_part_view(s, 2).offset}, {kSoftmaxSum, softmax_sum.as<float>()},
      {kScale, &scale},                         {kNegInf, &neg_inf},
      {kOne, &one}};
  if (!det) bindings.push_back({kDQAccum, dq_accum.as<float>()});
  execute(*p, bindings);
}

// The FP32-storage entries: the bf16 ones between packing and unpacking.
void fused_attention_forward(int64_t batch, int64_t T, int64_t heads, int64_t head_dim, const float* qkv,
                             float* att, float* stats) {
  const cudaStream_t st = context().compute;
  const int64_t n_qkv = batch * T * 3 * heads * head_dim, n_att = batch * T * heads * head_dim;
  Buffer qkv16(static_cast<size_t>(n_qkv) * 2), o16(static_cast<size_t>(n_att) * 2);
  kernels::pack_bf16(n_qkv, qkv, qkv16.as<uint16_t>(), st);
  fused_attention_forward_bf16(batch, T, heads, head_dim, qkv16.as<uint16_t>(), o16.as<uint16_t>(), stats);
  kernels::unpack_bf16(n_att, o16.as<uint16_t>(), att, st);
}

void fused_attention_backward(int64_t batch, int64_t T, int64_t heads, int64_t head_dim, const float* qkv,
                              const float* att, const float* stats, const float* datt, float* dqkv) {
  const cudaStream_t st = context().compute;
  const int64_t n_qkv = batch * T * 3 * heads * head_dim, n_att = batch * T * heads * head_dim;
  Buffer qkv16(static_cast<size_t>(n_qkv) * 2), dqkv16(static_cast<size_t>(n_qkv) * 2);
  Buffer o16(static_cast<size_t>(n_att) * 2), do16(static_cast<size_t>(n_att) * 2);
  kernels::pack_bf16(n_qkv, qkv, qkv16.as<uint16_t>(), st);
  kernels::pack_bf16(n_att, att, o16.as<uint16_t>(), st);
  kernels::pack_bf16(n_att, datt, do16.as<uint16_t>(), st);
  fused_attention_backward_bf16(batch, T, heads, head_dim, qkv16.as<uint16_t>(), o16.as<uint16_t>(), stats,
                                do16.as<uint16_t>(), dqkv16.as<uint16_t>());
  kernels::unpack_bf16(n_qkv, dqkv16.as<uint16_t>(), dqkv, st);
}

std::vector<std::string> fused_attention_graph_errors(int64_t batch, int64_t T, int64_t heads, int64_t head_dim) {
  const AttentionShape s{batch, T, heads, head_dim};
  std::vector<std::string> errors;
  for (const GraphForm& form : kGraphForms)
    for (int graph = 0; graph < 3; ++graph) {
      try {
        const Target none{nullptr, true};
        if (graph == 0)
          build_forward(s, form, none);
        else
          build_backward(s, graph == 2, form, none);
        errors.emplace_back();
      } catch (const std::exception& f) {
        errors.emplace_back(f.what());
      }
    }
  return errors;
}

size_t fused_attention_plan_count() {
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  return g_plans.size();
}

std::string fused_attention_plan_info(int64_t batch, int64_t T, int64_t heads, int64_t head_dim, bool backward,
                                      bool deterministic) {
  const FusedPlanKey key = fused_plan_key({batch, T, heads, head_dim},
                                          backward ? FusedPass::Backward : FusedPass::Forward, deterministic);
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  auto it = g_plans.find(key);
  return it == g_plans.end() ? std::string() : it->second->info;
}

void clear_fused_attention_plans() {
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  g_plans.clear();
}

}  // namespace pd::cuda

#else  // no cuDNN: the backend still builds; the layers never take the fused path.

namespace pd::cuda {

bool fused_attention_supported(int64_t, int64_t, int64_t, int64_t) { return false; }
void fused_attention_forward(int64_t, int64_t, int64_t, int64_t, const float*, float*, float*) {
  throw RuntimeFailure("fused attention needs cuDNN, and this build has none");
}
void fused_attention_backward(int64_t, int64_t, int64_t, int64_t, const float*, const float*, const float*,
                              const float*, float*) {
  throw RuntimeFailure("fused attention needs cuDNN, and this build has none");
}
void fused_attention_forward_bf16(int64_t, int64_t, int64_t, int64_t, const uint16_t*, uint16_t*, float*) {
  throw RuntimeFailure("fused attention needs cuDNN, and this build has none");
}
void fused_attention_backward_bf16(int64_t, int64_t, int64_t, int64_t, const uint16_t*, const uint16_t*,
                                   const float*, const uint16_t*, uint16_t*) {
  throw RuntimeFailure("fused attention needs cuDNN, and this build has none");
}
std::vector<std::string> fused_attention_graph_errors(int64_t, int64_t, int64_t, int64_t) {
  return {"this build has no cuDNN"};
}
size_t fused_attention_plan_count() { return 0; }
std::string fused_attention_plan_info(int64_t, int64_t, int64_t, int64_t, bool, bool) { return {}; }
void clear_fused_attention_plans() {}

}  // namespace pd::cuda

#endif
