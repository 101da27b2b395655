// NcclComm and its watchdog. See nccl_comm.h for the contract.
#include "comm/nccl/nccl_comm.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "base/error.h"
#include "comm/collective_ledger.h"
#include "comm/comm_checks.h"
#include "comm/cuda/event_join.h"
#include "comm/mpi_comm.h"

namespace quill {

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    case DType::U8:
    case DType::Bool: return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Sum ? ncclSum : ncclMax; }

int mpi_world_rank_or(int fallback) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return fallback;
  int r = fallback;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

std::string count_str(const Tensor& t) { return fmt::format("{} {}", t.numel(), dtype_name(t.dtype())); }

}  // namespace

// Follows every NCCL operation of a family of communicators (one made by init and those split
// from it): host calls (init, split, destroy) from begin() to end_host(), device work until an
// event recorded after it completes. Polls asynchronous NCCL errors. On a timeout or an error it
// ends the job with a message; it never lets a rank wait forever.
class NcclWatchdog {
 public:
  NcclWatchdog(int device, double timeout_s) : device_(device), timeout_s_(timeout_s), thread_([this] { loop(); }) {}

  ~NcclWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    for (auto& [ticket, p] : pending_)
      if (p.event) cudaEventDestroy(p.event);
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  }

  // `when`: the training step it belongs to (" during step 3"), for the message of a timeout.
  uint64_t begin(std::string what, std::string when = "") {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t ticket = next_++;
    pending_[ticket] = Pending{std::move(what), std::move(when), Clock::now(), nullptr};
    return ticket;
  }

  void end_host(uint64_t ticket) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.erase(ticket);
  }

  // The host call of `ticket` returned; its device work is done when the stream passes here.
  void enqueued(uint64_t ticket, cudaStream_t stream, const std::string& who) {
    cudaEvent_t event = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_events_.empty()) {
        event = free_events_.back();
        free_events_.pop_back();
      }
    }
    cudaError_t err = event ? cudaSuccess : cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (err == cudaSuccess) err = cudaEventRecord(event, stream);
    if (err != cudaSuccess) fatal(fmt::format("{}: cudaEventRecord after an NCCL call failed: {}", who, cudaGetErrorString(err)));
    std::lock_guard<std::mutex> lock(mu_);
    pending_[ticket].event = event;
  }

  void watch(ncclComm_t comm, std::string who) {
    std::lock_guard<std::mutex> lock(mu_);
    comms_.emplace_back(comm, std::move(who));
  }

  void unwatch(ncclComm_t comm) {
    std::lock_guard<std::mutex> lock(mu_);
    comms_.erase(std::remove_if(comms_.begin(), comms_.end(), [&](const auto& c) { return c.first == comm; }), comms_.end());
  }

  // Prints the message, aborts the NCCL communicators (bounded wait), and ends every rank.
  [[noreturn]] void fatal(const std::string& message) {
    if (fatal_started_.exchange(true)) {
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // the first caller ends the process
    }
    std::fprintf(stderr, "quill: %s; aborting NCCL and stopping every rank\n", message.c_str());
    std::fflush(stderr);
    std::vector<ncclComm_t> comms;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& c : comms_) comms.push_back(c.first);
    }
    auto aborted = std::make_shared<std::atomic<bool>>(false);
    std::thread([comms, aborted] {
      for (ncclComm_t c : comms) ncclCommAbort(c);
      *aborted = true;
    }).detach();
    for (int i = 0; i < 100 && !*aborted; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    MpiComm::abort_job("");  // the message is out already
  }

 private:
  struct Pending {
    std::string what, when;
    Clock::time_point start;
    cudaEvent_t event;  // null while the host call runs
  };

  void loop() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(20));
      if (stop_) break;
      std::string problem;
      const auto now = Clock::now();
      for (auto it = pending_.begin(); it != pending_.end() && problem.empty();) {
        Pending& p = it->second;
        if (p.event) {
          const cudaError_t q = cudaEventQuery(p.event);
          if (q == cudaSuccess) {
            free_events_.push_back(p.event);
            it = pending_.erase(it);
            continue;
          }
          if (q != cudaErrorNotReady) problem = fmt::format("{}: CUDA error while it ran: {}", p.what, cudaGetErrorString(q));
        }
        const double waited = std::chrono::duration<double>(now - p.start).count();
        if (problem.empty() && waited > timeout_s_)
          problem = fmt::format("{} did not complete within {} s{} (a rank of the communicator never reached it, is "
                                "stuck elsewhere, or died)", p.what, timeout_s_, p.when);
        ++it;
      }
      for (const auto& [comm, who] : comms_) {
        if (!problem.empty()) break;
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(comm, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
          const std::string during = pending_.empty() ? "" : " during " + pending_.begin()->second.what;
          problem = fmt::format("{}: NCCL reported an asynchronous error{}: {} ({})", who, during, ncclGetErrorString(async),
                                ncclGetLastError(comm));
        }
      }
      if (!problem.empty()) {
        lock.unlock();
        fatal(problem);
      }
    }
  }

  int device_;
  double timeout_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<bool> fatal_started_{false};
  uint64_t next_ = 1;
  std::map<uint64_t, Pending> pending_;
  std::vector<std::pair<ncclComm_t, std::string>> comms_;
  std::vector<cudaEvent_t> free_events_;
  std::thread thread_;  // last: starts after the members it uses
};

