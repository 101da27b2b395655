// MpiComm: collectives as nonblocking MPI calls waited for with a deadline; arguments checked
// locally and (with check_args) across ranks before any data moves.
#include "comm/mpi_comm.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <thread>

#include "base/error.h"
#include "comm/comm_checks.h"

namespace quill {

namespace {

enum class OpCode : int64_t { AllReduce = 1, ReduceScatter, AllGather, AllToAll, Broadcast, Barrier, Split };

const char* op_code_name(OpCode op) {
  switch (op) {
    case OpCode::AllReduce: return "all_reduce";
    case OpCode::ReduceScatter: return "reduce_scatter";
    case OpCode::AllGather: return "all_gather";
    case OpCode::AllToAll: return "all_to_all";
    case OpCode::Broadcast: return "broadcast";
    case OpCode::Barrier: return "barrier";
    case OpCode::Split: return "split";
  }
  return "?";
}

// The MPI type that moves (not reduces) elements of `d`.
MPI_Datatype move_type(DType d) {
  switch (d) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::BF16:
    case DType::F16: return MPI_UINT16_T;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::U8:
    case DType::Bool: return MPI_UINT8_T;
  }
  return MPI_BYTE;
}

// BF16/F16 have no MPI arithmetic: they are reduced in fp32 (one rounding, at the end).
bool reduce_via_f32(DType d) { return d == DType::BF16 || d == DType::F16; }

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Sum ? MPI_SUM : MPI_MAX; }

std::string mpi_error_string(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", rc);
  return std::string(text, len);
}

// Writes `src` (any float dtype) into `dst`'s elements, converting to dst's dtype.
void store_converted(const Tensor& src, const Tensor& dst) {
  Tensor c = convert_dtype(src, dst.dtype());
  if (dst.nbytes()) std::memcpy(dst.data(), c.data(), dst.nbytes());
}

using comm_checks::list_str;
using comm_checks::reduce_name;

}  // namespace

// What one rank passed to a collective; every rank must pass the same.
struct MpiComm::Signature {
  int64_t op = 0, dtype = -1, count = 0, root = -1, reduce = -1;

  std::string str() const {
    std::string s = op_code_name(static_cast<OpCode>(op));
    if (dtype >= 0) s += fmt::format(" of {} {}", count, dtype_name(static_cast<DType>(dtype)));
    if (reduce >= 0) s += fmt::format(" ({})", reduce_name(static_cast<ReduceOp>(reduce)));
    if (root >= 0) s += fmt::format(" from root {}", root);
    return s;
  }
  bool operator==(const Signature&) const = default;
};

