// ConfigSchema<T>: a subsystem's declaration of the config keys it reads into its options struct,
// and the schema-checked binding of one config block onto that struct.
//
//   struct TrainOptions {
//     int64_t steps = 1000;       // Default: 1000
//     double lr = 3e-4;           // Default: 3e-4
//   };
//   const ConfigSchema<TrainOptions>& TrainOptionsSchema() {
//     static const auto* schema = &(*new ConfigSchema<TrainOptions>())
//         .Field("steps", &TrainOptions::steps, "Number of optimizer steps").Min(1)
//         .Field("lr", &TrainOptions::lr, "Peak learning rate").Min(0);
//     return *schema;
//   }
//   TrainOptions options;                                   // defaults from the struct
//   SY_RETURN_IF_ERROR(TrainOptionsSchema().Bind(config, "train", &options));
//
// Defaults are the values of the struct the caller passes in (normally default-constructed; the
// struct's member initialisers are the one place a default is written down). A key absent from
// the block keeps that value; a block absent from the file binds every default.
//
// Field kinds: Field (a scalar or std::vector, see config_value.h), Enum (a string from a fixed
// set mapped onto an enum), Nested (a sub-block with its own schema). Min/Max bound the numeric
// field declared just before them; Check adds a rule across fields. Every error is an
// InvalidArgument Status naming the config file, the full dotted key and what to do:
//   config tiny.json: unknown key 'train.stpes'; did you mean 'train.steps'?
//   config tiny.json: 'model.num_experts' must be an integer, got string "eight"
//   config tiny.json: --set train.steps=0: 'train.steps' must be >= 1, got integer 0
//
// Ownership: a schema owns copies of its nested schemas. Thread-safety: immutable after
// construction, so a schema (usually a function-local static) may be used from any thread.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/config/config.h"
#include "runtime/config/config_value.h"
#include "runtime/core/check.h"
#include "runtime/core/status.h"

namespace sy {

// One documented key, for `--help-config` style listings.
struct ConfigFieldDoc {
  std::string key;            // full dotted key: "train.steps"
  std::string type;           // "integer", "number", "one of synthetic|tokens|text", "block", ...
  std::string default_value;  // JSON text of the default
  std::string help;
};

// A problem found by a Check rule: the key (relative to the block) and what is wrong with it,
// phrased to follow the key: {"max_len", "must be at most 30 so a sample fits seq_len 64"}.
struct ConfigIssue {
  std::string key;
  std::string problem;
};

namespace internal {
// "<where>: '<key>' <tail>" as InvalidArgument.
Status ConfigKeyError(const Config& config, const std::string& key, const std::string& tail);
// The unknown-key error, with the nearest of `candidates` or a list of `level_keys`.
Status ConfigUnknownKeyError(const Config& config, const std::string& key,
                             const std::vector<std::string>& candidates,
                             const std::vector<std::string>& level_keys, const std::string& block);
// "must be one of ..., got ..." with a suggestion.
Status ConfigEnumError(const Config& config, const std::string& key, const nlohmann::json& value,
                       const std::vector<std::string>& spellings);
// "prefix.name", or whichever is non-empty.
std::string JoinConfigKey(const std::string& prefix, const std::string& name);
}  // namespace internal

template <typename T>
class ConfigSchema {
 public:
  ConfigSchema() = default;

  // A scalar or vector field. `name` is a key inside the block (no dots).
  template <typename V>
  ConfigSchema& Field(std::string name, V T::*member, std::string help) {
    using Traits = ConfigValueTraits<V>;
    Entry entry = NewEntry(std::move(name), std::move(help), Traits::TypeName());
    entry.read = [member](const nlohmann::json& value, const Config& config, const std::string& key,
                          T* out) -> Status {
      if constexpr (std::is_same_v<V, std::string>) {
        // --set data.path=123 parses as a number; for a string field the user meant the text.
        const Config::Override* o = config.FindOverride(key);
        if (!value.is_string() && o != nullptr && o->key == key) {
          out->*member = o->raw_value;
          return Status::Ok();
        }
      }
      if (auto error = Traits::Read(value, &(out->*member))) {
        return internal::ConfigKeyError(config, key, *error);
      }
      return Status::Ok();
    };
    entry.write = [member](const T& value) { return Traits::Write(value.*member); };
    if constexpr (Traits::kIsNumber) {
      entry.number = [member](const T& value) { return static_cast<double>(value.*member); };
    }
    entries_.push_back(std::move(entry));
    return *this;
  }

