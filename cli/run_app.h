#pragma once
// What `pipedream` and `pipedream-bench` share around their subcommands:
// the OpenMP re-exec for commands that compute, and the mapping of errors to
// exit codes (bad input 2 — a bad flag included — run-time failure 1,
// interrupted 130). A
// worker started by `run`'s relaunch also leaves its error for the launching
// process, which prints it last (runtime/launcher.h).
#include <cxxabi.h>

#include <cstdlib>
#include <initializer_list>
#include <iostream>
#include <string>
#include <typeinfo>

#include <CLI/CLI.hpp>

#include "core/cpu/openmp_policy.h"
#include "core/error.h"
#include "runtime/launcher.h"

namespace pd::cli {

// Call first in main(), before MPI or OpenMP start: sleeping OpenMP waits
// (openmp_policy.h) only for the commands that compute, since the re-exec
// costs a process start.
inline void prepare_process(int argc, char** argv, std::initializer_list<const char*> computing) {
  const std::string command = argc > 1 ? argv[1] : "";
  for (const char* name : computing)
    if (command == name) pd::cpu::ensure_passive_openmp_wait(argv);
}

// An exception's text, or its type where it has none (a worker's failure
// must still say something to the launcher that prints it).
inline std::string described(const std::exception& e) {
  if (*e.what() != '\0') return e.what();
  int status = 0;
  char* name = abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, &status);
  const std::string type = status == 0 && name ? name : typeid(e).name();
  std::free(name);
  return "an exception of type " + type + " with no message";
}

inline int run_app(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 returns 0 for --help/--version and its own codes for errors.
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const pd::Interrupted& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 130;
  } catch (const pd::UserError& e) {
    // A relaunched worker's error is printed once, by the launching process.
    if (!pd::report_error_to_launcher(e.what(), 2)) std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    const std::string what = described(e);
    if (!pd::report_error_to_launcher(what, 1)) std::cerr << "error: " << what << "\n";
    return 1;
  }
  return 0;
}

}  // namespace pd::cli