MpiComm::MpiComm(MPI_Comm comm, std::string name, CommOptions options) : name_(std::move(name)), options_(options) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  QUILL_CHECK(initialized && !finalized, "MpiComm '{}': MPI is not initialised (call init_distributed() first)", name_);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  check_rc(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
  check_rc(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiComm::~MpiComm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

void MpiComm::abort_job(const std::string& message) {
  if (!message.empty()) std::fprintf(stderr, "quill: %s\n", message.c_str());
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

std::string MpiComm::who() const {
  return fmt::format("rank {} (rank {} of {} in comm '{}')", world_rank_, rank_, size_, name_);
}

void MpiComm::fail(const std::string& message) const {
  const std::string full = who() + ": " + message;
  if (options_.on_error == CommOptions::OnError::Throw) throw Error(full);
  abort_job(full);
}

void MpiComm::check_rc(int rc, const std::string& what) const {
  if (rc == MPI_SUCCESS) return;
  abort_job(fmt::format("{}: MPI {} failed: {}; stopping every rank", who(), what, mpi_error_string(rc)));
}

void MpiComm::wait(MPI_Request* request, const std::string& what, MPI_Status* status) const {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto limit = std::chrono::duration<double>(options_.timeout_s);
  MPI_Status local;
  for (long spins = 0;; ++spins) {
    int done = 0;
    check_rc(MPI_Test(request, &done, status ? status : &local), what);
    if (done) return;
    if (Clock::now() - start > limit)
      abort_job(fmt::format("{}: MPI {} did not complete within {} s{} (a rank of the communicator never reached it, "
                            "is stuck elsewhere, or died); stopping every rank", who(), what, options_.timeout_s,
                            options_.step_mark ? " " + options_.step_mark->describe() : std::string()));
    // Yield first (latency), then sleep (oversubscribed test runs share a few cores).
    if (spins < 2000) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void MpiComm::agree(const Signature& mine) const {
  if (!options_.check_args || size_ == 1) return;
  static_assert(sizeof(Signature) == 5 * sizeof(int64_t));
  std::vector<Signature> all(size_);
  MPI_Request req;
  const std::string what = mine.str() + " (argument check)";
  check_rc(MPI_Iallgather(&mine, 5, MPI_INT64_T, all.data(), 5, MPI_INT64_T, comm_, &req), what);
  wait(&req, what);
  if (std::all_of(all.begin(), all.end(), [&](const Signature& s) { return s == mine; })) return;
  // Group ranks by what they passed: "all_reduce of 10 F32 (sum) on ranks 0, 2; ... on rank 1".
  std::map<std::string, std::vector<int>> by_call;
  for (int r = 0; r < size_; ++r) by_call[all[r].str()].push_back(r);
  std::string calls;
  for (const auto& [call, ranks] : by_call) {
    std::string rs;
    for (size_t i = 0; i < ranks.size() && i < 8; ++i) rs += (i ? ", " : "") + std::to_string(ranks[i]);
    if (ranks.size() > 8) rs += ", ...";
    calls += fmt::format("{}{} on rank{} {}", calls.empty() ? "" : "; ", call, ranks.size() > 1 ? "s" : "", rs);
  }
  fail(fmt::format("ranks of comm '{}' called a collective with different arguments: {}", name_, calls));
}

void MpiComm::check(const std::string& problem) const {
  if (!problem.empty()) fail(problem);
}

void MpiComm::check_tensor(const Tensor& t, const char* op, const char* role) const {
  check(comm_checks::tensor(t, Device::CPU, op, role));
  if (t.numel() > INT_MAX)
    fail(fmt::format("{}: the {} tensor {} has more elements than one MPI call takes ({})", op, role, t.describe(), INT_MAX));
}

void MpiComm::check_peer(int peer, const char* op) const { check(comm_checks::peer(peer, size_, name_, op)); }

void MpiComm::all_reduce(const Tensor& t, ReduceOp op) {
  check_tensor(t, "all_reduce", "");
  check(comm_checks::reducible(t, "all_reduce"));
  const Signature sig{static_cast<int64_t>(OpCode::AllReduce), static_cast<int64_t>(t.dtype()), t.numel(), -1,
                      static_cast<int64_t>(op)};
  agree(sig);
  if (reduce_via_f32(t.dtype())) {
    Tensor f = convert_dtype(t, DType::F32);
    MPI_Request req;
    check_rc(MPI_Iallreduce(MPI_IN_PLACE, f.data(), static_cast<int>(f.numel()), MPI_FLOAT, mpi_op(op), comm_, &req),
             sig.str());
    wait(&req, sig.str());
    store_converted(f, t);
    return;
  }
  MPI_Request req;
  check_rc(MPI_Iallreduce(MPI_IN_PLACE, t.data(), static_cast<int>(t.numel()), move_type(t.dtype()), mpi_op(op), comm_, &req),
           sig.str());
  wait(&req, sig.str());
}

// A started operation: its request, posted at start, completed by wait() under the communicator's
// deadline, then `finish` (a BF16/F16 result converted back). What MPI reads or writes until then
// (staging copies, the count and displacement arrays) lives in the handle.
class MpiComm::Started final : public CommHandle {
 public:
  Started(const MpiComm& comm, std::string what) : comm_(&comm), what_(std::move(what)) {}
  ~Started() override { wait(); }  // never leave an operation in flight
  void wait() override {
    if (done_) return;
    done_ = true;
    comm_->wait(&request, what_);
    if (finish) finish();
  }
  MPI_Request* req() { return &request; }
  const std::string& what() const { return what_; }

  MPI_Request request = MPI_REQUEST_NULL;
  std::function<void()> finish;
  Tensor send, recv;                 // staging buffers
  std::vector<int> sc, sd, rc, rd;   // all-to-all-v counts and displacements

 private:
  const MpiComm* comm_;
  std::string what_;
  bool done_ = false;
};

void MpiComm::check_reduce_scatter(const Tensor& in, const Tensor& out, bool* in_place) const {
  check_tensor(in, "reduce_scatter", "input");
  check_tensor(out, "reduce_scatter", "output");
  check(comm_checks::reduce_scatter(in, out, size_, rank_, in_place));
}

std::unique_ptr<MpiComm::Started> MpiComm::post_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op,
                                                                bool in_place) const {
  const Signature sig{static_cast<int64_t>(OpCode::ReduceScatter), static_cast<int64_t>(in.dtype()), out.numel(), -1,
                      static_cast<int64_t>(op)};
  auto h = std::make_unique<Started>(*this, sig.str());
  // MPI forbids aliasing send and receive buffers; an in-place call sends from a copy.
  const bool f32 = reduce_via_f32(in.dtype());
  h->send = f32 ? convert_dtype(in, DType::F32) : in_place ? in.clone() : in;
  h->recv = f32 ? Tensor::empty(out.shape(), DType::F32) : out;
  check_rc(MPI_Ireduce_scatter_block(h->send.data(), h->recv.data(), static_cast<int>(h->recv.numel()),
                                     move_type(h->send.dtype()), mpi_op(op), comm_, h->req()),
           h->what());
  if (f32) h->finish = [recv = h->recv, out] { store_converted(recv, out); };
  return h;
}

void MpiComm::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  bool in_place = false;
  check_reduce_scatter(in, out, &in_place);
  agree(Signature{static_cast<int64_t>(OpCode::ReduceScatter), static_cast<int64_t>(in.dtype()), out.numel(), -1,
                  static_cast<int64_t>(op)});
  post_reduce_scatter(in, out, op, in_place)->wait();
}

std::unique_ptr<CommHandle> MpiComm::start_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  bool in_place = false;
  check_reduce_scatter(in, out, &in_place);
  return post_reduce_scatter(in, out, op, in_place);
}

void MpiComm::check_all_gather(const Tensor& in, const Tensor& out, bool* in_place) const {
  check_tensor(in, "all_gather", "input");
  check_tensor(out, "all_gather", "output");
  check(comm_checks::all_gather(in, out, size_, rank_, in_place));
}

std::unique_ptr<MpiComm::Started> MpiComm::post_all_gather(const Tensor& in, const Tensor& out, bool in_place) const {
  const Signature sig{static_cast<int64_t>(OpCode::AllGather), static_cast<int64_t>(in.dtype()), in.numel(), -1, -1};
  auto h = std::make_unique<Started>(*this, sig.str());
  const MPI_Datatype type = move_type(in.dtype());
  const int count = static_cast<int>(in.numel());
  check_rc(MPI_Iallgather(in_place ? MPI_IN_PLACE : in.data(), count, type, out.data(), count, type, comm_, h->req()),
           h->what());
  return h;
}

void MpiComm::all_gather(const Tensor& in, const Tensor& out) {
  bool in_place = false;
  check_all_gather(in, out, &in_place);
  agree(Signature{static_cast<int64_t>(OpCode::AllGather), static_cast<int64_t>(in.dtype()), in.numel(), -1, -1});
  post_all_gather(in, out, in_place)->wait();
}

std::unique_ptr<CommHandle> MpiComm::start_all_gather(const Tensor& in, const Tensor& out) {
  bool in_place = false;
  check_all_gather(in, out, &in_place);
  return post_all_gather(in, out, in_place);
}

void MpiComm::check_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                               const std::vector<int64_t>& recv_counts) const {
  check_tensor(in, "all_to_all", "input");
  check_tensor(out, "all_to_all", "output");
  check(comm_checks::all_to_all(in, send_counts, out, recv_counts, size_, name_));
  int64_t send_total = 0, recv_total = 0;
  for (int r = 0; r < size_; ++r) {
    send_total += send_counts[r];
    recv_total += recv_counts[r];
    if (send_total > INT_MAX || recv_total > INT_MAX)
      fail(fmt::format("all_to_all: more elements than one MPI call takes ({})", INT_MAX));
  }
}

namespace {
std::string all_to_all_what(DType d, const std::vector<int64_t>& send_counts, const std::vector<int64_t>& recv_counts) {
  int64_t send_total = 0, recv_total = 0;
  for (int64_t n : send_counts) send_total += n;
  for (int64_t n : recv_counts) recv_total += n;
  return fmt::format("all_to_all of {} (sending {} elements, receiving {})", dtype_name(d), send_total, recv_total);
}
}  // namespace

std::unique_ptr<MpiComm::Started> MpiComm::post_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts,
                                                            const Tensor& out, const std::vector<int64_t>& recv_counts) const {
  auto h = std::make_unique<Started>(*this, all_to_all_what(in.dtype(), send_counts, recv_counts));
  h->sc.resize(size_), h->sd.resize(size_), h->rc.resize(size_), h->rd.resize(size_);
  int64_t send_total = 0, recv_total = 0;
  for (int r = 0; r < size_; ++r) {
    h->sd[r] = static_cast<int>(send_total);
    h->rd[r] = static_cast<int>(recv_total);
    h->sc[r] = static_cast<int>(send_counts[r]);
    h->rc[r] = static_cast<int>(recv_counts[r]);
    send_total += send_counts[r];
    recv_total += recv_counts[r];
  }
  const MPI_Datatype type = move_type(in.dtype());
  check_rc(MPI_Ialltoallv(in.data(), h->sc.data(), h->sd.data(), type, out.data(), h->rc.data(), h->rd.data(), type,
                          comm_, h->req()),
           h->what());
  return h;
}

