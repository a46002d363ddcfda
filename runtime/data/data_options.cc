#include "runtime/data/data_options.h"

#include "runtime/data/text_dataset.h"

namespace sy {
namespace {

ConfigSchema<SyntheticOptions> SyntheticSchema() {
  using S = SyntheticOptions;
  ConfigSchema<S> schema;
  schema.Field("num_symbols", &S::num_symbols, "Symbols in the vocabulary (>= 10: the digits)")
      .Min(10)
      .Field("min_len", &S::min_len, "Shortest copy/reverse/sort input")
      .Min(1)
      .Field("max_len", &S::max_len, "Longest copy/reverse/sort input")
      .Min(1)
      .Field("modulus", &S::modulus, "p of the modadd task (a + b mod p)")
      .Min(2)
      .Field("markov_prefix_len", &S::markov_prefix_len, "Markov task input length")
      .Min(1)
      .Field("markov_answer_len", &S::markov_answer_len, "Markov task answer length")
      .Min(1)
      .Field("markov_branching", &S::markov_branching, "Successors per Markov state")
      .Min(1);
  return schema;
}

ConfigSchema<SyntheticTaskWeights> TasksSchema() {
  ConfigSchema<SyntheticTaskMix> mix;
  mix.Field("weight", &SyntheticTaskMix::weight, "Relative frequency in the train split")
      .Min(0)
      .Field("batch_size", &SyntheticTaskMix::batch_size,
             "Rows of this task per step (0 = its share of data.batch_size by weight)")
      .Min(0)
      .Field("grow_at_step", &SyntheticTaskMix::grow_at_step,
             "Step from which the task's rows become grow_batch_size (0 = never)")
      .Min(0)
      .Field("grow_batch_size", &SyntheticTaskMix::grow_batch_size,
             "Rows of this task per step from grow_at_step on")
      .Min(0)
      .Check([](const SyntheticTaskMix& m) -> std::optional<ConfigIssue> {
        if (m.grow_at_step > 0 && m.grow_batch_size < 1) {
          return ConfigIssue{"grow_batch_size", "must be at least 1 when grow_at_step is set"};
        }
        if (m.weight == 0 && (m.batch_size > 0 || m.grow_batch_size > 0)) {
          return ConfigIssue{"weight",
                             "is 0 (task disabled) but the task has a batch_size; give it a "
                             "positive weight or remove its batch_size"};
        }
        return std::nullopt;
      });
  using W = SyntheticTaskWeights;
  ConfigSchema<W> schema;
  schema.Nested("copy", &W::copy, mix, "Copy the input")
      .Nested("reverse", &W::reverse, mix, "Reverse the input")
      .Nested("sort", &W::sort, mix, "Sort the input")
      .Nested("modadd", &W::modadd, mix, "Add two numbers modulo p")
      .Nested("markov", &W::markov, mix, "Continue a Markov chain walk");
  return schema;
}

}  // namespace

const ConfigSchema<DataOptions>& DataOptionsSchema() {
  static const ConfigSchema<DataOptions>* schema = [] {
    using D = DataOptions;
    auto* s = new ConfigSchema<D>();
    s->Enum("source", &D::source,
            {{"synthetic", DataSource::kSynthetic},
             {"tokens", DataSource::kTokens},
             {"text", DataSource::kText}},
            "Where examples come from")
        .Field("seq_len", &D::seq_len, "Tokens per example")
        .Min(1)
        .Max(1 << 24)
        .Field("batch_size", &D::batch_size, "Examples per batch, per data-parallel rank")
        .Min(1)
        .Field("seed", &D::seed, "Seed of the examples, the hold-out and the shuffling")
        .Field("eval_fraction", &D::eval_fraction, "Fraction held out for eval")
        .Min(0)
        .Max(0.9)
        .Field("path", &D::path, "Token file (tokens) or text file (text)")
        .Enum("token_dtype", &D::token_dtype,
              {{"u16", TokenDType::kU16}, {"u32", TokenDType::kU32}},
              "Token width of a tokens file (little-endian)")
        .Field("vocab_size", &D::vocab_size, "Vocabulary of a tokens file; 0 = largest token + 1")
        .Min(0)
        .Max(2147483647)
        .Field("shuffle", &D::shuffle, "Shuffle file windows every epoch")
        .Nested("synthetic", &D::synthetic, SyntheticSchema(), "Synthetic task settings")
        .Nested("tasks", &D::tasks, TasksSchema(), "Synthetic task mixture")
        .Check([](const D& d) -> std::optional<ConfigIssue> {
          if (d.source != DataSource::kSynthetic && d.path.empty()) {
            return ConfigIssue{"path",
                               "must name the data file when source is \"tokens\" or "
                               "\"text\""};
          }
          if (d.source == DataSource::kSynthetic) {
            return CheckSyntheticOptions(d.synthetic, d.seq_len, d.eval_fraction,
                                         d.tasks.ToArray());
          }
          return std::nullopt;
        });
    return s;
  }();
  return *schema;
}

Result<std::unique_ptr<Dataset>> CreateDataset(const DataOptions& options) {
  switch (options.source) {
    case DataSource::kSynthetic: {
      const auto weights = options.tasks.ToArray();
      SY_ASSIGN_OR_RETURN(auto dataset,
                          SyntheticDataset::Create(options.synthetic, options.seq_len, options.seed,
                                                   options.eval_fraction, weights));
      return std::unique_ptr<Dataset>(std::move(dataset));
    }
    case DataSource::kTokens: {
      SY_ASSIGN_OR_RETURN(auto dataset,
                          TokenFileDataset::Open(options.path, options.token_dtype, options.seq_len,
                                                 options.vocab_size, options.eval_fraction));
      return std::unique_ptr<Dataset>(std::move(dataset));
    }
    case DataSource::kText: {
      SY_ASSIGN_OR_RETURN(auto dataset,
                          TextDataset::Open(options.path, options.seq_len, options.eval_fraction));
      return std::unique_ptr<Dataset>(std::move(dataset));
    }
  }
  return InternalError("unknown data source");
}

BatcherOptions MakeBatcherOptions(const DataOptions& options, Split split, int num_shards,
                                  int shard) {
  BatcherOptions batcher;
  batcher.batch_size = options.batch_size;
  batcher.split = split;
  batcher.shuffle = split == Split::kTrain && options.shuffle;
  batcher.seed = options.seed;
  batcher.num_shards = num_shards;
  batcher.shard = shard;
  return batcher;
}

}  // namespace sy
