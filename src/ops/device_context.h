// DeviceContext: where ops run and with what. The CPU backend needs nothing more than the device;
// the CUDA backend adds its stream, cuBLASLt handle and workspace (opaque here so that the model
// layer stays free of CUDA headers). Passed explicitly to every op: no global streams or handles.
#pragma once

#include "tensor/tensor.h"

namespace quill {

struct CudaResources;  // defined by the CUDA backend

struct DeviceContext {
  Device device = Device::CPU;
  CudaResources* cuda = nullptr;
  // Allocator for activations and gradients on this device.
  Allocator* allocator = &host_allocator();

  static DeviceContext cpu() { return DeviceContext{}; }
};

}  // namespace quill
