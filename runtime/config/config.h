// Config: one JSON config file (a top-level object of blocks: "model", "data", "train", "optim",
// "checkpoint", "log", "parallel", "inference", ...) plus the `--set key=value` overrides given on
// the command line.
//
//   SY_ASSIGN_OR_RETURN(Config config, Config::Load("examples/configs/tiny.json"));
//   SY_RETURN_IF_ERROR(config.ApplyOverrides(cli_sets));          // {"train.steps=100", ...}
//   SY_RETURN_IF_ERROR(TrainOptionsSchema().Bind(config, "train", &train_options));
//   SY_RETURN_IF_ERROR(config.CheckKnownBlocks({"model", "data", "train"}));
//   writer.SetText("config", config.DumpEffective());
//
// Config knows no schema: each subsystem declares its fields with a ConfigSchema
// (runtime/config/config_schema.h) and binds its block, which is where unknown keys and wrong
// types are reported. Config remembers where each value came from, so an error names the file
// and, for a value set on the command line, the --set that set it.
//
// Overrides. `--set a.b.c=v` walks the dotted key from the top, creating blocks that do not exist,
// and replaces the value at the end. The value is parsed as JSON when it parses (100, 2.5, true,
// [1,2], {"weight":2}, "quoted"), and is taken as a plain string otherwise (--set data.path=x.bin).
// Overrides apply in order; a later one wins.
//
// Ownership: a value type; owns its JSON tree. Thread-safety: none; bind on one thread.
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/status.h"

namespace sy {

class Config {
 public:
  // One applied --set, kept for error messages.
  struct Override {
    std::string key;         // "train.steps"
    std::string raw_value;   // the text after '=', exactly as given
    std::string assignment;  // "train.steps=100"
  };

  // An empty config (every block absent, so every field takes its default).
  Config() = default;

  // Reads and parses `path`. NotFound when the file is missing; InvalidArgument for malformed
  // JSON (with line and column), a duplicate key, or a top level that is not an object.
  static Result<Config> Load(const std::string& path);
  // Parses `text`; `source` names it in messages (a path, or "<command line>").
  static Result<Config> Parse(std::string_view text, std::string source);

  // Applies one `key=value`. InvalidArgument when it has no '=', an empty key or key component, or
  // walks through a value that is not a block.
  Status ApplyOverride(std::string_view assignment);
  Status ApplyOverrides(std::span<const std::string> assignments);

  const std::string& source() const { return source_; }
  const nlohmann::json& root() const { return root_; }
  const std::vector<Override>& overrides() const { return overrides_; }

  // The value at a dotted key ("train.steps"), or nullptr when absent.
  const nlohmann::json* Find(std::string_view dotted_key) const;

  // The last override that set `dotted_key`, a block containing it, or a key inside it; nullptr
  // when no override touched it.
  const Override* FindOverride(std::string_view dotted_key) const;

  // The prefix of every message about `dotted_key`: "config <source>", followed by
  // ": --set <assignment>" when an override set the key.
  std::string Where(std::string_view dotted_key) const;

  // InvalidArgument naming the first top-level block not in `known` (with a suggestion).
  Status CheckKnownBlocks(std::span<const std::string_view> known) const;
  Status CheckKnownBlocks(std::initializer_list<std::string_view> known) const {
    return CheckKnownBlocks(std::span<const std::string_view>(known.begin(), known.size()));
  }

  // Records the effective value of a bound block (ConfigSchema::Bind calls this).
  void RecordEffective(std::string_view block, nlohmann::json value);

  // The effective config: the file with its overrides applied, where every bound block is replaced
  // by its bound values, defaults included. Loading this JSON and binding again gives the same
  // structs.
  nlohmann::json Effective() const;
  std::string DumpEffective(int indent = 2) const;

 private:
  Config(std::string source, nlohmann::json root)
      : source_(std::move(source)), root_(std::move(root)) {}

  std::string source_ = "<empty>";
  nlohmann::json root_ = nlohmann::json::object();
  std::vector<Override> overrides_;
  nlohmann::json effective_ = nlohmann::json::object();  // dotted block -> bound values
};

// Splits "a.b.c" into {"a", "b", "c"}. Empty components are kept (callers reject them).
std::vector<std::string> SplitDottedKey(std::string_view dotted_key);

// A short description of a JSON value for messages: string "eight", integer 3, number 2.5,
// boolean true, null, array [1,2], object {"a":1} (long values abbreviated).
std::string DescribeJsonValue(const nlohmann::json& value);

}  // namespace sy
