#include "train/checkpoint_index.h"

#include <fmt/format.h>

#include "base/error.h"
#include "base/file_util.h"

namespace quill {

std::string train_shard_file(int rank, int size) { return fmt::format("shard-rank{}-of-{}.safetensors", rank, size); }

nlohmann::json read_train_state(const std::string& dir) {
  const std::string state_path = dir + "/state.json";
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(read_file(state_path));
  } catch (const nlohmann::json::exception& e) {
    QUILL_FAIL("{}: malformed JSON: {}", state_path, e.what());
  }
  const std::string format = state.is_object() ? state.value("format", "") : "";
  QUILL_CHECK(format == kTrainCheckpointFormat || format == kUncheckedTrainCheckpointFormat,
              "{}: not a quill training checkpoint of format {}", state_path, kTrainCheckpointFormat);
  return state;
}

SavedIndex read_saved_index(const std::string& dir, int saved_world) {
  SavedIndex ix;
  for (int r = 0; r < saved_world; ++r) {
    ix.files.push_back(SafetensorsFile::open(dir + "/" + train_shard_file(r, saved_world)));
    for (const std::string& t : ix.files.back().names()) {
      const size_t slash = t.rfind('/'), dash = t.rfind('-');
      QUILL_CHECK(slash != std::string::npos && dash != std::string::npos && dash > slash, "{}: tensor {} is not a piece",
                  ix.files.back().path(), t);
      ix.pieces[t.substr(0, slash)].push_back(
          {std::stoll(t.substr(slash + 1, dash - slash - 1)), std::stoll(t.substr(dash + 1)), ix.files.size() - 1, t});
    }
  }
  return ix;
}

}  // namespace quill
