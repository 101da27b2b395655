// Comm: the one collective interface every parallel feature talks to (architecture.md). An NCCL
// implementation serves GPU tensors, an MPI one CPU tensors. Header-only interface; the
// implementations arrive with the parallel issues.
#pragma once

#include "tensor/tensor.h"

namespace quill {

enum class ReduceOp { Sum, Max };

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void all_reduce(const Tensor& t, ReduceOp op) = 0;
  virtual void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) = 0;
  virtual void all_gather(const Tensor& in, const Tensor& out) = 0;
  virtual void barrier() = 0;
};

}  // namespace quill
