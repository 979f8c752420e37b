#include "cli/inference.h"

#include "cli/option_checks.h"
#include "core/compute_settings.h"
#include "core/cuda_plugin.h"
#include "core/device_ops.h"
#include "core/error.h"

namespace pd::cli {

void add_inference_options(CLI::App& cmd, InferenceArgs& a) {
  cmd.add_option("--model", a.model, "Zoo model (see `pipedream models`), a spec .json file or an .onnx file");
  cmd.add_option("--model-spec", a.spec_file, "JSON model spec file")->check(CLI::ExistingFile);
  cmd.add_option("--model-options", a.model_options, "Zoo model options, e.g. width=0.5,image_size=32");
  cmd.add_option("--weights", a.weights,
                 "Weights, matched by name: train/run --save or export output, a checkpoint's step-N folder or stage "
                 "files, a PyTorch state_dict (safetensors)")
      ->required();
  cmd.add_option("--data", a.data, "fashion-mnist | cifar10 | text | synthetic")->capture_default_str();
  cmd.add_option("--data-dir", a.data_dir, "Dataset folder (cifar10), text file (text), or another fashion-mnist folder");
  cmd.add_option("--split", a.split, "test | train")->capture_default_str();
  cmd.add_option("--samples", a.samples, "Only the split's first N samples (default: all)")->check(CLI::PositiveNumber);
  cmd.add_option("--batch", a.batch, "Samples per forward pass")->capture_default_str();
  cmd.add_option("--threads", a.threads, "Compute threads (default: all cores)");
  cmd.add_option("--device", a.device, "cpu | cuda | cuda:N")->capture_default_str();
  cmd.add_flag("--deterministic", a.deterministic, "GPU: deterministic cuDNN convolution algorithms only");
  add_allow_tf32_flag(cmd, a.allow_tf32);
  cmd.add_option("--precision", a.precision,
                 "fp32 | bf16 (the rounding points of a bf16 train or run: the numbers it reports for these weights)")
      ->capture_default_str();
}

Inference open_inference(const InferenceArgs& a) {
  if (a.split != "test" && a.split != "train") throw UserError(cat("--split ", a.split, ": use test or train"));
  refuse_allow_tf32_off_cuda(a.allow_tf32, a.device);
  require_compute_device(a.device);
  Inference out;
  out.model = resolve_model(a.model, a.spec_file, a.model_options);
  const NamedTensors w = load_named_weights(out.model, a.weights);  // a wrong file is refused before the data is read
  DataSplits splits = open_dataset(a.data, a.data_dir, out.model);
  std::unique_ptr<Dataset>& split = a.split == "test" ? splits.test : splits.train;
  if (!split) throw UserError(cat("--data ", a.data, " has no ", a.split, " split"));
  if (a.samples > split->size())
    throw UserError(cat("--samples ", a.samples, ": the ", a.split, " split of ", split->name(), " has ",
                        split->size(), " samples"));
  out.data = a.samples > 0 ? load_into_memory(*split, a.samples) : std::move(split);
  out.precision = parse_precision_flag(a.precision);
  const Device device = resolve_compute_device(a.device);
  apply_compute_settings({.device = device, .threads = threads_or_all_cores(a.threads), .precision = out.precision,
                          .deterministic = a.deterministic, .allow_tf32 = a.allow_tf32});
  out.weights = ParameterStore::create(out.model, 0, device);
  out.weights.load(w, "--weights");
  return out;
}

}  // namespace pd::cli
