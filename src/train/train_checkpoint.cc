#include "train/train_checkpoint.h"

#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/file_util.h"
#include "io/dir_swap.h"
#include "io/safetensors.h"
#include "model/param_placement.h"
#include "ops/convert.h"

namespace quill {

namespace fs = std::filesystem;

namespace {

int rank_of(const Comm* dp) { return dp ? dp->rank() : 0; }
int size_of(const Comm* dp) { return dp ? dp->size() : 1; }
void barrier(Comm* dp) {
  if (dp && dp->size() > 1) dp->barrier();
}

Tensor to_host(const DeviceContext& ctx, const Tensor& t) {
  if (t.device() == Device::CPU) return t;
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  ops::transfer(ctx, t, h);
  return h;
}

std::string optimizer_file(int rank, int size) {
  return "optimizer-rank" + std::to_string(rank) + "-of-" + std::to_string(size) + ".safetensors";
}

// Every rank must agree on the temporary folder's name: rank 0's pid, broadcast.
std::string temp_name(const std::string& dir, Comm* dp, const DeviceContext& ctx) {
  Tensor host = Tensor::empty({1}, DType::I64);
  host.data_as<int64_t>()[0] = ::getpid();
  if (dp && dp->size() > 1) {
    Tensor t = dp->device() == Device::CPU ? host : Tensor::empty({1}, DType::I64, *ctx.allocator);
    ops::transfer(ctx, host, t);
    dp->broadcast(t, 0);
    ops::transfer(ctx, t, host);
  }
  return dir + ".tmp-" + std::to_string(host.data_as<int64_t>()[0]);
}

void copy_into(const SafetensorsFile& file, const std::string& name, const Tensor& dst, const DeviceContext& ctx) {
  QUILL_CHECK(file.contains(name), "{}: tensor {} missing", file.path(), name);
  Tensor src = file.tensor(name);
  QUILL_CHECK(src.shape() == dst.shape() && src.dtype() == dst.dtype(), "{}: tensor {} is {}, expected {}",
              file.path(), name, src.describe(), dst.describe());
  ops::transfer(ctx, src, dst);
}

}  // namespace

void save_train_checkpoint(const std::string& dir, int64_t next_step, const ParamTable& params, AdamW& optimizer,
                           const DeviceContext& ctx, Comm* dp) {
  const int rank = rank_of(dp), size = size_of(dp);
  const std::string tmp = temp_name(dir, dp, ctx);
  if (rank == 0) {
    fs::remove_all(tmp);
    make_dirs(tmp);
  }
  barrier(dp);
  write_safetensors(tmp + "/" + optimizer_file(rank, size),
                    {{"exp_avg", to_host(ctx, optimizer.exp_avg())}, {"exp_avg_sq", to_host(ctx, optimizer.exp_avg_sq())}},
                    {{"shard_begin", std::to_string(optimizer.shard_begin())},
                     {"shard_end", std::to_string(optimizer.shard_end())}});
  if (rank == 0) {
    std::vector<std::pair<std::string, Tensor>> weights;
    for (const Param& p : params.params()) weights.emplace_back(p.name, to_host(ctx, p.value));
    write_safetensors(tmp + "/weights.safetensors", weights);
    nlohmann::json state;
    state["format"] = "quill-train-checkpoint-v2";
    state["next_step"] = next_step;
    state["optimizer_steps"] = optimizer.steps_taken();
    state["dp_size"] = size;
    write_file_atomic(tmp + "/state.json", state.dump(2) + "\n");
  }
  barrier(dp);
  // Swap in (io/dir_swap.h): a kill at any moment leaves a complete checkpoint that resume finds.
  if (rank == 0) swap_dir_into_place(tmp, dir);
  barrier(dp);
}

int64_t load_train_checkpoint(const std::string& dir, ParamTable& params, AdamW& optimizer, const DeviceContext& ctx,
                              Comm* dp) {
  const std::string state_path = dir + "/state.json";
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(read_file(state_path));
  } catch (const nlohmann::json::exception& e) {
    QUILL_FAIL("{}: malformed JSON: {}", state_path, e.what());
  }
  QUILL_CHECK(state.value("format", "") == "quill-train-checkpoint-v2", "{}: not a quill training checkpoint (v2)",
              state_path);
  const int size = size_of(dp), rank = rank_of(dp);
  QUILL_CHECK(state.at("dp_size").get<int>() == size,
              "{}: saved with {} data-parallel ranks, resuming with {}: resume with the same layout", state_path,
              state.at("dp_size").get<int>(), size);
  const SafetensorsFile weights = SafetensorsFile::open(dir + "/weights.safetensors");
  for (Param& p : params.params()) copy_into(weights, p.name, p.value, ctx);
  const SafetensorsFile moments = SafetensorsFile::open(dir + "/" + optimizer_file(rank, size));
  QUILL_CHECK(moments.metadata().count("shard_begin") &&
                  std::stoll(moments.metadata().at("shard_begin")) == optimizer.shard_begin(),
              "{}: its shard does not start where this rank's does", moments.path());
  copy_into(moments, "exp_avg", optimizer.exp_avg(), ctx);
  copy_into(moments, "exp_avg_sq", optimizer.exp_avg_sq(), ctx);
  refresh_compute(params, ctx);
  optimizer.set_steps_taken(state.at("optimizer_steps").get<int64_t>());
  return state.at("next_step").get<int64_t>();
}

}  // namespace quill
