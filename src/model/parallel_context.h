// ParallelContext: the parallel degrees of a run and this rank's communicators, as one validated
// value passed to the model. With every size 1 and no communicators the model is plain
// single-device code; layers ask it, never global state, where their work lives.
#pragma once

#include "comm/comm.h"

namespace quill {

struct ParallelContext {
  int tp = 1, cp = 1, ep = 1, etp = 1, dp = 1, pp = 1;
  Comm* tp_comm = nullptr;
  Comm* dp_comm = nullptr;
  Comm* ep_comm = nullptr;

  bool single() const { return tp == 1 && cp == 1 && ep == 1 && etp == 1 && dp == 1 && pp == 1; }
  static ParallelContext single_device() { return ParallelContext{}; }
};

}  // namespace quill