bool ranks_share_a_gpu(Comm& bootstrap) {
  QUILL_CHECK(bootstrap.device() == Device::CPU, "ranks_share_a_gpu: '{}' must move CPU tensors", bootstrap.name());
  // "host/pci-bus-id": bus ids repeat across nodes, so the host name is part of the key.
  constexpr int64_t kIdBytes = 160;
  int device = 0;
  QUILL_CHECK(cudaGetDevice(&device) == cudaSuccess, "ranks_share_a_gpu: no current CUDA device");
  char bus[32] = {};
  QUILL_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus) - 1, device) == cudaSuccess,
              "ranks_share_a_gpu: cudaDeviceGetPCIBusId failed for device {}", device);
  char host[128] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string key = std::string(host) + "/" + bus;
  Tensor mine = Tensor::zeros({kIdBytes}, DType::U8);
  std::memcpy(mine.data(), key.data(), std::min<size_t>(key.size(), kIdBytes - 1));
  Tensor all = Tensor::empty({kIdBytes * bootstrap.size()}, DType::U8);
  bootstrap.all_gather(mine, all);
  std::set<std::string> ids;
  for (int r = 0; r < bootstrap.size(); ++r) ids.insert(std::string(static_cast<const char*>(all.data()) + r * kIdBytes));
  return static_cast<int>(ids.size()) < bootstrap.size();
}

int select_cuda_device(int local_rank, int local_size, bool share) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  QUILL_CHECK(err == cudaSuccess && count > 0, "rank with local rank {}: no CUDA device is visible ({})", local_rank,
              err == cudaSuccess ? "device count 0" : cudaGetErrorString(err));
  // One GPU visible: the launcher gave each rank its own (CUDA_VISIBLE_DEVICES per task), or the
  // ranks share it.
  const int device = count == 1 ? 0 : local_rank % count;
  QUILL_CHECK(share || count == 1 || local_size <= count,
              "{} ranks run on this node but only {} GPUs are visible; run one rank per GPU (or --comm mpi)", local_size,
              count);
  const cudaError_t set = cudaSetDevice(device);
  QUILL_CHECK(set == cudaSuccess, "cudaSetDevice({}) failed for local rank {}: {}", device, local_rank, cudaGetErrorString(set));
  return device;
}

std::unique_ptr<NcclComm> NcclComm::create(Comm& bootstrap, cudaStream_t stream, CommOptions options, std::string name,
                                           cudaStream_t comm_stream) {
  QUILL_CHECK(bootstrap.device() == Device::CPU, "NcclComm::create: the bootstrap communicator '{}' must move CPU tensors",
              bootstrap.name());
  Tensor id_bytes = Tensor::zeros({static_cast<int64_t>(sizeof(ncclUniqueId))}, DType::U8);
  if (bootstrap.rank() == 0) {
    ncclUniqueId id;
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
      MpiComm::abort_job(fmt::format("rank 0 of comm '{}': ncclGetUniqueId failed: {}", bootstrap.name(), ncclGetErrorString(r)));
    std::memcpy(id_bytes.data(), &id, sizeof(id));
  }
  bootstrap.broadcast(id_bytes, 0);
  ncclUniqueId id;
  std::memcpy(&id, id_bytes.data(), sizeof(id));
  return std::make_unique<NcclComm>(id, bootstrap.size(), bootstrap.rank(), stream, options, std::move(name), comm_stream);
}

