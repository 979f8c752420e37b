#pragma once
// Precision's spellings ("fp32", "bf16"): --precision, the profile's and the
// checkpoint's "precision" field. Header-only, for the planner too.
#include <optional>
#include <string_view>

#include "core/precision.h"
#include "core/spelling_table.h"

namespace pd {

inline constexpr SpellingTable<Precision, 2> kPrecisionNames{{{Precision::FP32, "fp32"}, {Precision::BF16, "bf16"}}};

inline const char* to_string(Precision p) { return name_in(kPrecisionNames, p); }
inline std::optional<Precision> parse_precision(std::string_view text) { return value_in(kPrecisionNames, text); }

}  // namespace pd
