#include "util/test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "base/error.h"
#include "base/rng.h"

namespace quill::test {

double get(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::F32: return t.data_as<float>()[i];
    case DType::F64: return t.data_as<double>()[i];
    case DType::BF16: return bf16_to_f32(t.data_as<uint16_t>()[i]);
    case DType::I32: return t.data_as<int32_t>()[i];
    case DType::I64: return static_cast<double>(t.data_as<int64_t>()[i]);
    default: ADD_FAILURE() << "get: unsupported dtype"; return 0;
  }
}

void set(const Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::F32: t.data_as<float>()[i] = static_cast<float>(v); break;
    case DType::F64: t.data_as<double>()[i] = v; break;
    case DType::BF16: t.data_as<uint16_t>()[i] = f32_to_bf16(static_cast<float>(v)); break;
    default: ADD_FAILURE() << "set: unsupported dtype";
  }
}

void fill_normal(const Tensor& t, uint64_t seed, double scale, double mean) {
  uint64_t key = stream_key(seed, "test");
  for (int64_t i = 0; i < t.numel(); ++i) set(t, i, mean + scale * normal_at(key, static_cast<uint64_t>(i)));
}

void fill_uniform(const Tensor& t, uint64_t seed, double lo, double hi) {
  uint64_t key = stream_key(seed, "test-uniform");
  for (int64_t i = 0; i < t.numel(); ++i) set(t, i, lo + (hi - lo) * uniform_at(key, static_cast<uint64_t>(i)));
}

Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double scale) {
  Tensor t = Tensor::empty(shape, dtype);
  fill_normal(t, seed, scale);
  return t;
}

double rel_l2(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = get(a, i), y = get(b, i);
    if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<double>::infinity();
    num += (x - y) * (x - y);
    den += y * y;
  }
  if (den == 0) return num == 0 ? 0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(get(a, i) - get(b, i)));
  return m;
}

void expect_error(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an error mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected quill::Error";
  return "";
}

double dot(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += get(a, i) * get(b, i);
  return s;
}

void check_gradients(const std::function<double()>& loss, const std::vector<GradInput>& inputs, double h, double tol,
                     int64_t max_elements) {
  for (const GradInput& in : inputs) {
    ASSERT_EQ(in.value.numel(), in.grad.numel()) << in.name;
    int64_t n = in.value.numel();
    int64_t stride = std::max<int64_t>(1, n / max_elements);
    double num = 0, den = 0, worst = 0;
    int64_t worst_i = -1;
    for (int64_t i = 0; i < n; i += stride) {
      double orig = get(in.value, i);
      set(in.value, i, orig + h);
      double up = loss();
      set(in.value, i, orig - h);
      double down = loss();
      set(in.value, i, orig);
      double fd = (up - down) / (2 * h);
      double an = get(in.grad, i);
      num += (fd - an) * (fd - an);
      den += fd * fd;
      if (std::fabs(fd - an) > worst) {
        worst = std::fabs(fd - an);
        worst_i = i;
      }
    }
    double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    EXPECT_LE(rel, tol) << "gradient of " << in.name << ": relative L2 error " << rel << ", worst element "
                        << worst_i << " off by " << worst;
    EXPECT_GT(den, 0.0) << "gradient of " << in.name << " is zero everywhere: the check cannot tell";
  }
}

}  // namespace quill::test
