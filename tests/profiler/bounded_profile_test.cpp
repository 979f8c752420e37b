// profile --memory: one layer at a time, each built alone, timed on a
// synthetic input of its recorded shape and freed before the next. The
// profile it writes has the layers, sizes and parameter bytes of the whole
// model's profile; a process profiling a model whose training state is
// several times the bound peaks below the bound's size, not the model's;
// and a layer that alone exceeds the bound is refused, named.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "core/cpu/host_allocator.h"
#include "core/error.h"
#include "profiler/measure.h"

namespace pd {
namespace {

ProfileOptions quick() {
  ProfileOptions o;
  o.batch = 8;
  o.threads = 1;
  o.warmup = 0;
  o.iters = 2;
  return o;
}

long status_kb(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  return -1;
}

TEST(BoundedProfile, HasTheWholeModelsLayersAndSizes) {
  for (const char* name : {"cnn", "gpt-mini"}) {
    const Model m = name == std::string("cnn")
                        ? resolve_model("cnn")
                        : resolve_model("gpt-mini", "", "vocab=64,context=16,width=32,depth=2,heads=2");
    ProfileOptions bounded = quick();
    bounded.memory_bytes = uint64_t{1} << 30;
    const Profile whole = measure_profile(m, quick()), alone = measure_profile(m, bounded);
    ASSERT_EQ(whole.nodes.size(), alone.nodes.size()) << name;
    EXPECT_EQ(whole.edges, alone.edges) << name;
    for (size_t i = 0; i < whole.nodes.size(); ++i) {
      const ProfileNode &a = whole.nodes[i], &b = alone.nodes[i];
      EXPECT_EQ(a.name, b.name) << name;
      EXPECT_EQ(a.output_bytes, b.output_bytes) << name << " " << a.name;
      EXPECT_EQ(a.activation_bytes, b.activation_bytes) << name << " " << a.name;
      EXPECT_EQ(a.parameter_bytes, b.parameter_bytes) << name << " " << a.name;
      EXPECT_EQ(a.optimizer_state_bytes, b.optimizer_state_bytes) << name << " " << a.name;
      EXPECT_GT(b.forward_ms, 0) << name << " " << a.name;
    }
  }
}

// An MLP of 8 layers of 1024x1024 (33 MB of weights, about 100 MB with
// gradients and momentum) profiled under --memory 16 MB.
TEST(BoundedProfile, AModelWhoseStateExceedsTheBoundPeaksUnderIt) {
  const Model m = resolve_model("mlp", "", "hidden=1024,depth=8");
  const uint64_t bound = 16'000'000, state = uint64_t(m.parameter_count()) * 4 * 3;
  ASSERT_GT(state, 5 * bound);
  ProfileOptions o = quick();
  o.memory_bytes = bound;
  // Once before measuring: the process's one-time start-up (OpenBLAS's
  // per-thread buffers at the first GEMM) is not the profile's.
  (void)measure_profile(resolve_model("mlp", "", "hidden=1024,depth=1"), o);
  cpu::release_host_cache();
  {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";  // resets VmHWM to the current resident size
    if (!clear.flush()) GTEST_SKIP() << "cannot reset the peak resident size (/proc/self/clear_refs)";
  }
  const long before = status_kb("VmRSS");
  const Profile p = measure_profile(m, o);
  const long peak_bytes = (status_kb("VmHWM") - before) * 1024;
  uint64_t parameter_bytes = 0;
  for (const ProfileNode& n : p.nodes) parameter_bytes += n.parameter_bytes;
  EXPECT_EQ(parameter_bytes * 3, state);
  std::printf("profiling a model of %.1f MB of training state under --memory %.1f MB peaked %.1f MB above the start\n",
              double(state) / 1e6, double(bound) / 1e6, double(peak_bytes) / 1e6);
  EXPECT_LT(peak_bytes, long(bound));
}

TEST(BoundedProfile, ALayerAloneOverTheBoundIsRefusedNamingIt) {
  const Model m = resolve_model("mlp", "", "hidden=1024,depth=2");
  ProfileOptions o = quick();
  o.memory_bytes = 4'000'000;  // one 1024x1024 layer with gradient and momentum: 12.6 MB
  try {
    measure_profile(m, o);
    FAIL() << "profiled over the bound";
  } catch (const UserError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("layer 1 (fc1) alone needs"), std::string::npos) << what;
    EXPECT_NE(what.find("more than --memory"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace pd
