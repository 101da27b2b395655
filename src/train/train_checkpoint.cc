#include "train/train_checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/file_util.h"
#include "base/progress.h"
#include "io/dir_swap.h"
#include "io/safetensors.h"
#include "io/write_progress.h"
#include "model/master_pieces.h"
#include "model/param_placement.h"
#include "train/checkpoint_history.h"
#include "train/checkpoint_index.h"
#include "ops/convert.h"

namespace quill {

namespace fs = std::filesystem;

namespace {

const char* const kKinds[] = {"master", "exp_avg", "exp_avg_sq"};

void barrier(Comm* world) {
  if (world && world->size() > 1) world->barrier();
}

Tensor to_host(const DeviceContext& ctx, const Tensor& t) {
  if (t.device() == Device::CPU) return t;
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  ops::transfer(ctx, t, h);
  return h;
}

// Every rank must agree on the temporary folder's name: rank 0's pid, broadcast.
std::string temp_name(const std::string& dir, Comm* world, const DeviceContext& ctx) {
  Tensor host = Tensor::empty({1}, DType::I64);
  host.data_as<int64_t>()[0] = ::getpid();
  if (world && world->size() > 1) {
    Tensor t = world->device() == Device::CPU ? host : Tensor::empty({1}, DType::I64, *ctx.allocator);
    ops::transfer(ctx, host, t);
    world->broadcast(t, 0);
    ops::transfer(ctx, t, host);
  }
  return dir + ".tmp-" + std::to_string(host.data_as<int64_t>()[0]);
}

// This rank's pieces of the masters (and so of the moments, which share the masters' shards).
using Piece = MasterPiece;

// A piece's state of one kind: on the device, or in host memory when offloaded; the moments in
// their own dtype (fp32 or bf16).
Tensor state_of(const ParamTable& params, const AdamW& opt, const char* kind, const Piece& pc) {
  const int64_t n = pc.end - pc.begin;
  if (std::string(kind) == "master") return params.buckets()[pc.bucket].master_range(pc.at, n);
  return opt.moment_range(std::string(kind) == "exp_avg" ? 0 : 1, pc.bucket, pc.at, n);
}

// Copies a host tensor into dst (device or host memory), converting a moment saved in another
// dtype (a resume that changes --exp-avg-dtype: bf16 widens exactly, fp32 rounds to nearest even).
void copy_into(const DeviceContext& ctx, const Tensor& src, const Tensor& dst) {
  Tensor from = src;
  if (src.dtype() != dst.dtype()) {
    from = Tensor::empty(src.shape(), dst.dtype());
    ops::convert(DeviceContext::cpu(), src, from);
  }
  if (dst.device() == Device::CPU) std::memcpy(dst.data(), from.data(), from.nbytes());
  else ops::transfer(ctx, from, dst);
}

nlohmann::json layout_json(const LayoutSpec& s) {
  return {{"tp", s.tp}, {"cp", s.cp}, {"dp", s.dp}, {"pp", s.pp}, {"ep", s.ep}, {"etp", s.etp}};
}

}  // namespace

CheckpointSnapshot snapshot_train_checkpoint(const std::string& dir, int64_t next_step, const ParamTable& params,
                                             const AdamW& optimizer, const DeviceContext& ctx, const Layout& layout,
                                             bool own_copy) {
  Comm* world = layout.world();
  CheckpointSnapshot s;
  s.dir = dir;
  s.next_step = next_step;
  s.optimizer_steps = optimizer.steps_taken();
  s.rank = layout.rank();
  s.world_size = world ? world->size() : 1;
  s.layout = layout.spec();
  s.tmp = temp_name(dir, world, ctx);
  if (s.rank == 0) {
    fs::remove_all(s.tmp);
    make_dirs(s.tmp);
  }
  barrier(world);
  // A host tensor of its own: the state may change while the copy is written.
  const auto host_copy = [&](const Tensor& t) {
    if (t.device() != Device::CPU || !own_copy) return to_host(ctx, t);
    Tensor c = Tensor::empty(t.shape(), t.dtype());
    std::memcpy(c.data(), t.data(), t.nbytes());
    return c;
  };
  for (const Piece& pc : master_pieces(params, /*replicas=*/false)) {
    const std::string& name = params.params()[pc.param].name;
    for (const char* kind : kKinds)
      s.pieces.emplace_back(fmt::format("{}/{}/{}-{}", kind, name, pc.begin, pc.end),
                            host_copy(state_of(params, optimizer, kind, pc)));
  }
  // Frozen tensors and buffers: the canonical holder of each slice writes it, by global range.
  for (const Param& p : params.params()) {
    if (p.trainable || !canonical_holder(p.shard, layout.coords())) continue;
    const Tensor value = to_host(ctx, p.value);
    for (const SliceRun& r : slice_runs(p.shard))
      s.pieces.emplace_back(fmt::format("fixed/{}/{}-{}", p.name, r.global_offset, r.global_offset + r.length),
                            host_copy(value.view_flat(r.local_offset, {r.length})));
  }
  // Each tensor's whole shape, so that a resume into another model is refused, not misread.
  for (const Param& p : params.params()) s.shapes["shape:" + p.name] = shape_str(p.shard.global_shape);
  for (const auto& [name, t] : s.pieces) s.bytes += static_cast<int64_t>(t.nbytes());
  return s;
}

void write_snapshot_shard(CheckpointSnapshot& s, bool show_progress) {
  std::vector<SafetensorsItem> items;
  for (const auto& [name, t] : s.pieces) items.push_back(SafetensorsItem::from_tensor(name, t));
  Progress progress(fmt::format("saving checkpoint {}{}", s.dir, s.world_size > 1 ? " (this rank's shard)" : ""),
                    ProgressOptions::in_bytes(show_progress));
  count_written_bytes(items, progress);
  write_safetensors(s.tmp + "/" + train_shard_file(s.rank, s.world_size), items, s.shapes, /*threads=*/0, &s.sha256);
}

void seal_train_checkpoint(const CheckpointSnapshot& s, const CheckpointIdentity& identity, Comm* world,
                           const DeviceContext& ctx) {
  const std::vector<std::string> hashes = gather_sha256(world, ctx, s.rank, s.sha256);
  if (s.rank == 0) {
    nlohmann::json state, shards = nlohmann::json::object();
    for (int r = 0; r < s.world_size; ++r) shards[train_shard_file(r, s.world_size)] = hashes[static_cast<size_t>(r)];
    state["format"] = kTrainCheckpointFormat;
    state["next_step"] = s.next_step;
    state["optimizer_steps"] = s.optimizer_steps;
    state["world_size"] = s.world_size;
    state["layout"] = layout_json(s.layout);
    seal_state(state, identity, shards);
    write_file_atomic(s.tmp + "/state.json", state.dump(2) + "\n");
  }
  barrier(world);
  // Swap in (io/dir_swap.h): a kill at any moment leaves a complete checkpoint that resume finds.
  if (s.rank == 0) swap_dir_into_place(s.tmp, s.dir);
  barrier(world);
}

void save_train_checkpoint(const std::string& dir, int64_t next_step, const CheckpointIdentity& identity,
                           const ParamTable& params, const AdamW& optimizer, const DeviceContext& ctx,
                           const Layout& layout, bool show_progress) {
  CheckpointSnapshot s = snapshot_train_checkpoint(dir, next_step, params, optimizer, ctx, layout, /*own_copy=*/false);
  write_snapshot_shard(s, show_progress);
  seal_train_checkpoint(s, identity, layout.world(), ctx);
}

int64_t load_train_checkpoint(const std::string& dir, const CheckpointIdentity& identity, const CheckpointChecks& checks,
                              ParamTable& params, AdamW& optimizer, const DeviceContext& ctx, const Layout& layout,
                              bool show_progress) {
  const nlohmann::json state = read_train_state(dir);
  if (state.at("format") == kTrainCheckpointFormat) {
    check_state(dir + "/state.json", state, identity, checks);
    if (checks.verify_bytes) verify_shards(dir, state, layout.world(), layout.rank(), ctx);
  } else if (layout.rank() == 0) {
    std::fprintf(stderr, "note: %s/state.json: format %s, written before checkpoints carried their config, rows and "
                 "hashes: resumed without those checks\n", dir.c_str(), kUncheckedTrainCheckpointFormat);
  }
  // Pieces are keyed by global element ranges, so any layout reads its shards from them; what
  // is missing (a checkpoint of another model, a torn one) is named below.
  const SavedIndex ix = read_saved_index(dir, state.at("world_size").get<int>());
  const std::vector<SafetensorsFile>& files = ix.files;
  for (const Param& p : params.params()) {
    for (const SafetensorsFile& f : files) {
      const auto it = f.metadata().find("shape:" + p.name);
      if (it == f.metadata().end()) continue;
      QUILL_CHECK(it->second == shape_str(p.shard.global_shape),
                  "{}: the checkpoint holds {} of shape {}, this model's is {}: a checkpoint of another model", f.path(),
                  p.name, it->second, shape_str(p.shard.global_shape));
      break;
    }
  }
  // Fills dst with elements [begin, end) of `kind/name` from the saved pieces that cover them.
  auto fill = [&](const std::string& kind, const std::string& name, int64_t begin, int64_t end, const Tensor& dst) {
    const auto found = ix.pieces.find(kind + "/" + name);
    QUILL_CHECK(found != ix.pieces.end(), "{}: {} of {} is not in the checkpoint", dir, kind, name);
    int64_t covered = 0;
    for (const SavedPiece& s : found->second) {
      const int64_t b = std::max(s.begin, begin), e = std::min(s.end, end);
      if (b >= e) continue;
      const Tensor src = files[s.file].tensor(s.tensor);
      // Masters and fixed tensors are fp32; moments fp32 or bf16 (--exp-avg-dtype, --exp-avg-sq-dtype).
      const bool moment = kind != "master" && kind != "fixed";
      QUILL_CHECK((src.dtype() == DType::F32 || (moment && src.dtype() == DType::BF16)) && src.numel() == s.end - s.begin,
                  "{}: tensor {} is {}, expected {} [{}]", files[s.file].path(), s.tensor, src.describe(),
                  moment ? "F32 or BF16" : "F32", s.end - s.begin);
      copy_into(ctx, src.view_flat(b - s.begin, {e - b}), dst.view_flat(b - begin, {e - b}));
      covered += e - b;
    }
    QUILL_CHECK(covered == end - begin, "{}: {} of {} elements [{}, {}) are missing (found {})", dir, kind, name, begin,
                end, covered);
  };
  const std::vector<Piece> pieces = master_pieces(params, /*replicas=*/true);
  Progress progress("loading checkpoint " + dir, ProgressOptions::counting(show_progress, "tensors"));
  const int64_t total = static_cast<int64_t>(pieces.size() + params.params().size());
  int64_t done = 0;
  for (const Piece& pc : pieces) {
    const Param& p = params.params()[pc.param];
    for (const char* kind : kKinds) fill(kind, p.name, pc.begin, pc.end, state_of(params, optimizer, kind, pc));
    progress.update(++done, total);
  }
  for (Param& p : params.params()) {
    progress.update(++done, total);
    if (p.trainable) continue;
    for (const SliceRun& r : slice_runs(p.shard))
      fill("fixed", p.name, r.global_offset, r.global_offset + r.length, p.value.view_flat(r.local_offset, {r.length}));
  }
  progress.finish();
  refresh_compute(params, ctx);
  optimizer.set_steps_taken(state.at("optimizer_steps").get<int64_t>());
  return state.at("next_step").get<int64_t>();
}

std::vector<std::pair<std::string, Tensor>> checkpoint_values(const std::string& root) {
  const std::optional<int64_t> latest = latest_iteration(root);
  const std::string dir = latest ? iteration_dir(root, *latest) : root;
  const nlohmann::json state = read_train_state(dir);
  const SavedIndex ix = read_saved_index(dir, state.at("world_size").get<int>());
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [key, pieces] : ix.pieces) {
    if (!key.starts_with("master/") && !key.starts_with("fixed/")) continue;
    int64_t n = 0;
    for (const SavedPiece& s : pieces) n = std::max(n, s.end);
    Tensor t = Tensor::zeros({n}, DType::F32);
    for (const SavedPiece& s : pieces)
      std::memcpy(t.data_as<float>() + s.begin, ix.files[s.file].tensor(s.tensor).data(),
                  static_cast<size_t>(s.end - s.begin) * sizeof(float));
    out.emplace_back(key.substr(key.find('/') + 1), t);
  }
  return out;
}

}  // namespace quill
