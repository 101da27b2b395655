// Local argument checks shared by the Comm implementations. Each returns the problem as a
// message ("" when the arguments are fine), which the implementation reports by its own policy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/comm.h"

namespace quill::comm_checks {

const char* reduce_name(ReduceOp op);

std::string tensor(const Tensor& t, Device device, const char* op, const char* role);
std::string reducible(const Tensor& t, const char* op);
std::string peer(int peer, int size, const std::string& comm_name, const char* op);

// Sizes, dtypes and overlap; *in_place says whether out is in's own block (reduce_scatter) or in
// is out's own block (all_gather), the one overlap these operations allow.
std::string reduce_scatter(const Tensor& in, const Tensor& out, int size, int rank, bool* in_place);
std::string all_gather(const Tensor& in, const Tensor& out, int size, int rank, bool* in_place);
std::string all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                       const std::vector<int64_t>& recv_counts, int size, const std::string& comm_name);
std::string split(const std::vector<int>& group, int rank, int size, const std::string& comm_name, const std::string& name);

bool overlaps(const Tensor& a, const Tensor& b);
std::string list_str(const std::vector<int>& v);

}  // namespace quill::comm_checks
