#include "launcher/hf_cache.h"

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <vector>

#include "runtime/core/read_file.h"

namespace sy::launcher {
namespace {

namespace fs = std::filesystem;

std::string HubCacheDir() {
  if (const char* hub = std::getenv("HF_HUB_CACHE"); hub != nullptr && *hub != '\0') return hub;
  if (const char* home = std::getenv("HF_HOME"); home != nullptr && *home != '\0') {
    return (fs::path(home) / "hub").string();
  }
  const char* user_home = std::getenv("HOME");
  return (fs::path(user_home != nullptr ? user_home : "") / ".cache" / "huggingface" / "hub")
      .string();
}

}  // namespace

Result<std::string> ResolveModelPath(const std::string& model) {
  std::error_code ec;
  if (model.empty() || fs::exists(model, ec)) return model;
  static const std::regex kRepoId(R"(^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$)");
  if (!std::regex_match(model, kRepoId)) {
    return NotFoundError(model + " does not exist");
  }
  const std::string slash = "/";
  const std::string org = model.substr(0, model.find(slash));
  const std::string name = model.substr(model.find(slash) + 1);
  const fs::path repo = fs::path(HubCacheDir()) / ("models--" + org + "--" + name);
  const std::string how = "; download it with `huggingface-cli download " + model +
                          "` (the cache is $HF_HUB_CACHE, else $HF_HOME/hub, else "
                          "~/.cache/huggingface/hub), or pass a directory";
  if (!fs::is_directory(repo / "snapshots", ec)) {
    return NotFoundError(model + " is neither a path nor a model in the Hugging Face cache (no " +
                         repo.string() + ")" + how);
  }
  std::string revision;
  if (Result<std::string> ref = ReadFile((repo / "refs" / "main").string(), 4096, "refs/main");
      ref.ok()) {
    revision = *ref;
    while (!revision.empty() && (revision.back() == '\n' || revision.back() == ' ')) {
      revision.pop_back();
    }
  } else {
    std::vector<std::string> snapshots;
    for (const fs::directory_entry& e : fs::directory_iterator(repo / "snapshots", ec)) {
      if (e.is_directory(ec)) snapshots.push_back(e.path().filename().string());
    }
    if (snapshots.size() != 1) {
      return NotFoundError(model + ": " + repo.string() + " has " +
                           std::to_string(snapshots.size()) +
                           " snapshots and no refs/main to choose one; pass the snapshot "
                           "directory itself");
    }
    revision = snapshots[0];
  }
  const fs::path snapshot = repo / "snapshots" / revision;
  if (revision.empty() || revision.find('/') != std::string::npos ||
      !fs::is_directory(snapshot, ec)) {
    return NotFoundError(model + ": refs/main names revision '" + revision + "', which " +
                         snapshot.string() + " does not hold" + how);
  }
  return snapshot.string();
}

}  // namespace sy::launcher
