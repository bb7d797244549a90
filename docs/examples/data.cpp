// The snippets of docs/data.md, compiled and run by the test suite. Uses Fashion-MNIST when the
// Debian package dataset-fashion-mnist is installed, random images otherwise.
#include <precis/precis.h>

#include <filesystem>
#include <iostream>

using namespace precis;

int main() {
  // --- images ------------------------------------------------------------------------------
  std::shared_ptr<const data::Dataset> images;
  if (std::filesystem::exists(std::string(data::kFashionMnistDir) + "/t10k-images-idx3-ubyte.gz"))
    images = std::make_shared<data::MnistDataset>(data::kFashionMnistDir, /*train=*/false);
  else
    images = std::make_shared<data::TensorDataset>(
        std::vector<Tensor>{rand({512, 1, 28, 28}), randint(0, 10, {512})});

  auto augmented = std::make_shared<data::TransformDataset>(
      images, data::compose({data::random_crop(28, 28, /*padding=*/2), data::random_horizontal_flip(),
                             data::normalize({0.2860f}, {0.3530f})}));
  data::DataLoader loader(augmented, {.batch_size = 128, .shuffle = true, .seed = 1, .drop_last = true,
                                      .num_workers = 2});
  int64_t seen = 0;
  for (data::Batch& b : loader.epoch(0)) {
    const Tensor& x = b[0];  // (128, 1, 28, 28) f32
    const Tensor& y = b[1];  // (128,) i64
    seen += x.size(0);
    if (b.index == 0) std::cout << "images " << x.describe() << ", labels " << y.describe() << "\n";
  }
  std::cout << seen << " images, waited for data " << static_cast<int>(100 * loader.wait_fraction())
            << "% of the time\n";

  // Resuming: the position after a batch, saved with a checkpoint, restarts the same stream.
  data::DataPosition pos = loader.position();  // {1, 0}: epoch 0 is done
  loader.set_position(pos.epoch, pos.batch);

  // --- text --------------------------------------------------------------------------------
  const std::vector<std::string> corpus = {
      "The quick brown fox jumps over the lazy dog.", "A fox is a small wild dog.",
      "Dogs and foxes jump; lazy dogs sleep.",        "The brown dog sleeps over there.",
  };
  data::WordPieceTokenizer tok(data::train_wordpiece_vocab(corpus, {.vocab_size = 80, .min_frequency = 1}));
  data::Encoding e = tok.encode("The lazy foxes.");
  std::cout << "ids:";
  for (int64_t id : e.ids) std::cout << ' ' << id;
  std::cout << "  (" << tok.decode(e.ids) << ")\n";

  auto mlm = data::MlmDataset::from_lines(tok, corpus, /*max_length=*/32);
  data::DataLoader text_loader(
      mlm, {.seed = 3,
            .collate = data::pad_collate({static_cast<double>(tok.pad_id()), static_cast<double>(data::kIgnoreIndex)}),
            .batch_sampler = data::token_budget_sampler(mlm->lengths(), {.max_tokens = 40, .seed = 3})});
  for (data::Batch& b : text_loader.epoch(0))
    std::cout << "text batch: input_ids " << b[0].describe() << ", labels " << b[1].describe() << ", attention "
              << b[2].describe() << "\n";
}