NcclComm::Streams::~Streams() {
  if (owned && comm) cudaStreamDestroy(comm);
}

NcclComm::NcclComm(const ncclUniqueId& id, int size, int rank, cudaStream_t stream, CommOptions options, std::string name,
                   cudaStream_t comm_stream)
    : stream_(stream), options_(options), name_(std::move(name)), rank_(rank), size_(size),
      streams_(std::make_shared<Streams>()) {
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  QUILL_CHECK(cudaGetDevice(&device_) == cudaSuccess, "NcclComm '{}': no current CUDA device", name_);
  streams_->comm = comm_stream;
  if (!comm_stream) {
    QUILL_CHECK(cudaStreamCreateWithFlags(&streams_->comm, cudaStreamNonBlocking) == cudaSuccess,
                "NcclComm '{}': cannot create its communication stream", name_);
    streams_->owned = true;
  }
  watchdog_ = std::make_shared<NcclWatchdog>(device_, options_.timeout_s);
  // Default (blocking) configuration: calls return once enqueued; the watchdog bounds waits.
  const std::string what = fmt::format("{}: NCCL init of {} ranks on GPU {}", who(), size, device_);
  const uint64_t ticket = watchdog_->begin(what);
  const ncclResult_t r = ncclCommInitRank(&comm_, size, id, rank);
  watchdog_->end_host(ticket);
  if (r != ncclSuccess) watchdog_->fatal(fmt::format("{} failed: {}", what, ncclGetErrorString(r)));
  init_common();
}

NcclComm::NcclComm(ncclComm_t comm, cudaStream_t stream, CommOptions options, std::string name,
                   std::shared_ptr<NcclWatchdog> watchdog, std::shared_ptr<Streams> streams)
    : comm_(comm), stream_(stream), options_(options), name_(std::move(name)), watchdog_(std::move(watchdog)),
      streams_(std::move(streams)) {
  cudaGetDevice(&device_);
  init_common();
}

void NcclComm::init_common() {
  ncclCommUserRank(comm_, &rank_);
  ncclCommCount(comm_, &size_);
  who_ = fmt::format("rank {} (rank {} of {} in comm '{}')", mpi_world_rank_or(rank_), rank_, size_, name_);
  const cudaError_t err = cudaMalloc(&scratch_, sizeof(int32_t));
  if (err != cudaSuccess) watchdog_->fatal(fmt::format("{}: cudaMalloc of the barrier word failed: {}", who(), cudaGetErrorString(err)));
  watchdog_->watch(comm_, who());
}

NcclComm::~NcclComm() {
  if (!comm_) return;
  watchdog_->unwatch(comm_);
  // Finalize waits for this communicator's outstanding work; the watchdog bounds the wait.
  const uint64_t ticket = watchdog_->begin(fmt::format("{}: NCCL finalize", who()));
  ncclResult_t r = ncclCommFinalize(comm_);
  if (r == ncclSuccess) r = ncclCommDestroy(comm_);
  else ncclCommAbort(comm_);
  watchdog_->end_host(ticket);
  if (r != ncclSuccess) std::fprintf(stderr, "quill: %s: NCCL finalize failed: %s\n", who().c_str(), ncclGetErrorString(r));
  cudaFree(scratch_);
}

std::string NcclComm::who() const {
  if (!who_.empty()) return who_;
  return fmt::format("rank {} (rank {} of {} in comm '{}')", mpi_world_rank_or(rank_), rank_, size_, name_);
}

void NcclComm::fail(const std::string& message) const {
  const std::string full = who() + ": " + message;
  if (options_.on_error == CommOptions::OnError::Throw) throw Error(full);
  watchdog_->fatal(full);
}

void NcclComm::check(const std::string& problem) const {
  if (!problem.empty()) fail(problem);
}

