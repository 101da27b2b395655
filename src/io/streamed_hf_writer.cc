#include "io/streamed_hf_writer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/file_util.h"
#include "io/dir_swap.h"
#include "model/whole_param.h"
#include "parallel/host_reduce.h"

namespace quill {

namespace fs = std::filesystem;

namespace {

void pwrite_all(int fd, const char* data, size_t n, uint64_t offset, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, data, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    QUILL_CHECK(w > 0, "{}: write failed at byte {} ({})", path, offset, std::strerror(errno));
    data += w, n -= static_cast<size_t>(w), offset += static_cast<uint64_t>(w);
  }
}

void pread_all(int fd, char* data, size_t n, uint64_t offset, const std::string& path) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, data, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    QUILL_CHECK(r >= 0, "{}: read failed at byte {} ({})", path, offset, std::strerror(errno));
    QUILL_CHECK(r > 0, "{}: ends at byte {}, before the bytes its header lists", path, offset);
    data += r, n -= static_cast<size_t>(r), offset += static_cast<uint64_t>(r);
  }
}

// A source checkpoint's tensor, copied byte for byte into [offset, + nbytes) of fd through a buffer
// of at most kHfExportStageBytes (not through its mapping, whose pages would stay resident).
void copy_tensor(const SafetensorsFile& src, const std::string& name, int fd, uint64_t offset, const std::string& path) {
  const SafetensorsEntry& e = src.entry(name);
  const int in = ::open(src.path().c_str(), O_RDONLY | O_CLOEXEC);
  QUILL_CHECK(in >= 0, "{}: cannot open ({})", src.path(), std::strerror(errno));
  try {
    std::vector<char> buf(std::min<size_t>(e.nbytes(), static_cast<size_t>(kHfExportStageBytes)));
    for (size_t done = 0; done < e.nbytes();) {
      const size_t m = std::min(buf.size(), e.nbytes() - done);
      pread_all(in, buf.data(), m, src.data_offset() + e.begin + done, src.path());
      pwrite_all(fd, buf.data(), m, offset + done, path);
      done += m;
    }
  } catch (...) {
    ::close(in);
    throw;
  }
  ::close(in);
}

}  // namespace

StreamedHfWriter::StreamedHfWriter(const HfExportPlan& plan, const std::string& out_dir, const InklingConfig& config,
                                   Comm* world, const DeviceContext& ctx, bool show_progress)
    : plan_(plan), world_(world), ctx_(ctx) {
  peak_.start();
  if (world_) rank_ = world_->rank(), size_ = world_->size();
  QUILL_CHECK(plan.dtype == DType::BF16 || plan.dtype == DType::F32, "export: dtype {} is not bf16 or fp32",
              dtype_name(plan.dtype));
  out_ = checked_hf_out_dir(out_dir, /*overwrite=*/true);
  QUILL_CHECK(nlohmann::json::accept(plan.config_json), "{}: the config.json text to write is not valid JSON", out_);
  for (const ParamDecl& d : param_decls(config)) {
    by_name_[d.name] = params_.size();
    params_.push_back(whole_param(d));
  }
  const HfFormat format = plan.format;
  const DType dtype = plan.dtype;
  const auto dtype_of = [format, dtype](const Param& p) { return hf_export_dtype(p, format, dtype); };
  list_ = hf_tensor_list(params_, format, dtype_of, plan.source_dir);
  shards_ = plan_checkpoint_shards(list_.items, plan.max_shard_bytes);

  // Each file's header, and from it each tensor's offset: a function of the tensor list alone.
  const std::map<std::string, std::string> metadata = CheckpointWriteOptions{}.metadata;
  item_file_.resize(list_.items.size());
  item_offset_.resize(list_.items.size());
  for (size_t f = 0; f < shards_.files.size(); ++f) {
    std::vector<SafetensorsItem> items;
    for (size_t j : shards_.items[f]) items.push_back(list_.items[j]);
    const std::string header = safetensors_header(items, metadata);
    std::string head(8, '\0');
    for (int i = 0; i < 8; ++i) head[static_cast<size_t>(i)] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
    head += header;
    uint64_t at = head.size();
    for (size_t j : shards_.items[f]) {
      item_file_[j] = f;
      item_offset_[j] = at;
      at += list_.items[j].nbytes;
    }
    headers_.push_back(std::move(head));
    file_bytes_.push_back(at);
  }
  placement_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::vector<CheckpointPart> parts = checkpoint_parts(params_[i], format);
    placement_[i].rows = std::make_unique<PartRowIndex>(params_[i], parts);
    placement_[i].items.resize(parts.size());
    placement_[i].dtype = dtype_of(params_[i]);
  }
  for (size_t j = 0; j < list_.origins.size(); ++j) {
    const HfTensorList::Origin& o = list_.origins[j];
    if (o.param != HfTensorList::kPassThrough) placement_[o.param].items[o.part] = j;
  }
  fds_.assign(shards_.files.size(), -1);
  pending_.reserve(static_cast<size_t>(kHfExportStageBytes));

  // Every rank writes into rank 0's temporary directory (its pid, agreed by a sum).
  Tensor pid = Tensor::zeros({1}, DType::I64);
  if (rank_ == 0) pid.data_as<int64_t>()[0] = ::getpid();
  all_reduce_host(world_, ctx_, pid);
  tmp_ = out_ + ".tmp-" + std::to_string(pid.data_as<int64_t>()[0]);
  if (rank_ == 0) {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
    make_dirs(tmp_);
  }
  barrier();
  create_my_files();
  barrier();  // every file exists at its full size before anyone writes into it
  progress_ = std::make_unique<Progress>(
      fmt::format("exporting {}{}", out_, size_ > 1 ? " (this rank's share)" : ""), ProgressOptions::in_bytes(show_progress));
}

