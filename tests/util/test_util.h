// Test helpers: random non-degenerate inputs and finite-difference gradient checks in double.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace quill::test {

// Fills a F32/F64 tensor with normal(0, scale) numbers from `seed` (never all zeros).
void fill_normal(const Tensor& t, uint64_t seed, double scale = 1.0, double mean = 0.0);
// Fills with uniform numbers in [lo, hi).
void fill_uniform(const Tensor& t, uint64_t seed, double lo, double hi);
Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double scale = 1.0);

double get(const Tensor& t, int64_t i);          // element i as double (F32/F64/BF16)
void set(const Tensor& t, int64_t i, double v);

// Relative L2 error ||a - b|| / ||b|| (NaN anywhere gives +inf).
double rel_l2(const Tensor& a, const Tensor& b);
double max_abs_diff(const Tensor& a, const Tensor& b);

// One input to a gradient check: the tensor whose elements are perturbed, and the analytic
// gradient of the loss with respect to it.
struct GradInput {
  std::string name;
  Tensor value;
  Tensor grad;
};

// Central differences of loss() with step `h` against each analytic gradient; fails the test
// (with the input's name and worst element) when the relative L2 error exceeds `tol`. Checks at
// most `max_elements` elements per input, spread evenly.
void check_gradients(const std::function<double()>& loss, const std::vector<GradInput>& inputs, double h = 1e-6,
                     double tol = 1e-6, int64_t max_elements = 4000);

// Runs fn and expects a quill::Error whose message contains `needle` (a test failure otherwise).
void expect_error(const std::function<void()>& fn, const std::string& needle);
// Runs fn and returns the message of the quill::Error it throws ("" and a test failure when none).
std::string error_of(const std::function<void()>& fn);

// Dot product of two F32/F64 tensors, in double: the loss sum(out * probe) of a gradient check.
double dot(const Tensor& a, const Tensor& b);

}  // namespace quill::test
