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
// Whether this process speaks for the job in what every rank would print
// alike (notes on the inputs): true outside MPI and on rank 0 of a world the
// user started; false in workers that run_and_wait started (the launching
// process has said it).
bool speaks_for_the_job();
// UserError unless world == plan_workers, with both numbers.
void require_world_size(int plan_workers, int world);

// The command line that re-runs this program under mpirun with `ranks`
// processes: --allow-run-as-root when root, --oversubscribe when ranks
// exceed the cores, no core binding (threads per worker decide), --quiet
// (run_and_wait says what failed).
// With a hostfile, the ranks go to its hosts in order, filling each host's
// slots first (--map-by slot): ranks r..r+k-1 share a host, as the plan's
// innermost level of k workers assumes.
std::vector<std::string> mpirun_command(int ranks, const std::vector<std::string>& program_args,
                                        const std::string& hostfile = "");

// Where the ranks run, one line per host, "  HOST: ranks 0 1 (stages 0 1)",
// and a warning line when a group of the plan's innermost level
// (`innermost_count` consecutive ranks) spans hosts. Empty when every rank
// is on one host. stage_of_rank[r]: rank r's stages.
std::string placement_text(const std::vector<std::string>& host_of_rank,
                           const std::vector<std::vector<int>>& stages_of_rank, int innermost_count);
// This process's own arguments (argv[1..]), read from /proc/self/cmdline.
std::vector<std::string> own_arguments();
// Runs the command (mpirun), forwarding Ctrl-C to it, and returns its exit
// code. When a worker reported an error (report_error_to_launcher), that
// error is printed as this process's last line, below mpirun's own report,
// and its exit code is returned: the user sees our one line, not mpirun's.
// A worker that failed without a report (a crash) gets a line naming the code.
int run_and_wait(const std::vector<std::string>& command);
// In a worker started by run_and_wait: leaves the one-line error and its exit
// code (2 bad input, 1 run-time failure) for the launching process, which
// prints it once for all ranks. True when it was left there (the worker then
// prints nothing itself); false in a process that run_and_wait did not start,
// or when the launcher's folder cannot be written (a rank on another host).
bool report_error_to_launcher(const std::string& message, int exit_code);

}  // namespace pd
