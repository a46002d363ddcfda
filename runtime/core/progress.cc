#include "runtime/core/progress.h"

#include <unistd.h>

#include <algorithm>
#include <string>

namespace sy {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string Amount(int64_t v, ProgressUnit unit) {
  if (unit == ProgressUnit::kCount) return std::to_string(v);
  char buf[32];
  const double d = static_cast<double>(v);
  if (d >= 1024.0 * 1024 * 1024) {
    std::snprintf(buf, sizeof buf, "%.1f GiB", d / (1024.0 * 1024 * 1024));
  } else if (d >= 1024.0 * 1024) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", d / (1024.0 * 1024));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f KiB", d / 1024.0);
  }
  return buf;
}

}  // namespace

ProgressLine::ProgressLine(std::FILE* out, std::string label, ProgressUnit unit,
                           ProgressStyle style, double line_interval_s)
    : out_(out),
      label_(std::move(label)),
      unit_(unit),
      style_(style),
      line_interval_s_(line_interval_s),
      start_(Clock::now()),
      last_print_(start_) {
  if (style_ == ProgressStyle::kAuto) {
    style_ = isatty(fileno(out_)) ? ProgressStyle::kBar : ProgressStyle::kLines;
  }
}

ProgressLine::~ProgressLine() {
  if (started_ && !finished_) Finish();
}

std::string ProgressLine::Describe(int64_t done, int64_t total, ProgressUnit unit) {
  const int64_t clamped = std::clamp<int64_t>(done, 0, std::max<int64_t>(total, 0));
  const int percent = total > 0 ? static_cast<int>(clamped * 100 / total) : 0;
  if (unit == ProgressUnit::kCount) {
    return std::to_string(percent) + "% " + std::to_string(done) + "/" + std::to_string(total);
  }
  // "1.2/2.3 GiB": the unit once, the larger one's.
  std::string t = Amount(total, unit);
  const std::string suffix = t.substr(t.find(' '));
  char buf[32];
  double scale = 1024.0;
  if (suffix == " MiB") scale = 1024.0 * 1024;
  if (suffix == " GiB") scale = 1024.0 * 1024 * 1024;
  std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(done) / scale);
  return std::to_string(percent) + "% " + buf + "/" + t;
}

void ProgressLine::Update(int64_t done, int64_t total) {
  done_ = done;
  total_ = total;
  started_ = true;
  const Clock::time_point now = Clock::now();
  const double since = Seconds(last_print_, now);
  switch (style_) {
    case ProgressStyle::kBar:
      if (since >= 0.1 || done >= total) Print(false);
      break;
    case ProgressStyle::kLines:
      if (since >= line_interval_s_) Print(false);
      break;
    case ProgressStyle::kAuto:
    case ProgressStyle::kNone:
      break;
  }
}

void ProgressLine::Finish() {
  if (finished_ || !started_) return;  // nothing shown, nothing to finish
  finished_ = true;
  Print(true);
}

void ProgressLine::Print(bool last) {
  last_print_ = Clock::now();
  const double elapsed = Seconds(start_, last_print_);
  const std::string what = Describe(done_, total_, unit_);
  switch (style_) {
    case ProgressStyle::kBar: {
      constexpr int kWidth = 20;
      const int filled =
          total_ > 0 ? static_cast<int>(std::clamp<int64_t>(done_, 0, total_) * kWidth / total_)
                     : 0;
      std::fprintf(out_, "\r%s [%s%s] %s %.0fs ", label_.c_str(), std::string(filled, '#').c_str(),
                   std::string(kWidth - filled, '.').c_str(), what.c_str(), elapsed);
      if (last) std::fprintf(out_, "\n");
      break;
    }
    case ProgressStyle::kLines:
      std::fprintf(out_, "%s: %s %.0fs\n", label_.c_str(), what.c_str(), elapsed);
      break;
    case ProgressStyle::kAuto:
    case ProgressStyle::kNone:
      break;
  }
  std::fflush(out_);
}

}  // namespace sy
