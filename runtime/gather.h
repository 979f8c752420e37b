#pragma once
// End-of-run collection on one rank: texts (stats, trace events) and named
// tensors (the merged --save file), over the transport's gather tag.
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "runtime/comm/transport.h"

namespace pd {

void send_text(Transport& t, int to, const std::string& text);
std::string recv_text(Transport& t, int from);
// Sends a stage's tensors (names first, then each tensor in order).
void send_named_tensors(Transport& t, int to, const NamedTensors& tensors);
NamedTensors recv_named_tensors(Transport& t, int from);

}  // namespace pd
