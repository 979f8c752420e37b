// Hostile input files given to `pipedream`: JSON nested 70,000 levels deep
// (used to overflow the stack: SIGSEGV), devices such as /dev/zero (used to
// be read until std::bad_alloc), folders, a schedule CSV declaring 2^63
// minibatches. Each exits 2 with a message naming the file and the field.
// Also: a failed or killed run leaves an existing --metrics file whole.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "core/safetensors.h"
#include "tests/integration/run_job.h"
#include "tests/models/data_files.h"

namespace pd::testing {
namespace {

namespace fs = std::filesystem;

const std::string kDirToken = "{dir}";
const std::string kGraph = PD_SOURCE_DIR "/tests/data/pipedream-profiles/vgg16/graph.txt";
const char* kPlan = R"({"format": "pipedream-plan/1", "config": "1", "stages": [
  {"index": 0, "layers": [0, 7], "replicas": 1, "ranks": [0]}]})";
const std::string kModel = " --model mlp --model-options hidden=24,depth=3 --data synthetic";
const std::string kRun = "run --plan {dir}/plan.json" + kModel + " --threads-per-worker 1";
const std::string kTrain = "train" + kModel + " --threads 1";

// An AddressSanitizer build maps terabytes of shadow memory: no
// address-space cap (prlimit --as) lets its pipedream start.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSpaceCapsWork = false;
#else
constexpr bool kAddressSpaceCapsWork = true;
#endif

std::string deep(size_t depth = 70000) { return std::string(depth, '[') + "0" + std::string(depth, ']'); }

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class HostileFiles : public ::testing::TestWithParam<std::tuple<std::string, std::string, std::string>> {
 protected:
  static fs::path dir() { return fs::temp_directory_path() / ("pd_cli_hostile_" + std::to_string(::getpid())); }

  static void SetUpTestSuite() {
    const fs::path d = dir();
    fs::remove_all(d);
    fs::create_directories(d / "folder");
    write_text((d / "plan.json").string(), kPlan);
    save_safetensors((d / "w.safetensors").string(), {{"w", Tensor::zeros({2})}});
    write_text((d / "deep_spec.json").string(),
               R"({"input": {"shape": [1, 8, 8]}, "classes": 2, "layers": [{"type": "conv2d", "out_channels": 2,
                   "kernel": )" + deep() + R"(}, {"type": "flatten"}, {"type": "linear", "out_features": 2}]})");
    write_text((d / "deep_profile.json").string(),
               R"({"format": "pipedream-profile/1", "model": "m", "batch_size": 4, "nodes": [
                   {"id": 0, "name": "a", "forward_ms": )" + deep() + R"(, "backward_ms": 2, "output_bytes": 8,
                    "activation_bytes": 8, "parameter_bytes": 4}], "edges": []})");
    write_text((d / "deep_topology.json").string(), R"({"levels": [{"count": )" + deep() + R"(, "bandwidth_GBps": 1}]})");
    write_text((d / "deep_plan.json").string(), R"({"format": "pipedream-plan/1", "config": "1", "stages": [
      {"index": 0, "layers": [0, 7], "replicas": )" + deep() + R"(, "ranks": [0]}]})");
    fs::create_directories(d / "deep_ckpt" / "step-4");
    write_text((d / "deep_ckpt" / "latest").string(), "step-4\n");
    write_text((d / "deep_ckpt" / "step-4" / "state.json").string(),
               R"({"format": "pipedream-checkpoint/1", "step": )" + deep() + R"(, "layers": [[0, 7]]})");
    write_text((d / "huge_minibatches.csv").string(),
               "# pipedream-schedule/1 schedule=1f1b-rr weights=stash microbatches=1 "
               "minibatches=9223372036854775807 workers=1\nrank,stage,action\n");
  }
  static void TearDownTestSuite() { fs::remove_all(dir()); }

  static std::string expand(std::string args) {
    for (size_t at; (at = args.find(kDirToken)) != std::string::npos;) args.replace(at, kDirToken.size(), dir().string());
    return args;
  }
};

TEST_P(HostileFiles, ExitsTwoNamingTheFieldOrFile) {
  const auto& [name, args, want] = GetParam();
  const JobResult r = run_shell(pipedream_binary() + " " + expand(args) + " < /dev/null", 60);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output.substr(0, 2000);
  EXPECT_NE(r.output.find(expand(want)), std::string::npos) << "expected '" << expand(want) << "' in:\n"
                                                             << r.output.substr(0, 2000);
  EXPECT_EQ(r.output.find("bad_alloc"), std::string::npos) << r.output.substr(0, 2000);
  EXPECT_TRUE(fs::is_empty(dir() / "folder")) << "something was written into the output folder";
}

