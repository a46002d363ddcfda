#include "inference/stop_strings.h"

#include <algorithm>
#include <utility>

namespace sy {

StopStrings::StopStrings(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

std::string StopStrings::Append(std::string_view piece) {
  if (stopped_) return "";
  held_.append(piece);
  // The earliest match wins; a match may begin in the text held back from earlier pieces.
  size_t match = std::string::npos;
  for (const std::string& stop : stops_) match = std::min(match, held_.find(stop));
  if (match != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, match);
    held_.clear();
    return out;
  }
  // Hold back the longest end of the text that is a proper beginning of some stop string.
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    for (size_t n = std::min(stop.size() - 1, held_.size()); n > keep; --n) {
      if (std::string_view(held_).substr(held_.size() - n) == std::string_view(stop).substr(0, n)) {
        keep = n;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStrings::Finish() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace sy
