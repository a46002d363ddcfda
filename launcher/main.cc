// switchyard: the command-line entry point. Every subcommand is a launcher/cmd_*.cc file that
// registers itself (launcher/command.h); this file only builds the CLI from the registry.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "launcher/command.h"
#include "launcher/command_line_typos.h"
#include "launcher/version.h"
#include "runtime/core/logging.h"
#include "runtime/core/temporary_cleanup.h"

namespace {

std::vector<std::string> SplitPath(const std::string& path) {
  std::vector<std::string> parts;
  std::istringstream in(path);
  for (std::string part; in >> part;) parts.push_back(part);
  return parts;
}

}  // namespace

int main(int argc, char** argv) {
  // Ctrl-C or SIGTERM of any command removes the temporaries it is writing (a conversion's
  // staging directory, a report being replaced); `train` and `serve` install their own handlers.
  sy::InstallTemporaryCleanupOnSignals();
  CLI::App app{"Switchyard: Mixture-of-Experts training and offloaded inference", "switchyard"};
  app.require_subcommand(0, 1);
  bool show_version = false;
  app.add_flag("--version", show_version, "Print the version and the features built in");
  std::string log_level;
  app.add_option("--log-level", log_level,
                 "Diagnostics shown on stderr: trace, debug, info, warning, error, off (default: "
                 "$SY_LOG_LEVEL, else info)");
  app.fallthrough();  // --log-level after the command's name too

  struct Built {
    CLI::App* app;
    std::unique_ptr<sy::launcher::Command> command;
  };
  std::vector<Built> built;
  std::map<std::string, CLI::App*> groups;  // "bench" -> its CLI node
  // In the order of their names, whatever order the command files registered in (the unity
  // build batches them).
  std::vector<const sy::launcher::CommandEntry*> entries;
  for (const auto& entry : sy::launcher::CommandRegistry()) entries.push_back(&entry);
  std::sort(entries.begin(), entries.end(),
            [](const auto* a, const auto* b) { return a->path < b->path; });
  for (const sy::launcher::CommandEntry* e : entries) {
    const sy::launcher::CommandEntry& entry = *e;
    std::vector<std::string> parts = SplitPath(entry.path);
    CLI::App* parent = &app;
    std::string prefix;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      prefix += parts[i] + " ";
      auto it = groups.find(prefix);
      if (it == groups.end()) {
        CLI::App* group = parent->add_subcommand(parts[i], "'" + parts[i] + "' commands");
        group->require_subcommand(1);
        it = groups.emplace(prefix, group).first;
      }
      parent = it->second;
    }
    CLI::App* sub = parent->add_subcommand(parts.back(), entry.help);
    auto command = entry.make();
    command->Configure(*sub);
    built.push_back({sub, std::move(command)});
  }

  // A bad flag reads like every other error: "error: --max-tokens: -1 is not an integer from 0 to
  // 16777216", then where to look.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "error: " + std::string(e.what()) + "\nRun with --help for more information.\n";
  });
  // `switchyard help [COMMAND ...]`, and typos named with the nearest command or option.
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "help") {
    const sy::launcher::HelpText help =
        sy::launcher::HelpFor(app, std::vector<std::string>(args.begin() + 1, args.end()));
    if (!help.error.empty()) {
      std::fprintf(stderr, "error: %s\n", help.error.c_str());
      return 1;
    }
    std::printf("%s", help.text.c_str());
    return 0;
  }
  if (const std::string typo = sy::launcher::FindCommandLineTypo(app, args); !typo.empty()) {
    std::fprintf(stderr, "error: %s\n", typo.c_str());
    return 1;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (show_version) {
    std::printf("%s", sy::launcher::VersionText().c_str());
    return 0;
  }
  if (const sy::Status logging = sy::ConfigureLogging(log_level); !logging.ok()) {
    std::fprintf(stderr, "error: %s\n", logging.ToString().c_str());
    return 1;
  }
  for (auto& b : built) {
    if (b.app->parsed()) return b.command->Run();
  }
  std::printf("%s", app.help().c_str());
  return 0;
}