template <typename F>
cudaEvent_t NcclComm::launch(const std::string& what, const char* op, int64_t payload_bytes, int64_t bus_bytes,
                             F&& enqueue) {
  const std::string full = fmt::format("{}: NCCL {}", who(), what);
  join(streams_->comm, record_event(stream_));  // after the compute stream's work so far
  CommSpanListener* listener = timeline_ ? timeline_->listener() : nullptr;
  if (listener) listener->span_begin(streams_->comm, CommSpanInfo{name_, op, size_, payload_bytes, bus_bytes});
  const uint64_t ticket = watchdog_->begin(full, options_.step_mark ? " " + options_.step_mark->describe() : "");
  const ncclResult_t r = enqueue();
  if (r != ncclSuccess)
    watchdog_->fatal(fmt::format("{} failed: {} ({})", full, ncclGetErrorString(r), ncclGetLastError(comm_)));
  watchdog_->enqueued(ticket, streams_->comm, who());
  if (listener) listener->span_end(streams_->comm);
  return record_event(streams_->comm);
}

template <typename F>
void NcclComm::run(const std::string& what, const char* op, int64_t payload_bytes, int64_t bus_bytes, F&& enqueue) {
  join(stream_, launch(what, op, payload_bytes, bus_bytes, std::forward<F>(enqueue)));
}

namespace {
// A GPU tensor on another GPU than the communicator's is a bug worth naming.
std::string on_device(const Tensor& t, int device, const char* op) {
  if (!t.defined() || t.nbytes() == 0) return "";
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, t.data()) != cudaSuccess) {
    cudaGetLastError();
    return fmt::format("{}: {} is not CUDA memory", op, t.describe());
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
    return fmt::format("{}: {} is not device memory", op, t.describe());
  if (attr.device != device)
    return fmt::format("{}: {} lives on GPU {}, but the communicator is on GPU {}", op, t.describe(), attr.device, device);
  return "";
}
}  // namespace

void NcclComm::all_reduce(const Tensor& t, ReduceOp op) {
  check(comm_checks::tensor(t, Device::CUDA, "all_reduce", ""));
  check(on_device(t, device_, "all_reduce"));
  check(comm_checks::reducible(t, "all_reduce"));
  const int64_t bytes = static_cast<int64_t>(t.nbytes());
  run(fmt::format("all_reduce of {} ({})", count_str(t), comm_checks::reduce_name(op)), "all_reduce", bytes,
      ring_all_reduce_bytes(bytes, size_), [&] {
    return ncclAllReduce(t.data(), t.data(), t.numel(), nccl_type(t.dtype()), nccl_op(op), comm_, streams_->comm);
  });
}

std::unique_ptr<CommHandle> NcclComm::start_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  check(comm_checks::tensor(in, Device::CUDA, "reduce_scatter", "input"));
  check(comm_checks::tensor(out, Device::CUDA, "reduce_scatter", "output"));
  check(on_device(in, device_, "reduce_scatter"));
  check(on_device(out, device_, "reduce_scatter"));
  bool in_place = false;  // NCCL handles out == in's block rank itself
  check(comm_checks::reduce_scatter(in, out, size_, rank_, &in_place));
  const int64_t whole = static_cast<int64_t>(out.nbytes()) * size_;  // nccl-tests' size: the whole input
  cudaEvent_t done = launch(fmt::format("reduce_scatter of {} ({})", count_str(out), comm_checks::reduce_name(op)),
                            "reduce_scatter", whole, ring_gather_bytes(whole, size_), [&] {
    return ncclReduceScatter(in.data(), out.data(), out.numel(), nccl_type(in.dtype()), nccl_op(op), comm_, streams_->comm);
  });
  return std::make_unique<EventJoinHandle>(stream_, done);
}

void NcclComm::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  start_reduce_scatter(in, out, op)->wait();
}

std::unique_ptr<CommHandle> NcclComm::start_all_gather(const Tensor& in, const Tensor& out) {
  check(comm_checks::tensor(in, Device::CUDA, "all_gather", "input"));
  check(comm_checks::tensor(out, Device::CUDA, "all_gather", "output"));
  check(on_device(in, device_, "all_gather"));
  check(on_device(out, device_, "all_gather"));
  bool in_place = false;
  check(comm_checks::all_gather(in, out, size_, rank_, &in_place));
  const int64_t whole = static_cast<int64_t>(in.nbytes()) * size_;  // nccl-tests' size: the whole output
  cudaEvent_t done = launch(fmt::format("all_gather of {}", count_str(in)), "all_gather", whole,
                            ring_gather_bytes(whole, size_), [&] {
    return ncclAllGather(in.data(), out.data(), in.numel(), nccl_type(in.dtype()), comm_, streams_->comm);
  });
  return std::make_unique<EventJoinHandle>(stream_, done);
}

