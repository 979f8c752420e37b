#pragma once
// Shared by the ONNX tests: PyTorch availability, running the Python side
// scripts, a scratch folder in the build tree.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace pd::testing {

// Debian's PyTorch lives under /usr/bin/python3 (not a pyenv/venv python).
inline const char* kPython = "/usr/bin/python3";

inline bool have_torch() {
  static const bool ok = std::system(("OMP_NUM_THREADS=1 " + std::string(kPython) +
                                      " -c 'import torch, torchvision' >/dev/null 2>&1").c_str()) == 0;
  return ok;
}

#define PD_SKIP_WITHOUT_TORCH()                                                                          \
  if (!::pd::testing::have_torch())                                                                      \
  GTEST_SKIP() << "python3-torch / python3-torchvision are not installed (scripts/setup.sh installs them)"

inline std::string scratch_dir(const std::string& name) {
  const std::filesystem::path d = std::filesystem::path(PD_BINARY_DIR) / "onnx_test" / name;
  std::filesystem::create_directories(d);
  return d.string();
}

// Runs a Python script of the repository (path relative to its root); true on exit 0.
inline bool run_python(const std::string& script_and_args, const std::string& log) {
  // Huge pages for glibc's large blocks: VGG's 400 MB gradients are
  // allocated afresh on every backward, and faulting them in 4 KiB pages
  // cost a third of torch_reference.py's time.
  const std::string cmd = "OMP_NUM_THREADS=1 GLIBC_TUNABLES=glibc.malloc.hugetlb=1 " + std::string(kPython) + " " +
                          std::string(PD_SOURCE_DIR) + "/" +
                          script_and_args + " >" + log + " 2>&1";
  return std::system(cmd.c_str()) == 0;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Exit status of `pipedream ARGS` (-1 if it did not exit), its output in
// `log`. As root, MPI runs need leave to run and to place more ranks than
// cores (what scripts/test.sh exports too).
inline int run_pipedream(const std::string& args, const std::string& log) {
  const std::string cmd = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 " +
                          std::string(PD_BINARY_DIR) + "/bin/pipedream " + args + " >" + log + " 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace pd::testing
