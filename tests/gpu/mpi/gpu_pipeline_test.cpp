// Pipelines on GPUs under mpirun (2 ranks), against the single-process
// reference executed on the same GPU. Skipped (GTEST_SKIP, on every rank
// alike) when no GPU is visible, as on CI:
//  - staged transport, 2 ranks on one GPU: bitwise equal to --reference,
//    for a 2-stage pipeline and for 2 replicas (host-staged all-reduce);
//  - one cnn training step on the GPU against the CPU: atol 2e-4 + rtol 2e-3
//    on every weight after 2 SGD steps (cuDNN/cuBLAS reassociate sums, so
//    FP32 rounding differs; a layout or gradient bug is off by far more);
//  - gpt-mini tie=1 split over 2 stages: the tied gradient's exchange
//    staged (bitwise) and over NCCL (2 GPUs, within tolerance);
//  - NCCL transport (needs 2 GPUs: NCCL refuses two ranks on one GPU):
//    within atol 1e-5 + rtol 1e-4 of --reference (NCCL's all-reduce is not
//    the reference's rank-order sum).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/cuda_plugin.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "runtime/comm/nccl_transport.h"
#include "runtime/comm/staged_transport.h"
#include "runtime/pipeline_worker.h"
#include "runtime/reference.h"
#include "tests/integration/comm_mpi/mpi_test_main.h"
#include "tests/runtime/pipeline_fixture.h"

namespace pd::testing {
namespace {

// The same answer on every rank of one machine, so all skip together.
int visible_gpus() {
  const CudaPluginApi* api = cuda_plugin();
  return api ? api->visible_device_count() : 0;
}

#define PD_REQUIRE_GPUS(n)                                                                                     \
  do {                                                                                                         \
    if (visible_gpus() < (n))                                                                                  \
      GTEST_SKIP() << "needs " << (n) << " visible GPU(s), found " << visible_gpus()                           \
                   << (cuda_plugin() ? "" : " (no CUDA plugin in this build)");                                 \
  } while (0)

// This rank's GPU: local rank modulo the visible GPUs, deterministic convolutions.
Device gpu() {
  static const Device d = open_compute_device("cuda", /*deterministic=*/true);
  return d;
}

// cnn: conv1 relu1 pool1 conv2 relu2 pool2 flatten fc1 relu3 fc2 (10 layers).
struct CnnRun {
  Model model = resolve_model("cnn");
  DataSplits data = open_dataset("synthetic", "", model);
  RunSpec spec;
};

std::unique_ptr<CnnRun> cnn_run(const Plan& plan, const std::string& save) {
  auto r = std::make_unique<CnnRun>();
  r->spec = small_spec(plan, parse_schedule_kind("1f1b-rr"), WeightPolicy::Stash, 6, 1, 16);
  r->spec.device = gpu();
  r->spec.save = save;
  r->spec.timeout_s = 60;
  return r;
}

std::string scratch(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("pipedream_gpu_pipeline_" + name + ".safetensors")).string();
}

NamedTensors reference_weights(const CnnRun& r) {
  ReferencePipeline ref(r.spec, r.model, *r.data.train);
  for (const Segment& seg : run_segments(r.spec, 0)) ref.run_segment(seg, nullptr);
  return ref.merged_weights();
}

// Runs the pipeline over `t`; the reporter saves the merged weights, every
// rank reads them back.
NamedTensors distributed_weights(CnnRun& r, Transport& t) {
  run_pipeline_worker(r.spec, r.model, r.data, t);
  transport().barrier();
  return load_safetensors(r.spec.save);
}

void expect_close(const NamedTensors& got, const NamedTensors& want, double atol, double rtol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].first, want[i].first);
    const std::vector<float> a = got[i].second.to_floats(), b = want[i].second.to_floats();
    ASSERT_EQ(a.size(), b.size()) << got[i].first;
    int bad = 0;
    for (size_t k = 0; k < a.size() && bad < 5; ++k)
      if (!(std::fabs(double(a[k]) - b[k]) <= atol + rtol * std::fabs(double(b[k])))) {
        ADD_FAILURE() << got[i].first << "[" << k << "]: " << a[k] << " vs " << b[k];
        ++bad;
      }
  }
}

void expect_bitwise(const NamedTensors& got, const NamedTensors& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].first, want[i].first);
    EXPECT_EQ(got[i].second.to_floats(), want[i].second.to_floats()) << got[i].first << " differs from the reference";
  }
}

