#include "runtime/launcher.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <regex>
#include <thread>

#include "core/error.h"

namespace pd {

int launcher_world_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return -1;
}

bool speaks_for_the_job() {
  if (launcher_world_size() < 0) return true;
  if (const char* dir = std::getenv("PIPEDREAM_ERROR_DIR"); dir && *dir) return false;
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var)) return std::atoi(v) == 0;
  return true;
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

std::vector<std::string> mpirun_command(int ranks, const std::vector<std::string>& program_args,
                                        const std::string& hostfile) {
  std::vector<std::string> cmd = {"mpirun"};
  if (::geteuid() == 0) cmd.push_back("--allow-run-as-root");
  if (ranks > static_cast<int>(std::thread::hardware_concurrency())) cmd.push_back("--oversubscribe");
  // --quiet: no banner about the exit codes; the launching process prints the
  // workers' error itself (run_and_wait), once.
  cmd.insert(cmd.end(), {"--quiet", "--bind-to", "none", "-np", std::to_string(ranks)});
  if (!hostfile.empty()) cmd.insert(cmd.end(), {"--hostfile", hostfile, "--map-by", "slot"});
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) throw RuntimeFailure("cannot find this program's path (/proc/self/exe)");
  cmd.emplace_back(self, static_cast<size_t>(n));
  cmd.insert(cmd.end(), program_args.begin(), program_args.end());
  return cmd;
}

std::string placement_text(const std::vector<std::string>& host_of_rank,
                           const std::vector<std::vector<int>>& stages_of_rank, int innermost_count) {
  std::vector<std::string> hosts;  // in order of first rank
  for (const auto& h : host_of_rank)
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  if (hosts.size() < 2) return "";
  std::string text;
  for (const auto& h : hosts) {
    std::string ranks, stages;
    std::vector<int> seen;
    for (size_t r = 0; r < host_of_rank.size(); ++r) {
      if (host_of_rank[r] != h) continue;
      ranks += cat(" ", r);
      if (r < stages_of_rank.size())
        for (int s : stages_of_rank[r])
          if (std::find(seen.begin(), seen.end(), s) == seen.end()) seen.push_back(s);
    }
    for (int s : seen) stages += cat(" ", s);
    text += cat("  ", h, ": ranks", ranks, seen.empty() ? "" : cat(" (stage", seen.size() > 1 ? "s" : "", stages, ")"), "\n");
  }
  if (innermost_count > 1)
    for (size_t first = 0; first + 1 < host_of_rank.size(); first += static_cast<size_t>(innermost_count))
      for (size_t r = first + 1; r < first + static_cast<size_t>(innermost_count) && r < host_of_rank.size(); ++r)
        if (host_of_rank[r] != host_of_rank[first]) {
          text += cat("warning: the plan's topology puts ranks ", first, "..", first + innermost_count - 1,
                      " on one host, but they run on ", host_of_rank[first], " and ", host_of_rank[r],
                      ": give each host ", innermost_count, " slots in the hostfile, in plan order\n");
          return text;
        }
  return text;
}

namespace {

// The launching process names a fresh folder in this variable; mpirun hands
// its environment to the workers it starts on this host. Workers on other
// hosts cannot reach the folder: there mpirun's own report is all there is.
constexpr const char* kErrorDirVariable = "PIPEDREAM_ERROR_DIR";

struct WorkerError {
  int64_t reported_at_ns = 0;
  int exit_code = 1;
  std::string message;
};

int64_t wall_clock_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// One report per file: "<time ns> <exit code>\n<message>".
std::optional<WorkerError> read_worker_error(const std::filesystem::path& file) {
  std::ifstream in(file);
  WorkerError e;
  if (!(in >> e.reported_at_ns >> e.exit_code)) return std::nullopt;
  in.ignore(1);
  e.message.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (e.message.empty()) return std::nullopt;
  return e;
}

// A rank stopped by another rank's failure reports "rank N aborted: <why>"
// (runtime/comm), possibly before the failing rank gets to report.
bool echoes_another_rank(const WorkerError& e) {
  static const std::regex echo("^rank [0-9]+ aborted: ");
  return std::regex_search(e.message, echo);
}

// The error that caused the others: the earliest report that is not an echo
// of another rank's failure, else the earliest report.
std::optional<WorkerError> first_cause(const std::filesystem::path& dir) {
  std::vector<WorkerError> reports;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (auto e = read_worker_error(entry.path())) reports.push_back(*e);
  if (reports.empty()) return std::nullopt;
  std::stable_sort(reports.begin(), reports.end(), [](const WorkerError& a, const WorkerError& b) {
    if (echoes_another_rank(a) != echoes_another_rank(b)) return !echoes_another_rank(a);
    return a.reported_at_ns < b.reported_at_ns;
  });
  return reports.front();
}

// A fresh folder for the workers' reports, removed when the run is over.
class ErrorReportDir {
 public:
  ErrorReportDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "pipedream-errors-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr)
      throw RuntimeFailure(cat("cannot create a temporary folder ", pattern, " for the workers' errors: set TMPDIR "
                               "to a writable folder"));
    path_ = pattern;
    ::setenv(kErrorDirVariable, path_.c_str(), 1);
  }
  ~ErrorReportDir() {
    ::unsetenv(kErrorDirVariable);
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ErrorReportDir(const ErrorReportDir&) = delete;
  ErrorReportDir& operator=(const ErrorReportDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

pid_t g_child = -1;
void forward_signal(int sig) {
  if (g_child > 0) ::kill(g_child, sig);
}

// Starts the command and waits for it; its exit code (128 + signal when killed).
int spawn_and_wait(const std::vector<std::string>& command) {
  std::vector<char*> argv;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw RuntimeFailure("fork failed while launching mpirun");
  if (pid == 0) {
    // If this launcher dies (kill -9, a job manager killing one PID), mpirun
    // gets SIGTERM and ends the workers: orphans would go on writing the
    // checkpoints and outputs a resumed run writes too.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) std::_Exit(143);  // died before the prctl
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

}  // namespace

int run_and_wait(const std::vector<std::string>& command) {
  const ErrorReportDir reports;
  const int exit_code = spawn_and_wait(command);
  if (exit_code == 0) return 0;
  const std::optional<WorkerError> cause = first_cause(reports.path());
  std::fflush(stdout);
  if (!cause) {
    // mpirun --quiet says nothing about a worker that crashed or was killed.
    std::fprintf(stderr, "error: a worker failed without an error message (exit code %d%s)\n", exit_code,
                 exit_code > 128 ? cat(": signal ", exit_code - 128).c_str() : "");
    return exit_code;
  }
  std::fprintf(stderr, "error: %s\n", cause->message.c_str());
  std::fflush(stderr);
  return cause->exit_code;
}

bool report_error_to_launcher(const std::string& message, int exit_code) {
  const char* dir = std::getenv(kErrorDirVariable);
  if (dir == nullptr || *dir == '\0') return false;
  // One file per process: every rank on this host writes its own. A rank on
  // another host finds no such folder and prints its error itself.
  std::ofstream out(cat(dir, "/worker-", ::getpid(), ".txt"));
  // The launcher skips an empty report (a file still being written), so an
  // error without text would leave it saying the worker gave no message.
  out << wall_clock_ns() << ' ' << exit_code << '\n'
      << (message.empty() ? cat("an error with no message (exit code ", exit_code, ")") : message);
  out.close();
  return static_cast<bool>(out);
}

}  // namespace pd
