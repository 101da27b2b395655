#include "train/train_checkpoint.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/file_util.h"
#include "io/safetensors.h"
#include "model/param_placement.h"
#include "ops/convert.h"

namespace quill {

namespace fs = std::filesystem;

namespace {
Tensor to_host(const DeviceContext& ctx, const Tensor& t) {
  if (t.device() == Device::CPU) return t;
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  ops::transfer(ctx, t, h);
  return h;
}
}  // namespace

void save_train_checkpoint(const std::string& dir, int64_t next_step, const ParamTable& params, AdamW& optimizer,
                           const DeviceContext& ctx) {
  const std::string tmp = dir + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp);
  make_dirs(tmp);
  std::vector<std::pair<std::string, Tensor>> weights, moments;
  size_t j = 0;
  for (const Param& p : params.params()) {
    weights.emplace_back(p.name, to_host(ctx, p.value));
    if (!p.trainable) continue;
    moments.emplace_back("exp_avg." + p.name, to_host(ctx, optimizer.exp_avg()[j]));
    moments.emplace_back("exp_avg_sq." + p.name, to_host(ctx, optimizer.exp_avg_sq()[j]));
    ++j;
  }
  write_safetensors(tmp + "/weights.safetensors", weights);
  write_safetensors(tmp + "/optimizer.safetensors", moments);
  nlohmann::json state;
  state["format"] = "quill-train-checkpoint-v1";
  state["next_step"] = next_step;
  state["optimizer_steps"] = optimizer.steps_taken();
  write_file_atomic(tmp + "/state.json", state.dump(2) + "\n");
  // Swap in: the old checkpoint is removed only after the new one is complete and in place.
  const std::string old = dir + ".old-" + std::to_string(::getpid());
  if (fs::exists(dir)) fs::rename(dir, old);
  fs::rename(tmp, dir);
  fs::remove_all(old);
}

namespace {
void copy_into(const SafetensorsFile& file, const std::string& name, const Tensor& dst, const DeviceContext& ctx) {
  QUILL_CHECK(file.contains(name), "{}: tensor {} missing", file.path(), name);
  Tensor src = file.tensor(name);
  QUILL_CHECK(src.shape() == dst.shape() && src.dtype() == dst.dtype(), "{}: tensor {} is {}, expected {}",
              file.path(), name, src.describe(), dst.describe());
  ops::transfer(ctx, src, dst);
}
}  // namespace

int64_t load_train_checkpoint(const std::string& dir, ParamTable& params, AdamW& optimizer, const DeviceContext& ctx) {
  const nlohmann::json state = [&] {
    const std::string path = dir + "/state.json";
    try {
      return nlohmann::json::parse(read_file(path));
    } catch (const nlohmann::json::exception& e) {
      QUILL_FAIL("{}: malformed JSON: {}", path, e.what());
    }
  }();
  QUILL_CHECK(state.value("format", "") == "quill-train-checkpoint-v1", "{}/state.json: not a quill training checkpoint",
              dir);
  const SafetensorsFile weights = SafetensorsFile::open(dir + "/weights.safetensors");
  const SafetensorsFile moments = SafetensorsFile::open(dir + "/optimizer.safetensors");
  size_t j = 0;
  for (Param& p : params.params()) {
    copy_into(weights, p.name, p.value, ctx);
    if (!p.trainable) continue;
    copy_into(moments, "exp_avg." + p.name, optimizer.exp_avg()[j], ctx);
    copy_into(moments, "exp_avg_sq." + p.name, optimizer.exp_avg_sq()[j], ctx);
    ++j;
  }
  refresh_compute(params, ctx);
  optimizer.set_steps_taken(state.at("optimizer_steps").get<int64_t>());
  return state.at("next_step").get<int64_t>();
}

}  // namespace quill
