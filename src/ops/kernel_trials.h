// GPU kernels on trial: experiments chosen per run (quill train flags, CudaBackendOptions, recorded in summary.json),
// each made the default or deleted once measured on a GPU. The CPU backend has one path for each, so a choice other
// than the default is refused there.
//   GroupedWgradForm (--grouped-wgrad-form): the form of quill's experts' weight-gradient kernel when it runs
//     (src/ops/cuda/grouped_wgrad_wg.h: half, the measured default; quarter and pingpong, experiments);
//   AttentionBiasRows (--attention-bias-rows): how the attention's bias rows and their dr are computed
//     (src/ops/cuda/attention_bias_rows.h: cublaslt, the default; kernels, an experiment);
//   AttentionForwardForm (--attention-forward-form): the Hopper attention forward's key tiles (src/ops/cuda/
//     attention_wg.h: narrow, 64 keys, the measured default; wide, 128 keys with the producer's registers given to
//     the consumers, an experiment);
//   AttentionBackwardForm (--attention-backward-form): who loads and adds dQ in the Hopper attention backward
//     (src/ops/cuda/attention_wg.h: consumers, the measured default; producer, a third warpgroup, an experiment).
#pragma once

#include <initializer_list>
#include <string>

namespace quill {

enum class GroupedWgradForm { kHalf, kQuarter, kPingpong };
enum class AttentionBiasRows { kCublasLt, kKernels };
enum class AttentionForwardForm { kNarrow, kWide };
enum class AttentionBackwardForm { kConsumers, kProducer };

inline const char* kernel_trial_name(GroupedWgradForm f) {
  switch (f) {
    case GroupedWgradForm::kQuarter: return "quarter";
    case GroupedWgradForm::kPingpong: return "pingpong";
    case GroupedWgradForm::kHalf: break;
  }
  return "half";
}

inline const char* kernel_trial_name(AttentionBiasRows b) {
  return b == AttentionBiasRows::kKernels ? "kernels" : "cublaslt";
}

inline const char* kernel_trial_name(AttentionForwardForm f) { return f == AttentionForwardForm::kWide ? "wide" : "narrow"; }
inline const char* kernel_trial_name(AttentionBackwardForm f) {
  return f == AttentionBackwardForm::kProducer ? "producer" : "consumers";
}

// The value named s (kernel_trial_name's spelling); false for anything else.
template <class Trial>
bool parse_kernel_trial(const std::string& s, Trial& out, std::initializer_list<Trial> all) {
  for (Trial t : all)
    if (s == kernel_trial_name(t)) {
      out = t;
      return true;
    }
  return false;
}
inline bool parse_kernel_trial(const std::string& s, GroupedWgradForm& out) {
  return parse_kernel_trial(s, out, {GroupedWgradForm::kHalf, GroupedWgradForm::kQuarter, GroupedWgradForm::kPingpong});
}
inline bool parse_kernel_trial(const std::string& s, AttentionBiasRows& out) {
  return parse_kernel_trial(s, out, {AttentionBiasRows::kCublasLt, AttentionBiasRows::kKernels});
}
inline bool parse_kernel_trial(const std::string& s, AttentionForwardForm& out) {
  return parse_kernel_trial(s, out, {AttentionForwardForm::kNarrow, AttentionForwardForm::kWide});
}
inline bool parse_kernel_trial(const std::string& s, AttentionBackwardForm& out) {
  return parse_kernel_trial(s, out, {AttentionBackwardForm::kConsumers, AttentionBackwardForm::kProducer});
}

}  // namespace quill
