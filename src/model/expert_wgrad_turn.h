// What a micro-batch's backward does with the routed experts' weight gradients under
// --moe-expert-wgrad-micro-batches (model/expert_wgrad_pairs.h), apart so that the memory plan
// (plan/activation_trace.h) follows the same turns without the model's tensors.
#pragma once

#include <cstdint>

namespace quill {

enum class ExpertWgradTurn {
  Write,          // computes them from its own rows (the default, and the last of an odd count)
  Hold,           // keeps its rows for the next micro-batch's backward; writes nothing
  WriteWithHeld,  // computes them from the held rows and its own, in one GEMM per matrix
};

// The turn of the k-th backward (0-based, in the order the stage runs them) of a step with n backwards, when
// `per_gemm` (1 or 2) micro-batches share a GEMM: pairs (0, 1), (2, 3), ...; an odd last one alone. The
// step's last backward never holds, so every gradient is final after it (what --overlap-grad-reduce needs).
ExpertWgradTurn expert_wgrad_turn(int64_t k, int64_t n, int per_gemm);

}  // namespace quill