void MpiComm::all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                         const std::vector<int64_t>& recv_counts) {
  check_all_to_all(in, send_counts, out, recv_counts);
  const Signature sig{static_cast<int64_t>(OpCode::AllToAll), static_cast<int64_t>(in.dtype()), 0, -1, -1};
  agree(sig);
  const std::string what = all_to_all_what(in.dtype(), send_counts, recv_counts);
  if (options_.check_args && size_ > 1) {
    // incoming[r] = what rank r sends here; it must be what this rank expects from r.
    std::vector<int64_t> incoming(size_);
    MPI_Request req;
    check_rc(MPI_Ialltoall(send_counts.data(), 1, MPI_INT64_T, incoming.data(), 1, MPI_INT64_T, comm_, &req), what + " (count check)");
    wait(&req, what + " (count check)");
    int64_t mine[4] = {0, -1, 0, 0};  // bad, peer, peer sends, this rank expects
    for (int r = 0; r < size_; ++r)
      if (incoming[r] != recv_counts[r]) {
        mine[0] = 1, mine[1] = r, mine[2] = incoming[r], mine[3] = recv_counts[r];
        break;
      }
    std::vector<int64_t> all(4 * size_);
    check_rc(MPI_Iallgather(mine, 4, MPI_INT64_T, all.data(), 4, MPI_INT64_T, comm_, &req), what + " (count check)");
    wait(&req, what + " (count check)");
    std::string bad;
    for (int r = 0; r < size_; ++r)
      if (all[4 * r])
        bad += fmt::format("{}rank {} expects {} elements from rank {}, which sends {}", bad.empty() ? "" : "; ", r,
                           all[4 * r + 3], all[4 * r + 1], all[4 * r + 2]);
    if (!bad.empty()) fail(fmt::format("all_to_all counts disagree across comm '{}': {}", name_, bad));
  }
  post_all_to_all(in, send_counts, out, recv_counts)->wait();
}