using Case = std::tuple<std::string, std::string, std::string>;
INSTANTIATE_TEST_SUITE_P(
    Readers, HostileFiles,
    ::testing::Values(
        // Nested 70,000 levels deep: was SIGSEGV (exit 139).
        Case{"DeepModelSpec", "models --model-spec {dir}/deep_spec.json", "field 'layers[0].kernel[0]"},
        Case{"DeepModelSpecTrain", "train --model-spec {dir}/deep_spec.json --data synthetic --minibatches 1",
             "field 'layers[0].kernel[0]"},
        Case{"DeepProfile", "plan --profile {dir}/deep_profile.json --workers 2 --bandwidth 10",
             "field 'nodes[0].forward_ms[0]"},
        Case{"DeepTopology", "plan --profile " + kGraph + " --topology {dir}/deep_topology.json",
             "field 'levels[0].count[0]"},
        Case{"DeepPlanSimulate", "simulate --plan {dir}/deep_plan.json", "field 'stages[0].replicas[0]"},
        Case{"DeepPlanSchedule", "schedule --plan {dir}/deep_plan.json", "field 'stages[0].replicas[0]"},
        Case{"DeepPlanRun", "run --plan {dir}/deep_plan.json" + kModel + " --minibatches 1",
             "field 'stages[0].replicas[0]"},
        Case{"DeepCheckpointState", kRun + " --minibatches 8 --resume {dir}/deep_ckpt", "field 'step[0]"},
        // Devices: were read past 2 GB, then std::bad_alloc.
        Case{"PlanProfileDevZero", "plan --profile /dev/zero --workers 2 --bandwidth 10",
             "/dev/zero: the profile is not a regular file"},
        Case{"PlanProfileDevUrandom", "plan --profile /dev/urandom --workers 2 --bandwidth 10",
             "/dev/urandom: the profile is not a regular file"},
        Case{"PlanTopologyDevZero", "plan --profile " + kGraph + " --topology /dev/zero",
             "/dev/zero: the topology file is not a regular file"},
        Case{"SimulatePlanDevZero", "simulate --plan /dev/zero", "/dev/zero: the plan is not a regular file"},
        Case{"SimulateProfileDevZero", "simulate --plan {dir}/plan.json --profile /dev/zero",
             "/dev/zero: the profile is not a regular file"},
        Case{"SimulateScheduleFileDevUrandom", "simulate --plan {dir}/plan.json --schedule-file /dev/urandom",
             "/dev/urandom: the schedule file is not a regular file"},
        Case{"SchedulePlanDevZero", "schedule --plan /dev/zero", "/dev/zero: the plan is not a regular file"},
        Case{"RunPlanDevZero", "run --plan /dev/zero" + kModel + " --minibatches 1",
             "/dev/zero: the plan is not a regular file"},
        Case{"ExportOnnxDevZero", "export --onnx /dev/zero --weights {dir}/w.safetensors -o {dir}/folder/out.onnx",
             "/dev/zero: the ONNX model is not a regular file"},
        Case{"ExportWeightsDevZero", "export --onnx {dir}/plan.json --weights /dev/zero -o {dir}/folder/out.onnx",
             "/dev/zero: the safetensors file is not a regular file"},
        Case{"ModelSpecDevZero", "models --model-spec /dev/zero", "/dev/zero: the model spec is not a regular file"},
        // Folders: were exit 1 "basic_filebuf::underflow ... Is a directory".
        Case{"ModelSpecFolder", "models --model-spec {dir}/folder", "{dir}/folder: the model spec is a folder"},
        Case{"ExportOnnxFolder", "export --onnx {dir}/folder --weights {dir}/w.safetensors -o {dir}/out.onnx",
             "{dir}/folder: the ONNX model is a folder"},
        // Was std::bad_alloc.
        Case{"ScheduleCsvMinibatches2To63", "simulate --plan {dir}/plan.json --schedule-file {dir}/huge_minibatches.csv",
             "field 'minibatches' must be an integer in [1, 16777216]"}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::get<0>(info.param); });

// ---- --metrics ---------------------------------------------------------------

class MetricsFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = scratch_dir("metrics_file");
    metrics_ = dir_ + "/m.jsonl";
    write_text(metrics_, kOld);
  }
  static constexpr const char* kOld = "{\"event\": \"step\", \"step\": 0, \"from\": \"an earlier run\"}\n";
  std::string dir_, metrics_;
};

