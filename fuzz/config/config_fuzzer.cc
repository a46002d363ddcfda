// libFuzzer target for the config parser, --set overrides and schema binding.
//
// Input layout: the bytes up to the first NUL are the config file's text; the rest, split at
// '\n', are --set assignments. Every path must return a Status (never crash, hang or leak), and a
// config that binds must round-trip: its effective dump parses and binds to the same values.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/config/config.h"
#include "runtime/config/config_schema.h"
#include "runtime/core/check.h"

namespace {

enum class Mode { kFast, kSlow };

struct Inner {
  double weight = 1.0;
  std::vector<int> sizes = {1};
};

struct Options {
  int64_t steps = 10;
  int width = 4;
  uint32_t seed = 1;
  float lr = 0.5f;
  bool flag = false;
  std::string name = "x";
  std::vector<std::string> tags;
  Mode mode = Mode::kFast;
  Inner inner;
};

const sy::ConfigSchema<Options>& Schema() {
  static const sy::ConfigSchema<Options>* schema = [] {
    sy::ConfigSchema<Inner> inner;
    inner.Field("weight", &Inner::weight, "w").Min(0).Field("sizes", &Inner::sizes, "s");
    auto* s = new sy::ConfigSchema<Options>();
    s->Field("steps", &Options::steps, "steps")
        .Min(1)
        .Field("width", &Options::width, "width")
        .Max(1 << 20)
        .Field("seed", &Options::seed, "seed")
        .Field("lr", &Options::lr, "lr")
        .Field("flag", &Options::flag, "flag")
        .Field("name", &Options::name, "name")
        .Field("tags", &Options::tags, "tags")
        .Enum("mode", &Options::mode, {{"fast", Mode::kFast}, {"slow", Mode::kSlow}}, "mode")
        .Nested("inner", &Options::inner, inner, "inner");
    return s;
  }();
  return *schema;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view text = input.substr(0, nul);
  std::vector<std::string> sets;
  if (nul != std::string_view::npos) {
    std::string_view rest = input.substr(nul + 1);
    while (!rest.empty()) {
      const size_t newline = rest.find('\n');
      sets.emplace_back(rest.substr(0, newline));
      if (newline == std::string_view::npos) break;
      rest = rest.substr(newline + 1);
    }
  }

  sy::Result<sy::Config> config = sy::Config::Parse(text, "fuzz.json");
  if (!config.ok()) return 0;
  if (!config->ApplyOverrides(sets).ok()) return 0;
  config->CheckKnownBlocks({"a", "b"}).IgnoreError();

  Options options;
  if (!Schema().Bind(*config, "a", &options).ok()) return 0;
  Options nested;
  Schema().Bind(*config, "b.c", &nested).IgnoreError();

  const std::string dump = config->DumpEffective();
  sy::Result<sy::Config> again = sy::Config::Parse(dump, "effective.json");
  SY_CHECK(again.ok()) << "effective dump does not parse: " << again.status().ToString();
  Options reread;
  sy::Status status = Schema().Bind(*again, "a", &reread);
  SY_CHECK(status.ok()) << "effective dump does not bind: " << status.ToString();
  SY_CHECK(Schema().ToJson(reread) == Schema().ToJson(options)) << "round trip changed values";
  return 0;
}