std::unique_ptr<CommHandle> MpiComm::start_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts,
                                                      const Tensor& out, const std::vector<int64_t>& recv_counts) {
  check_all_to_all(in, send_counts, out, recv_counts);
  return post_all_to_all(in, send_counts, out, recv_counts);
}

void MpiComm::broadcast(const Tensor& t, int root) {
  check_tensor(t, "broadcast", "");
  check_peer(root, "broadcast");
  const Signature sig{static_cast<int64_t>(OpCode::Broadcast), static_cast<int64_t>(t.dtype()), t.numel(), root, -1};
  agree(sig);
  MPI_Request req;
  check_rc(MPI_Ibcast(t.data(), static_cast<int>(t.numel()), move_type(t.dtype()), root, comm_, &req), sig.str());
  wait(&req, sig.str());
}

namespace {
constexpr int kTag = 0x5157;  // "QW": point-to-point traffic of this communicator
}

void MpiComm::send(const Tensor& t, int peer) {
  check_tensor(t, "send", "");
  check_peer(peer, "send");
  if (peer == rank_) fail("send: a rank cannot send to itself with a blocking send (use send_recv)");
  if (t.nbytes() > INT_MAX) fail(fmt::format("send: {} is larger than one MPI message ({} bytes)", t.describe(), INT_MAX));
  const std::string what = fmt::format("send of {} {} to rank {}", t.numel(), dtype_name(t.dtype()), peer);
  MPI_Request req;
  check_rc(MPI_Isend(t.data(), static_cast<int>(t.nbytes()), MPI_BYTE, peer, kTag, comm_, &req), what);
  wait(&req, what);
}

