#include "train/routing_replay.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.h"
#include "base/file_util.h"

namespace quill {

namespace {

std::string topk_name(int64_t layer) { return fmt::format("model.llm.layers.{}.mlp.gate.topk", layer); }

// Layer `layer`'s tensor, checked (from the header) to hold rows [0, rows) of T tokens each.
const SafetensorsEntry& topk_entry(const SafetensorsFile& file, const InklingConfig& config, int64_t layer, int64_t rows,
                                   int64_t T) {
  const std::string name = topk_name(layer);
  QUILL_CHECK(file.contains(name), "{}: tensor {} missing (the routing of MoE layer {})", file.path(), name, layer);
  const SafetensorsEntry& e = file.entry(name);
  QUILL_CHECK(e.dtype == DType::I32 && e.shape.size() == 2 && e.shape[0] >= rows * T &&
                  e.shape[1] == config.num_experts_per_tok,
              "{}: {} is {} {}, not I32 [rows x {}, {}] with {} rows", file.path(), name, e.dtype_str,
              fmt::format("[{}]", fmt::join(e.shape, ", ")), T, config.num_experts_per_tok, rows);
  return e;
}

}  // namespace

void check_routing_file(const std::string& path, const InklingConfig& config, int64_t rows, int64_t T) {
  QUILL_CHECK(path_exists(path), "--replay-routing {}: no such file", path);
  try {
    const SafetensorsFile file = SafetensorsFile::open(path);
    for (int64_t i = 0; i < config.num_layers; ++i)
      if (config.is_moe(i)) topk_entry(file, config, i, rows, T);
  } catch (const Error& e) {
    QUILL_FAIL("--replay-routing: {}", e.what());
  }
}

std::vector<Tensor> routing_of_row(const SafetensorsFile& file, const InklingConfig& config, int64_t row, int64_t T) {
  std::vector<Tensor> topk(static_cast<size_t>(config.num_layers));
  for (int64_t i = 0; i < config.num_layers; ++i) {
    if (!config.is_moe(i)) continue;
    topk_entry(file, config, i, row + 1, T);
    topk[static_cast<size_t>(i)] = file.tensor(topk_name(i)).rows(row * T, (row + 1) * T).clone();
  }
  return topk;
}

}  // namespace quill
