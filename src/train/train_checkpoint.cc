#include "train/train_checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
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

constexpr const char* kFormat = "quill-train-checkpoint-v3";
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

std::string shard_file(int rank, int size) { return fmt::format("shard-rank{}-of-{}.safetensors", rank, size); }

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

// One piece of this rank's shards: elements [begin, end) of a parameter (flattened), and where they
// lie in its bucket's shard.
struct Piece {
  size_t param, bucket;
  int64_t begin, end;  // in the parameter
  int64_t at;          // offset in the bucket's shard (master and moments)
};

std::vector<Piece> my_pieces(const ParamTable& params) {
  std::vector<Piece> out;
  for (size_t bi = 0; bi < params.buckets().size(); ++bi) {
    const ParamBucket& b = params.buckets()[bi];
    for (size_t i : b.members) {
      const Param& p = params.params()[i];
      const int64_t o = p.bucket_offset;
      const int64_t begin = std::max(o, b.shard_begin), end = std::min(o + shape_numel(p.shape), b.shard_end);
      if (begin < end) out.push_back({i, bi, begin - o, end - o, begin - b.shard_begin});
    }
  }
  return out;
}

const Tensor& state_of(const ParamTable& params, const AdamW& opt, const char* kind, size_t bucket) {
  if (std::string(kind) == "master") return params.buckets()[bucket].master;
  return std::string(kind) == "exp_avg" ? opt.exp_avg(bucket) : opt.exp_avg_sq(bucket);
}

nlohmann::json layout_json(const LayoutSpec& s) {
  return {{"tp", s.tp}, {"cp", s.cp}, {"dp", s.dp}, {"pp", s.pp}, {"ep", s.ep}, {"etp", s.etp}};
}

// Saved pieces of one tensor kind of one parameter: [begin, end) and where to read them.
struct SavedPiece {
  int64_t begin, end;
  size_t file;
  std::string tensor;
};

nlohmann::json read_state(const std::string& dir) {
  const std::string state_path = dir + "/state.json";
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(read_file(state_path));
  } catch (const nlohmann::json::exception& e) {
    QUILL_FAIL("{}: malformed JSON: {}", state_path, e.what());
  }
  QUILL_CHECK(state.value("format", "") == kFormat, "{}: not a quill training checkpoint of format {}", state_path,
              kFormat);
  return state;
}

// Every rank's file, and which of them holds which range of which tensor ("kind/name" -> pieces).
struct SavedIndex {
  std::vector<SafetensorsFile> files;
  std::map<std::string, std::vector<SavedPiece>> pieces;
};

