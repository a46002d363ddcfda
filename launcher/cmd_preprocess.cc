// `switchyard preprocess`: turns a text corpus into the token files `switchyard train` reads
// (data.source "tokens", runtime/data/token_file_dataset.h), with a model's tokenizer, as
// Megatron's tools/preprocess_data.py does.
//
//   switchyard preprocess --model DIR|FILE.gguf|ORG/NAME --input corpus.jsonl|corpus.txt --out DIR
//                         [--json-key text --validation-fraction 0.01 -t|--threads N]
//
// Documents: a .jsonl file holds one JSON object per line, its text under --json-key; any other
// file holds one document per line (empty lines skipped). Each document is encoded with the
// model's tokenizer (tokenizer.json, tokenizer.model, or a GGUF's) on every core, and followed by
// the model's end-of-sequence token, so that the documents stay apart in the flat token stream.
// Every round(1 / --validation-fraction)-th document goes to the validation file.
//
// DIR (which must not exist; it is made under a temporary name and renamed into place at the end,
// so an interrupted run leaves nothing) receives:
//   train.bin, validation.bin  little-endian token ids: u16 when the vocabulary fits, else u32
//   preprocess.json            the counts, and the "data" block that trains on train.bin
// A progress bar (or lines, off a terminal) counts the input's bytes.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "inference/generation_config.h"
#include "inference/tokenizer.h"
#include "launcher/command.h"
#include "launcher/hf_cache.h"
#include "runtime/core/file_creation.h"
#include "runtime/core/progress.h"
#include "runtime/core/regular_file.h"
#include "runtime/core/temporary_cleanup.h"
#include "runtime/core/thread_pool.h"
#include "storage/formats/text_file.h"

namespace sy::launcher {
namespace {

// Documents per batch handed to the threads: big enough to amortise, small enough for the bar.
constexpr size_t kBatchDocuments = 256;

// One output file: token ids appended as u16 or u32.
class TokenWriter {
 public:
  TokenWriter(std::string path, bool wide) : path_(std::move(path)), wide_(wide) {}
  Status Open() {
    SY_ASSIGN_OR_RETURN(fd_, CreateNewFile(path_));
    return Status::Ok();
  }
  Status Append(const std::vector<int32_t>& ids) {
    buffer_.clear();
    for (const int32_t id : ids) {
      const auto v = static_cast<uint32_t>(id);
      for (int b = 0; b < (wide_ ? 4 : 2); ++b) buffer_.push_back(static_cast<char>(v >> (8 * b)));
    }
    tokens_ += static_cast<int64_t>(ids.size());
    return WriteAll(fd_.get(), path_, buffer_);
  }
  int64_t tokens() const { return tokens_; }

 private:
  std::string path_;
  bool wide_;
  UniqueFd fd_;
  std::string buffer_;
  int64_t tokens_ = 0;
};

class PreprocessCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("-m,--model", model_,
                   "The model whose tokenizer encodes the corpus: a directory, a GGUF file or "
                   "ORG/NAME in the Hugging Face cache")
        ->required();
    app.add_option("--input", input_,
                   "The corpus: .jsonl (one JSON object per line) or text "
                   "(one document per line)")
        ->required();
    app.add_option("--out", out_, "The directory to write; must not exist")->required();
    app.add_option("--json-key", json_key_, "The text's key in each JSONL object (default text)");
    app.add_option("--validation-fraction", validation_fraction_,
                   "Share of the documents held out in validation.bin (default 0.01; 0: none)")
        ->check(NumberRange(0, 0.5));
    AddThreadsOption(app, &threads_);
  }

  int Run() override { return ExitCode(RunStatus()); }

