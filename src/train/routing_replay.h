// The routing file of `quill train --dump-grads-step K --replay-routing FILE`: at step K each row's
// tokens go to the experts FILE names, so that gradients compare with a reference's under one expert
// choice. FILE is safetensors holding, per MoE layer i, "model.llm.layers.{i}.mlp.gate.topk": I32
// [rows * T, top_k], the step's rows in order (row r is lines r*T to (r+1)*T).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/config.h"
#include "tensor/tensor.h"

namespace quill {

// Before anything is loaded or written: FILE opens and holds every MoE layer's tensor, of the dtype and
// shape above with at least `rows` rows of T tokens (a header read, no data). A quill::Error naming
// --replay-routing, the file and the tensor otherwise.
void check_routing_file(const std::string& path, const InklingConfig& config, int64_t rows, int64_t T);

// Row `row` of the file: per layer, its T x top_k slice (undefined for dense layers).
std::vector<Tensor> routing_of_row(const SafetensorsFile& file, const InklingConfig& config, int64_t row, int64_t T);

}  // namespace quill
