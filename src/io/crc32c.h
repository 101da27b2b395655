// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum of TensorBoard's record files
// (train/tensorboard_events.h). A byte-at-a-time table: the event files carry a few hundred bytes a step.
#pragma once

#include <cstdint>
#include <string_view>

namespace quill {

// The CRC-32C of `bytes`; crc32c("123456789") == 0xE3069283. `crc` continues an earlier call's value
// over the bytes that follow it.
uint32_t crc32c(std::string_view bytes, uint32_t crc = 0);

}  // namespace quill
