// The layout entries of the CUDA table (strided_copy, index_select_*)
// against the CPU table's on random data: copies and the selection are
// exact, and the selection's gradient adds in the same order on both, so
// every comparison is bit for bit.
#if defined(PIPEDREAM_HAVE_CUDA)  // the whole file needs the CUDA backend
#include <cstring>
#include <vector>

#include "tests/gpu/gpu_test.h"

namespace pd::gputest {

namespace {

using CudaLayout = GpuTest;

struct CopyCase {
  const char* name;
  Shape shape;
  std::vector<int64_t> x_strides, y_strides;
  int64_t x_offset = 0, y_offset = 0;
  int64_t x_size = 0, y_size = 0;  // elements of the buffers the copy reads and writes
};

// Runs one copy on the CPU and on the GPU from the same x into the same
// starting y (random, so untouched elements are compared too).
void expect_same_copy(const DeviceOps& gpu, const CopyCase& c, uint32_t key) {
  SCOPED_TRACE(c.name);
  const std::vector<float> x = random_floats(static_cast<size_t>(c.x_size), key);
  const std::vector<float> y0 = random_floats(static_cast<size_t>(c.y_size), key + 1000);
  std::vector<float> want = y0;
  const int rank = static_cast<int>(c.shape.size());
  cpu_device_ops().strided_copy(rank, c.shape.data(), x.data() + c.x_offset, c.x_strides.data(),
                                want.data() + c.y_offset, c.y_strides.data());
  Tensor dx = on_gpu(x), dy = on_gpu(y0);
  gpu.strided_copy(rank, c.shape.data(), dx.f32() + c.x_offset, c.x_strides.data(), dy.f32() + c.y_offset,
                   c.y_strides.data());
  EXPECT_EQ(host(dy), want);
}

}  // namespace

TEST_F(CudaLayout, StridedCopyMatchesTheCpuOnEveryLayoutOpsPattern) {
  ASSERT_TRUE(ops->strided_copy && ops->index_select_forward && ops->index_select_backward_accum)
      << "the CUDA table lacks a layout entry";
  std::vector<CopyCase> cases;
  {  // Transpose [2, 3, 4, 5] by (0, 2, 3, 1): y contiguous, x at permuted strides.
    const Shape xs{2, 3, 4, 5};
    const auto st = contiguous_strides(xs);
    const Shape out{2, 4, 5, 3};
    cases.push_back({"transpose", out, {st[0], st[2], st[3], st[1]}, contiguous_strides(out), 0, 0, 120, 120});
  }
  {  // Slice [6, 10] rows 1..5 step 2, columns 9 down to 1 step -3 (negative step).
    const Shape out{3, 3};
    cases.push_back({"slice negative step", out, {20, -3}, contiguous_strides(out), 1 * 10 + 9, 0, 60, 9});
  }
  {  // Concat: a [4, 2, 3] part into the middle of a [4, 7, 3] whole (offset 3 rows of 3).
    const Shape part{4, 2, 3};
    cases.push_back({"concat slab", part, contiguous_strides(part), {21, 3, 1}, 0, 9, 24, 84});
  }
  {  // Split: the same slab out of the whole.
    const Shape part{4, 2, 3};
    cases.push_back({"split slab", part, {21, 3, 1}, contiguous_strides(part), 9, 0, 84, 24});
  }
  {  // Pad's interior: [3, 4, 5] into [3, 6, 9] at (0, 1, 2); its backward reads it back.
    const Shape in{3, 4, 5};
    cases.push_back({"pad interior", in, contiguous_strides(in), {54, 9, 1}, 0, 11, 60, 162});
    cases.push_back({"pad backward", in, {54, 9, 1}, contiguous_strides(in), 11, 0, 162, 60});
  }
  {  // Expand [1, 5, 1] to [4, 5, 6]: zero strides on the broadcast dimensions.
    const Shape out{4, 5, 6};
    cases.push_back({"expand", out, {0, 1, 0}, contiguous_strides(out), 0, 0, 5, 120});
  }
  {  // A contiguous copy (one memcpy) and a scalar (rank 0).
    const Shape s{7, 11};
    cases.push_back({"contiguous", s, contiguous_strides(s), contiguous_strides(s), 0, 0, 77, 77});
    cases.push_back({"scalar", {}, {}, {}, 3, 2, 5, 4});
  }
  {  // Rank 8 (kMaxStridedRank), reversed dimension order, size-1 dimensions among them.
    const Shape xs{2, 1, 3, 2, 1, 2, 3, 2};
    const auto st = contiguous_strides(xs);
    Shape out(8);
    std::vector<int64_t> src(8);
    for (int d = 0; d < 8; ++d) {
      out[size_t(d)] = xs[size_t(7 - d)];
      src[size_t(d)] = st[size_t(7 - d)];
    }
    cases.push_back({"rank 8", out, src, contiguous_strides(out), 0, 0, 144, 144});
  }
  {  // Packing a boundary: [5, 6] into columns 4..9 of [5, 13], and back.
    cases.push_back({"pack", {5, 6}, {6, 1}, {13, 1}, 0, 4, 30, 65});
    cases.push_back({"unpack", {5, 6}, {13, 1}, {6, 1}, 4, 0, 65, 30});
  }
  {  // Large enough for many blocks: a [64, 33, 65] transpose of the last two dimensions.
    const Shape out{64, 65, 33};
    cases.push_back({"large transpose", out, {33 * 65, 1, 65}, contiguous_strides(out), 0, 0, 64 * 33 * 65, 64 * 33 * 65});
  }
  uint32_t key = 1;
  for (const CopyCase& c : cases) expect_same_copy(*ops, c, key++);
}

TEST_F(CudaLayout, StridedCopyOfAnEmptyShapeWritesNothing) {
  const std::vector<float> y0 = random_floats(8, 77);
  Tensor dx = on_gpu(random_floats(8, 78)), dy = on_gpu(y0);
  const Shape shape{3, 0, 2};
  const std::vector<int64_t> st{2, 2, 1};
  ops->strided_copy(3, shape.data(), dx.f32(), st.data(), dy.f32(), st.data());
  EXPECT_EQ(host(dy), y0);
}

TEST_F(CudaLayout, IndexSelectForwardAndBackwardMatchTheCpuBitForBit) {
  const DeviceOps& cpu = cpu_device_ops();
  // x [outer 3, len 7, inner 5]; indices repeat and count from the end.
  const int64_t outer = 3, len = 7, inner = 5;
  const std::vector<int32_t> idx32{0, 6, -1, 3, 3, -7, 2, 6, 6, 1};
  const int64_t count = static_cast<int64_t>(idx32.size());
  std::vector<int64_t> idx64(idx32.begin(), idx32.end());
  const std::vector<float> x = random_floats(static_cast<size_t>(outer * len * inner), 11);
  const std::vector<float> dy = random_floats(static_cast<size_t>(outer * count * inner), 12, -3.0f, 3.0f);
  const std::vector<float> dx0 = random_floats(static_cast<size_t>(outer * len * inner), 13);  // accumulated into
  for (DType t : {DType::I32, DType::I64}) {
    SCOPED_TRACE(dtype_name(t));
    const void* host_idx = t == DType::I32 ? static_cast<const void*>(idx32.data()) : idx64.data();
    Tensor host64 = Tensor::empty({count}, DType::I64);
    std::memcpy(host64.raw(), idx64.data(), idx64.size() * sizeof(int64_t));
    const Tensor gidx = t == DType::I32 ? on_gpu_ints(idx32) : host64.to(Device::cuda(0));
    std::vector<float> want_y(static_cast<size_t>(outer * count * inner));
    ASSERT_TRUE(cpu.index_select_forward(outer, len, inner, count, t, host_idx, x.data(), want_y.data()));
    Tensor gx = on_gpu(x), gy = gpu_zeros(want_y.size());
    ASSERT_TRUE(ops->index_select_forward(outer, len, inner, count, t, gidx.raw(), gx.f32(), gy.f32()));
    EXPECT_EQ(host(gy), want_y);

    std::vector<float> want_dx = dx0;
    cpu.index_select_backward_accum(outer, len, inner, count, t, host_idx, dy.data(), want_dx.data());
    Tensor gdy = on_gpu(dy), gdx = on_gpu(dx0);
    ops->index_select_backward_accum(outer, len, inner, count, t, gidx.raw(), gdy.f32(), gdx.f32());
    EXPECT_EQ(host(gdx), want_dx);
  }
}

TEST_F(CudaLayout, IndexSelectOfAnEmbeddingTableMatchesTheCpu) {
  // Gather of run-time token ids: outer 1, a [vocab, dim] table, many repeats.
  const DeviceOps& cpu = cpu_device_ops();
  const int64_t vocab = 300, dim = 96, count = 2048;
  const std::vector<int32_t> ids = random_ints(static_cast<size_t>(count), 21, 40);  // 40 distinct at most
  const std::vector<float> table = random_floats(static_cast<size_t>(vocab * dim), 22);
  const std::vector<float> dy = random_floats(static_cast<size_t>(count * dim), 23);
  std::vector<float> want_y(static_cast<size_t>(count * dim)), want_dx(static_cast<size_t>(vocab * dim), 0.0f);
  ASSERT_TRUE(cpu.index_select_forward(1, vocab, dim, count, DType::I32, ids.data(), table.data(), want_y.data()));
  cpu.index_select_backward_accum(1, vocab, dim, count, DType::I32, ids.data(), dy.data(), want_dx.data());
  Tensor gids = on_gpu_ints(ids), gt = on_gpu(table), gy = gpu_zeros(want_y.size()), gdy = on_gpu(dy),
         gdx = gpu_zeros(want_dx.size());
  ASSERT_TRUE(ops->index_select_forward(1, vocab, dim, count, DType::I32, gids.raw(), gt.f32(), gy.f32()));
  ops->index_select_backward_accum(1, vocab, dim, count, DType::I32, gids.raw(), gdy.f32(), gdx.f32());
  EXPECT_EQ(host(gy), want_y);
  EXPECT_EQ(host(gdx), want_dx);
}

TEST_F(CudaLayout, IndexSelectReportsAnIndexOutOfRange) {
  const std::vector<int32_t> bad{0, 4, 2};  // len 4: 4 is outside [-4, 4)
  Tensor gidx = on_gpu_ints(bad), gx = on_gpu(random_floats(8, 31)), gy = gpu_zeros(6);
  EXPECT_FALSE(ops->index_select_forward(1, 4, 2, 3, DType::I32, gidx.raw(), gx.f32(), gy.f32()));
  EXPECT_FALSE(cpu_device_ops().index_select_forward(1, 4, 2, 3, DType::I32, bad.data(),
                                                     random_floats(8, 31).data(), std::vector<float>(6).data()));
  Tensor gdx = gpu_zeros(8);
  EXPECT_THROW(ops->index_select_backward_accum(1, 4, 2, 3, DType::I32, gidx.raw(), gy.f32(), gdx.f32()),
               RuntimeFailure);
  // A table whose entries are all in range afterwards still works (the flag is per call).
  const std::vector<int32_t> good{0, 3, -4};
  Tensor gg = on_gpu_ints(good);
  EXPECT_TRUE(ops->index_select_forward(1, 4, 2, 3, DType::I32, gg.raw(), gx.f32(), gy.f32()));
}

}  // namespace pd::gputest
#endif