TEST_F(MetricsFile, AFailedTrainLeavesTheExistingFileWhole) {
  const JobResult r = run_shell(pipedream_binary() + " " + kTrain + " --minibatches 20 --log-every 1 --lr 1e30 --metrics " +
                                metrics_ + " < /dev/null");
  ASSERT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("nan"), std::string::npos) << r.output;
  EXPECT_EQ(read_all(metrics_), kOld);
  EXPECT_TRUE(fs::exists(metrics_ + ".partial")) << "the failed run's own log is kept beside it";
}

TEST_F(MetricsFile, AFailedRunLeavesTheExistingFileWhole) {
  write_text(dir_ + "/plan.json", kPlan);
  const JobResult r = run_shell(pipedream_binary() + " run --plan " + dir_ + "/plan.json" + kModel +
                                " --threads-per-worker 1 --minibatches 20 --log-every 1 --lr 1e30 --metrics " +
                                metrics_ + " < /dev/null");
  ASSERT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("diverged"), std::string::npos) << r.output;
  EXPECT_EQ(read_all(metrics_), kOld) << r.output;
}

TEST_F(MetricsFile, AKilledTrainLeavesTheExistingFileWhole) {
  const std::string cmd = pipedream_binary() + " " + kTrain + " --minibatches 1000000 --log-every 1 --metrics " +
                          metrics_ + " < /dev/null > " + dir_ + "/log.txt 2>&1";
  const pid_t job = fork();
  ASSERT_GE(job, 0);
  if (job == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Until the run has logged steps (to the partial file).
  for (int i = 0; i < 600 && step_losses(metrics_ + ".partial").size() < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_GE(step_losses(metrics_ + ".partial").size(), 3u) << read_all(dir_ + "/log.txt");
  kill(job, SIGTERM);  // train stops before its next step (Interrupted, exit 130)
  int status = 0;
  waitpid(job, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 130) << status;
  EXPECT_EQ(read_all(metrics_), kOld);
}

TEST_F(MetricsFile, AFinishedTrainReplacesIt) {
  const JobResult r = run_shell(pipedream_binary() + " " + kTrain + " --minibatches 3 --log-every 1 --no-eval --metrics " +
                                metrics_ + " < /dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(step_losses(metrics_).size(), 3u) << read_all(metrics_);
  EXPECT_FALSE(fs::exists(metrics_ + ".partial"));
}


// ---- users' data files -------------------------------------------------------

// The data readers, --init and the weights of evaluate, as the pipedream
// binary runs them: each hostile file exits 2 naming it, within the
// timeout (a FIFO used to block forever), and never "bad_alloc".
class HostileData : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = scratch_dir("hostile_data");
    ASSERT_EQ(::mkfifo((dir_ + "/fifo.npy").c_str(), 0600), 0);
    fs::create_directories(dir_ + "/folder.npy");
  }
  // The sparse 20 GB and 4.4 GB files take no disk but must not pile up.
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  JobResult pipedream(const std::string& args, const std::string& prefix = "") const {
    return run_shell(prefix + pipedream_binary() + " " + args + " < /dev/null", 60);
  }
  void expect_refused(const JobResult& r, const std::string& want) const {
    EXPECT_EQ(r.exit_code, 2) << r.output.substr(0, 2000);
    EXPECT_NE(r.output.find(want), std::string::npos) << "expected '" << want << "' in:\n" << r.output.substr(0, 2000);
    EXPECT_EQ(r.output.find("bad_alloc"), std::string::npos) << r.output.substr(0, 2000);
    EXPECT_EQ(r.output.find("filesystem error"), std::string::npos) << r.output.substr(0, 2000);
  }
  std::string dir_;
};

const std::string kGptTiny = " --model gpt-mini --model-options vocab=50,context=8,width=16,depth=1,heads=2";

TEST_F(HostileData, FifosFoldersAndSymlinkLoopsExitTwoNamingThePath) {
  const std::string train = "train --model mlp --threads 1 --minibatches 1 --data ";
  write_text(dir_ + "/y.npy", "");
  fs::create_symlink(dir_ + "/fifo.npy", dir_ + "/data.npz");
  expect_refused(pipedream(train + "npy:" + dir_ + "/fifo.npy," + dir_ + "/y.npy"), dir_ + "/fifo.npy is not a regular file");
  expect_refused(pipedream(train + "npy:" + dir_ + "/data.npz"), dir_ + "/data.npz is not a regular file");
  expect_refused(pipedream(train + "npy:" + dir_ + "/folder.npy," + dir_ + "/y.npy"), dir_ + "/folder.npy is a folder");
  fs::create_symlink(dir_ + "/fifo.npy", dir_ + "/train.bin");
  expect_refused(pipedream("train" + kGptTiny + " --threads 1 --minibatches 1 --data tokens:" + dir_ + "/train.bin"),
                 dir_ + "/train.bin is not a regular file");
  fs::remove(dir_ + "/train.bin");
  std::string tokens;
  for (int i = 0; i < 200; ++i) tokens += std::string("\x01\x00", 2);
  write_text(dir_ + "/train.bin", tokens);
  fs::create_symlink(dir_ + "/fifo.npy", dir_ + "/val.bin");
  expect_refused(pipedream("train" + kGptTiny + " --threads 1 --minibatches 1 --data tokens:" + dir_ + "/train.bin"),
                 dir_ + "/val.bin is not a regular file");
  fs::create_directories(dir_ + "/tokens_folder.bin");
  expect_refused(pipedream("train" + kGptTiny + " --threads 1 --minibatches 1 --data tokens:" + dir_ + "/tokens_folder.bin"),
                 dir_ + "/tokens_folder.bin is a folder");
  // Symlink loops: in an image folder, and in a weights folder.
  fs::create_directories(dir_ + "/images/a");
  fs::create_symlink(dir_ + "/images/b", dir_ + "/images/b");
  expect_refused(pipedream("train --model cnn --model-options classes=2 --threads 1 --minibatches 1 --data images:" +
                           dir_ + "/images"),
                 dir_ + "/images/b cannot be opened: Too many levels of symbolic links");
  fs::create_directories(dir_ + "/weights");
  fs::create_symlink(dir_ + "/weights/x.safetensors", dir_ + "/weights/x.safetensors");
  expect_refused(pipedream("evaluate --model mlp --data synthetic --weights " + dir_ + "/weights"),
                 dir_ + "/weights/x.safetensors");
}

// NaN or infinity in --init used to be blamed on the learning rate.
TEST_F(HostileData, NonFiniteInitWeightsAreNamed) {
  const std::string w = dir_ + "/w.safetensors";
  ASSERT_EQ(pipedream("train --model mlp --data synthetic --threads 1 --minibatches 1 --no-eval --save " + w).exit_code, 0);
  auto t = load_safetensors(w);
  t[0].second.f32()[2] = std::nanf("");
  save_safetensors(w, t);
  expect_refused(pipedream("train --model mlp --data synthetic --threads 1 --minibatches 2 --init " + w),
                 w + ": tensor '" + t[0].first + "' holds nan at element 2; weights must be finite");
}

// u8 token ids were read with a 1-byte stride: the same ids in every
// integer dtype must train the same weights.
TEST_F(HostileData, EveryIntegerDtypeOfTokenIdsTrainsTheSameWeights) {
  const int n = 16, t = 8;
  std::string first;
  for (const std::string descr : {"|u1", "|i1", "<u2", "<i2", "<u4", "<i4", "<u8", "<i8"}) {
    const size_t es = static_cast<size_t>(descr[2] - '0');
    std::string x, y;
    for (int i = 0; i < n * t; ++i) {
      const int64_t a = (i * 7 + 3) % 50, b = (i * 7 + 10) % 50;
      x += std::string(reinterpret_cast<const char*>(&a), es);
      y += std::string(reinterpret_cast<const char*>(&b), es);
    }
    write_text(dir_ + "/x.npy", npy_bytes(descr, {n, t}, x));
    write_text(dir_ + "/y.npy", npy_bytes(descr, {n, t}, y));
    const std::string w = dir_ + "/w.safetensors";
    const JobResult r = pipedream("train" + kGptTiny + " --threads 1 --minibatches 3 --batch 4 --no-eval --save " + w +
                                  " --data npy:" + dir_ + "/x.npy," + dir_ + "/y.npy");
    ASSERT_EQ(r.exit_code, 0) << descr << "\n" << r.output;
    if (first.empty()) first = read_all(w);
    else EXPECT_TRUE(read_all(w) == first) << descr << " trained other weights than |u1";
  }
}

// Each reader under an address-space cap (`prlimit --as`, as the probe
// ran): files that claim or hold more than the cap allows are refused
// naming the file, not "bad_alloc" or "out of host memory".
TEST_F(HostileData, ReadersUnderAnAddressSpaceCapNameTheFile) {
  if (!kAddressSpaceCapsWork) GTEST_SKIP() << "AddressSanitizer build: prlimit --as cannot be used";
  const std::string cap = "prlimit --as=" + std::to_string(uint64_t{3} << 30) + " ";
  const std::string train = "train --model mlp --threads 1 --minibatches 1 --no-eval --data ";
  // 20 GB sparse files: tokens, a .npy whose header vouches for 20 GB, an image.
  write_text(dir_ + "/big.bin", "");
  fs::resize_file(dir_ + "/big.bin", uint64_t{20} << 30);
  expect_refused(pipedream("train" + kGptTiny + " --threads 1 --minibatches 1 --data tokens:" + dir_ + "/big.bin", cap),
                 dir_ + "/big.bin needs 10737418240 tokens in memory, which could not be allocated");
  const int64_t rows = (int64_t{20} << 30) / 3136;
  write_text(dir_ + "/x.npy", npy_bytes("<f4", {rows, 1, 28, 28}, ""));
  fs::resize_file(dir_ + "/x.npy", fs::file_size(dir_ + "/x.npy") + uint64_t(rows) * 3136);
  write_text(dir_ + "/y.npy", npy_bytes("|u1", {rows}, std::string(static_cast<size_t>(rows), '\0')));
  expect_refused(pipedream(train + "npy:" + dir_ + "/x.npy," + dir_ + "/y.npy", cap),
                 dir_ + "/x.npy needs " + std::to_string(rows * 3136) + " bytes in memory, which could not be allocated");
  fs::create_symlink("/dev/zero", dir_ + "/zero.npy");
  expect_refused(pipedream(train + "npy:" + dir_ + "/zero.npy," + dir_ + "/y.npy", cap),
                 dir_ + "/zero.npy is not a regular file");
  expect_refused(pipedream("train" + kGptTiny + " --threads 1 --minibatches 1 --data tokens:/dev/zero", cap),
                 "/dev/zero is not a regular file");
  // A safetensors file of one 20 GB tensor the model lacks: refused from its header.
  const std::string header = R"({"huge": {"dtype": "F32", "shape": [5368709120], "data_offsets": [0, 21474836480]}})";
  std::string st(8, '\0');
  const uint64_t len = header.size();
  std::memcpy(st.data(), &len, 8);
  write_text(dir_ + "/huge.safetensors", st + header);
  fs::resize_file(dir_ + "/huge.safetensors", 8 + header.size() + (uint64_t{20} << 30));
  expect_refused(pipedream("evaluate --model mlp --data synthetic --weights " + dir_ + "/huge.safetensors", cap),
                 dir_ + "/huge.safetensors: 1 tensor is not in mlp: 'huge'");
}

// Too little address space for OpenBLAS's 128 MiB work buffer: OpenBLAS
// retried its mmap forever at full CPU (and a first SIGTERM only asked the
// loop to stop); now the run exits 1 naming memory and the limit.
TEST_F(HostileData, TrainUnderAnAddressSpaceCapTooSmallForOpenBlasExitsOneNamingMemory) {
  if (!kAddressSpaceCapsWork) GTEST_SKIP() << "AddressSanitizer build: prlimit --as cannot be used";
  const JobResult r = pipedream("train --model mlp --data synthetic --minibatches 3 --no-eval --threads 1 "
                                "--loader-threads 0",
                                "prlimit --as=" + std::to_string(uint64_t{150} << 20) + " ");
  EXPECT_EQ(r.exit_code, 1) << r.output.substr(0, 2000);
  EXPECT_NE(r.output.find("out of memory: OpenBLAS needs 128 MiB of address space"), std::string::npos)
      << r.output.substr(0, 2000);
  EXPECT_NE(r.output.find("address-space limit of 150 MiB"), std::string::npos) << r.output.substr(0, 2000);
}

// Unreadable files and folders. The tests run as root, whom permissions do
// not stop, so the reader runs as nobody (setpriv), on files it may reach
// but not read: each exits 2 naming the path and why.
TEST_F(HostileData, UnreadableFilesAndFoldersExitTwoNamingThePath) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run the reader as another user";
  if (run_shell("setpriv --version").exit_code != 0) GTEST_SKIP() << "no setpriv";
  const std::string nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  const std::string train = "train --model mlp --threads 1 --minibatches 1 --batch 4 --no-eval --data ";
  write_text(dir_ + "/x.npy", npy_bytes("<f4", {20, 1, 28, 28}, std::string(20 * 3136, '\0')));
  write_text(dir_ + "/y.npy", npy_bytes("|u1", {20}, std::string(20, '\1')));
  const JobResult readable = pipedream(train + "npy:" + dir_ + "/x.npy," + dir_ + "/y.npy", nobody);
  ASSERT_EQ(readable.exit_code, 0) << "nobody cannot run pipedream or reach " << dir_ << ":\n" << readable.output;
  ASSERT_EQ(::chmod((dir_ + "/x.npy").c_str(), 0), 0);
  expect_refused(pipedream(train + "npy:" + dir_ + "/x.npy," + dir_ + "/y.npy", nobody),
                 "--data npy: " + dir_ + "/x.npy cannot be opened: Permission denied");
  write_text(dir_ + "/data.npz", zip_bytes({{"x.npy", "."}, {"y.npy", "."}}, false));
  ASSERT_EQ(::chmod((dir_ + "/data.npz").c_str(), 0), 0);
  expect_refused(pipedream(train + "npy:" + dir_ + "/data.npz", nobody),
                 "--data npy: " + dir_ + "/data.npz cannot be opened: Permission denied");
  write_text(dir_ + "/train.bin", std::string(400, '\1'));
  ASSERT_EQ(::chmod((dir_ + "/train.bin").c_str(), 0), 0);
  expect_refused(pipedream("train" + kGptTiny + " --threads 1 --minibatches 1 --data tokens:" + dir_ + "/train.bin", nobody),
                 dir_ + "/train.bin cannot be opened: Permission denied");
  // An image folder: an unreadable class folder, then an unreadable image.
  write_image_folder(dir_ + "/images", 2, 2);
  ASSERT_EQ(::chmod((dir_ + "/images/class1").c_str(), 0), 0);
  const std::string images = "train --model cnn --model-options classes=2 --threads 1 --minibatches 1 --batch 2 --data images:";
  expect_refused(pipedream(images + dir_ + "/images", nobody),
                 "folder " + dir_ + "/images/class1 cannot be listed: Permission denied");
  ASSERT_EQ(::chmod((dir_ + "/images/class1").c_str(), 0755), 0);
  ASSERT_EQ(::chmod((dir_ + "/images/class1/img001.png").c_str(), 0), 0);
  expect_refused(pipedream(images + dir_ + "/images", nobody),
                 dir_ + "/images/class1/img001.png cannot be opened: Permission denied");
  // Weights: an unreadable file, and an unreadable weights folder.
  const std::string w = dir_ + "/w.safetensors";
  ASSERT_EQ(pipedream("train --model mlp --data synthetic --threads 1 --minibatches 1 --no-eval --save " + w).exit_code, 0);
  ASSERT_EQ(::chmod(w.c_str(), 0), 0);
  expect_refused(pipedream("evaluate --model mlp --data synthetic --weights " + w, nobody), w + ": Permission denied");
  expect_refused(pipedream("train --model mlp --data synthetic --threads 1 --minibatches 1 --init " + w, nobody),
                 w + ": Permission denied");
  fs::create_directories(dir_ + "/weights");
  ASSERT_EQ(::chmod((dir_ + "/weights").c_str(), 0), 0);
  expect_refused(pipedream("evaluate --model mlp --data synthetic --weights " + dir_ + "/weights", nobody),
                 dir_ + "/weights: the weights folder cannot be listed: Permission denied");
}

