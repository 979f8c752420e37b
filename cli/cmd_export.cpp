// `pipedream export`: trained weights (safetensors from --save, or a
// checkpoint's stage files) written back into the ONNX file they came from.
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/option_checks.h"
#include "onnx/export.h"

namespace pd::cli {

void add_export_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("export", "Write trained weights into the ONNX model they were imported from");
  struct Args {
    std::string onnx, output;
    std::vector<std::string> weights;
    bool external_data = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--onnx", a->onnx, "The ONNX model that was trained (--model file.onnx)")->required();
  cmd->add_option("--weights", a->weights,
                  "Trained weights: train/run --save output, or each stage file of a checkpoint")
      ->required();
  cmd->add_option("-o,--output", a->output, "The ONNX file to write")->required();
  cmd->add_flag("--external-data", a->external_data,
                "Write the weights to an external data file beside the output (OUTPUT.data), as ONNX keeps models "
                "over 2 GB; without it, only models that would reach 2 GiB do");
  cmd->callback([a] {
    check_output_file("--output", a->output);
    const onnx::ExportLayout layout = onnx::export_model_file(
        a->onnx, a->weights, a->output, a->external_data ? onnx::ExportLayout::external : onnx::ExportLayout::automatic);
    if (layout == onnx::ExportLayout::external)
      std::printf("wrote %s and its external data %s\n", a->output.c_str(),
                  (std::filesystem::path(a->output).parent_path() / onnx::external_data_file_name(a->output)).c_str());
    else
      std::printf("wrote %s\n", a->output.c_str());
  });
}

}  // namespace pd::cli
