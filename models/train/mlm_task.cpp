// BERT masked-LM pre-training on a text corpus (WordNet glosses by default). Every 20th line is
// held out as the test split; the test metric is the accuracy of the predictions at masked
// positions (a fixed masking: the test loader's per-example streams do not change between
// evaluations).
#include <cstdlib>
#include <filesystem>

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "data/collate.h"
#include "data/text/corpus.h"
#include "data/text/mlm.h"
#include "data/text/token_batching.h"
#include "data/text/wordpiece.h"
#include "data/text/wordpiece_trainer.h"
#include "models/bert.h"
#include "models/train/task.h"
#include "ops/functional.h"

namespace precis::train {

namespace {

namespace fs = std::filesystem;

constexpr int64_t kTestEvery = 20;

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ULL) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

std::string cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "precis").string();
  if (const char* h = std::getenv("HOME"); h && *h) return (fs::path(h) / ".cache" / "precis").string();
  return (fs::temp_directory_path() / "precis-cache").string();
}

// The vocabulary: options.vocab when that file exists; otherwise trained on the training lines
// to vocab_size and written to options.vocab, or to a cache file keyed on the corpus and size.
data::WordPieceTokenizer load_or_train_vocab(const TrainOptions& o, const std::string& corpus_path,
                                             const std::vector<std::string>& train_lines, std::ostream& log) {
  std::string path = o.vocab;
  if (path.empty()) {
    uint64_t h = fnv1a(fs::absolute(corpus_path).string());
    h = fnv1a(std::to_string(train_lines.size()), h);
    for (size_t i = 0; i < train_lines.size(); i += 997) h = fnv1a(train_lines[i], h);
    char name[96];
    std::snprintf(name, sizeof name, "vocab-%016llx-%lld.txt", static_cast<unsigned long long>(h),
                  static_cast<long long>(o.vocab_size));
    path = (fs::path(cache_dir()) / name).string();
  }
  if (fs::exists(path)) {
    if (!o.quiet) log << "vocab: " << path << "\n";
    return data::WordPieceTokenizer::from_file(path);
  }
  if (!o.quiet) log << "vocab: training a " << o.vocab_size << "-token WordPiece vocabulary ... " << std::flush;
  std::vector<std::string> vocab = data::train_wordpiece_vocab(train_lines, {.vocab_size = o.vocab_size});
  std::error_code ec;
  if (fs::path(path).has_parent_path()) fs::create_directories(fs::path(path).parent_path(), ec);
  if (!o.vocab.empty()) {
    data::write_vocab(path, vocab);  // its folder was proven writable before the data was read
    if (!o.quiet) log << vocab.size() << " tokens, written to " << path << "\n";
  } else {
    // The cache only saves the next run this training: a cache that cannot be written is no
    // reason to stop this one.
    try {
      data::write_vocab(path, vocab);
      if (!o.quiet) log << vocab.size() << " tokens, cached in " << path << "\n";
    } catch (const IOError& e) {
      if (!o.quiet) log << vocab.size() << " tokens, not cached (" << e.what() << "; --vocab FILE keeps it)\n";
    }
  }
  return data::WordPieceTokenizer(std::move(vocab));
}

