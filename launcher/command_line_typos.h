// Typos on the command line, caught before CLI11 parses it (issue 45): a word that is not a
// command, or an option that the command does not have, is an error that names the nearest one,
// as `--set` keys already do ("did you mean"), instead of CLI11's "The following arguments were
// not expected" or "--model is required".
//
//   switchyard generat --model x   ->  error: unknown command 'generat'; did you mean 'generate'?
//   switchyard generate --modle x  ->  error: 'switchyard generate' has no option '--modle'; did
//                                      you mean '--model'?
//
// And `switchyard help [COMMAND ...]`, which prints the help of the command named.
//
// Thread-safety: pure functions of the CLI tree. Ownership: borrows the tree.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace sy::launcher {

// The error message for the first unknown command or option in `args` (argv without the
// program's name), naming the nearest known one where one is near, or "" (CLI11 then checks the
// rest: values, required options).
std::string FindCommandLineTypo(const CLI::App& app, const std::vector<std::string>& args);

// `switchyard help WORDS...`: the help of the command WORDS name (the program's with none), or an
// error message naming the word that is not a command (with the nearest one).
struct HelpText {
  std::string text;   // the help, when found
  std::string error;  // else why not
};
HelpText HelpFor(const CLI::App& app, const std::vector<std::string>& words);

}  // namespace sy::launcher
