// Runs a program with extra environment variables and captures its stdout.
#ifndef MEMVIRT_TESTS_SHIM_RUN_PROGRAM_H_
#define MEMVIRT_TESTS_SHIM_RUN_PROGRAM_H_

#include <string>
#include <utility>
#include <vector>

namespace memvirt::testing {

struct ProgramResult {
  int exit_code = -1;  // -1: did not exit normally
  std::string out;
};

// `env` entries override (or add to) the current environment; an entry
// "NAME=" with an empty value removes NAME. With `with_stderr`, `out` also
// receives the program's standard error (e.g. the shim's log lines).
ProgramResult RunProgram(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         bool with_stderr = false);

// The word after the first whole word `key` in `out` ("key value" pairs).
std::string Field(const std::string& out, const std::string& key);

}  // namespace memvirt::testing

#endif  // MEMVIRT_TESTS_SHIM_RUN_PROGRAM_H_
