// TensorBoard's event file format, written by hand (no protobuf library): a file is a sequence of
// records (TFRecord framing), each holding one serialized `Event` protobuf. Only what scalar summaries
// need: the file_version event that opens a file, and events of float scalars.
//
// Record: uint64 length (little-endian), uint32 masked CRC-32C of those 8 bytes, the data, uint32
// masked CRC-32C of the data. Event: 1 wall_time (double), 2 step (int64), 3 file_version (string) or
// 5 summary (Summary: repeated 1 value, Summary.Value: 1 tag (string), 2 simple_value (float)).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace quill {

// TFRecord's masking of a CRC (a CRC of data that holds CRCs stays meaningful):
// ((crc >> 15) | (crc << 17)) + 0xa282ead8, in 32-bit arithmetic.
uint32_t masked_crc32c(std::string_view bytes);

// `data` framed as one record.
std::string tf_record(std::string_view data);

struct TensorBoardScalar {
  std::string tag;
  float value = 0;
};

// The serialized Event that opens every event file: file_version "brain.Event:2".
std::string file_version_event(double wall_time);
// The serialized Event of one step's scalars (one Summary.Value each, in order).
std::string scalars_event(double wall_time, int64_t step, const std::vector<TensorBoardScalar>& scalars);

}  // namespace quill