void MpiComm::recv(const Tensor& t, int peer) {
  check_tensor(t, "recv", "");
  check_peer(peer, "recv");
  if (peer == rank_) fail("recv: a rank cannot receive from itself with a blocking recv (use send_recv)");
  if (t.nbytes() > INT_MAX) fail(fmt::format("recv: {} is larger than one MPI message ({} bytes)", t.describe(), INT_MAX));
  const std::string what = fmt::format("recv of {} {} ({} bytes) from rank {}", t.numel(), dtype_name(t.dtype()), t.nbytes(), peer);
  MPI_Request req;
  MPI_Status status;
  check_rc(MPI_Irecv(t.data(), static_cast<int>(t.nbytes()), MPI_BYTE, peer, kTag, comm_, &req), what);
  wait(&req, what, &status);
  int got = 0;
  MPI_Get_count(&status, MPI_BYTE, &got);
  if (static_cast<size_t>(got) != t.nbytes())
    abort_job(fmt::format("{}: MPI {}: the message holds {} bytes; sender and receiver disagree on the size", who(), what, got));
}

void MpiComm::check_send_recv(const Tensor& send, int dst, const Tensor& recv, int src) const {
  check_tensor(send, "send_recv", "send");
  check_tensor(recv, "send_recv", "receive");
  check_peer(dst, "send_recv");
  check_peer(src, "send_recv");
  if (send.nbytes() > INT_MAX || recv.nbytes() > INT_MAX) fail("send_recv: a message is larger than one MPI message");
  if (comm_checks::overlaps(send, recv)) fail("send_recv: send and receive tensors overlap");
}