// A real zip64 archive: a stored member of 4.39 GB (a sparse hole on
// disk), then members whose local headers lie beyond 4 GiB. The sizes and
// offsets exist only in the zip64 fields; read as 32-bit values they would
// make x_train "hold 95 MB but need 4.39 GB" and y_train's header lie
// nowhere. Under a 3 GiB address-space cap the reader gets as far as
// allocating x_train's 4,390,400,000 bytes and names the member.
TEST_F(HostileData, Zip64MemberOverFourGiBIsReadByItsZip64Fields) {
  if (!kAddressSpaceCapsWork) GTEST_SKIP() << "AddressSanitizer build: prlimit --as cannot be used";
  const int64_t rows = 1400000;  // x 28x28 f32: 4,390,400,000 bytes > 2^32
  const std::string x_head = npy_bytes("<f4", {rows, 1, 28, 28}, "");
  const uint64_t x_size = x_head.size() + uint64_t(rows) * 3136;
  ASSERT_GT(x_size, uint64_t{1} << 32);
  // CRC-32 of the header then x_size - header zeros, combined without reading 4 GB.
  const std::string mib(1 << 20, '\0');
  const uLong zero_mib = crc32(0, reinterpret_cast<const Bytef*>(mib.data()), static_cast<uInt>(mib.size()));
  uLong crc = crc32(0, reinterpret_cast<const Bytef*>(x_head.data()), static_cast<uInt>(x_head.size()));
  uint64_t zeros = x_size - x_head.size();
  for (; zeros >= mib.size(); zeros -= mib.size()) crc = crc32_combine(crc, zero_mib, static_cast<z_off_t>(mib.size()));
  crc = crc32(crc, reinterpret_cast<const Bytef*>(mib.data()), static_cast<uInt>(zeros));
  auto put = [](std::string& s, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
  };
  struct Entry {
    std::string name, data;
    uint64_t size, crc, offset;
  };
  std::vector<Entry> entries;
  std::string labels(static_cast<size_t>(rows), '\0');
  for (int64_t i = 0; i < rows; ++i) labels[static_cast<size_t>(i)] = static_cast<char>(i % 10);
  const std::string y = npy_bytes("|u1", {rows}, labels), xt = npy_bytes("<f4", {2, 1, 28, 28}, std::string(2 * 3136, '\0')),
                    yt = npy_bytes("|u1", {2}, std::string("\1\2", 2));
  auto crc_of = [](const std::string& d) { return crc32(0, reinterpret_cast<const Bytef*>(d.data()), static_cast<uInt>(d.size())); };
  const std::string path = dir_ + "/big.npz";
  {
    std::ofstream f(path, std::ios::binary);
    // x_train: sizes in the local zip64 extra field; its data a hole after the .npy header.
    std::string local;
    put(local, 0x04034b50, 4), put(local, 45, 2), put(local, 0, 2), put(local, 0, 2), put(local, 0, 4);
    put(local, crc, 4), put(local, 0xFFFFFFFF, 4), put(local, 0xFFFFFFFF, 4), put(local, 11, 2), put(local, 20, 2);
    local += "x_train.npy";
    put(local, 0x0001, 2), put(local, 16, 2), put(local, x_size, 8), put(local, x_size, 8);
    entries.push_back({"x_train.npy", "", x_size, crc, 0});
    f << local << x_head;
    uint64_t at = local.size() + x_size;
    f.seekp(static_cast<std::streamoff>(at));
    for (const auto& [name, data] : std::vector<std::pair<std::string, std::string>>{
             {"y_train.npy", y}, {"x_test.npy", xt}, {"y_test.npy", yt}}) {
      std::string h;
      put(h, 0x04034b50, 4), put(h, 20, 2), put(h, 0, 2), put(h, 0, 2), put(h, 0, 4);
      put(h, crc_of(data), 4), put(h, data.size(), 4), put(h, data.size(), 4), put(h, name.size(), 2), put(h, 0, 2);
      f << h << name << data;
      entries.push_back({name, data, data.size(), crc_of(data), at});
      at += h.size() + name.size() + data.size();
    }
    // Central directory: x_train's sizes and every later member's offset in zip64 fields.
    std::string dir;
    for (const Entry& e : entries) {
      const bool big = e.size > 0xFFFFFFFFu, far = e.offset > 0xFFFFFFFFu;
      put(dir, 0x02014b50, 4), put(dir, 45, 2), put(dir, 45, 2), put(dir, 0, 2), put(dir, 0, 2), put(dir, 0, 4);
      put(dir, e.crc, 4), put(dir, big ? 0xFFFFFFFF : e.size, 4), put(dir, big ? 0xFFFFFFFF : e.size, 4);
      put(dir, e.name.size(), 2), put(dir, (big ? 16 : 0) + (far ? 8 : 0) + (big || far ? 4 : 0), 2);
      put(dir, 0, 2), put(dir, 0, 2), put(dir, 0, 2), put(dir, 0, 4), put(dir, far ? 0xFFFFFFFF : e.offset, 4);
      dir += e.name;
      if (big || far) {
        put(dir, 0x0001, 2), put(dir, (big ? 16 : 0) + (far ? 8 : 0), 2);
        if (big) put(dir, e.size, 8), put(dir, e.size, 8);
        if (far) put(dir, e.offset, 8);
      }
    }
    std::string end;
    put(end, 0x06064b50, 4), put(end, 44, 8), put(end, 45, 2), put(end, 45, 2), put(end, 0, 4), put(end, 0, 4);
    put(end, entries.size(), 8), put(end, entries.size(), 8), put(end, dir.size(), 8), put(end, at, 8);
    put(end, 0x07064b50, 4), put(end, 0, 4), put(end, at + dir.size(), 8), put(end, 1, 4);
    put(end, 0x06054b50, 4), put(end, 0, 2), put(end, 0, 2), put(end, 0xFFFF, 2), put(end, 0xFFFF, 2);
    put(end, 0xFFFFFFFF, 4), put(end, 0xFFFFFFFF, 4), put(end, 0, 2);
    f << dir << end;
    ASSERT_TRUE(f.good());
  }
  const std::string cap = "prlimit --as=" + std::to_string(uint64_t{3} << 30) + " ";
  expect_refused(pipedream("train --model mlp --threads 1 --minibatches 1 --no-eval --data npy:" + path, cap),
                 "--data npy: " + path + " needs " + std::to_string(x_size - x_head.size()) + " bytes for " + path +
                     ":x_train in memory, which could not be allocated");
}

