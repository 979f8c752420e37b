#pragma once
// Test helper: the message of the UserError a call throws, or
// "(no UserError)" when it throws none (so a find() on it fails loudly).
#include <functional>
#include <string>

#include "core/error.h"

namespace pd::testing_support {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no UserError)";
}

}  // namespace pd::testing_support
