#include "runtime/data/text_dataset.h"

#include "runtime/core/check.h"

namespace sy {

Result<std::unique_ptr<TextDataset>> TextDataset::Open(const std::string& path, int64_t seq_len,
                                                       double eval_fraction) {
  SY_ASSIGN_OR_RETURN(MappedFile file, OpenDataFile(path));
  std::unique_ptr<TextDataset> dataset(new TextDataset(std::move(file)));
  const int64_t num_tokens = static_cast<int64_t>(dataset->file_.size()) + 2;  // BOS, EOS
  SY_RETURN_IF_ERROR(dataset->InitWindows(path, num_tokens, seq_len, eval_fraction));
  dataset->eval_fraction_ = eval_fraction;
  return dataset;
}

std::string_view TextDataset::task_name(int task) const {
  SY_CHECK_EQ(task, 0);
  return "text";
}

void TextDataset::ReadTokens(int64_t begin, std::span<int32_t> out) const {
  const int64_t n = static_cast<int64_t>(file_.size());
  SY_CHECK(begin >= 0 && begin + static_cast<int64_t>(out.size()) <= n + 2);
  const uint8_t* bytes = file_.bytes().data();
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t position = begin + static_cast<int64_t>(i);
    if (position == 0) {
      out[i] = kTextBos;
    } else if (position == n + 1) {
      out[i] = kTextEos;
    } else {
      out[i] = bytes[position - 1];
    }
  }
}

nlohmann::json TextDataset::Fingerprint() const {
  return {{"kind", "text"},
          {"bytes", file_.size()},
          {"sample_hash", DataFileSampleHash(file_.bytes())},
          {"seq_len", seq_len()},
          {"eval_fraction", eval_fraction_}};
}

}  // namespace sy