StreamedHfWriter::~StreamedHfWriter() {
  for (int& f : fds_)
    if (f >= 0) ::close(f), f = -1;
  if (!finished_ && rank_ == 0) {  // a failed export leaves nothing behind (the others fail on their next write)
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }
}

void StreamedHfWriter::barrier() {
  if (world_ && size_ > 1) world_->barrier();
}

size_t StreamedHfWriter::param_index(const std::string& name, const std::string& what) const {
  const auto it = by_name_.find(name);
  QUILL_CHECK(it != by_name_.end(), "{}: tensor {} is not a parameter of this model", what, name);
  return it->second;
}

void StreamedHfWriter::create_my_files() {
  for (size_t f = static_cast<size_t>(rank_); f < shards_.files.size(); f += static_cast<size_t>(size_)) {
    const std::string path = tmp_ + "/" + shards_.files[f];
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    QUILL_CHECK(fd >= 0, "{}: cannot create ({})", path, std::strerror(errno));
    fds_[f] = fd;
    QUILL_CHECK(::ftruncate(fd, static_cast<off_t>(file_bytes_[f])) == 0, "{}: cannot size to {} bytes ({})", path,
                file_bytes_[f], std::strerror(errno));
    pwrite_all(fd, headers_[f].data(), headers_[f].size(), 0, path);
    for (size_t j : shards_.items[f]) {
      const HfTensorList::Origin& o = list_.origins[j];
      if (o.param == HfTensorList::kPassThrough)
        copy_tensor(list_.source->file_of(o.source_name), o.source_name, fd, item_offset_[j], path);
    }
  }
}

int StreamedHfWriter::fd(size_t file) {
  if (fds_[file] < 0) {
    const std::string path = tmp_ + "/" + shards_.files[file];
    fds_[file] = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    QUILL_CHECK(fds_[file] >= 0, "{}: cannot open ({})", path, std::strerror(errno));
  }
  return fds_[file];
}

