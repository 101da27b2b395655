// A collective ledger row for the plan tests (comm/collective_ledger.h), every field given.
#pragma once

#include <cstdint>
#include <string>

#include "comm/collective_ledger.h"

namespace quill::test {

inline CollectiveRow ledger_row(const std::string& phase, const std::string& group, int size, const std::string& op,
                                int64_t calls, int64_t payload, int64_t sent, int64_t recv) {
  CollectiveRow r;
  r.step = 0;
  r.phase = phase;
  r.group = group;
  r.group_size = size;
  r.op = op;
  r.calls = calls;
  r.payload_bytes = payload;
  r.sent_bytes = sent;
  r.recv_bytes = recv;
  return r;
}

}  // namespace quill::test