void NcclComm::all_gather(const Tensor& in, const Tensor& out) { start_all_gather(in, out)->wait(); }

std::unique_ptr<CommHandle> NcclComm::start_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts,
                                                       const Tensor& out, const std::vector<int64_t>& recv_counts) {
  check(comm_checks::tensor(in, Device::CUDA, "all_to_all", "input"));
  check(comm_checks::tensor(out, Device::CUDA, "all_to_all", "output"));
  check(on_device(in, device_, "all_to_all"));
  check(on_device(out, device_, "all_to_all"));
  check(comm_checks::all_to_all(in, send_counts, out, recv_counts, size_, name_));
  const size_t es = dtype_size(in.dtype());
  const ncclDataType_t type = nccl_type(in.dtype());
  int64_t send_total = 0, recv_total = 0;
  for (int r = 0; r < size_; ++r) send_total += send_counts[r], recv_total += recv_counts[r];
  // The bus carries what goes to the other ranks (nccl-tests' (p-1)/p of the send total when even).
  const int64_t to_others = (send_total - send_counts[static_cast<size_t>(rank_)]) * static_cast<int64_t>(es);
  cudaEvent_t done = launch(fmt::format("all_to_all of {} (sending {} elements, receiving {})", dtype_name(in.dtype()), send_total, recv_total),
                            "all_to_all", send_total * static_cast<int64_t>(es), to_others, [&] {
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) return r;
    auto* src = static_cast<char*>(in.data());
    auto* dst = static_cast<char*>(out.data());
    int64_t so = 0, ro = 0;
    for (int p = 0; p < size_ && r == ncclSuccess; ++p) {
      if (send_counts[p] > 0) r = ncclSend(src + so * es, send_counts[p], type, p, comm_, streams_->comm);
      if (r == ncclSuccess && recv_counts[p] > 0) r = ncclRecv(dst + ro * es, recv_counts[p], type, p, comm_, streams_->comm);
      so += send_counts[p];
      ro += recv_counts[p];
    }
    const ncclResult_t end = ncclGroupEnd();
    return r != ncclSuccess ? r : end;
  });
  return std::make_unique<EventJoinHandle>(stream_, done);
}

void NcclComm::all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                          const std::vector<int64_t>& recv_counts) {
  start_all_to_all(in, send_counts, out, recv_counts)->wait();
}

void NcclComm::broadcast(const Tensor& t, int root) {
  check(comm_checks::tensor(t, Device::CUDA, "broadcast", ""));
  check(on_device(t, device_, "broadcast"));
  check(comm_checks::peer(root, size_, name_, "broadcast"));
  const int64_t bytes = static_cast<int64_t>(t.nbytes());
  run(fmt::format("broadcast of {} from root {}", count_str(t), root), "broadcast", bytes, size_ > 1 ? bytes : 0, [&] {
    return ncclBroadcast(t.data(), t.data(), t.numel(), nccl_type(t.dtype()), root, comm_, streams_->comm);
  });
}

void NcclComm::send(const Tensor& t, int peer) {
  check(comm_checks::tensor(t, Device::CUDA, "send", ""));
  check(on_device(t, device_, "send"));
  check(comm_checks::peer(peer, size_, name_, "send"));
  if (peer == rank_) fail("send: a rank cannot send to itself with a lone send (use send_recv)");
  const int64_t bytes = static_cast<int64_t>(t.nbytes());
  run(fmt::format("send of {} to rank {}", count_str(t), peer), "send", bytes, bytes,
      [&] { return ncclSend(t.data(), t.numel(), nccl_type(t.dtype()), peer, comm_, streams_->comm); });
}

void NcclComm::recv(const Tensor& t, int peer) {
  check(comm_checks::tensor(t, Device::CUDA, "recv", ""));
  check(on_device(t, device_, "recv"));
  check(comm_checks::peer(peer, size_, name_, "recv"));
  if (peer == rank_) fail("recv: a rank cannot receive from itself with a lone recv (use send_recv)");
  const int64_t bytes = static_cast<int64_t>(t.nbytes());
  run(fmt::format("recv of {} from rank {}", count_str(t), peer), "recv", bytes, bytes,
      [&] { return ncclRecv(t.data(), t.numel(), nccl_type(t.dtype()), peer, comm_, streams_->comm); });
}

