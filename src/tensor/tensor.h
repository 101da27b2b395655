// Tensor: a reference-counted, contiguous, row-major block of elements with a shape, a dtype and
// a device. Copies share storage (cheap to pass by value); `clone` copies the elements.
// Views (`reshape`, `rows`) share storage too. Allocation goes through an Allocator so the CUDA
// backend can add device and pinned-host memory without this layer knowing CUDA.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace quill {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);

struct Allocator {
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  // Memory that reads as zeros, freed by deallocate like allocate's; null when this allocator has no
  // way to get it cheaper than writing the zeros (Tensor::zeros then writes them).
  virtual void* allocate_zeroed(size_t bytes) {
    (void)bytes;
    return nullptr;
  }
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual Device device() const = 0;
};

// 64-byte-aligned host memory. Zeros (Tensor::zeros) from 8 MiB up are pages of their own (mmap): they
// cost nothing until a page is first written, and then they are written by whichever thread writes it
// (a rank's parameter table and its gradients are tens of GB of zeros, written on one thread before).
Allocator& host_allocator();

class Storage {
 public:
  Storage(Allocator& allocator, size_t bytes);
  // Adopts `data` of `bytes` that `allocator` handed out (freed by it).
  Storage(Allocator& allocator, void* data, size_t bytes);
  // Wraps memory owned elsewhere (a memory-mapped file); `release` runs when the last user goes.
  Storage(void* data, size_t bytes, Device device, std::function<void()> release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_ = Device::CPU;
  Allocator* allocator_ = nullptr;
  std::function<void()> release_;
};

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(const Shape& shape, DType dtype, Allocator& allocator = host_allocator());
  static Tensor zeros(const Shape& shape, DType dtype, Allocator& allocator = host_allocator());
  static Tensor wrap(std::shared_ptr<Storage> storage, size_t offset_bytes, const Shape& shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  void* data() const;
  template <typename T>
  T* data_as() const { return static_cast<T*>(data()); }

  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const;  // negative counts from the end
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::CPU; }

  // Same elements, another shape of equal numel.
  Tensor reshape(const Shape& shape) const;
  // Elements [offset, offset + numel(shape)) of this contiguous tensor, seen with `shape`, sharing storage.
  Tensor view_flat(int64_t offset, const Shape& shape) const;
  // Rows [begin, end) along dimension 0, sharing storage.
  Tensor rows(int64_t begin, int64_t end) const;
  // The parts as one tensor along dimension 0 when they lie back to back in one storage, in this order,
  // with one dtype and the same trailing dimensions (matrices of one parameter bucket: their GEMMs can
  // run as one); undefined otherwise, or when a part is undefined.
  static Tensor joined_rows(std::initializer_list<Tensor> parts);
  // Deep copy on the host (CPU tensors only).
  Tensor clone() const;
  void fill_zero() const;
  std::string describe() const;  // "F32[3, 4] cpu"

 private:
  // empty() and zeros(): zeros from the allocator's allocate_zeroed when it has one, else written.
  static Tensor allocated(const Shape& shape, DType dtype, Allocator& allocator, bool zeroed);

  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::F32;
};

// Element-wise conversion of a CPU tensor to another dtype (F32/F64/BF16/F16 among themselves).
Tensor convert_dtype(const Tensor& src, DType dtype);
// The same into an existing CPU tensor of equal numel (bf16 and f16 round to nearest even).
void convert_into(const Tensor& src, const Tensor& dst);

}  // namespace quill
