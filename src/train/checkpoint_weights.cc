#include "train/checkpoint_weights.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "model/params.h"

namespace quill {

namespace fs = std::filesystem;

namespace {

// The kinds of saved pieces that hold weights: trainable tensors' masters, frozen tensors and buffers.
constexpr const char* kWeightKinds[] = {"master", "fixed"};

void close_all(std::vector<int>* fds) {
  for (int fd : *fds)
    if (fd >= 0) ::close(fd);
  delete fds;
}

}  // namespace

CheckpointWeights CheckpointWeights::open(const std::string& dir, const InklingConfig* expected_config,
                                          const CheckpointChecks& checks, Comm* world, const DeviceContext& ctx) {
  QUILL_CHECK(fs::is_directory(dir), "{}: no such directory", dir);
  QUILL_CHECK(fs::is_regular_file(dir + "/state.json"),
              "{}/state.json: missing: {} is not a quill training checkpoint (the directory `quill train --save` "
              "writes, holding state.json and shard-rank*-of-*.safetensors)",
              dir, dir);
  CheckpointWeights w;
  w.dir_ = dir;
  const nlohmann::json state = read_train_state(dir);
  const std::string state_path = dir + "/state.json";
  QUILL_CHECK(state.at("format") == kTrainCheckpointFormat,
              "{}: format {} was written before checkpoints carried their model's config and their files' hashes: it "
              "cannot be checked, and is not exported (resume it with this quill and save it again)",
              state_path, state.at("format").get<std::string>());
  QUILL_CHECK(state.contains("config") && state["config"].is_object(), "{}: no \"config\" object", state_path);
  w.config_ = expected_config ? *expected_config : parse_inkling_config(state["config"].dump(), state_path);
  CheckpointChecks c = checks;
  c.verify_rows = false;  // an export reads no rows
  check_state(state_path, state, CheckpointIdentity{config_to_hf_json(w.config_), state.value("rows_sha256", "")}, c);
  if (checks.verify_bytes) verify_shards(dir, state, world, world ? world->rank() : 0, ctx, checks.use);
  w.next_step_ = state.value("next_step", int64_t{0});
  w.index_ = std::make_shared<SavedIndex>(read_saved_index(dir, state.at("world_size").get<int>()));

  // Every weight piece belongs to a parameter of the model, and each parameter is covered once.
  std::map<std::string, int64_t> numel;
  for (const ParamDecl& d : param_decls(w.config_)) numel[d.name] = shape_numel(d.shape);
  for (const auto& [key, pieces] : w.index_->pieces) {
    const size_t slash = key.find('/');
    const std::string kind = key.substr(0, slash), name = key.substr(slash + 1);
    if (std::find(std::begin(kWeightKinds), std::end(kWeightKinds), kind) == std::end(kWeightKinds)) continue;
    const SafetensorsFile& first = w.index_->files[pieces.front().file];
    QUILL_CHECK(numel.count(name), "{}: holds {} of {}, which the model of {} has no tensor of", first.path(), kind,
                name, state_path);
    for (const SavedPiece& p : pieces) {
      const SafetensorsEntry& e = w.index_->files[p.file].entry(p.tensor);
      QUILL_CHECK(e.dtype_str == "F32" && p.end > p.begin && e.nbytes() == static_cast<size_t>(p.end - p.begin) * 4,
                  "{}: tensor {} is {} of {} bytes, expected F32 [{}]", w.index_->files[p.file].path(), p.tensor,
                  e.dtype_str, e.nbytes(), p.end - p.begin);
      w.by_param_[name].push_back(p);
    }
  }
  for (const auto& [name, n] : numel) {
    std::vector<SavedPiece>& pieces = w.by_param_[name];
    std::sort(pieces.begin(), pieces.end(), [](const SavedPiece& a, const SavedPiece& b) { return a.begin < b.begin; });
    int64_t at = 0;
    for (const SavedPiece& p : pieces) {
      QUILL_CHECK(p.begin == at, "{}: elements [{}, {}) of {} are {} (a torn checkpoint, or another model's)", dir,
                  std::min(at, p.begin), std::max(at, p.begin), name, p.begin > at ? "in no shard file" : "in two pieces");
      at = p.end;
    }
    QUILL_CHECK(at == n, "{}: elements [{}, {}) of {} are in no shard file (a torn checkpoint, or another model's)", dir,
                std::min(at, n), std::max(at, n), name);
  }
  w.fds_ = std::shared_ptr<std::vector<int>>(new std::vector<int>(w.index_->files.size(), -1), close_all);
  return w;
}

const std::vector<SavedPiece>& CheckpointWeights::pieces(const std::string& name) const {
  const auto it = by_param_.find(name);
  QUILL_CHECK(it != by_param_.end(), "{}: the checkpoint has no tensor {}", dir_, name);
  return it->second;
}

void CheckpointWeights::read(const SavedPiece& piece, int64_t begin, int64_t n, float* out) const {
  QUILL_CHECK(begin >= piece.begin && n >= 0 && begin + n <= piece.end, "{}: elements [{}, {}) are not in piece {}",
              dir_, begin, begin + n, piece.tensor);
  const SafetensorsFile& f = index_->files[piece.file];
  int& fd = (*fds_)[piece.file];
  if (fd < 0) {
    fd = ::open(f.path().c_str(), O_RDONLY | O_CLOEXEC);
    QUILL_CHECK(fd >= 0, "{}: cannot open ({})", f.path(), std::strerror(errno));
  }
  char* dst = reinterpret_cast<char*>(out);
  size_t left = static_cast<size_t>(n) * sizeof(float);
  uint64_t offset = f.data_offset() + f.entry(piece.tensor).begin + static_cast<uint64_t>(begin - piece.begin) * sizeof(float);
  while (left > 0) {
    const ssize_t r = ::pread(fd, dst, left, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    QUILL_CHECK(r > 0, "{}: read of tensor {} failed at byte {} ({})", f.path(), piece.tensor, offset,
                r == 0 ? "the file ends early" : std::strerror(errno));
    dst += r, left -= static_cast<size_t>(r), offset += static_cast<uint64_t>(r);
  }
}

}  // namespace quill
