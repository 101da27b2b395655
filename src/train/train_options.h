// Everything that defines a training run of `quill train` (numerics) and how it is carried out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "optim/adamw.h"
#include "optim/lr_schedule.h"

namespace quill {

struct TrainOptions {
  std::string config_path;   // config.json (file or directory); defaults to init_dir's
  std::string rows_dir;      // rows produced by the data layer
  std::string init_dir;      // Hugging Face checkpoint to start from ("" = random init from seed)
  uint64_t seed = 1234;
  int64_t steps = 10;
  int64_t global_batch = 1;  // rows per optimizer step, one row per micro-batch
  LrSchedule lr;
  AdamWConfig adam;
  std::vector<std::string> freeze_patterns;  // '*' globs over parameter names
  bool loss_over_padded_vocab = false;
  std::string out_dir;
  int64_t save_every = 0;    // training checkpoint every N steps (0: only at the end)
  bool final_checkpoint = true;  // false: no checkpoint at the end (benchmarks, parity runs)
  std::string resume_dir;    // a training checkpoint to resume from
  bool save_hf = false;      // export a Hugging Face checkpoint at the end (out_dir/hf)
  bool quiet = false;        // no per-step log lines
  int64_t stop_after = -1;
  int64_t dump_grads_step = -1;
  // At dump_grads_step, replay this routing (safetensors: "model.llm.layers.{i}.mlp.gate.topk" I32
  // [rows * T, top_k], the step's rows in order), so that gradients compare under one expert choice.
  std::string replay_routing_file;  // write that step's gradients to out_dir/grads_step{K}.safetensors   // stop (with a checkpoint) after this many steps: tests of resume
};

}  // namespace quill