  // A string key mapped onto an enum. `choices` lists every accepted spelling and its value; the
  // first spelling of a value is the one written back.
  template <typename E>
  ConfigSchema& Enum(std::string name, E T::*member, std::vector<std::pair<std::string, E>> choices,
                     std::string help) {
    SY_CHECK(!choices.empty()) << "enum field '" << name << "' has no choices";
    std::string names;
    for (const auto& choice : choices) names += (names.empty() ? "" : "|") + choice.first;
    Entry entry = NewEntry(std::move(name), std::move(help), "one of " + names);
    auto shared =
        std::make_shared<const std::vector<std::pair<std::string, E>>>(std::move(choices));
    entry.read = [member, shared](const nlohmann::json& value, const Config& config,
                                  const std::string& key, T* out) -> Status {
      std::vector<std::string> spellings;
      for (const auto& [spelling, e] : *shared) {
        if (value.is_string() && value.get<std::string>() == spelling) {
          out->*member = e;
          return Status::Ok();
        }
        spellings.push_back(spelling);
      }
      return internal::ConfigEnumError(config, key, value, spellings);
    };
    entry.write = [member, shared, field = entry.name](const T& value) -> nlohmann::json {
      for (const auto& [spelling, e] : *shared) {
        if (e == value.*member) return spelling;
      }
      SY_CHECK(false) << "enum field '" << field << "' holds a value with no spelling";
      return nullptr;
    };
    entries_.push_back(std::move(entry));
    return *this;
  }

  // A sub-block read with its own schema.
  template <typename S>
  ConfigSchema& Nested(std::string name, S T::*member, ConfigSchema<S> schema, std::string help) {
    Entry entry = NewEntry(std::move(name), std::move(help), "block");
    auto shared = std::make_shared<const ConfigSchema<S>>(std::move(schema));
    entry.read = [member, shared](const nlohmann::json& value, const Config& config,
                                  const std::string& key, T* out) -> Status {
      return shared->Read(value, config, key, &(out->*member));
    };
    entry.write = [member, shared](const T& value) { return shared->ToJson(value.*member); };
    entry.describe = [member, shared](const std::string& key, const T& defaults,
                                      std::vector<ConfigFieldDoc>* docs) {
      auto nested = shared->Describe(key, defaults.*member);
      docs->insert(docs->end(), nested.begin(), nested.end());
    };
    entry.keys = [shared](const std::string& key, std::vector<std::string>* keys) {
      shared->CollectKeys(key, keys);
    };
    entries_.push_back(std::move(entry));
    return *this;
  }

  // Bounds on the numeric field declared just before (inclusive).
  ConfigSchema& Min(double bound) {
    LastNumeric("Min").min = bound;
    return *this;
  }
  ConfigSchema& Max(double bound) {
    LastNumeric("Max").max = bound;
    return *this;
  }

  // A rule across fields, checked after every field has been read.
  ConfigSchema& Check(std::function<std::optional<ConfigIssue>(const T&)> rule) {
    checks_.push_back(std::move(rule));
    return *this;
  }

  // Reads the block at dotted key `block` of `config` into *out and records the effective values
  // in `config` (for DumpEffective). On error *out is unchanged.
  Status Bind(Config& config, std::string_view block, T* out) const {
    const std::string key(block);
    T result = *out;
    if (const nlohmann::json* value = config.Find(key)) {
      SY_RETURN_IF_ERROR(Read(*value, config, key, &result));
    } else {
      SY_RETURN_IF_ERROR(RunChecks(config, key, result));
    }
    config.RecordEffective(key, ToJson(result));
    *out = std::move(result);
    return Status::Ok();
  }