void StreamedHfWriter::write(size_t param, int64_t begin, const float* values, int64_t n) {
  QUILL_CHECK(param < params_.size(), "export: parameter index {} out of range", param);
  const Param& p = params_[param];
  QUILL_CHECK(begin >= 0 && n >= 0 && begin + n <= shape_numel(p.shape),
              "export: elements [{}, {}) are outside {} ({} elements)", begin, begin + n, p.name, shape_numel(p.shape));
  const Placement& at = placement_[param];
  const int64_t cols = at.rows->cols();
  const size_t esize = dtype_size(at.dtype);
  // Row by row (a row is contiguous in the file; its neighbours may not be: interleaved gate/up).
  for (int64_t g = begin, end = begin + n; g < end;) {
    const int64_t row = g / cols, col = g % cols, len = std::min(end - g, cols - col);
    const PartRowIndex::FileRow fr = at.rows->of(row);
    const size_t item = at.items[fr.part];
    stage(item_file_[item], item_offset_[item] + static_cast<uint64_t>(fr.row * cols + col) * esize, values + (g - begin),
          len, at.dtype);
    g += len;
  }
  written_elements_ += n;
  progress_->update(written_elements_ * static_cast<int64_t>(dtype_size(plan_.dtype)),
                    expected_ * static_cast<int64_t>(dtype_size(plan_.dtype)));
}

void StreamedHfWriter::stage(size_t file, uint64_t offset, const float* values, int64_t n, DType dtype) {
  const size_t esize = dtype_size(dtype), cap = static_cast<size_t>(kHfExportStageBytes);
  while (n > 0) {
    if (!pending_.empty() &&
        (file != pending_file_ || offset != pending_offset_ + pending_.size() || pending_.size() + esize > cap))
      flush();
    if (pending_.empty()) pending_file_ = file, pending_offset_ = offset;
    const int64_t m = std::min<int64_t>(n, static_cast<int64_t>((cap - pending_.size()) / esize));
    const size_t from = pending_.size();
    pending_.resize(from + static_cast<size_t>(m) * esize);
    char* dst = pending_.data() + from;
    if (dtype == DType::F32) {
      std::memcpy(dst, values, static_cast<size_t>(m) * esize);
    } else {
      for (int64_t i = 0; i < m; ++i) {
        const uint16_t b = f32_to_bf16(values[i]);  // round to nearest even, as save_hf_checkpoint does
        std::memcpy(dst + 2 * i, &b, 2);
      }
    }
    values += m, n -= m, offset += static_cast<uint64_t>(m) * esize;
  }
}

void StreamedHfWriter::flush() {
  if (pending_.empty()) return;
  pwrite_all(fd(pending_file_), pending_.data(), pending_.size(), pending_offset_, tmp_ + "/" + shards_.files[pending_file_]);
  written_bytes_ += pending_.size();
  pending_.clear();
}

void StreamedHfWriter::sync_and_close() {
  for (size_t f = 0; f < fds_.size(); ++f) {
    if (fds_[f] < 0) continue;
    const std::string path = tmp_ + "/" + shards_.files[f];
    const bool synced = ::fsync(fds_[f]) == 0;
    const int err = errno;
    const bool closed = ::close(fds_[f]) == 0;
    fds_[f] = -1;
    QUILL_CHECK(synced && closed, "{}: fsync/close failed ({})", path, std::strerror(synced ? errno : err));
  }
}

SaveReport StreamedHfWriter::finish() {
  flush();
  sync_and_close();
  int64_t model = 0;
  for (const Param& p : params_) model += shape_numel(p.shape);
  // Every element once: the ranks' shares must add up to the model (a hole would read as zeros).
  const double total = sum_over(world_, ctx_, static_cast<double>(written_elements_));
  QUILL_CHECK(total == static_cast<double>(model),
              "{}: the ranks wrote {} elements of the model's {}: their shares do not cover it once; nothing was put "
              "in place",
              out_, static_cast<int64_t>(total), model);
  if (rank_ == 0) {
    if (shards_.sharded())
      write_file_atomic(tmp_ + "/" + CheckpointDir::kIndexFile, checkpoint_index_json(shards_, list_.items));
    write_file_atomic(tmp_ + "/config.json", plan_.config_json);
    if (list_.source) copy_hf_side_files(plan_.source_dir, tmp_);
    swap_dir_into_place(tmp_, out_);
  }
  // Each rank's peak, onto every rank (one-hot vectors summed).
  Tensor added = Tensor::zeros({size_}, DType::I64);
  added.data_as<int64_t>()[rank_] = peak_.added_bytes();
  all_reduce_host(world_, ctx_, added);
  finished_ = true;
  progress_->finish();
  SaveReport report = list_.report;
  report.host_bytes_added_per_rank.assign(added.data_as<int64_t>(), added.data_as<int64_t>() + size_);
  return report;
}

}  // namespace quill
