#include "train/tensorboard_events.h"

#include <bit>
#include <cstring>

#include "io/crc32c.h"

namespace quill {

namespace {

// Protobuf's wire types of the fields written here.
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, uint32_t field, WireType type) { put_varint(out, (field << 3) | type); }

// Little-endian bytes, whatever the host's order (protobuf's fixed fields and TFRecord's header are).
template <typename T>
void put_little_endian(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void put_double(std::string& out, uint32_t field, double v) {
  put_key(out, field, kFixed64);
  put_little_endian(out, std::bit_cast<uint64_t>(v));
}

void put_float(std::string& out, uint32_t field, float v) {
  put_key(out, field, kFixed32);
  put_little_endian(out, std::bit_cast<uint32_t>(v));
}

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// Event fields 1 and 2, common to every event.
std::string event_head(double wall_time, int64_t step) {
  std::string event;
  put_double(event, 1, wall_time);
  put_key(event, 2, kVarint);
  put_varint(event, static_cast<uint64_t>(step));  // int64: a negative step is ten bytes, as protobuf says
  return event;
}

}  // namespace

uint32_t masked_crc32c(std::string_view bytes) {
  const uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tf_record(std::string_view data) {
  std::string length;
  put_little_endian(length, static_cast<uint64_t>(data.size()));
  std::string record = length;
  put_little_endian(record, masked_crc32c(length));
  record.append(data);
  put_little_endian(record, masked_crc32c(data));
  return record;
}

std::string file_version_event(double wall_time) {
  std::string event = event_head(wall_time, 0);
  put_bytes(event, 3, "brain.Event:2");
  return event;
}

std::string scalars_event(double wall_time, int64_t step, const std::vector<TensorBoardScalar>& scalars) {
  std::string summary;
  for (const TensorBoardScalar& s : scalars) {
    std::string value;
    put_bytes(value, 1, s.tag);
    put_float(value, 2, s.value);
    put_bytes(summary, 1, value);
  }
  std::string event = event_head(wall_time, step);
  put_bytes(event, 5, summary);
  return event;
}

}  // namespace quill