  // Reads `object`, the block at dotted key `prefix`, into *out (which may be partly updated on
  // error; Bind guards against that).
  Status Read(const nlohmann::json& object, const Config& config, const std::string& prefix,
              T* out) const {
    if (!object.is_object()) {
      return internal::ConfigKeyError(
          config, prefix, internal::ExpectedButGot("a block (a JSON object of keys)", object));
    }
    for (const auto& [name, value] : object.items()) {
      const Entry* entry = FindEntry(name);
      const std::string key = internal::JoinConfigKey(prefix, name);
      if (entry == nullptr) {
        std::vector<std::string> candidates;
        CollectKeys(prefix, &candidates);
        std::vector<std::string> level;
        for (const Entry& e : entries_) level.push_back(e.name);
        return internal::ConfigUnknownKeyError(config, key, candidates, level, prefix);
      }
      SY_RETURN_IF_ERROR(entry->read(value, config, key, out));
      if (entry->number) {
        const double v = entry->number(*out);
        if (entry->min && v < *entry->min) {
          return internal::ConfigKeyError(
              config, key,
              internal::ExpectedButGot(">= " + internal::FormatConfigNumber(*entry->min), value));
        }
        if (entry->max && v > *entry->max) {
          return internal::ConfigKeyError(
              config, key,
              internal::ExpectedButGot("<= " + internal::FormatConfigNumber(*entry->max), value));
        }
      }
    }
    return RunChecks(config, prefix, *out);
  }

  // The JSON of every field of `value`, in declaration order.
  nlohmann::json ToJson(const T& value) const {
    nlohmann::json object = nlohmann::json::object();
    for (const Entry& entry : entries_) object[entry.name] = entry.write(value);
    return object;
  }

  // Every key under `prefix`, with its type, its default (read from `defaults`) and its help.
  std::vector<ConfigFieldDoc> Describe(const std::string& prefix, const T& defaults = T{}) const {
    std::vector<ConfigFieldDoc> docs;
    for (const Entry& entry : entries_) {
      const std::string key = internal::JoinConfigKey(prefix, entry.name);
      if (entry.describe) {
        docs.push_back({key, entry.type_name, "", entry.help});
        entry.describe(key, defaults, &docs);
      } else {
        docs.push_back({key, entry.type_name, entry.write(defaults).dump(), entry.help});
      }
    }
    return docs;
  }

  // Every valid dotted key under `prefix` (blocks and leaves), for suggestions.
  void CollectKeys(const std::string& prefix, std::vector<std::string>* keys) const {
    for (const Entry& entry : entries_) {
      const std::string key = internal::JoinConfigKey(prefix, entry.name);
      keys->push_back(key);
      if (entry.keys) entry.keys(key, keys);
    }
  }

 private:
  struct Entry {
    std::string name;
    std::string help;
    std::string type_name;
    std::function<Status(const nlohmann::json&, const Config&, const std::string&, T*)> read;
    std::function<nlohmann::json(const T&)> write;
    std::function<double(const T&)> number;  // set for numeric fields only
    std::optional<double> min;
    std::optional<double> max;
    // Set for nested blocks only.
    std::function<void(const std::string&, const T&, std::vector<ConfigFieldDoc>*)> describe;
    std::function<void(const std::string&, std::vector<std::string>*)> keys;
  };

  Entry NewEntry(std::string name, std::string help, std::string type_name) const {
    SY_CHECK(!name.empty() && name.find('.') == std::string::npos)
        << "config key '" << name << "' must be non-empty and have no '.'";
    SY_CHECK(FindEntry(name) == nullptr) << "config key '" << name << "' declared twice";
    Entry entry;
    entry.name = std::move(name);
    entry.help = std::move(help);
    entry.type_name = std::move(type_name);
    return entry;
  }

  const Entry* FindEntry(std::string_view name) const {
    for (const Entry& entry : entries_) {
      if (entry.name == name) return &entry;
    }
    return nullptr;
  }

  Entry& LastNumeric(const char* what) {
    SY_CHECK(!entries_.empty() && entries_.back().number)
        << what << "() must follow a numeric Field()";
    return entries_.back();
  }

  Status RunChecks(const Config& config, const std::string& prefix, const T& value) const {
    for (const auto& check : checks_) {
      if (std::optional<ConfigIssue> issue = check(value)) {
        return internal::ConfigKeyError(config, internal::JoinConfigKey(prefix, issue->key),
                                        issue->problem);
      }
    }
    return Status::Ok();
  }

  std::vector<Entry> entries_;
  std::vector<std::function<std::optional<ConfigIssue>(const T&)>> checks_;
};

}  // namespace sy
