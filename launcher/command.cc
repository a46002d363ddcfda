#include "launcher/command.h"

#include <cstdio>

namespace sy::launcher {

std::vector<CommandEntry>& CommandRegistry() {
  static std::vector<CommandEntry> registry;
  return registry;
}

CommandRegistrar::CommandRegistrar(std::string path, std::string help,
                                   std::function<std::unique_ptr<Command>()> make) {
  CommandRegistry().push_back({std::move(path), std::move(help), std::move(make)});
}

void PrintError(const Status& status) {
  std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
}

int ExitCode(const Status& status) {
  if (status.ok()) return 0;
  PrintError(status);
  return 1;
}

}  // namespace sy::launcher