class MlmTask : public TrainTask {
 public:
  MlmTask(const TrainOptions& o, std::ostream& log) {
    const std::string path = o.data.empty() ? data::kWordNetDir : o.data;
    PRECIS_CHECK_T(IOError, fs::exists(path), "--data: the corpus '", path,
                   "' does not exist. WordNet's glosses come from the Debian package wordnet-base "
                   "(scripts/install-deps.sh --data); --data may name any text file or folder of text files.");
    std::vector<std::string> lines = data::read_corpus(path);
    std::vector<std::string> train_lines, test_lines;
    for (size_t i = 0; i < lines.size(); ++i) ((i + 1) % kTestEvery == 0 ? test_lines : train_lines).push_back(lines[i]);
    PRECIS_CHECK(!train_lines.empty() && !test_lines.empty(), "--data: the corpus '", path, "' has ",
                 lines.size(), " lines; at least ", kTestEvery, " are needed (every ", kTestEvery,
                 "th is held out for testing)");
    tokenizer_ = std::make_unique<data::WordPieceTokenizer>(load_or_train_vocab(o, path, train_lines, log));
    auto train = data::MlmDataset::from_lines(*tokenizer_, train_lines, o.max_len);
    auto test = data::MlmDataset::from_lines(*tokenizer_, test_lines, o.max_len);
    auto train_sub = take_first(train, o.limit_train);
    auto test_sub = take_first(test, o.limit_test);
    auto collate = data::pad_collate({static_cast<double>(tokenizer_->pad_id()), double(data::kIgnoreIndex)});
    data::DataLoaderOptions train_opts{.batch_size = o.batch, .shuffle = true, .seed = o.seed,
                                       .num_workers = o.workers, .collate = collate,
                                       .pin_memory = o.device.is_cuda()};
    data::DataLoaderOptions test_opts{.batch_size = o.eval_batch, .shuffle = false, .seed = o.seed,
                                      .num_workers = o.workers, .collate = collate,
                                      .pin_memory = o.device.is_cuda()};
    if (o.max_tokens > 0) {
      auto lengths = [](const data::MlmDataset& d, int64_t n) {
        std::vector<int64_t> all = d.lengths();
        all.resize(static_cast<size_t>(n));
        return all;
      };
      train_opts.batch_sampler = data::token_budget_sampler(lengths(*train, train_sub->size()),
                                                            {.max_tokens = o.max_tokens, .seed = o.seed});
      test_opts.batch_sampler = data::token_budget_sampler(lengths(*test, test_sub->size()),
                                                           {.max_tokens = o.max_tokens, .shuffle = false});
    }
    train_loader_ = std::make_unique<data::DataLoader>(train_sub, train_opts);
    test_loader_ = std::make_unique<data::DataLoader>(test_sub, test_opts);

    models::BertConfig config = models::BertConfig::mini(tokenizer_->vocab_size());
    config.hidden_size = o.hidden;
    config.num_hidden_layers = o.layers;
    config.num_attention_heads = o.heads;
    config.intermediate_size = o.intermediate;
    config.max_position_embeddings = std::max<int64_t>(512, o.max_len);
    config.pad_token_id = tokenizer_->pad_id();
    model_ = std::make_shared<models::BertForMaskedLM>(config);
    model_->bert->set_checkpointing({.mode = o.checkpoint_activations});
    if (!o.quiet)
      log << "data: " << path << ", " << train_sub->size() << "/" << train->size() << " train and "
          << test_sub->size() << "/" << test->size() << " test sequences (every " << kTestEvery
          << "th line held out), max " << o.max_len << " tokens"
          << (o.max_tokens > 0 ? ", batches of <= " + std::to_string(o.max_tokens) + " tokens" : "") << "\n"
          << "model: BERT L" << o.layers << " H" << o.hidden << " A" << o.heads << " I" << o.intermediate
          << ", vocabulary " << tokenizer_->vocab_size() << ", " << model_->num_parameters() << " parameters\n";
  }

  std::shared_ptr<nn::Module> model() override { return model_; }
  std::shared_ptr<nn::Module> clone_model(const nn::Module& m) const override {
    return dynamic_cast<const models::BertForMaskedLM&>(m).clone<models::BertForMaskedLM>();
  }
  ForwardStats forward(nn::Module& m, const data::Batch& host, Device device) override {
    auto& bert = dynamic_cast<models::BertForMaskedLM&>(m);
    ForwardStats s;
    s.samples = host[0].size(0);
    {
      // Counted on the loader's host copy of the labels: no device result is read.
      NoGradGuard no_grad;
      s.count = sum(ne(host[1], data::kIgnoreIndex)).item<int64_t>();
    }
    const data::Batch b = to_device(host, device);
    const Tensor& ids = b[0];
    const Tensor& mask = b[2];
    // The prediction head (transform, decoder to the vocabulary, loss) runs at the masked
    // positions only, as NVIDIA's BERT pre-training: the same loss and gradients as the full head
    // at a fraction of its cost. The positions are read from the loader's host labels, so finding
    // them reads nothing from the device.
    const models::MaskedLMOutput out =
        bert.forward_with_labels(ids, mask, host[1], {.masked_positions_only = true});
    {
      NoGradGuard no_grad;
      auto [values, pred] = max(out.logits.detach(), 1);  // logits (N, V) at the N masked positions
      s.correct = sum(eq(pred, out.labels));
    }
    // A batch without a masked token has no loss (cross_entropy's mean would be 0/0 = NaN): it
    // contributes zero gradients instead.
    s.loss = s.count > 0 ? out.loss : mul(sum(out.logits), 0.0);
    return s;
  }
  data::DataLoader& train_loader() override { return *train_loader_; }
  data::DataLoader& test_loader() override { return *test_loader_; }
  const char* metric() const override { return "mlm_accuracy"; }
  std::map<std::string, std::string> metadata() const override {
    return {{"vocab_size", std::to_string(tokenizer_->vocab_size())}};
  }

 private:
  std::unique_ptr<data::WordPieceTokenizer> tokenizer_;
  std::shared_ptr<models::BertForMaskedLM> model_;
  std::unique_ptr<data::DataLoader> train_loader_, test_loader_;
};

}  // namespace

std::unique_ptr<TrainTask> make_mlm_task(const TrainOptions& options, std::ostream& log) {
  return std::make_unique<MlmTask>(options, log);
}

}  // namespace precis::train
