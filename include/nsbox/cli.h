// The command line: `nsbox run|exec|check|doctor` (and the flag checks that
// `nsbox serve` shares). A thin layer over the library.
#pragma once

#include <CLI/CLI.hpp>

namespace nsbox {

// A flag's value that is empty would be ignored (an unset variable in a unit
// file): refused instead.
extern const CLI::Validator kNonEmpty;

// Parses argv, runs the subcommand and returns the process exit code.
int cli_main(int argc, char** argv);

}  // namespace nsbox
