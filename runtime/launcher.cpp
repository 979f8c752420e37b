#include "runtime/launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>

#include "core/error.h"

namespace pd {

int launcher_world_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return -1;
}

void require_world_size(int plan_workers, int world) {
  if (world != plan_workers)
    throw UserError(cat("the plan needs ", plan_workers, " workers but the MPI world has ", world,
                        " processes: start it with mpirun -np ", plan_workers,
                        " (or run pipedream without mpirun and it launches them)"));
}

std::vector<std::string> own_arguments() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  size_t start = 0;
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i] == '\0') {
      args.push_back(all.substr(start, i - start));
      start = i + 1;
    }
  if (!args.empty()) args.erase(args.begin());
  return args;
}

std::vector<std::string> mpirun_command(int ranks, const std::vector<std::string>& program_args) {
  std::vector<std::string> cmd = {"mpirun"};
  if (::geteuid() == 0) cmd.push_back("--allow-run-as-root");
  if (ranks > static_cast<int>(std::thread::hardware_concurrency())) cmd.push_back("--oversubscribe");
  cmd.insert(cmd.end(), {"--bind-to", "none", "-np", std::to_string(ranks)});
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) throw RuntimeFailure("cannot find this program's path (/proc/self/exe)");
  cmd.emplace_back(self, static_cast<size_t>(n));
  cmd.insert(cmd.end(), program_args.begin(), program_args.end());
  return cmd;
}

namespace {
pid_t g_child = -1;
void forward_signal(int sig) {
  if (g_child > 0) ::kill(g_child, sig);
}
}  // namespace

int run_and_wait(const std::vector<std::string>& command) {
  std::vector<char*> argv;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw RuntimeFailure("fork failed while launching mpirun");
  if (pid == 0) {
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "error: cannot run %s (is Open MPI installed? scripts/setup.sh)\n", argv[0]);
    std::_Exit(127);
  }
  g_child = pid;
  // Ctrl-C reaches mpirun through the terminal's process group; a SIGTERM
  // sent to us only is passed on.
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGTERM, forward_signal);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  g_child = -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

}  // namespace pd
