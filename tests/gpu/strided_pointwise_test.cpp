// The pointwise strided entries of CUDA's DeviceOps table against the CPU
// table's (the reference the ONNX ops ran on before they ran anywhere),
// on random data: broadcasting on inner, outer and middle dimensions, rank
// 0, 1 and 5, size-1 dimensions and an empty output.
// Tolerances: binary forward, Where and the strided sums of plain values
// exact or atol 1e-6 per summed term (one IEEE operation per element; the
// sums run in the CPU's order, FMA contraction aside); unary maps atol
// 2e-6 + rtol 2e-6 (CUDA's erff, tanhf, expf, powf, sinf, cosf are within
// 2 ulp of the C library's); softmax atol 1e-6 + rtol 1e-5. Every sum is
// also compared bit for bit with a second run.
#if defined(PIPEDREAM_HAVE_CUDA)  // the whole file needs the CUDA backend
#include <algorithm>
#include <cstring>

#include "tests/gpu/gpu_test.h"

namespace pd::gputest {

namespace {

// One broadcasting case: both operands' shapes broadcast to out.
struct Case {
  Shape out, a, b;
};

std::vector<Case> cases() {
  return {
      {{5}, {5}, {1}},                                   // rank 1, scalar-like operand
      {{7}, {7}, {7}},                                   // rank 1, same shape (the CPU's dense path)
      {{}, {}, {}},                                      // rank 0
      {{4, 3, 5}, {4, 3, 5}, {5}},                       // inner
      {{4, 3, 5}, {4, 1, 1}, {4, 3, 5}},                 // outer
      {{4, 3, 5}, {4, 1, 5}, {1, 3, 1}},                 // middle, both operands broadcast
      {{2, 3, 1, 4, 2}, {2, 1, 1, 4, 1}, {1, 3, 1, 1, 2}},  // rank 5 with size-1 dims
      {{64, 300}, {64, 300}, {300}},                     // a bias
      {{33, 70}, {33, 70}, {}},                          // a scalar: 2310 terms in one sum
      {{2, 0, 3}, {2, 0, 3}, {1, 1, 3}},                 // empty: the broadcast operand's gradient is 0
  };
}

int rank_of(const Case& c) { return static_cast<int>(c.out.size()); }

// Device copy of v (one element more than nothing, so that empty inputs have an address).
Tensor dev(const std::vector<float>& v) { return on_gpu(v.empty() ? std::vector<float>{0.0f} : v); }
std::vector<float> back(const Tensor& t, size_t n) {
  std::vector<float> h = host(t);
  h.resize(n);
  return h;
}

// Condition bytes on the device (packed into an i32 tensor).
Tensor dev_bytes(const std::vector<uint8_t>& c) {
  std::vector<int32_t> packed((c.size() + 3) / 4 + 1, 0);
  std::memcpy(packed.data(), c.data(), c.size());
  return on_gpu_ints(packed);
}
const uint8_t* bytes(const Tensor& t) { return reinterpret_cast<const uint8_t*>(t.data<int32_t>()); }

size_t count(const Shape& s) { return static_cast<size_t>(shape_numel(s)); }

// Operand values for `op`: divisors kept away from 0.
std::vector<float> operand(const Shape& s, uint32_t key, bool divisor) {
  return divisor ? random_floats(count(s), key, 0.5f, 2.0f) : random_floats(count(s), key);
}

// Terms per element of a broadcast operand's gradient (for the tolerance).
double terms(const Shape& out, const Shape& in) { return double(std::max<int64_t>(1, shape_numel(out))) / std::max<int64_t>(1, shape_numel(in)); }

}  // namespace

using CudaStridedPointwise = GpuTest;

TEST_F(CudaStridedPointwise, BroadcastBinaryIsTheCpusArithmetic) {
  const DeviceOps& cpu = cpu_device_ops();
  uint32_t key = 1;
  for (const Case& c : cases())
    for (BinaryArith op : {BinaryArith::Add, BinaryArith::Sub, BinaryArith::Mul, BinaryArith::Div}) {
      SCOPED_TRACE(::testing::Message() << "out " << shape_str(c.out) << " a " << shape_str(c.a) << " b "
                                        << shape_str(c.b) << " op " << int(op));
      const auto sa = broadcast_strides(c.a, c.out), sb = broadcast_strides(c.b, c.out);
      const auto a = operand(c.a, key++, false), b = operand(c.b, key++, op == BinaryArith::Div);
      std::vector<float> want(count(c.out));
      cpu.broadcast_binary(op, rank_of(c), c.out.data(), sa.data(), sb.data(), a.data(), b.data(), want.data());
      Tensor da = dev(a), db = dev(b), y = dev(want);
      ops->broadcast_binary(op, rank_of(c), c.out.data(), sa.data(), sb.data(), da.f32(), db.f32(), y.f32());
      EXPECT_EQ(back(y, want.size()), want);  // one IEEE operation per element
    }
}

TEST_F(CudaStridedPointwise, MulAndDivGradientsMatchTheCpuAndRepeat) {
  const DeviceOps& cpu = cpu_device_ops();
  uint32_t key = 100;
  for (const Case& c : cases())
    for (BinaryArith op : {BinaryArith::Mul, BinaryArith::Div}) {
      SCOPED_TRACE(::testing::Message() << "out " << shape_str(c.out) << " a " << shape_str(c.a) << " b "
                                        << shape_str(c.b) << " op " << int(op));
      const auto sa = broadcast_strides(c.a, c.out), sb = broadcast_strides(c.b, c.out);
      const auto a = operand(c.a, key++, false), b = operand(c.b, key++, op == BinaryArith::Div);
      const auto dy = random_floats(count(c.out), key++);
      std::vector<float> wa(count(c.a)), wb(count(c.b));
      cpu.broadcast_binary_backward(op, rank_of(c), c.out.data(), sa.data(), sb.data(), a.data(), b.data(), dy.data(),
                                    wa.data(), wb.data());
      Tensor ga = dev(a), gb = dev(b), gdy = dev(dy);
      Tensor da = dev(std::vector<float>(wa.size(), 7.0f)), db = dev(std::vector<float>(wb.size(), 7.0f));
      Tensor da2 = dev(wa), db2 = dev(wb);
      ops->broadcast_binary_backward(op, rank_of(c), c.out.data(), sa.data(), sb.data(), ga.f32(), gb.f32(),
                                     gdy.f32(), da.f32(), db.f32());
      ops->broadcast_binary_backward(op, rank_of(c), c.out.data(), sa.data(), sb.data(), ga.f32(), gb.f32(),
                                     gdy.f32(), da2.f32(), db2.f32());
      // Div's b-gradient terms reach |a| / b^2 <= 4.
      EXPECT_TRUE(close(back(da, wa.size()), wa, 4e-6 * terms(c.out, c.a), 1e-5));
      EXPECT_TRUE(close(back(db, wb.size()), wb, 4e-6 * terms(c.out, c.b), 1e-5));
      EXPECT_EQ(back(da, wa.size()), back(da2, wa.size()));
      EXPECT_EQ(back(db, wb.size()), back(db2, wb.size()));
      // Only a's gradient (db null): the same bits.
      Tensor da3 = dev(std::vector<float>(wa.size(), 3.0f));
      ops->broadcast_binary_backward(op, rank_of(c), c.out.data(), sa.data(), sb.data(), ga.f32(), gb.f32(),
                                     gdy.f32(), da3.f32(), nullptr);
      EXPECT_EQ(back(da3, wa.size()), back(da, wa.size()));
    }
}

TEST_F(CudaStridedPointwise, StridedSumsMatchTheCpuAndRepeatBitForBit) {
  const DeviceOps& cpu = cpu_device_ops();
  uint32_t key = 200;
  for (const Case& c : cases())
    for (const Shape& to : {c.a, c.b}) {
      SCOPED_TRACE(::testing::Message() << shape_str(c.out) << " summed to " << shape_str(to));
      const auto st = broadcast_strides(to, c.out);
      const auto x = random_floats(count(c.out), key++);
      std::vector<float> want(count(to), 5.0f);  // overwritten, zeros where nothing adds
      cpu.reduce_sum_strided(rank_of(c), c.out.data(), st.data(), x.data(), want.data());
      Tensor gx = dev(x), y1 = dev(std::vector<float>(want.size(), 5.0f)), y2 = dev(want);
      ops->reduce_sum_strided(rank_of(c), c.out.data(), st.data(), gx.f32(), y1.f32());
      ops->reduce_sum_strided(rank_of(c), c.out.data(), st.data(), gx.f32(), y2.f32());
      EXPECT_TRUE(close(back(y1, want.size()), want, 1e-6 * terms(c.out, to), 1e-6));
      EXPECT_EQ(back(y1, want.size()), back(y2, want.size()));
    }
}

TEST_F(CudaStridedPointwise, SumOfALargeTensorToAScalarRepeats) {
  const DeviceOps& cpu = cpu_device_ops();
  const Shape out{300, 1001};
  const std::vector<int64_t> to_scalar{0, 0}, to_rows{1, 0};
  const auto x = random_floats(count(out), 300);
  for (const auto& st : {to_scalar, to_rows}) {
    const size_t n = st[0] ? 300 : 1;
    std::vector<float> want(n);
    cpu.reduce_sum_strided(2, out.data(), st.data(), x.data(), want.data());
    Tensor gx = dev(x), y1 = gpu_zeros(n), y2 = gpu_zeros(n);
    ops->reduce_sum_strided(2, out.data(), st.data(), gx.f32(), y1.f32());
    ops->reduce_sum_strided(2, out.data(), st.data(), gx.f32(), y2.f32());
    EXPECT_TRUE(close(host(y1), want, 1e-6 * double(count(out)) / double(n), 1e-6));
    EXPECT_EQ(host(y1), host(y2));
  }
}

TEST_F(CudaStridedPointwise, WhereSelectsAndRoutesGradientsLikeTheCpu) {
  const DeviceOps& cpu = cpu_device_ops();
  uint32_t key = 400;
  // The condition broadcasts like operand a, X like b, Y with the full shape.
  for (const Case& c : cases()) {
    SCOPED_TRACE(shape_str(c.out));
    const auto sc = broadcast_strides(c.a, c.out), sx = broadcast_strides(c.b, c.out), sy = broadcast_strides(c.out, c.out);
    std::vector<uint8_t> cond(count(c.a));
    const auto bits = random_ints(cond.size(), key++, 2);
    for (size_t i = 0; i < cond.size(); ++i) cond[i] = static_cast<uint8_t>(bits[i] * (1 + int(i % 3)));  // nonzero: true
    const auto x = random_floats(count(c.b), key++), y = random_floats(count(c.out), key++);
    const auto dout = random_floats(count(c.out), key++);
    const size_t n = count(c.out);
    std::vector<float> want(n), wdx(n), wdy(n);
    cpu.where_forward(rank_of(c), c.out.data(), sc.data(), sx.data(), sy.data(), cond.data(), x.data(), y.data(),
                      want.data());
    cpu.where_backward(rank_of(c), c.out.data(), sc.data(), cond.data(), dout.data(), wdx.data(), wdy.data());
    Tensor gc = dev_bytes(cond), gx = dev(x), gy = dev(y), gd = dev(dout);
    Tensor out = dev(std::vector<float>(n, 9.0f)), dx = dev(std::vector<float>(n, 9.0f)),
           dy = dev(std::vector<float>(n, 9.0f));
    ops->where_forward(rank_of(c), c.out.data(), sc.data(), sx.data(), sy.data(), bytes(gc), gx.f32(), gy.f32(),
                       out.f32());
    ops->where_backward(rank_of(c), c.out.data(), sc.data(), bytes(gc), gd.f32(), dx.f32(), dy.f32());
    EXPECT_EQ(back(out, n), want);
    EXPECT_EQ(back(dx, n), wdx);
    EXPECT_EQ(back(dy, n), wdy);
    Tensor only_y = dev(std::vector<float>(n, 9.0f));
    ops->where_backward(rank_of(c), c.out.data(), sc.data(), bytes(gc), gd.f32(), nullptr, only_y.f32());
    EXPECT_EQ(back(only_y, n), wdy);
  }
}

TEST_F(CudaStridedPointwise, UnaryMapsAndTheirGradientsAreCloseToTheCpus) {
  const DeviceOps& cpu = cpu_device_ops();
  const std::vector<UnaryParams> maps = {
      {UnaryFn::Erf},     {UnaryFn::Tanh},        {UnaryFn::Sqrt},         {UnaryFn::Sigmoid},
      {UnaryFn::Neg},     {UnaryFn::Pow, 2.0f},   {UnaryFn::Pow, 3.0f},    {UnaryFn::Pow, 0.5f},
      {UnaryFn::Clip, -0.5f, 0.7f},               {UnaryFn::Sin},          {UnaryFn::Cos},
      {UnaryFn::Exp},     {UnaryFn::Reciprocal},  {UnaryFn::HardSigmoid, 0.2f, 0.5f},
      {UnaryFn::HardSwish},
  };
  const size_t n = 4099;
  uint32_t key = 500;
  for (const UnaryParams& f : maps) {
    SCOPED_TRACE(::testing::Message() << "fn " << int(f.fn) << " p0 " << f.p0);
    const bool positive = f.fn == UnaryFn::Sqrt || f.fn == UnaryFn::Reciprocal || (f.fn == UnaryFn::Pow && f.p0 == 0.5f);
    const auto x = positive ? random_floats(n, key++, 0.25f, 4.0f) : random_floats(n, key++, -4.0f, 4.0f);
    const auto dy = random_floats(n, key++);
    std::vector<float> y(n), dx(n);
    cpu.unary_forward(f, n, x.data(), y.data());
    const std::vector<float>& saved = unary_backward_reads_output(f.fn) ? y : x;
    cpu.unary_backward(f, n, saved.data(), dy.data(), dx.data());
    Tensor gx = dev(x), gy = gpu_zeros(n), gs = dev(saved), gdy = dev(dy), gdx = gpu_zeros(n);
    ops->unary_forward(f, n, gx.f32(), gy.f32());
    ops->unary_backward(f, n, gs.f32(), gdy.f32(), gdx.f32());
    EXPECT_TRUE(close(host(gy), y, 2e-6, 2e-6));
    EXPECT_TRUE(close(host(gdx), dx, 2e-6, 2e-6));
    ops->unary_forward(f, n, gx.f32(), gx.f32());  // in place
    EXPECT_EQ(host(gx), host(gy));
  }
}

TEST_F(CudaStridedPointwise, SoftmaxOnOneAxisIsCloseToTheCpusAndRepeats) {
  const DeviceOps& cpu = cpu_device_ops();
  struct Axis {
    int64_t outer, len, inner;
  };
  uint32_t key = 600;
  for (const Axis& s : {Axis{3, 7, 5}, Axis{1, 1000, 1}, Axis{64, 33, 1}, Axis{2, 1, 3}, Axis{5, 4, 1}, Axis{1, 6, 40}}) {
    SCOPED_TRACE(::testing::Message() << s.outer << " x " << s.len << " x " << s.inner);
    const size_t n = static_cast<size_t>(s.outer * s.len * s.inner);
    const auto x = random_floats(n, key++, -8.0f, 8.0f), dy = random_floats(n, key++);
    std::vector<float> y(n), dx(n);
    cpu.softmax_axis_forward(s.outer, s.len, s.inner, x.data(), y.data());
    cpu.softmax_axis_backward(s.outer, s.len, s.inner, y.data(), dy.data(), dx.data());
    Tensor gx = dev(x), gy = gpu_zeros(n), gy2 = gpu_zeros(n), gys = dev(y), gdy = dev(dy), gdx = gpu_zeros(n),
           gdx2 = gpu_zeros(n);
    ops->softmax_axis_forward(s.outer, s.len, s.inner, gx.f32(), gy.f32());
    ops->softmax_axis_forward(s.outer, s.len, s.inner, gx.f32(), gy2.f32());
    ops->softmax_axis_backward(s.outer, s.len, s.inner, gys.f32(), gdy.f32(), gdx.f32());
    ops->softmax_axis_backward(s.outer, s.len, s.inner, gys.f32(), gdy.f32(), gdx2.f32());
    EXPECT_TRUE(close(host(gy), y, 1e-6, 1e-5));
    EXPECT_TRUE(close(host(gdx), dx, 1e-6, 1e-5));
    EXPECT_EQ(host(gy), host(gy2));
    EXPECT_EQ(host(gdx), host(gdx2));
  }
}

}  // namespace pd::gputest

#endif  // PIPEDREAM_HAVE_CUDA