 private:
  Status RunStatus() {
    SY_ASSIGN_OR_RETURN(model_, ResolveModelPath(model_));
    SY_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, LoadTokenizer(model_));
    const int64_t vocab = tokenizer->vocab_size();
    SY_ASSIGN_OR_RETURN(std::vector<int32_t> eos, LoadEosTokenIds(model_, tokenizer.get(), vocab));
    if (eos.empty()) {
      return InvalidArgumentError(model_ +
                                  " names no end-of-sequence token (eos_token_id in "
                                  "generation_config.json or config.json, or eos_token in "
                                  "tokenizer_config.json) to separate the documents with");
    }
    // Read through the descriptor that was checked to be a regular file (a FIFO never blocks).
    SY_ASSIGN_OR_RETURN(UniqueFd in, OpenRegularFile(input_));
    struct stat st {};
    const int64_t input_bytes = fstat(in.get(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
    const int reading = dup(in.get());  // the FILE owns this copy; `in` closes its own
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(
        reading >= 0 ? fdopen(reading, "rb") : nullptr, &std::fclose);
    if (file == nullptr) {
      if (reading >= 0) close(reading);
      return IOError("cannot read --input " + input_);
    }
    const bool jsonl = input_.size() >= 6 && input_.substr(input_.size() - 6) == ".jsonl";

    // Staged under a temporary name beside --out, renamed into place once complete.
    std::error_code exists_ec;
    if (std::filesystem::exists(std::filesystem::symlink_status(out_, exists_ec))) {
      return AlreadyExistsError("--out " + out_ + " exists; choose a new directory");
    }
    ScopedTemporary staging(TemporaryPathFor(out_));
    SY_RETURN_IF_ERROR(CreateNewDirectory(staging.path()));
    const bool wide = vocab > 65536;
    TokenWriter train(staging.path() + "/train.bin", wide);
    TokenWriter validation(staging.path() + "/validation.bin", wide);
    SY_RETURN_IF_ERROR(train.Open());
    SY_RETURN_IF_ERROR(validation.Open());
    const int64_t every = validation_fraction_ > 0
                              ? std::max<int64_t>(1, std::llround(1.0 / validation_fraction_))
                              : 0;

    ThreadPool pool(threads_ > 0 ? threads_ : ThreadPool::DefaultNumThreads());
    ProgressLine progress(stderr, "preprocess " + input_, ProgressUnit::kBytes);
    int64_t documents = 0, validation_documents = 0, line_number = 0, bytes_read = 0;
    std::vector<std::string> batch;
    std::vector<Result<std::vector<int32_t>>> encoded;
    auto flush = [&]() -> Status {
      encoded.assign(batch.size(), std::vector<int32_t>());
      pool.ParallelFor(static_cast<int64_t>(batch.size()), 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          encoded[static_cast<size_t>(i)] = tokenizer->Encode(batch[static_cast<size_t>(i)]);
        }
      });
      for (Result<std::vector<int32_t>>& ids : encoded) {
        if (!ids.ok()) return ids.status().WithContext("--input " + input_);
        ids->push_back(eos[0]);
        const bool held_out = every > 0 && documents % every == every - 1;
        SY_RETURN_IF_ERROR(held_out ? validation.Append(*ids) : train.Append(*ids));
        ++documents;
        validation_documents += held_out;
      }
      batch.clear();
      if (input_bytes > 0) progress.Update(std::min(bytes_read, input_bytes), input_bytes);
      return Status::Ok();
    };
    // getline's buffer, grown (and freed) by getline itself; freed here on every way out.
    struct LineBuffer {
      char* data = nullptr;
      size_t capacity = 0;
      ~LineBuffer() { std::free(data); }
    } buffer;
    ssize_t length;
    while ((length = ::getline(&buffer.data, &buffer.capacity, file.get())) >= 0) {
      ++line_number;
      bytes_read += length;
      std::string line(buffer.data, static_cast<size_t>(length));
      while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
      if (line.empty()) continue;
      if (jsonl) {
        Result<nlohmann::json> object =
            storage::ParseStrictJson(line, input_, "line " + std::to_string(line_number));
        if (!object.ok()) return object.status();
        const auto it = object->is_object() ? object->find(json_key_) : object->end();
        if (it == object->end() || !it->is_string()) {
          return InvalidArgumentError(input_ + " line " + std::to_string(line_number) +
                                      ": expected an object with a \"" + json_key_ +
                                      "\" string (--json-key)");
        }
        batch.push_back(it->get<std::string>());
      } else {
        batch.push_back(std::move(line));
      }
      if (batch.size() == kBatchDocuments) SY_RETURN_IF_ERROR(flush());
    }
    if (std::ferror(file.get())) return IOError("reading --input " + input_ + " failed");
    SY_RETURN_IF_ERROR(flush());
    progress.Finish();
    if (documents == 0) return InvalidArgumentError("--input " + input_ + " holds no document");

    const nlohmann::json summary = {
        {"model", model_},
        {"input", input_},
        {"documents", documents},
        {"validation_documents", validation_documents},
        {"train_tokens", train.tokens()},
        {"validation_tokens", validation.tokens()},
        {"eos_token_id", eos[0]},
        {"data",
         {{"source", "tokens"},
          {"path", (std::filesystem::path(out_) / "train.bin").string()},
          {"token_dtype", wide ? "u32" : "u16"},
          {"vocab_size", vocab}}}};
    SY_ASSIGN_OR_RETURN(UniqueFd json_fd, CreateNewFile(staging.path() + "/preprocess.json"));
    SY_RETURN_IF_ERROR(
        WriteAll(json_fd.get(), staging.path() + "/preprocess.json", summary.dump(2) + "\n"));
    SY_RETURN_IF_ERROR(RenameNoReplace(staging.path(), out_));
    staging.Release();
    std::fprintf(stderr,
                 "wrote %s: %lld documents, %lld train and %lld validation tokens (%s); train "
                 "with --set data.source=tokens --set data.path=%s/train.bin --set "
                 "data.token_dtype=%s --set data.vocab_size=%lld\n",
                 out_.c_str(), static_cast<long long>(documents),
                 static_cast<long long>(train.tokens()),
                 static_cast<long long>(validation.tokens()), wide ? "u32" : "u16", out_.c_str(),
                 wide ? "u32" : "u16", static_cast<long long>(vocab));
    return Status::Ok();
  }

  std::string model_;
  std::string input_;
  std::string out_;
  std::string json_key_ = "text";
  double validation_fraction_ = 0.01;
  int threads_ = 0;
};

}  // namespace

SY_REGISTER_COMMAND("preprocess",
                    "Tokenize a text or JSONL corpus into the token files `train` reads",
                    PreprocessCommand);

}  // namespace sy::launcher