// ---- failed writes -------------------------------------------------------------

// Every output on a full disk (a 64 KB tmpfs, filled): the write fails with
// exit 1 naming the path, and the file that was there stays whole.
class FullDisk : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = scratch_dir("full_disk");
    disk_ = dir_ + "/disk";
    fs::create_directories(disk_);
    if (run_shell("mount -t tmpfs -o size=64k tmpfs " + disk_ + " 2>&1").exit_code != 0)
      GTEST_SKIP() << "cannot mount a tmpfs here (not root?)";
    mounted_ = true;
    write_text(dir_ + "/plan.json", kPlan);
    ASSERT_EQ(run_shell(pipedream_binary() + " " + kTrain + " --minibatches 1 --no-eval --save " + dir_ +
                        "/w.safetensors < /dev/null").exit_code, 0);
  }
  void TearDown() override {
    if (mounted_) run_shell("umount " + disk_);
  }
  std::string expand_plan(std::string args) const {
    for (size_t at; (at = args.find(kDirToken)) != std::string::npos;) args.replace(at, kDirToken.size(), dir_);
    return args;
  }
  // Writes `old` to each of `files` (on the disk), then fills the disk.
  void fill(const std::vector<std::string>& files) {
    for (const std::string& f : files) write_text(disk_ + "/" + f, kOldText);
    std::ofstream filler(disk_ + "/filler", std::ios::binary);
    const std::string block(4096, 'x');
    while (filler.write(block.data(), block.size()) && filler.flush()) {
    }
  }
  // `named`: the path the message names (default: `file`).
  void expect_failed_write(const std::string& args, const std::string& file, const std::string& named = "") {
    fill({file});
    const JobResult r = run_shell(pipedream_binary() + " " + args + " < /dev/null", 120);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.output.substr(0, 2000);
    EXPECT_NE(r.output.find(disk_ + "/" + (named.empty() ? file : named)), std::string::npos)
        << args << "\n" << r.output.substr(0, 2000);
    EXPECT_EQ(read_all(disk_ + "/" + file), kOldText) << args;
  }
  static constexpr const char* kOldText = "{\"from\": \"an earlier run\"}\n";
  std::string dir_, disk_;
  bool mounted_ = false;
};

