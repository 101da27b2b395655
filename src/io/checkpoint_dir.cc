#include "io/checkpoint_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "base/error.h"
#include "base/file_util.h"

namespace quill {

namespace fs = std::filesystem;

namespace {

std::string join(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

// A shard name from an index must stay inside the directory.
bool safe_relative(const std::string& name) {
  if (name.empty()) return false;
  fs::path p(name);
  if (p.is_absolute()) return false;
  for (const auto& part : p)
    if (part == "..") return false;
  return true;
}

void write_text_unrenamed(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  QUILL_CHECK(fd >= 0, "{}: cannot create ({})", path, std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      ::unlink(path.c_str());
      QUILL_FAIL("{}: write failed ({})", path, std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  bool ok = ::fsync(fd) == 0;
  int err = errno;
  ok = (::close(fd) == 0) && ok;
  if (!ok) {
    ::unlink(path.c_str());
    QUILL_FAIL("{}: fsync/close failed ({})", path, std::strerror(err));
  }
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

bool CheckpointDir::is_checkpoint_dir(const std::string& dir) {
  return fs::is_regular_file(join(dir, kSingleFile)) || fs::is_regular_file(join(dir, kIndexFile));
}

CheckpointDir CheckpointDir::open(const std::string& dir) {
  CheckpointDir c;
  c.state_ = std::make_shared<State>();
  State& s = *c.state_;
  s.dir = dir;
  QUILL_CHECK(fs::is_directory(dir), "{}: not a directory", dir);
  std::string single = join(dir, kSingleFile), index = join(dir, kIndexFile);
  if (fs::is_regular_file(single)) {
    auto file = std::make_unique<SafetensorsFile>(SafetensorsFile::open(single));
    for (const std::string& name : file->names()) s.weight_map[name] = kSingleFile;
    s.files[kSingleFile] = std::move(file);
  } else {
    QUILL_CHECK(fs::is_regular_file(index), "{}: no {} and no {}: not a Hugging Face checkpoint directory", dir,
                kSingleFile, kIndexFile);
    s.sharded = true;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_file(index));
    } catch (const nlohmann::json::exception& e) {
      QUILL_FAIL("{}: not valid JSON ({})", index, e.what());
    }
    QUILL_CHECK(j.is_object(), "{}: not a JSON object", index);
    auto wm = j.find("weight_map");
    QUILL_CHECK(wm != j.end() && wm->is_object(), "{}: missing or non-object weight_map", index);
    std::set<std::string> shards;
    for (auto& [name, file] : wm->items()) {
      QUILL_CHECK(file.is_string(), "{}: weight_map entry of tensor {} is not a string", index, name);
      std::string f = file.get<std::string>();
      QUILL_CHECK(safe_relative(f), "{}: weight_map entry of tensor {} names '{}', not a file inside the directory", index,
                  name, f);
      s.weight_map[name] = f;
      shards.insert(f);
    }
    for (const std::string& f : shards)
      QUILL_CHECK(fs::is_regular_file(join(dir, f)), "{}: shard {} listed in {} does not exist", dir, f, kIndexFile);
    auto meta = j.find("metadata");
    if (meta != j.end() && meta->is_object()) {
      auto ts = meta->find("total_size");
      if (ts != meta->end() && !ts->is_null()) {
        if (ts->is_number_unsigned()) {
          s.total_size = ts->get<uint64_t>();
        } else if (ts->is_number_float() && ts->get<double>() >= 0) {
          s.total_size = static_cast<uint64_t>(ts->get<double>());  // some writers emit 1.0e10-style numbers
        } else {
          QUILL_FAIL("{}: metadata.total_size is not a non-negative number", index);
        }
      }
    }
  }
  for (const auto& [name, file] : s.weight_map) s.names.push_back(name);
  return c;
}

const std::string& CheckpointDir::shard_of(const std::string& name) const {
  auto it = state_->weight_map.find(name);
  QUILL_CHECK(it != state_->weight_map.end(), "{}: tensor {} missing", state_->dir, name);
  return it->second;
}

const SafetensorsFile& CheckpointDir::file_of(const std::string& name) const {
  const std::string& shard = shard_of(name);
  std::lock_guard<std::mutex> lock(state_->mutex);
  auto it = state_->files.find(shard);
  if (it == state_->files.end()) {
    auto file = std::make_unique<SafetensorsFile>(SafetensorsFile::open(join(state_->dir, shard)));
    it = state_->files.emplace(shard, std::move(file)).first;
  }
  QUILL_CHECK(it->second->contains(name), "{}: tensor {} is listed in {} under {} but that shard does not hold it",
              state_->dir, name, kIndexFile, shard);
  return *it->second;
}

CheckpointShards plan_checkpoint_shards(const std::vector<SafetensorsItem>& items, uint64_t max_shard_bytes) {
  CheckpointShards plan;
  plan.items.emplace_back();
  uint64_t shard_bytes = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!plan.items.back().empty() && shard_bytes + items[i].nbytes > max_shard_bytes) {
      plan.items.emplace_back();
      shard_bytes = 0;
    }
    plan.items.back().push_back(i);
    shard_bytes += items[i].nbytes;
    plan.total_bytes += items[i].nbytes;
  }
  const size_t k = plan.items.size();
  for (size_t i = 0; i < k; ++i)
    plan.files.push_back(k == 1 ? std::string(CheckpointDir::kSingleFile)
                                : fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, k));
  return plan;
}

std::string checkpoint_index_json(const CheckpointShards& shards, const std::vector<SafetensorsItem>& items) {
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < shards.files.size(); ++i)
    for (size_t j : shards.items[i]) weight_map[items[j].name] = shards.files[i];
  nlohmann::json index = {{"metadata", {{"total_size", shards.total_bytes}}}, {"weight_map", std::move(weight_map)}};
  return index.dump(2) + "\n";
}