SavedIndex read_index(const std::string& dir, int saved_world) {
  SavedIndex ix;
  for (int r = 0; r < saved_world; ++r) {
    ix.files.push_back(SafetensorsFile::open(dir + "/" + shard_file(r, saved_world)));
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

}  // namespace

void save_train_checkpoint(const std::string& dir, int64_t next_step, const ParamTable& params, const AdamW& optimizer,
                           const DeviceContext& ctx, const Layout& layout) {
  Comm* world = layout.world();
  const int rank = layout.rank(), size = world ? world->size() : 1;
  const std::string tmp = temp_name(dir, world, ctx);
  if (rank == 0) {
    fs::remove_all(tmp);
    make_dirs(tmp);
  }
  barrier(world);
  std::vector<std::pair<std::string, Tensor>> pieces;
  for (const Piece& pc : my_pieces(params)) {
    const std::string& name = params.params()[pc.param].name;
    for (const char* kind : kKinds)
      pieces.emplace_back(fmt::format("{}/{}/{}-{}", kind, name, pc.begin, pc.end),
                          to_host(ctx, state_of(params, optimizer, kind, pc.bucket).view_flat(pc.at, {pc.end - pc.begin})));
  }
  write_safetensors(tmp + "/" + shard_file(rank, size), pieces);
  if (rank == 0) {
    std::vector<std::pair<std::string, Tensor>> fixed;
    for (const Param& p : params.params())
      if (!p.trainable) fixed.emplace_back(p.name, to_host(ctx, p.value));
    write_safetensors(tmp + "/fixed.safetensors", fixed);
    nlohmann::json state;
    state["format"] = kFormat;
    state["next_step"] = next_step;
    state["optimizer_steps"] = optimizer.steps_taken();
    state["world_size"] = size;
    state["layout"] = layout_json(layout.spec());
    write_file_atomic(tmp + "/state.json", state.dump(2) + "\n");
  }
  barrier(world);
  // Swap in (io/dir_swap.h): a kill at any moment leaves a complete checkpoint that resume finds.
  if (rank == 0) swap_dir_into_place(tmp, dir);
  barrier(world);
}

int64_t load_train_checkpoint(const std::string& dir, ParamTable& params, AdamW& optimizer, const DeviceContext& ctx,
                              const Layout& layout) {
  const nlohmann::json state = read_state(dir);
  const std::string state_path = dir + "/state.json";
  nlohmann::json saved_layout = state.at("layout"), now = layout_json(layout.spec());
  saved_layout.erase("dp");
  now.erase("dp");
  QUILL_CHECK(saved_layout == now,
              "{}: saved under layout {}, resuming under {}: only the data-parallel size may change on resume",
              state_path, state.at("layout").dump(), layout_json(layout.spec()).dump());
  const SavedIndex ix = read_index(dir, state.at("world_size").get<int>());
  const std::vector<SafetensorsFile>& files = ix.files;
  for (const Piece& pc : my_pieces(params)) {
    const Param& p = params.params()[pc.param];
    for (const char* kind : kKinds) {
      const std::string key = fmt::format("{}/{}", kind, p.name);
      const Tensor dst = state_of(params, optimizer, kind, pc.bucket).view_flat(pc.at, {pc.end - pc.begin});
      int64_t covered = 0;
      const auto found = ix.pieces.find(key);
      if (found == ix.pieces.end()) QUILL_FAIL("{}: {} of {} is not in the checkpoint", dir, kind, p.name);
      for (const SavedPiece& s : found->second) {
        const int64_t begin = std::max(s.begin, pc.begin), end = std::min(s.end, pc.end);
        if (begin >= end) continue;
        const Tensor src = files[s.file].tensor(s.tensor);
        QUILL_CHECK(src.dtype() == DType::F32 && src.numel() == s.end - s.begin, "{}: tensor {} is {}, expected F32 [{}]",
                    files[s.file].path(), s.tensor, src.describe(), s.end - s.begin);
        ops::transfer(ctx, src.view_flat(begin - s.begin, {end - begin}), dst.view_flat(begin - pc.begin, {end - begin}));
        covered += end - begin;
      }
      QUILL_CHECK(covered == pc.end - pc.begin, "{}: {} of {} elements [{}, {}) are missing (found {})", dir, kind, p.name,
                  pc.begin, pc.end, covered);
    }
  }
  const SafetensorsFile fixed = SafetensorsFile::open(dir + "/fixed.safetensors");
  for (Param& p : params.params()) {
    if (p.trainable) continue;
    QUILL_CHECK(fixed.contains(p.name), "{}: tensor {} missing", fixed.path(), p.name);
    const Tensor src = fixed.tensor(p.name);
    QUILL_CHECK(src.shape() == p.value.shape() && src.dtype() == DType::F32, "{}: tensor {} is {}, expected {}",
                fixed.path(), p.name, src.describe(), p.value.describe());
    ops::transfer(ctx, src, p.value);
  }
  refresh_compute(params, ctx);
  optimizer.set_steps_taken(state.at("optimizer_steps").get<int64_t>());
  return state.at("next_step").get<int64_t>();
}

std::vector<std::pair<std::string, Tensor>> checkpoint_values(const std::string& dir) {
  const nlohmann::json state = read_state(dir);
  const SavedIndex ix = read_index(dir, state.at("world_size").get<int>());
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [key, pieces] : ix.pieces) {
    if (!key.starts_with("master/")) continue;
    int64_t n = 0;
    for (const SavedPiece& s : pieces) n = std::max(n, s.end);
    Tensor t = Tensor::zeros({n}, DType::F32);
    for (const SavedPiece& s : pieces)
      std::memcpy(t.data_as<float>() + s.begin, ix.files[s.file].tensor(s.tensor).data(),
                  static_cast<size_t>(s.end - s.begin) * sizeof(float));
    out.emplace_back(key.substr(7), t);
  }
  const SafetensorsFile fixed = SafetensorsFile::open(dir + "/fixed.safetensors");
  for (const std::string& name : fixed.names()) out.emplace_back(name, fixed.tensor(name).clone());
  return out;
}

}  // namespace quill
