// DeviceContext: where ops run and with what. The CPU backend needs nothing more than the device;
// the CUDA backend adds its stream, cuBLASLt handle and workspace (opaque here so that the model
// layer stays free of CUDA headers). Passed explicitly to every op: no global streams or handles.
#pragma once

#include "tensor/tensor.h"

namespace quill {

struct CudaResources;  // defined by the CUDA backend
struct OpTable;        // ops/op_table.h

struct DeviceContext {
  Device device = Device::CPU;
  CudaResources* cuda = nullptr;
  // The CUDA backend's op implementations; every public op forwards to it on a CUDA context.
  const OpTable* cuda_ops = nullptr;
  // Element type of activations and their gradients: F32 on the CPU reference, BF16 on the GPU.
  DType activation = DType::F32;
  // Allocator for activations and gradients on this device.
  Allocator* allocator = &host_allocator();
  // Host memory for the host side of transfers: page-locked on a GPU (asynchronous copies need
  // it), plain host memory on the CPU backend.
  Allocator* host_pinned = &host_allocator();

  static DeviceContext cpu() { return DeviceContext{}; }
};

}  // namespace quill
