#include "model/bucket_split.h"

#include <algorithm>
#include <map>

namespace quill {

int64_t default_bucket_elements(int data_parallel_size) {
  return std::max<int64_t>(40'000'000, int64_t{1'000'000} * data_parallel_size);
}

std::vector<std::vector<size_t>> split_bucket_by_layers(const std::vector<Param>& params,
                                                        const std::vector<size_t>& members, int64_t bucket_elements) {
  if (members.empty()) return {};
  if (bucket_elements <= 0) return {members};
  // The members of each layer, in table order; layers visited from the last.
  std::map<int64_t, std::vector<size_t>, std::greater<>> by_layer;
  for (size_t i : members) by_layer[params[i].layer].push_back(i);
  std::vector<std::vector<size_t>> buckets;
  std::vector<size_t> open;
  int64_t open_elements = 0;
  for (const auto& [layer, indices] : by_layer) {
    for (size_t i : indices) open_elements += shape_numel(params[i].shape);
    open.insert(open.end(), indices.begin(), indices.end());
    if (open_elements >= bucket_elements) {
      std::sort(open.begin(), open.end());
      buckets.push_back(std::move(open));
      open.clear();
      open_elements = 0;
    }
  }
  if (!open.empty()) {
    std::sort(open.begin(), open.end());
    buckets.push_back(std::move(open));
  }
  return buckets;
}

}  // namespace quill
