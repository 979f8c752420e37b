// `pipedream evaluate`: loss and accuracy of given weights on a data set's
// split, in eval mode (BatchNorm on its running statistics, no dropout) -
// what `train` reports after its last epoch.
#include <cstdio>

#include "cli/commands.h"
#include "cli/inference.h"
#include "cli/option_checks.h"
#include "runtime/metrics.h"
#include "runtime/trainer.h"

namespace pd::cli {

void add_evaluate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("evaluate", "Test loss and accuracy of trained weights (eval mode)");
  struct Args {
    InferenceArgs in;
    std::string metrics;
  };
  auto a = std::make_shared<Args>();
  add_inference_options(*cmd, a->in);
  cmd->add_option("--metrics", a->metrics, "Also write the result to this file as a JSON line: {\"event\":\"eval\",\"split\",\"samples\",\"test_loss\",\"test_accuracy\"}");
  cmd->callback([a] {
    check_output_file("--metrics", a->metrics);
    const Inference in = open_inference(a->in);
    const EvalResult r = evaluate(in.model, in.weights, *in.data, a->in.batch, in.precision);
    MetricsWriter metrics(a->metrics);
    metrics.write({{"event", "eval"}, {"split", a->in.split}, {"samples", in.data->size()}, {"test_loss", r.loss},
                   {"test_accuracy", r.accuracy}});
    std::printf("%s on %lld samples of %s: test loss %.6f, test accuracy %.2f%%\n", in.model.name.c_str(),
                static_cast<long long>(in.data->size()), in.data->name().c_str(), r.loss, 100.0 * r.accuracy);
  });
}

}  // namespace pd::cli
