#include "tensor/tensor.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_set>

#include "base/error.h"

namespace quill {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {
// Zeros of at least this many bytes are pages of their own (mmap), zero until first written. Smaller
// ones, and every allocate(), come from the C library, which reuses freed memory: a CPU training step
// allocating and freeing activations would otherwise fault fresh pages in on every step.
constexpr size_t kOwnPagesBytes = size_t{8} << 20;

class HostAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    void* p = std::aligned_alloc(64, round(bytes));
    QUILL_CHECK(p != nullptr, "out of host memory allocating {} bytes", bytes);
    return p;
  }
  void* allocate_zeroed(size_t bytes) override {
    const size_t rounded = round(bytes);
    if (rounded < kOwnPagesBytes) {
      void* p = allocate(bytes);
      std::memset(p, 0, rounded);
      return p;
    }
    // Anonymous pages (page-aligned, so 64-byte-aligned), zero-filled by the kernel on first touch,
    // offered transparent huge pages (512 times fewer faults when a table is first written).
    void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    QUILL_CHECK(p != MAP_FAILED, "out of host memory allocating {} bytes ({})", bytes, std::strerror(errno));
    madvise(p, rounded, MADV_HUGEPAGE);  // advice only: its failure changes nothing
    std::lock_guard<std::mutex> lock(mu_);
    mapped_.insert(p);
    return p;
  }
  void deallocate(void* ptr, size_t bytes) override {
    const size_t rounded = round(bytes);
    if (rounded >= kOwnPagesBytes) {
      std::unique_lock<std::mutex> lock(mu_);
      if (mapped_.erase(ptr)) {
        lock.unlock();
        munmap(ptr, rounded);
        return;
      }
    }
    std::free(ptr);
  }
  Device device() const override { return Device::CPU; }

 private:
  static size_t round(size_t bytes) { return bytes ? (bytes + 63) / 64 * 64 : 64; }
  std::mutex mu_;
  std::unordered_set<void*> mapped_;  // what allocate_zeroed mapped (freed by munmap, not free)
};
}  // namespace

Allocator& host_allocator() {
  // Never destroyed: a tensor held by a static object may be freed after every function-local static is gone.
  static HostAllocator* allocator = new HostAllocator;
  return *allocator;
}

Storage::Storage(Allocator& allocator, size_t bytes)
    : data_(allocator.allocate(bytes)), bytes_(bytes), device_(allocator.device()), allocator_(&allocator) {}

Storage::Storage(Allocator& allocator, void* data, size_t bytes)
    : data_(data), bytes_(bytes), device_(allocator.device()), allocator_(&allocator) {}

Storage::Storage(void* data, size_t bytes, Device device, std::function<void()> release)
    : data_(data), bytes_(bytes), device_(device), release_(std::move(release)) {}

Storage::~Storage() {
  if (allocator_) allocator_->deallocate(data_, bytes_);
  if (release_) release_();
}

