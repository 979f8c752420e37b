#include "planner/paper_model.h"
#include "core/error.h"
namespace pd {
PlannedPipeline plan_paper(const PlanningGraph&, const Topology&, const PlannerOptions&, PaperAlgorithm) {
  throw UserError("paper model: not yet");
}
}  // namespace pd
