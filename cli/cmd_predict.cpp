// `pipedream predict`: the model's outputs (logits) for every sample of a
// data set's split, in the split's order, in eval mode (BatchNorm on its
// running statistics, no dropout). Written as .npy (float32, [samples,
// output dims...]) or .csv (one row per sample, the outputs flattened).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string_view>

#include "cli/commands.h"
#include "cli/inference.h"
#include "cli/option_checks.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "models/layer_range.h"

namespace pd::cli {

namespace {

enum class OutputFormat { Npy, Csv };

OutputFormat output_format(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".npy") return OutputFormat::Npy;
  if (ext == ".csv") return OutputFormat::Csv;
  throw UserError(cat("--output ", path, ": name a .npy or a .csv file"));
}

// NPY format 1.0: magic, version, header length, a Python dict padded with
// spaces to a multiple of 64 bytes and ended by a newline.
std::string npy_header(const Shape& shape) {
  std::string dims;  // as numpy writes it: (n,) for one dimension, (n, k) otherwise
  for (size_t i = 0; i < shape.size(); ++i) dims += cat(i ? ", " : "", shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string dict = cat("{'descr': '<f4', 'fortran_order': False, 'shape': (", dims, "), }");
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict.push_back('\n');
  std::string out = "\x93NUMPY";
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(dict.size() & 0xff));
  out.push_back(static_cast<char>(dict.size() >> 8));
  return out + dict;
}

void write_outputs(const std::string& path, OutputFormat format, const Shape& shape, const std::vector<float>& values) {
  write_file_atomically(path, [&](std::FILE* f) {
    if (format == OutputFormat::Npy) {
      const std::string h = npy_header(shape);
      return std::fwrite(h.data(), 1, h.size(), f) == h.size() &&
             std::fwrite(values.data(), sizeof(float), values.size(), f) == values.size();
    }
    const size_t row = shape[0] > 0 ? values.size() / static_cast<size_t>(shape[0]) : 0;
    bool ok = true;
    for (size_t i = 0; i < values.size(); ++i)
      ok = ok && std::fprintf(f, "%.9g%c", values[i], (i + 1) % row == 0 ? '\n' : ',') > 0;
    return ok;
  });
}

}  // namespace

void add_predict_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("predict", "Write the model's outputs (logits) for a data set's samples");
  struct Args {
    InferenceArgs in;
    std::string output;
  };
  auto a = std::make_shared<Args>();
  add_inference_options(*cmd, a->in);
  cmd->add_option("-o,--output", a->output,
                  "out.npy (float32, [samples, outputs...]) or out.csv (a row of outputs per sample), in the data "
                  "set's order")
      ->required();
  cmd->callback([a] {
    check_output_file("--output", a->output);
    const OutputFormat format = output_format(a->output);
    const Inference in = open_inference(a->in);
    const Dataset& data = *in.data;
    std::vector<float> values;
    Shape shape;
    const StepInfo eval{.training = false, .precision = in.precision};
    RangeContext ctx;
    std::vector<int64_t> idx;
    for (int64_t first = 0; first < data.size(); first += a->in.batch) {
      const int64_t n = std::min(a->in.batch, data.size() - first);
      idx.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = first + i;
      const Tensor out = forward_layers(in.model, in.weights, 0, in.model.size() - 1, data.inputs(idx), eval, ctx);
      ctx.clear();
      const std::vector<float> v = out.to_floats();
      values.insert(values.end(), v.begin(), v.end());
      if (shape.empty()) shape = out.shape();
    }
    shape[0] = data.size();
    write_outputs(a->output, format, shape, values);
    std::printf("wrote %s: outputs %s of %s for %lld samples of %s\n", a->output.c_str(), shape_str(shape).c_str(),
                in.model.name.c_str(), static_cast<long long>(data.size()), data.name().c_str());
  });
}

}  // namespace pd::cli
