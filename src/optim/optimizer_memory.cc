#include "optim/optimizer_memory.h"

#include <fmt/format.h>

#include "base/error.h"

namespace quill {

DType parse_optimizer_dtype(const std::string& name, const char* flag) {
  if (name == "fp32") return DType::F32;
  if (name == "bf16") return DType::BF16;
  QUILL_FAIL("{}: '{}' is not a dtype quill keeps optimizer state in (fp32 or bf16)", flag, name);
}

const char* optimizer_dtype_name(DType dtype) { return dtype == DType::BF16 ? "bf16" : "fp32"; }

std::string OptimizerMemory::describe() const {
  std::string s = cpu_offload ? fmt::format("offload {}{}", offload_fraction, overlap_d2h_h2d ? " (overlap)" : "")
                              : std::string("no offload");
  return s + fmt::format(", exp_avg {}, exp_avg_sq {}, main grads {}", optimizer_dtype_name(exp_avg),
                         optimizer_dtype_name(exp_avg_sq), optimizer_dtype_name(main_grads));
}

std::vector<std::string> check_optimizer_memory(const OptimizerMemory& m) {
  QUILL_CHECK(m.offload_fraction >= 0 && m.offload_fraction <= 1,
              "--optimizer-offload-fraction: {} is not a fraction in [0, 1]", m.offload_fraction);
  for (DType d : {m.exp_avg, m.exp_avg_sq, m.main_grads})
    QUILL_CHECK(d == DType::F32 || d == DType::BF16, "optimizer state dtypes are fp32 or bf16");
  std::vector<std::string> notes;
  if (!m.cpu_offload && m.overlap_d2h_h2d)
    notes.push_back("--overlap-cpu-optimizer-d2h-h2d has no effect without --optimizer-cpu-offload");
  return notes;
}

}  // namespace quill
