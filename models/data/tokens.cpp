// tokens:FILE.bin - a uint16 token stream as nanoGPT's prepare scripts and
// llm.c's write it, cut into windows of the model's context.
#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "models/data/data_file.h"
#include "models/data/readers.h"

namespace pd::data {

namespace {

namespace fs = std::filesystem;

// llm.c's files start with 256 int32: magic, version, token count.
constexpr int32_t kLlmcMagic = 20240520;
constexpr size_t kLlmcHeader = 256 * sizeof(int32_t);

// The header (llm.c's 1 KB) is read first; the tokens are then read into
// a buffer of exactly the count it vouches for.
std::vector<uint16_t> read_tokens(const fs::path& p, int64_t vocab) {
  const DataFile f(p.string(), "--data tokens");
  const uint64_t size = f.size();
  uint64_t at = 0, count = 0;
  int32_t head[3] = {0, 0, 0};
  if (size >= kLlmcHeader) f.read_into(0, head, sizeof head);
  if (head[0] == kLlmcMagic) {
    if (head[1] != 1)
      throw UserError(cat("--data tokens: ", p.string(), " is an llm.c token file of version ", head[1],
                          " (version 1, uint16 tokens, is read)"));
    at = kLlmcHeader;
    count = static_cast<uint64_t>(std::max(head[2], 0));
    if (head[2] < 0 || size != at + 2 * count)
      throw UserError(cat("--data tokens: ", p.string(), ": its llm.c header counts ", head[2], " tokens but ",
                          size - at, " bytes follow it (truncated?)"));
  } else {
    if (size % 2 != 0)
      throw UserError(cat("--data tokens: ", p.string(), " has ", size, " bytes, an odd count: not a stream of "
                          "uint16 tokens (truncated?)"));
    count = size / 2;
  }
  auto t = f.allocate<std::vector<uint16_t>>(count, "tokens");
  f.read_into(at, t.data(), 2 * count);  // little-endian, as the writers store them
  const auto top = std::max_element(t.begin(), t.end());
  if (top != t.end() && *top >= vocab)
    throw UserError(cat("--data tokens: ", p.string(), " holds token ", *top, " at position ", top - t.begin(),
                        " but the model's vocabulary is ", vocab, " (set the model's vocab option)"));
  return t;
}

// Non-overlapping windows of T tokens; targets are the next T.
class TokenDataset final : public Dataset {
 public:
  TokenDataset(std::string name, std::vector<uint16_t> tokens, int64_t context, int64_t vocab)
      : name_(std::move(name)), tokens_(std::move(tokens)), t_(context), vocab_(vocab) {}
  std::string name() const override { return name_; }
  int64_t size() const override { return (static_cast<int64_t>(tokens_.size()) - 1) / t_; }
  Shape sample_shape() const override { return {t_}; }
  DType input_dtype() const override { return DType::I32; }
  Shape label_shape() const override { return {t_}; }
  int64_t classes() const override { return vocab_; }
  Tensor inputs(std::span<const int64_t> idx) const override { return window(idx, 0); }
  Tensor labels(std::span<const int64_t> idx) const override { return window(idx, 1); }

 private:
  Tensor window(std::span<const int64_t> idx, int64_t shift) const {
    return token_windows(tokens_.data(), size(), t_, idx, shift);
  }
  std::string name_;
  std::vector<uint16_t> tokens_;
  int64_t t_, vocab_;
};

// nanoGPT: train.bin beside val.bin; llm.c: NAME_train.bin beside NAME_val.bin.
fs::path sibling_val(const fs::path& p) {
  const std::string f = p.filename().string();
  if (f == "train.bin") return p.parent_path() / "val.bin";
  const size_t at = f.rfind("_train.bin");
  if (at != std::string::npos && at + 10 == f.size()) return p.parent_path() / (f.substr(0, at) + "_val.bin");
  return {};
}

}  // namespace

DataSplits open_tokens(const std::string& file, const Model& m, const DataOptions& o) {
  if (file.empty()) throw UserError("--data tokens:FILE.bin needs a file");
  o.refuse_image_options("tokens:");
  if (m.task != Task::LanguageModel)
    throw UserError(cat("--data tokens: trains language models; ", m.name, " is a classifier"));
  const fs::path path(file);
  const int64_t t = m.input_shape[0];
  std::vector<uint16_t> train = read_tokens(path, m.classes), test;
  const fs::path val = sibling_val(path);
  std::error_code ec;  // a val.bin that is there but unreadable (a symlink loop) is read, and refused naming it
  if (!val.empty() && fs::symlink_status(val, ec).type() != fs::file_type::not_found) {
    test = read_tokens(val, m.classes);
  } else {
    held_out_stride(o.val);  // the same range as every reader's: (0, 0.5]
    const size_t cut = train.size() - static_cast<size_t>(static_cast<double>(train.size()) * o.val);
    test.assign(train.begin() + static_cast<std::ptrdiff_t>(cut), train.end());
    train.resize(cut);
  }
  using Part = std::pair<const std::vector<uint16_t>*, const char*>;
  for (const auto& [part, name] : {Part{&train, "training"}, Part{&test, "test"}})
    if (static_cast<int64_t>(part->size()) < t + 1)
      throw UserError(cat("--data tokens: ", file, ": the ", name, " split has ", part->size(),
                          " tokens, fewer than one window of the model's context + 1 (", t + 1, ")"));
  return {std::make_unique<TokenDataset>("tokens/train", std::move(train), t, m.classes),
          std::make_unique<TokenDataset>("tokens/test", std::move(test), t, m.classes)};
}

}  // namespace pd::data
