#include "comm/comm_checks.h"

#include <algorithm>

#include <fmt/format.h>

namespace quill::comm_checks {

namespace {
char* bytes(const Tensor& t) { return static_cast<char*>(t.data()); }
}  // namespace

const char* reduce_name(ReduceOp op) { return op == ReduceOp::Sum ? "sum" : "max"; }

bool overlaps(const Tensor& a, const Tensor& b) {
  return a.nbytes() && b.nbytes() && bytes(a) < bytes(b) + b.nbytes() && bytes(b) < bytes(a) + a.nbytes();
}

std::string list_str(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string tensor(const Tensor& t, Device device, const char* op, const char* role) {
  const std::string what = *role ? fmt::format("the {} tensor", role) : std::string("the tensor");
  if (!t.defined()) return fmt::format("{}: {} is undefined", op, what);
  if (t.device() != device)
    return fmt::format("{}: {} is {}, but this communicator moves {} tensors (MpiComm: cpu, NcclComm: cuda)", op, what,
                       t.describe(), device_name(device));
  return "";
}

std::string reducible(const Tensor& t, const char* op) {
  return t.dtype() == DType::Bool ? fmt::format("{}: BOOL tensors cannot be reduced", op) : "";
}

std::string peer(int peer, int size, const std::string& comm_name, const char* op) {
  if (peer >= 0 && peer < size) return "";
  return fmt::format("{}: peer rank {} is outside comm '{}' of {} ranks", op, peer, comm_name, size);
}

std::string reduce_scatter(const Tensor& in, const Tensor& out, int size, int rank, bool* in_place) {
  if (in.dtype() != out.dtype())
    return fmt::format("reduce_scatter: input {} and output {} differ in dtype", in.describe(), out.describe());
  if (in.numel() != out.numel() * size)
    return fmt::format("reduce_scatter: input {} must hold {} blocks of the output's {} elements", in.describe(), size,
                       out.numel());
  *in_place = bytes(out) == bytes(in) + rank * out.nbytes();
  if (!*in_place && overlaps(in, out)) return "reduce_scatter: output overlaps the input other than at this rank's block";
  return reducible(in, "reduce_scatter");
}

std::string all_gather(const Tensor& in, const Tensor& out, int size, int rank, bool* in_place) {
  if (in.dtype() != out.dtype())
    return fmt::format("all_gather: input {} and output {} differ in dtype", in.describe(), out.describe());
  if (out.numel() != in.numel() * size)
    return fmt::format("all_gather: output {} must hold {} blocks of the input's {} elements", out.describe(), size,
                       in.numel());
  *in_place = bytes(in) == bytes(out) + rank * in.nbytes();
  if (!*in_place && overlaps(in, out)) return "all_gather: input overlaps the output other than at this rank's block";
  return "";
}

std::string all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                       const std::vector<int64_t>& recv_counts, int size, const std::string& comm_name) {
  if (in.dtype() != out.dtype())
    return fmt::format("all_to_all: input {} and output {} differ in dtype", in.describe(), out.describe());
  if (static_cast<int>(send_counts.size()) != size || static_cast<int>(recv_counts.size()) != size)
    return fmt::format("all_to_all: {} send counts and {} receive counts given; comm '{}' has {} ranks", send_counts.size(),
                       recv_counts.size(), comm_name, size);
  if (overlaps(in, out)) return "all_to_all: input and output overlap";
  int64_t send_total = 0, recv_total = 0;
  for (int r = 0; r < size; ++r) {
    if (send_counts[r] < 0 || recv_counts[r] < 0) return fmt::format("all_to_all: negative count for rank {}", r);
    send_total += send_counts[r];
    recv_total += recv_counts[r];
  }
  if (send_total > in.numel())
    return fmt::format("all_to_all: send counts sum to {} elements, but the input {} holds {}", send_total, in.describe(),
                       in.numel());
  if (recv_total > out.numel())
    return fmt::format("all_to_all: receive counts sum to {} elements, but the output {} holds {}", recv_total,
                       out.describe(), out.numel());
  return "";
}

std::string split(const std::vector<int>& group, int rank, int size, const std::string& comm_name, const std::string& name) {
  if (std::find(group.begin(), group.end(), rank) == group.end())
    return fmt::format("split '{}': this rank ({}) is not in the group it passed, {}", name, rank, list_str(group));
  std::vector<int> sorted = group;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() || sorted.front() < 0 || sorted.back() >= size)
    return fmt::format("split '{}': group {} must list distinct ranks of comm '{}' (0..{})", name, list_str(group), comm_name,
                       size - 1);
  return "";
}

}  // namespace quill::comm_checks