std::vector<std::string> write_checkpoint_dir(const std::string& dir, const std::vector<SafetensorsItem>& items,
                                              const CheckpointWriteOptions& options) {
  QUILL_CHECK(options.max_shard_bytes > 0, "{}: max_shard_bytes must be positive", dir);
  std::set<std::string> seen;
  for (const SafetensorsItem& item : items)
    QUILL_CHECK(seen.insert(item.name).second, "{}: tensor {} appears twice in the checkpoint", dir, item.name);

  const CheckpointShards plan = plan_checkpoint_shards(items, options.max_shard_bytes);
  const size_t k = plan.files.size();
  std::vector<std::string> files = plan.files;
  std::vector<std::vector<SafetensorsItem>> shards(k);
  for (size_t i = 0; i < k; ++i)
    for (size_t j : plan.items[i]) shards[i].push_back(items[j]);

  make_dirs(dir);
  const std::string suffix = ".tmp." + std::to_string(::getpid());
  std::vector<std::string> written;  // tmp paths
  try {
    for (size_t i = 0; i < k; ++i) {
      std::string tmp = join(dir, files[i]) + suffix;
      written.push_back(tmp);
      write_safetensors_unrenamed(tmp, join(dir, files[i]), shards[i], options.metadata);
    }
    if (k > 1) {
      files.push_back(CheckpointDir::kIndexFile);
      std::string tmp = join(dir, CheckpointDir::kIndexFile) + suffix;
      written.push_back(tmp);
      write_text_unrenamed(tmp, checkpoint_index_json(plan, items));
    }
  } catch (...) {
    for (const std::string& tmp : written) ::unlink(tmp.c_str());
    throw;
  }
  for (size_t i = 0; i < files.size(); ++i) {
    std::string final_path = join(dir, files[i]);
    if (::rename(written[i].c_str(), final_path.c_str()) != 0) {
      int err = errno;
      for (size_t j = i; j < written.size(); ++j) ::unlink(written[j].c_str());
      QUILL_FAIL("{}: rename failed ({})", final_path, std::strerror(err));
    }
  }
  // The other layout's entry file would shadow or confuse what was just written.
  std::error_code ec;
  fs::remove(join(dir, k == 1 ? CheckpointDir::kIndexFile : CheckpointDir::kSingleFile), ec);
  fsync_dir(dir);
  return files;
}

}  // namespace quill