void NcclComm::send_recv(const Tensor& send, int dst, const Tensor& recv, int src) {
  start_send_recv(send, dst, recv, src)->wait();
}

std::unique_ptr<CommHandle> NcclComm::start_send_recv(const Tensor& send, int dst, const Tensor& recv, int src) {
  check(comm_checks::tensor(send, Device::CUDA, "send_recv", "send"));
  check(comm_checks::tensor(recv, Device::CUDA, "send_recv", "receive"));
  check(on_device(send, device_, "send_recv"));
  check(on_device(recv, device_, "send_recv"));
  check(comm_checks::peer(dst, size_, name_, "send_recv"));
  check(comm_checks::peer(src, size_, name_, "send_recv"));
  if (comm_checks::overlaps(send, recv)) fail("send_recv: send and receive tensors overlap");
  const int64_t bytes = static_cast<int64_t>(send.nbytes());
  cudaEvent_t done = launch(fmt::format("send_recv ({} to rank {}, {} from rank {})", count_str(send), dst,
                                        count_str(recv), src),
                            "send_recv", bytes, dst == rank_ ? 0 : bytes, [&] {
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) return r;
    r = ncclSend(send.data(), send.numel(), nccl_type(send.dtype()), dst, comm_, streams_->comm);
    if (r == ncclSuccess) r = ncclRecv(recv.data(), recv.numel(), nccl_type(recv.dtype()), src, comm_, streams_->comm);
    const ncclResult_t end = ncclGroupEnd();
    return r != ncclSuccess ? r : end;
  });
  return std::make_unique<EventJoinHandle>(stream_, done);
}

void NcclComm::barrier() {
  run("barrier", "barrier", 4, ring_all_reduce_bytes(4, size_), [&] { return ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, streams_->comm); });
  const cudaError_t err = cudaStreamSynchronize(streams_->comm);  // the watchdog bounds this wait
  if (err != cudaSuccess) watchdog_->fatal(fmt::format("{}: barrier: {}", who(), cudaGetErrorString(err)));
}

std::unique_ptr<Comm> NcclComm::split(const std::vector<int>& group, const std::string& name) {
  return split_with(group, name, streams_);
}

std::unique_ptr<Comm> NcclComm::split_isolated(const std::vector<int>& group, const std::string& name) {
  auto own = std::make_shared<Streams>();
  const cudaError_t err = cudaStreamCreateWithFlags(&own->comm, cudaStreamNonBlocking);
  if (err != cudaSuccess)
    watchdog_->fatal(fmt::format("{}: cannot create the communication stream of '{}': {}", who(), name, cudaGetErrorString(err)));
  own->owned = true;
  return split_with(group, name, std::move(own));
}

std::unique_ptr<Comm> NcclComm::split_with(const std::vector<int>& group, const std::string& name,
                                           std::shared_ptr<Streams> streams) {
  check(comm_checks::split(group, rank_, size_, name_, name));
  const int color = *std::min_element(group.begin(), group.end());
  const int key = static_cast<int>(std::find(group.begin(), group.end(), rank_) - group.begin());
  ncclComm_t sub = nullptr;
  const std::string what = fmt::format("{}: NCCL split into '{}' {}", who(), name, comm_checks::list_str(group));
  const uint64_t ticket = watchdog_->begin(what);
  const ncclResult_t r = ncclCommSplit(comm_, color, key, &sub, /*config: the parent's*/ nullptr);
  watchdog_->end_host(ticket);
  if (r != ncclSuccess || !sub)
    watchdog_->fatal(fmt::format("{} failed: {} ({})", what, ncclGetErrorString(r), ncclGetLastError(comm_)));
  std::unique_ptr<NcclComm> comm(new NcclComm(sub, stream_, options_, name, watchdog_, std::move(streams)));
  comm->timeline_ = timeline_;
  if (comm->size_ != static_cast<int>(group.size()) || group[comm->rank_] != rank_)
    watchdog_->fatal(fmt::format("{}: the new communicator has {} ranks with this rank at {}; every member must pass the "
                                 "same list", what, comm->size_, comm->rank_));
  return comm;
}

}  // namespace quill
