#include "launcher/command_line_typos.h"

#include <cstdlib>
#include <optional>

#include "runtime/config/edit_distance.h"

namespace sy::launcher {
namespace {

std::vector<CLI::App*> Subcommands(const CLI::App& app) {
  return const_cast<CLI::App&>(app).get_subcommands([](CLI::App*) { return true; });
}

CLI::App* FindSubcommand(const CLI::App& app, const std::string& name) {
  for (CLI::App* sub : Subcommands(app)) {
    if (sub->get_name() == name) return sub;
  }
  return nullptr;
}

// "switchyard bench infer": the command's words.
std::string CommandName(const CLI::App* app) {
  std::string name = app->get_name();
  for (const CLI::App* p = app->get_parent(); p != nullptr; p = p->get_parent()) {
    name = p->get_name() + " " + name;
  }
  return name;
}

// "switchyard help bench infer": the command that prints `app`'s help.
std::string HelpCommand(const CLI::App* app) {
  std::string words;
  for (const CLI::App* a = app; a->get_parent() != nullptr; a = a->get_parent()) {
    words = " " + a->get_name() + words;
  }
  return "switchyard help" + words;
}

std::string UnknownCommand(const CLI::App& app, const std::string& word) {
  std::vector<std::string> names;
  for (CLI::App* sub : Subcommands(app)) names.push_back(sub->get_name());
  std::string message = "unknown command '" + word + "' for '" + CommandName(&app) + "'";
  if (std::optional<std::string> near = NearestMatch(word, names)) {
    message += "; did you mean '" + *near + "'?";
  } else {
    message += "; run '" + HelpCommand(&app) + "' for the commands";
  }
  return message;
}

// Whether `token` reads as a number (an option's negative value, "-1"), not an option.
bool IsNumber(const std::string& token) {
  char* end = nullptr;
  std::strtod(token.c_str(), &end);
  return end != token.c_str() && *end == '\0';
}

}  // namespace

std::string FindCommandLineTypo(const CLI::App& app, const std::vector<std::string>& args) {
  const CLI::App* current = &app;
  bool value_next = false;  // the token after an option that takes a value is that value
  for (const std::string& token : args) {
    if (token == "--") break;
    if (value_next) {
      value_next = false;
      continue;
    }
    if (token.size() > 1 && token[0] == '-' && !IsNumber(token)) {
      const size_t equals = token.find('=');
      const std::string name = token.substr(0, equals);
      if (name == "-h" || name == "--help") continue;
      // A short option may carry its value glued on ("-n16").
      const bool glued = name.size() > 2 && name[1] != '-';
      const std::string lookup = glued ? name.substr(0, 2) : name;
      // An option of a parent counts too when the command lets it fall through (--log-level).
      const CLI::Option* option = nullptr;
      for (const CLI::App* a = current; a != nullptr && option == nullptr;
           a = a->get_fallthrough() ? a->get_parent() : nullptr) {
        option = a->get_option_no_throw(lookup);
      }
      if (option != nullptr) {
        value_next = option->get_type_size() != 0 && equals == std::string::npos && !glued;
        continue;
      }
      std::vector<std::string> names;
      for (const CLI::Option* option : current->get_options()) {
        for (const std::string& l : option->get_lnames()) names.push_back("--" + l);
        for (const std::string& s : option->get_snames()) names.push_back("-" + s);
      }
      std::string message = "'" + CommandName(current) + "' has no option '" + name + "'";
      if (std::optional<std::string> near = NearestMatch(name, names)) {
        return message + "; did you mean '" + *near + "'?";
      }
      return message + "; run '" + HelpCommand(current) + "' for its options";
    }
    if (Subcommands(*current).empty()) continue;  // a value or a positional argument
    CLI::App* sub = FindSubcommand(*current, token);
    if (sub == nullptr) return UnknownCommand(*current, token);
    current = sub;
  }
  return "";
}

HelpText HelpFor(const CLI::App& app, const std::vector<std::string>& words) {
  const CLI::App* current = &app;
  for (const std::string& word : words) {
    CLI::App* sub = FindSubcommand(*current, word);
    if (sub == nullptr) return {"", UnknownCommand(*current, word)};
    current = sub;
  }
  // CLI11 prefixes the command's own name with `prev`: "Usage: switchyard bench infer".
  const std::string prev =
      current->get_parent() != nullptr ? CommandName(current->get_parent()) : "";
  return {current->help(prev), ""};
}

}  // namespace sy::launcher
