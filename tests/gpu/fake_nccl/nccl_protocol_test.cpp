// NcclTransport's message protocol without a GPU (2 ranks under mpirun):
// the fake CUDA plugin (fake_cuda_plugin.cpp) stands in for the backend -
// "device" memory is host memory, an NCCL link is a FIFO drained by one
// thread per communicator that blocks like a CUDA stream on ncclSend/Recv.
// What it checks is the transport's own logic: bootstrap (UUID gather, id
// broadcast, communicator init order), headers matched to posted receives
// by tag whatever the posting order, receives straight into a posted
// tensor, host tensors on a link, meta, shape checks, both directions at
// once with messages larger than a pipe holds, fallback to staging for
// peers without a link, and the same-GPU refusal. Last, a whole 2-stage
// pipeline (CPU weights: every message is a host tensor on a link, so the
// executor's traffic - early-posted receives, evaluation chunks, the final
// gathers - goes through the header protocol) against the reference.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

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

// Before anything loads the plugin.
const bool g_fake_plugin = [] {
  setenv("PIPEDREAM_CUDA_PLUGIN", PD_FAKE_CUDA_PLUGIN, 1);
  return true;
}();

Device gpu() {
  static const Device d = open_compute_device("cuda:0");
  return d;
}

Tensor device_floats(const std::vector<float>& v, const Shape& s) { return Tensor::from_floats(v, s).to(gpu()); }