// Host tensors pass through the staged transport untouched (runs everywhere).
TEST(StagedTransport, HostTensorsPassThrough) {
  StagedTransport t(transport());
  ASSERT_EQ(t.world_size(), 2);
  const int peer = 1 - t.rank();
  Tensor mine = Tensor::from_floats({1.5f + t.rank(), -2.0f}, {2});
  Request s = t.isend(mine, peer, 5, 40 + t.rank());
  Request any = t.irecv_any(peer, 5);
  any.wait();
  s.wait();
  EXPECT_EQ(any.tensor().to_floats(), (std::vector<float>{1.5f + peer, -2.0f}));
  EXPECT_EQ(any.meta(), 40 + peer);
  Tensor into = Tensor::zeros({2});
  Request s2 = t.isend(mine, peer, 6);
  Request r2 = t.irecv(into, peer, 6);
  r2.wait();
  s2.wait();
  EXPECT_EQ(into.to_floats(), (std::vector<float>{1.5f + peer, -2.0f}));
  Tensor sum = Tensor::from_floats({float(t.rank()), 1.0f}, {2});
  t.all_reduce(*t.world_group(), {sum}, ReduceOp::Sum);
  EXPECT_EQ(sum.to_floats(), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(t.name(), "staged-mpi");
}

TEST(GpuPipeline, StagedTwoStagesOnOneGpuMatchReferenceBitwise) {
  PD_REQUIRE_GPUS(1);
  auto r = cnn_run(make_plan({{0, 4}, {5, 9}}, {1, 1}), scratch("staged_straight"));
  StagedTransport staged(transport());
  const NamedTensors got = distributed_weights(*r, staged);
  expect_bitwise(got, reference_weights(*r));
}

TEST(GpuPipeline, StagedReplicasOnOneGpuMatchReferenceBitwise) {
  PD_REQUIRE_GPUS(1);
  auto r = cnn_run(make_plan({{0, 9}}, {2}), scratch("staged_replicas"));
  StagedTransport staged(transport());
  const NamedTensors got = distributed_weights(*r, staged);
  expect_bitwise(got, reference_weights(*r));
}

TEST(GpuPipeline, CnnTrainingStepOnGpuMatchesCpu) {
  PD_REQUIRE_GPUS(1);
  const Model m = resolve_model("cnn");
  const DataSplits data = open_dataset("synthetic", "", m);
  RunSpec s = small_spec(make_plan({{0, 9}}, {1}), parse_schedule_kind("1f1b-rr"), WeightPolicy::Stash, 2, 1, 32);
  TrainOptions o = train_options(s, 32);
  const TrainResult cpu = train(m, *data.train, nullptr, o);
  o.device = gpu();
  const TrainResult cuda = train(m, *data.train, nullptr, o);
  ASSERT_EQ(cpu.losses.size(), cuda.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i) EXPECT_NEAR(cuda.losses[i], cpu.losses[i], 1e-4 + 1e-3 * std::fabs(cpu.losses[i]));
  EXPECT_EQ(cuda.weights.device(), gpu());
  expect_close(cuda.weights.named_tensors(), cpu.weights.named_tensors(), 2e-4, 2e-3);
}

TEST(GpuPipeline, NcclTransportMatchesReferenceWithinTolerance) {
  PD_REQUIRE_GPUS(2);
  const CudaNcclApi* nccl = cuda_plugin()->nccl();
  if (!nccl || !nccl->available()) GTEST_SKIP() << "the CUDA backend was built without NCCL";
  for (const Plan& plan : {make_plan({{0, 4}, {5, 9}}, {1, 1}), make_plan({{0, 9}}, {2})}) {
    auto r = cnn_run(plan, scratch("nccl_" + plan.config));
    NcclLinks links;
    if (plan.stages.size() == 2) links.p2p = {{0, 1}, {1, 0}};
    else links.groups = {{0, 1}};
    NcclTransport t(transport(), gpu(), links);
    const NamedTensors got = distributed_weights(*r, t);
    expect_close(got, reference_weights(*r), 1e-5, 1e-4);
  }
}

// gpt-mini tie=1 with its embedding (stage 0) and head (stage 1) apart:
// the tied gradient goes device to host to device (staged) or over NCCL.
TEST(GpuPipeline, TiedGptAcrossTwoStagesMatchesReference) {
  PD_REQUIRE_GPUS(1);
  const Model m = resolve_model("gpt-mini", "", "tie=1,vocab=32,context=8,width=16,depth=2,heads=2");
  const DataSplits data = open_dataset("synthetic", "", m);
  RunSpec s = small_spec(make_plan({{0, 2}, {3, 4}}, {1, 1}), parse_schedule_kind("1f1b-flush"), WeightPolicy::Stash, 3, 2, 4);
  s.device = gpu();
  s.timeout_s = 60;
  s.save = scratch("tied_staged");
  auto reference = [&] {
    ReferencePipeline ref(s, m, *data.train);
    ref.run_segment({0, s.steps()}, nullptr);
    return ref.merged_weights();
  };
  {
    StagedTransport staged(transport());
    run_pipeline_worker(s, m, data, staged);
    transport().barrier();
    expect_bitwise(load_safetensors(s.save), reference());
  }
  if (visible_gpus() < 2) return;  // NCCL refuses two ranks on one GPU
  const CudaNcclApi* nccl = cuda_plugin()->nccl();
  if (!nccl || !nccl->available()) return;
  s.save = scratch("tied_nccl");
  NcclLinks links;
  links.p2p = {{0, 1}, {1, 0}};
  NcclTransport t(transport(), gpu(), links);
  run_pipeline_worker(s, m, data, t);
  transport().barrier();
  expect_close(load_safetensors(s.save), reference(), 1e-5, 1e-4);
}

TEST(GpuPipeline, NcclRefusesTwoRanksOnOneGpu) {
  PD_REQUIRE_GPUS(1);
  if (visible_gpus() > 1) GTEST_SKIP() << "each rank has its own GPU here";
  const CudaNcclApi* nccl = cuda_plugin()->nccl();
  if (!nccl || !nccl->available()) GTEST_SKIP() << "the CUDA backend was built without NCCL";
  gpu();
  try {
    NcclTransport t(transport(), gpu(), NcclLinks::all_pairs(transport().world_size()));
    FAIL() << "two ranks on one GPU must be refused before NCCL fails inside init";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("same GPU"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pd::testing
