// measure_profile with --precision bf16: the same layers, activation and
// message sizes at 2 bytes an element (half fp32's), and "precision" in the
// profile's JSON, read back (absent for fp32, whose files stay as they were).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "profiler/measure.h"

namespace pd {
namespace {

ProfileOptions quick(Precision p) {
  ProfileOptions o;
  o.batch = 8;
  o.threads = 1;
  o.warmup = 0;
  o.iters = 1;
  o.precision = p;
  return o;
}

TEST(Bf16Profile, ActivationAndMessageSizesAreHalfFp32s) {
  for (const char* name : {"cnn", "gpt-mini"}) {
    const Model m = name == std::string("cnn")
                        ? resolve_model("cnn")
                        : resolve_model("gpt-mini", "", "vocab=64,context=16,width=32,depth=2,heads=2");
    const Profile fp32 = measure_profile(m, quick(Precision::FP32));
    const Profile bf16 = measure_profile(m, quick(Precision::BF16));
    EXPECT_EQ(fp32.precision, Precision::FP32);
    EXPECT_EQ(bf16.precision, Precision::BF16);
    ASSERT_EQ(fp32.nodes.size(), bf16.nodes.size());
    for (size_t i = 0; i < fp32.nodes.size(); ++i) {
      const ProfileNode &a = fp32.nodes[i], &b = bf16.nodes[i];
      EXPECT_GT(a.output_bytes, 0u) << name << " " << a.name;
      EXPECT_EQ(b.output_bytes * 2, a.output_bytes) << name << " " << a.name;
      EXPECT_EQ(b.activation_bytes, a.activation_bytes / 2) << name << " " << a.name;
      EXPECT_EQ(b.parameter_bytes, a.parameter_bytes) << "master weights stay fp32";
      EXPECT_GT(b.forward_ms, 0);
    }
  }
}

TEST(Bf16Profile, PrecisionRoundTripsThroughTheJson) {
  const auto dir = std::filesystem::temp_directory_path() / ("pd_bf16_profile_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const Model m = resolve_model("mlp", "", "hidden=16,depth=1");
  const Profile bf16 = measure_profile(m, quick(Precision::BF16));
  write_profile_json(bf16, (dir / "bf16.json").string());
  EXPECT_EQ(read_profile((dir / "bf16.json").string()).precision, Precision::BF16);
  write_profile_json(measure_profile(m, quick(Precision::FP32)), (dir / "fp32.json").string());
  std::ifstream f(dir / "fp32.json");
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.find("\"precision\""), std::string::npos);
  EXPECT_EQ(read_profile((dir / "fp32.json").string()).precision, Precision::FP32);
  std::string bad = text;
  bad.insert(bad.find('{') + 1, "\"precision\": \"fp16\", ");
  try {
    parse_profile_json(bad, "bad.json");
    ADD_FAILURE() << "a profile with precision fp16 was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("precision"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pd