TEST_F(FullDisk, TrainMetrics) { expect_failed_write(kTrain + " --minibatches 3 --log-every 1 --metrics " + disk_ + "/m.jsonl", "m.jsonl"); }
TEST_F(FullDisk, EvaluateMetrics) {
  expect_failed_write("evaluate --model mlp --model-options hidden=24,depth=3 --data synthetic --weights " + dir_ +
                          "/w.safetensors --metrics " + disk_ + "/m.jsonl",
                      "m.jsonl");
}
TEST_F(FullDisk, RunMetrics) {
  expect_failed_write(expand_plan(kRun) + " --minibatches 3 --log-every 1 --metrics " + disk_ + "/m.jsonl", "m.jsonl");
}
TEST_F(FullDisk, TrainSave) { expect_failed_write(kTrain + " --minibatches 1 --no-eval --save " + disk_ + "/w.safetensors", "w.safetensors"); }
TEST_F(FullDisk, RunSave) {
  expect_failed_write(expand_plan(kRun) + " --minibatches 1 --no-eval --save " + disk_ + "/w.safetensors", "w.safetensors");
}
TEST_F(FullDisk, PredictOutput) {
  expect_failed_write("predict --model mlp --model-options hidden=24,depth=3 --data synthetic --weights " + dir_ +
                          "/w.safetensors -o " + disk_ + "/out.csv",
                      "out.csv");
}
TEST_F(FullDisk, Checkpoints) {
  fs::create_directories(disk_ + "/ckpt");
  // The stage file being written is named; `latest` still points at the old checkpoint.
  expect_failed_write(kTrain + " --minibatches 2 --no-eval --checkpoint-dir " + disk_ + "/ckpt", "ckpt/latest",
                      "ckpt/step-2.partial/stage-0.safetensors");
}
TEST_F(FullDisk, PlanOutput) {
  expect_failed_write("plan --profile " + kGraph + " --workers 4 --bandwidth 10 -o " + disk_ + "/plan.json", "plan.json");
}
TEST_F(FullDisk, ProfileOutput) {
  expect_failed_write("profile --model mlp --model-options hidden=24,depth=3 --batch 4 --threads 1 -o " + disk_ +
                          "/profile.json",
                      "profile.json");
}

}  // namespace
}  // namespace pd::testing