Tensor Tensor::allocated(const Shape& shape, DType dtype, Allocator& allocator, bool zeroed) {
  for (int64_t d : shape) QUILL_CHECK(d >= 0, "negative dimension in shape {}", shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  void* zeros = zeroed ? allocator.allocate_zeroed(t.nbytes()) : nullptr;
  t.storage_ = zeros ? std::make_shared<Storage>(allocator, zeros, t.nbytes()) : std::make_shared<Storage>(allocator, t.nbytes());
  if (zeroed && !zeros) t.fill_zero();
  return t;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Allocator& allocator) { return allocated(shape, dtype, allocator, false); }

Tensor Tensor::zeros(const Shape& shape, DType dtype, Allocator& allocator) { return allocated(shape, dtype, allocator, true); }

Tensor Tensor::wrap(std::shared_ptr<Storage> storage, size_t offset_bytes, const Shape& shape, DType dtype) {
  Tensor t;
  t.storage_ = std::move(storage);
  t.offset_ = offset_bytes;
  t.shape_ = shape;
  t.dtype_ = dtype;
  QUILL_CHECK(offset_bytes + t.nbytes() <= t.storage_->bytes(), "tensor {} does not fit its storage", t.describe());
  return t;
}

void* Tensor::data() const {
  return storage_ ? static_cast<char*>(storage_->data()) + offset_ : nullptr;
}

int64_t Tensor::dim(int i) const {
  int n = ndim();
  if (i < 0) i += n;
  QUILL_CHECK(i >= 0 && i < n, "dimension {} out of range for {}", i, describe());
  return shape_[static_cast<size_t>(i)];
}

Tensor Tensor::reshape(const Shape& shape) const {
  QUILL_CHECK(shape_numel(shape) == numel(), "cannot reshape {} to {}", describe(), shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::view_flat(int64_t offset, const Shape& shape) const {
  QUILL_CHECK(offset >= 0 && offset + shape_numel(shape) <= numel(), "view_flat: [{}, {}) out of range for {}", offset,
              offset + shape_numel(shape), describe());
  Tensor t = *this;
  t.offset_ += static_cast<size_t>(offset) * dtype_size(dtype_);
  t.shape_ = shape;
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  QUILL_CHECK(ndim() >= 1 && begin >= 0 && begin <= end && end <= shape_[0], "rows [{}, {}) out of range for {}",
              begin, end, describe());
  Tensor t = *this;
  int64_t row_elems = shape_[0] ? numel() / shape_[0] : 0;
  t.offset_ += static_cast<size_t>(begin * row_elems) * dtype_size(dtype_);
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::joined_rows(std::initializer_list<Tensor> parts) {
  if (parts.size() == 0) return Tensor();
  const Tensor& first = *parts.begin();
  if (!first.defined() || first.ndim() < 1) return Tensor();
  Shape shape = first.shape_;
  size_t end = first.offset_;
  for (const Tensor& t : parts) {
    if (!t.defined() || t.storage_ != first.storage_ || t.dtype_ != first.dtype_ || t.offset_ != end ||
        t.ndim() != first.ndim() || !std::equal(t.shape_.begin() + 1, t.shape_.end(), first.shape_.begin() + 1))
      return Tensor();
    end += t.nbytes();
    if (&t != &first) shape[0] += t.shape_[0];
  }
  Tensor joined = first;
  joined.shape_ = shape;
  return joined;
}

Tensor Tensor::clone() const {
  QUILL_CHECK(device() == Device::CPU, "clone of a device tensor needs the CUDA backend");
  Tensor t = empty(shape_, dtype_);
  std::memcpy(t.data(), data(), nbytes());
  return t;
}

void Tensor::fill_zero() const {
  QUILL_CHECK(device() == Device::CPU, "fill_zero of a device tensor needs the CUDA backend");
  if (nbytes()) std::memset(data(), 0, nbytes());
}

std::string Tensor::describe() const {
  return std::string(dtype_name(dtype_)) + shape_str(shape_) + " " + device_name(device());
}

namespace {
double load_as_double(const void* p, DType d, int64_t i) {
  switch (d) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F64: return static_cast<const double*>(p)[i];
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: QUILL_FAIL("convert_dtype: {} is not a floating type", dtype_name(d));
  }
}
void store_from_double(void* p, DType d, int64_t i, double v) {
  switch (d) {
    case DType::F32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::F64: static_cast<double*>(p)[i] = v; break;
    case DType::BF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(static_cast<float>(v)); break;
    case DType::F16: static_cast<uint16_t*>(p)[i] = f32_to_f16(static_cast<float>(v)); break;
    default: QUILL_FAIL("convert_dtype: {} is not a floating type", dtype_name(d));
  }
}
}  // namespace

void convert_into(const Tensor& src, const Tensor& dst) {
  QUILL_CHECK(src.device() == Device::CPU && dst.device() == Device::CPU && src.numel() == dst.numel(),
              "convert_into: {} into {} needs CPU tensors of equal size", src.describe(), dst.describe());
  if (src.dtype() == dst.dtype()) {
    if (src.data() != dst.data()) std::memcpy(dst.data(), src.data(), src.nbytes());
    return;
  }
  for (int64_t i = 0, n = src.numel(); i < n; ++i)
    store_from_double(dst.data(), dst.dtype(), i, load_as_double(src.data(), src.dtype(), i));
}

Tensor convert_dtype(const Tensor& src, DType dtype) {
  QUILL_CHECK(src.device() == Device::CPU, "convert_dtype needs a CPU tensor, got {}", src.describe());
  Tensor out = Tensor::empty(src.shape(), dtype);
  convert_into(src, out);
  return out;
}

}  // namespace quill
