#include "train/checkpoint_identity.h"

#include <fmt/format.h>

#include <set>

#include "base/error.h"
#include "base/file_util.h"
#include "base/sha256_stream.h"
#include "parallel/host_reduce.h"

namespace quill {

namespace {

// The hash of a state.json object without its own "sha256" (nlohmann's objects keep their keys sorted,
// so the dump is one text for one content).
std::string content_sha256(nlohmann::json state) {
  state.erase("sha256");
  return sha256_hex(state.dump());
}

std::string value_text(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

}  // namespace

void seal_state(nlohmann::json& state, const CheckpointIdentity& identity, const nlohmann::json& shards) {
  state["config"] = nlohmann::json::parse(identity.config_json);
  state["rows_sha256"] = identity.rows_sha256;
  state["shards"] = shards;
  state["sha256"] = content_sha256(state);
}

std::vector<std::string> config_differences(const nlohmann::json& saved, const nlohmann::json& mine) {
  std::set<std::string> keys;
  for (const auto& [k, v] : saved.items()) keys.insert(k);
  for (const auto& [k, v] : mine.items()) keys.insert(k);
  std::vector<std::string> out;
  for (const std::string& k : keys) {
    const bool in_saved = saved.contains(k), in_mine = mine.contains(k);
    if (in_saved && in_mine && saved[k] == mine[k]) continue;
    out.push_back(fmt::format("{} {}, this run has {}", k, in_saved ? value_text(saved[k]) : "(absent)",
                              in_mine ? value_text(mine[k]) : "(absent)"));
  }
  return out;
}

void check_state(const std::string& state_path, const nlohmann::json& state, const CheckpointIdentity& identity,
                 const CheckpointChecks& checks) {
  if (checks.verify_bytes) {
    QUILL_CHECK(state.contains("sha256") && state["sha256"].is_string(), "{}: no \"sha256\" of its content",
                state_path);
    QUILL_CHECK(state["sha256"].get<std::string>() == content_sha256(state),
                "{}: its content does not match its \"sha256\": the file was changed after it was written (next_step, "
                "a shard's hash or the config); {} from an unchanged checkpoint, or give --no-verify-checkpoint "
                "to {} it as it is",
                state_path, checks.use, checks.use);
  }
  QUILL_CHECK(state.contains("config") && state["config"].is_object(), "{}: no \"config\" object", state_path);
  const std::vector<std::string> differ = config_differences(state["config"], nlohmann::json::parse(identity.config_json));
  if (!differ.empty()) {
    std::string list;
    for (const std::string& d : differ) list += (list.empty() ? "" : "; ") + d;
    QUILL_FAIL("{}: the checkpoint was written for another model: {} (give the --config it was trained with)",
               state_path, list);
  }
  const std::string saved_rows = state.value("rows_sha256", "");
  QUILL_CHECK(!checks.verify_rows || saved_rows == identity.rows_sha256,
              "{}: the checkpoint was trained on other rows (rows_sha256 {}, this run's --rows has {}); give the "
              "--rows it was trained on, or --no-verify-checkpoint-rows to continue it on these",
              state_path, saved_rows, identity.rows_sha256);
}

void verify_shards(const std::string& dir, const nlohmann::json& state, Comm* world, int rank,
                   const DeviceContext& ctx, const char* use) {
  const nlohmann::json& shards = state.at("shards");
  const int size = world ? world->size() : 1;
  // The first file (in name order) that differs on this rank, as its index + 1; 0: none.
  int64_t bad = 0, i = 0;
  std::vector<std::string> names;
  for (const auto& [name, hex] : shards.items()) {
    names.push_back(name);
    if (bad == 0 && i % size == rank) {
      bool same = false;
      try {
        same = sha256_file_hex(dir + "/" + name) == hex.get<std::string>();
      } catch (const Error&) {
        // unreadable or missing: reported below like changed bytes, by every rank alike
      }
      if (!same) bad = i + 1;
    }
    ++i;
  }
  // The smallest bad index over the ranks: the largest of (count - index) (a max is the reduction at hand).
  const int64_t n = static_cast<int64_t>(names.size());
  const int64_t top = static_cast<int64_t>(max_over(world, ctx, static_cast<double>(bad == 0 ? 0 : n + 1 - bad)));
  if (top == 0) return;
  QUILL_FAIL("{}/{}: missing, or its bytes do not match the sha256 in {}/state.json: the file changed after it was written; "
             "{} from an intact checkpoint, or give --no-verify-checkpoint to {} it as it is",
             dir, names[static_cast<size_t>(n + 1 - top - 1)], dir, use, use);
}

std::vector<std::string> gather_sha256(Comm* world, const DeviceContext& ctx, int rank, const std::string& hex) {
  QUILL_CHECK(hex.size() == 64, "gather_sha256: '{}' is not a SHA-256 in hex", hex);
  const int size = world ? world->size() : 1;
  // An all-gather as a sum: each rank fills its own four words, the others' stay 0.
  Tensor words = Tensor::zeros({4 * size}, DType::I64);
  for (int w = 0; w < 4; ++w)
    words.data_as<int64_t>()[4 * rank + w] = static_cast<int64_t>(std::stoull(hex.substr(16 * w, 16), nullptr, 16));
  all_reduce_host(world, ctx, words);
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r) {
    std::string h;
    for (int w = 0; w < 4; ++w) h += fmt::format("{:016x}", static_cast<uint64_t>(words.data_as<int64_t>()[4 * r + w]));
    out.push_back(h);
  }
  return out;
}

}  // namespace quill
