// The bf16 compute copies of FP8 matrices, held only while the weights are written (docs/fp8.md, "Memory").
//
// Under --fp8-recipe blockwise on a GPU the GEMMs of the matrices model/fp8_params.h marks read only their
// FP8 copies (codes, transposed codes and scales: about two bytes an element), made from the bf16 compute
// copy once per optimizer step. Keeping the bf16 copy through the passes as well would cost two more bytes an
// element that nothing reads (15.7 GiB on the first stage of the seed's layout). So placement gives those
// matrices buckets of their own (ParamBucket::compute_transient), whose flat compute buffer is allocated
// before an optimizer step (or a refresh from the masters) writes it and released once the members' FP8
// copies are made from the written, all-gathered values. The FP8 copies are the same bits as when the bf16
// copy stays (the same values quantised); the passes' peak falls by the bf16 bytes of those matrices, and the
// optimizer phase (no activations) holds them instead. Those buckets' all-gather runs in the optimizer phase
// even under --overlap-param-gather (it fills the buffer the copies are made from).
#pragma once

#include "model/params.h"
#include "ops/device_context.h"

namespace quill {

// Whether placement gives `p` a transient compute copy: an FP8 matrix (Param::fp8, marked before placement)
// that computes in bf16 on `device`.
bool has_transient_compute(const Param& p, Device device);
// Allocates the compute buffer of every transient bucket and points its members at it (the padding past the
// last member zeroed): before the optimizer's update or a refresh writes the weights.
void hold_transient_compute(ParamTable& table, const DeviceContext& ctx);
// Makes the FP8 copy of every member of a held transient bucket (and of a frozen FP8 matrix holding its bf16
// copy) from the values written since the last compute_changed, then releases the bf16 buffers. After the
// writes and the buckets' all-gathers.
void release_transient_compute(ParamTable& table, const DeviceContext& ctx);
// The same for one bucket (placement releases each as soon as it is filled).
void release_transient_compute(ParamTable& table, ParamBucket& bucket, const DeviceContext& ctx);

}  // namespace quill