void MpiComm::send_recv(const Tensor& send, int dst, const Tensor& recv, int src) {
  check_send_recv(send, dst, recv, src);
  const std::string what = fmt::format("send_recv ({} {} to rank {}, {} {} ({} bytes) from rank {})", send.numel(),
                                       dtype_name(send.dtype()), dst, recv.numel(), dtype_name(recv.dtype()), recv.nbytes(), src);
  MPI_Request reqs[2];
  check_rc(MPI_Irecv(recv.data(), static_cast<int>(recv.nbytes()), MPI_BYTE, src, kTag, comm_, &reqs[0]), what);
  check_rc(MPI_Isend(send.data(), static_cast<int>(send.nbytes()), MPI_BYTE, dst, kTag, comm_, &reqs[1]), what);
  MPI_Status status;
  wait(&reqs[0], what, &status);
  wait(&reqs[1], what);
  int got = 0;
  MPI_Get_count(&status, MPI_BYTE, &got);
  if (static_cast<size_t>(got) != recv.nbytes())
    abort_job(fmt::format("{}: MPI {}: the message holds {} bytes; sender and receiver disagree on the size", who(), what, got));
}

namespace {
// Both halves of a started send_recv, each waited for under the watchdog.
class BothHandles final : public CommHandle {
 public:
  BothHandles(std::unique_ptr<CommHandle> a, std::unique_ptr<CommHandle> b) : a_(std::move(a)), b_(std::move(b)) {}
  void wait() override {
    a_->wait();
    b_->wait();
  }

 private:
  std::unique_ptr<CommHandle> a_, b_;
};
}  // namespace

std::unique_ptr<CommHandle> MpiComm::start_send_recv(const Tensor& send, int dst, const Tensor& recv, int src) {
  check_send_recv(send, dst, recv, src);
  // The started form's receive posts exactly its tensor's bytes: a longer message is MPI's truncation error
  // (the job ends naming it); the ring that uses it sends equal blocks by construction.
  const std::string what = fmt::format("send_recv ({} {} to rank {}, {} {} from rank {})", send.numel(),
                                       dtype_name(send.dtype()), dst, recv.numel(), dtype_name(recv.dtype()), src);
  auto r = std::make_unique<Started>(*this, what + ", receive");
  check_rc(MPI_Irecv(recv.data(), static_cast<int>(recv.nbytes()), MPI_BYTE, src, kTag, comm_, r->req()), r->what());
  auto s = std::make_unique<Started>(*this, what + ", send");
  check_rc(MPI_Isend(send.data(), static_cast<int>(send.nbytes()), MPI_BYTE, dst, kTag, comm_, s->req()), s->what());
  return std::make_unique<BothHandles>(std::move(r), std::move(s));
}

void MpiComm::barrier() {
  const Signature sig{static_cast<int64_t>(OpCode::Barrier), -1, 0, -1, -1};
  agree(sig);
  MPI_Request req;
  check_rc(MPI_Ibarrier(comm_, &req), "barrier");
  wait(&req, "barrier");
}

std::unique_ptr<Comm> MpiComm::split(const std::vector<int>& group, const std::string& name) {
  check(comm_checks::split(group, rank_, size_, name_, name));
  const auto me = std::find(group.begin(), group.end(), rank_);
  agree(Signature{static_cast<int64_t>(OpCode::Split), -1, 0, -1, -1});
  // Groups partition the ranks, so the smallest rank names a group; members order by position.
  MPI_Comm sub = MPI_COMM_NULL;
  check_rc(MPI_Comm_split(comm_, *std::min_element(group.begin(), group.end()), static_cast<int>(me - group.begin()), &sub), "split '" + name + "'");
  auto comm = std::make_unique<MpiComm>(sub, name, options_);
  MPI_Comm_free(&sub);
  // The ranks that joined must be exactly the group this rank asked for, in its order.
  std::vector<int> joined(comm->size_);
  MPI_Request req;
  comm->check_rc(MPI_Iallgather(&rank_, 1, MPI_INT, joined.data(), 1, MPI_INT, comm->comm_, &req), "split check");
  comm->wait(&req, "split check");
  if (joined != group)
    abort_job(fmt::format("{}: split '{}': this rank passed the group {}, but the ranks that share its smallest rank passed "
                          "groups that join as {}; every member must pass the same list", who(), name, list_str(group),
                          list_str(joined)));
  return comm;
}

}  // namespace quill
