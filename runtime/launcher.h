#pragma once
// Starting the workers: `pipedream run` outside MPI re-launches itself
// under `mpirun -np R` (so one command starts a run); under a launcher the
// MPI world must have exactly the plan's R workers.
#include <string>
#include <vector>

namespace pd {

// World size the MPI launcher announced in the environment (Open MPI,
// MPICH/Hydra, PMI, Slurm), or -1 when not launched under MPI.
int launcher_world_size();
// UserError unless world == plan_workers, with both numbers.
void require_world_size(int plan_workers, int world);

// The command line that re-runs this program under mpirun with `ranks`
// processes: --allow-run-as-root when root, --oversubscribe when ranks
// exceed the cores, no core binding (threads per worker decide).
std::vector<std::string> mpirun_command(int ranks, const std::vector<std::string>& program_args);
// This process's own arguments (argv[1..]), read from /proc/self/cmdline.
std::vector<std::string> own_arguments();
// Runs the command (mpirun), forwarding Ctrl-C to it, and returns its exit
// code. When a worker reported an error (report_error_to_launcher), that
// error is printed as this process's last line, below mpirun's own report,
// and its exit code is returned: the user sees our one line, not mpirun's.
int run_and_wait(const std::vector<std::string>& command);
// In a worker started by run_and_wait: leaves the one-line error and its exit
// code (2 bad input, 1 run-time failure) for the launching process. Does
// nothing in a process that run_and_wait did not start.
void report_error_to_launcher(const std::string& message, int exit_code);

}  // namespace pd