std::vector<float> iota_floats(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

NcclLinks both_ways() {
  NcclLinks l;
  l.p2p = {{0, 1}, {1, 0}};
  return l;
}

TEST(NcclProtocol, ReceivesMatchByTagWhateverThePostingOrder) {
  ASSERT_TRUE(g_fake_plugin);
  NcclTransport t(transport(), gpu(), both_ways());
  ASSERT_TRUE(t.links_to(1 - t.rank()));
  if (t.rank() == 0) {
    std::vector<Request> sends;
    sends.push_back(t.isend(device_floats(iota_floats(6, 0), {2, 3}), 1, 7, 70));
    sends.push_back(t.isend(device_floats(iota_floats(4, 100), {4}), 1, 3, 30));
    sends.push_back(t.isend(device_floats(iota_floats(5, 200), {5}), 1, 7, 71));  // same tag: in order
    sends.push_back(t.isend(Tensor::from_ints({1, 2, 3}, {3}), 1, 9, 90));       // a host tensor on the link
    wait_all(sends);
  } else {
    Request r3 = t.irecv_any(0, 3);  // posted in another order than sent
    Request r9 = t.irecv_any(0, 9);
    Tensor into = Tensor::zeros({2, 3}, DType::F32, gpu());
    Request r7a = t.irecv(into, 0, 7);
    Request r7b = t.irecv_any(0, 7);
    r9.wait();
    r7b.wait();
    r3.wait();
    r7a.wait();
    EXPECT_TRUE(r7a.tensor().same_storage(into)) << "a matching posted tensor is received into directly";
    EXPECT_EQ(into.to_floats(), iota_floats(6, 0));
    EXPECT_EQ(r7a.meta(), 70);
    EXPECT_EQ(r3.tensor().shape(), (Shape{4}));
    EXPECT_TRUE(r3.tensor().device().is_cuda());
    EXPECT_EQ(r3.tensor().to_floats(), iota_floats(4, 100));
    EXPECT_EQ(r3.meta(), 30);
    EXPECT_EQ(r7b.tensor().to_floats(), iota_floats(5, 200));
    EXPECT_EQ(r7b.meta(), 71);
    ASSERT_TRUE(r9.tensor().device().is_cpu()) << "host tensors stay on the host";
    EXPECT_EQ(r9.tensor().dtype(), DType::I32);
    EXPECT_EQ(r9.tensor().data<int32_t>()[2], 3);
    EXPECT_EQ(r9.meta(), 90);
  }
  t.barrier();
}

TEST(NcclProtocol, BothDirectionsAtOnceWithLargeMessages) {
  NcclTransport t(transport(), gpu(), both_ways());
  const int peer = 1 - t.rank();
  const size_t n = 1 << 20;  // 4 MB: far more than a pipe buffers, so a send blocks until received
  std::vector<Request> sends, recvs;
  for (int k = 0; k < 3; ++k) {
    sends.push_back(t.isend(device_floats(iota_floats(n, float(t.rank() * 10 + k)), {int64_t(n)}), peer, k));
    recvs.push_back(t.irecv_any(peer, k));
  }
  wait_all(recvs);
  wait_all(sends);
  for (int k = 0; k < 3; ++k) {
    const std::vector<float> got = recvs[static_cast<size_t>(k)].tensor().to_floats();
    ASSERT_EQ(got.size(), n);
    EXPECT_EQ(got.front(), float(peer * 10 + k));
    EXPECT_EQ(got.back(), float(peer * 10 + k) + float(n - 1));
  }
  t.barrier();
}

TEST(NcclProtocol, ShapeMismatchNamesBothShapes) {
  NcclTransport t(transport(), gpu(), both_ways());
  if (t.rank() == 0) {
    t.isend(device_floats(iota_floats(6, 0), {6}), 1, 2).wait();
  } else {
    Request r = t.irecv(Tensor::zeros({2, 2}, DType::F32, gpu()), 0, 2);
    try {
      r.wait();
      FAIL() << "a shape mismatch must fail";
    } catch (const RuntimeFailure& e) {
      EXPECT_NE(std::string(e.what()).find("[6]"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("[2, 2]"), std::string::npos) << e.what();
    }
  }
  t.barrier();
}

TEST(NcclProtocol, PeersWithoutALinkAreStagedThroughTheHost) {
  NcclLinks one_way;
  one_way.p2p = {{0, 1}};
  NcclTransport t(transport(), gpu(), one_way);
  if (t.rank() == 1) {
    EXPECT_FALSE(t.links_to(0));
    t.isend(device_floats({1, 2, 3}, {3}), 0, 4, 44).wait();
  } else {
    EXPECT_TRUE(t.links_to(1));
    Request r = t.irecv_any(1, 4);
    r.wait();
    EXPECT_TRUE(r.tensor().device().is_cpu()) << "staged messages arrive on the host";
    EXPECT_EQ(r.tensor().to_floats(), (std::vector<float>{1, 2, 3}));
    EXPECT_EQ(r.meta(), 44);
  }
  t.barrier();
}

TEST(NcclProtocol, ReservesTwoTagsBelowTheMpiTransports) {
  NcclTransport t(transport(), gpu(), both_ways());
  EXPECT_EQ(t.max_tag(), transport().max_tag() - 2);
  EXPECT_EQ(t.name(), "nccl");
}

TEST(NcclProtocol, TwoRanksOnOneGpuAreRefusedNamingThem) {
  setenv("PD_FAKE_GPU_UUID", "GPU-shared", 1);
  try {
    NcclTransport t(transport(), gpu(), both_ways());
    FAIL() << "two ranks on one GPU must be refused";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("ranks 0 and 1 use the same GPU (GPU-shared)"), std::string::npos) << e.what();
  }
  unsetenv("PD_FAKE_GPU_UUID");
}

// The staged transport's device paths, with the fake plugin's "device" tensors.
TEST(StagedTransportOnFakeGpu, DeviceTensorsGoThroughTheHostAndBack) {
  StagedTransport t(transport());
  const int peer = 1 - t.rank();
  Request s = t.isend(device_floats({1.0f + t.rank(), 2.0f}, {2}), peer, 11, 5);
  Tensor into = Tensor::zeros({2}, DType::F32, gpu());
  Request r = t.irecv(into, peer, 11);
  r.wait();
  s.wait();
  EXPECT_TRUE(r.tensor().same_storage(into));
  EXPECT_EQ(into.to_floats(), (std::vector<float>{1.0f + peer, 2.0f}));
  EXPECT_EQ(r.meta(), 5);
  // A bucket mixing device and host tensors, reduced in rank order on the host.
  Tensor d = device_floats({0.5f * float(t.rank() + 1), 3.0f}, {2});
  Tensor h = Tensor::from_floats({float(t.rank())}, {1});
  Request ar = t.iall_reduce(*t.world_group(), {d, h}, ReduceOp::Sum);
  ar.wait();
  EXPECT_TRUE(d.device().is_cuda());
  EXPECT_EQ(d.to_floats(), (std::vector<float>{1.5f, 6.0f}));
  EXPECT_EQ(h.to_floats(), (std::vector<float>{1.0f}));
}

TEST(NcclProtocol, PipelineOverLinksMatchesTheReference) {
  const Model m = small_mlp();
  const DataSplits data = open_dataset("synthetic", "", m);
  RunSpec spec = small_spec(make_plan({{0, 3}, {4, 7}}, {1, 1}), parse_schedule_kind("1f1b-rr"),
                            WeightPolicy::Stash, 12, 1, 8);
  spec.evaluate = true;
  spec.eval_every = 6;
  spec.save = (std::filesystem::temp_directory_path() / "pipedream_nccl_protocol_pipeline.safetensors").string();
  {
    NcclTransport t(transport(), gpu(), both_ways());
    run_pipeline_worker(spec, m, data, t);
  }
  transport().barrier();
  const NamedTensors got = load_safetensors(spec.save);
  ReferencePipeline ref(spec, m, *data.train);
  for (const Segment& seg : run_segments(spec, 0)) ref.run_segment(seg, nullptr);
  const NamedTensors want = ref.merged_weights();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_EQ(got[i].second.to_floats(), want[i].second.to_floats()) << got[i].first;
  }
}

}  // namespace
}  // namespace pd::testing
