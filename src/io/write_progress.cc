#include "io/write_progress.h"

#include <memory>

namespace quill {

void count_written_bytes(std::vector<SafetensorsItem>& items, Progress& progress) {
  int64_t total = 0;
  for (const SafetensorsItem& item : items) total += static_cast<int64_t>(item.nbytes);
  auto done = std::make_shared<int64_t>(0);
  for (SafetensorsItem& item : items) {
    // The producer is called on the writing thread, one item after another: no lock needed.
    item.bytes = [inner = std::move(item.bytes), n = static_cast<int64_t>(item.nbytes), done, total, &progress] {
      Tensor t = inner();
      *done += n;
      progress.update(*done, total);
      return t;
    };
  }
}

}  // namespace quill
