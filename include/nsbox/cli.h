// The command line: `nsbox run|doctor|version`. A thin layer over the library.
#pragma once

namespace nsbox {

// Parses argv, runs the subcommand and returns the process exit code.
int cli_main(int argc, char** argv);

}  // namespace nsbox
