#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <limits>

#include "base/file_util.h"
#include "io/io_test_util.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::expect_error;
using test::same_bytes;
using test::ScratchDir;

Tensor iota_i64(const Shape& shape, int64_t start) {
  Tensor t = Tensor::empty(shape, DType::I64);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<int64_t>()[i] = start + i * 7919 - 40000;
  return t;
}

TEST(Safetensors, RoundTripMixedDtypesBitExact) {
  ScratchDir dir;
  Tensor f32 = test::random_tensor({3, 5}, DType::F32, 1);
  f32.data_as<float>()[0] = -0.0f;
  f32.data_as<float>()[1] = std::numeric_limits<float>::denorm_min();
  Tensor bf16 = convert_dtype(test::random_tensor({7}, DType::F32, 2), DType::BF16);
  Tensor f16 = convert_dtype(test::random_tensor({2, 2, 3}, DType::F32, 3), DType::F16);
  Tensor f64 = test::random_tensor({4}, DType::F64, 4);
  Tensor i64 = iota_i64({2, 3}, 5);
  Tensor scalar = test::random_tensor({}, DType::F32, 6);
  Tensor empty = Tensor::empty({0, 4}, DType::BF16);
  std::vector<std::pair<std::string, Tensor>> tensors = {{"f32", f32}, {"bf16", bf16},     {"f16", f16},  {"f64", f64},
                                                         {"i64", i64}, {"scalar", scalar}, {"empty", empty}};
  std::string path = dir / "t.safetensors";
  write_safetensors(path, tensors, {{"format", "pt"}, {"note", "x y"}});

  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "x y");
  ASSERT_EQ(f.names().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    if (t.nbytes() > 0) {
      EXPECT_EQ(f.names()[i], name);  // data-block order = write order
    }
    Tensor back = f.tensor(name);
    EXPECT_EQ(back.dtype(), t.dtype()) << name;
    EXPECT_EQ(back.shape(), t.shape()) << name;
    EXPECT_TRUE(same_bytes(back, t)) << name;
    EXPECT_EQ(f.entry(name).dtype_str, dtype_name(t.dtype()));
  }
  EXPECT_EQ(f.tensor("scalar").shape(), Shape{});
}

TEST(Safetensors, HeaderPaddedToEightBytes) {
  ScratchDir dir;
  for (int n = 1; n <= 9; ++n) {
    std::string path = dir / ("p" + std::to_string(n) + ".safetensors");
    write_safetensors(path, {{std::string(static_cast<size_t>(n), 'a'), test::random_tensor({1}, DType::F32, 1)}});
    std::string bytes = read_file(path);
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
    EXPECT_EQ(len % 8, 0u);
    EXPECT_EQ(bytes.size(), 8 + len + 4);
    EXPECT_EQ(bytes[8], '{');
  }
}

TEST(Safetensors, ReadsAReferenceStyleFile) {
  // Bytes laid out as safetensors' Python writer does: metadata first, trailing spaces.
  ScratchDir dir;
  std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  float a[2] = {1.5f, -2.25f};
  uint16_t b[2] = {f32_to_bf16(3.0f), f32_to_bf16(-0.5f)};
  std::string data(reinterpret_cast<const char*>(a), 8);
  data += std::string(reinterpret_cast<const char*>(b), 4);
  test::write_bytes(dir / "r.safetensors", test::safetensors_bytes(header, data));
  SafetensorsFile f = SafetensorsFile::open(dir / "r.safetensors");
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(f.tensor("a").data_as<float>()[1], -2.25f);
  EXPECT_EQ(bf16_to_f32(f.tensor("b").data_as<uint16_t>()[0]), 3.0f);
}

TEST(Safetensors, ViewsOutliveTheFileObject) {
  ScratchDir dir;
  Tensor t = test::random_tensor({16}, DType::F32, 9);
  write_safetensors(dir / "v.safetensors", {{"t", t}});
  Tensor view;
  {
    SafetensorsFile f = SafetensorsFile::open(dir / "v.safetensors");
    view = f.tensor("t");
  }
  EXPECT_TRUE(same_bytes(view, t));
}

TEST(Safetensors, DtypeQuillCannotComputeInIsReadableRaw) {
  ScratchDir dir;
  std::string header = R"({"q":{"dtype":"F8_E4M3","shape":[2,3],"data_offsets":[0,6]}})";
  test::write_bytes(dir / "f8.safetensors", test::safetensors_bytes(header, "abcdef"));
  SafetensorsFile f = SafetensorsFile::open(dir / "f8.safetensors");
  EXPECT_FALSE(f.entry("q").dtype.has_value());
  Tensor raw = f.raw("q");
  EXPECT_EQ(std::string(static_cast<const char*>(raw.data()), 6), "abcdef");
  expect_error([&] { f.tensor("q"); }, {"f8.safetensors", "'q'", "F8_E4M3"});
  // and it writes back byte for byte
  write_safetensors(dir / "copy.safetensors", std::vector<SafetensorsItem>{SafetensorsItem::from_file("q", f, "q")});
  SafetensorsFile c = SafetensorsFile::open(dir / "copy.safetensors");
  EXPECT_EQ(c.entry("q").dtype_str, "F8_E4M3");
  EXPECT_EQ(c.entry("q").shape, (Shape{2, 3}));
  EXPECT_TRUE(same_bytes(c.raw("q"), raw));
}

struct BadFile {
  const char* what;
  std::string bytes;
  std::vector<std::string> must_name;
};

TEST(Safetensors, MalformedFilesNameTheFileAndTensor) {
  ScratchDir dir;
  auto ok_entry = [](const char* name, const char* off) {
    return std::string("\"") + name + R"(":{"dtype":"F32","shape":[2],"data_offsets":)" + off + "}";
  };
  std::vector<BadFile> cases = {
      {"empty", "", {"truncated"}},
      {"short", std::string(5, '\0'), {"truncated"}},
      {"length beyond file", test::safetensors_bytes("{}", "").substr(0, 8) + "{", {"header length"}},
      {"huge length", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}", {"header length"}},
      {"bad json", test::safetensors_bytes(R"({"a":{"dtype":"F32",)", ""), {"not valid JSON"}},
      {"not object", test::safetensors_bytes("[1,2]   ", ""), {"JSON object"}},
      {"offsets out of range", test::safetensors_bytes("{" + ok_entry("w", "[0,8]") + "}", std::string(4, 'x')),
       {"'w'", "out of range"}},
      {"begin after end", test::safetensors_bytes("{" + ok_entry("w", "[8,0]") + "}", std::string(8, 'x')), {"'w'"}},
      {"size mismatch",
       test::safetensors_bytes(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, 'x')),
       {"'w'", "needs 12 bytes"}},
      {"overlap",
       test::safetensors_bytes("{" + ok_entry("a", "[0,8]") + "," + ok_entry("b", "[4,12]") + "}", std::string(12, 'x')),
       {"overlap", "'b'", "'a'"}},
      {"unknown dtype",
       test::safetensors_bytes(R"({"w":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}})", "x"),
       {"'w'", "unknown dtype 'Q7'"}},
      {"missing dtype", test::safetensors_bytes(R"({"w":{"shape":[1],"data_offsets":[0,1]}})", "x"), {"'w'", "dtype"}},
      {"negative dim",
       test::safetensors_bytes(R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", "x"),
       {"'w'", "shape"}},
      {"bad offsets", test::safetensors_bytes(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", "x"),
       {"'w'", "data_offsets"}},
      {"metadata not strings", test::safetensors_bytes(R"({"__metadata__":{"a":1}})", ""), {"__metadata__"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string path = dir / ("bad" + std::to_string(i) + ".safetensors");
    test::write_bytes(path, cases[i].bytes);
    SCOPED_TRACE(cases[i].what);
    std::vector<std::string> parts = cases[i].must_name;
    parts.push_back(path);
    try {
      SafetensorsFile::open(path);
      ADD_FAILURE() << "accepted a malformed file";
    } catch (const Error& e) {
      std::string msg = e.what();
      for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg << " lacks " << p;
    }
  }
  expect_error([&] { SafetensorsFile::open(dir / "nope.safetensors"); }, {"nope.safetensors", "cannot open"});
}

TEST(Safetensors, MissingTensorNamesFileAndTensor) {
  ScratchDir dir;
  write_safetensors(dir / "m.safetensors", {{"a", test::random_tensor({2}, DType::F32, 1)}});
  SafetensorsFile f = SafetensorsFile::open(dir / "m.safetensors");
  expect_error([&] { f.tensor("zzz"); }, {"m.safetensors", "zzz", "missing"});
}

TEST(Safetensors, FailedWriteLeavesNothing) {
  ScratchDir dir;
  std::string path = dir / "w.safetensors";
  SafetensorsItem good = SafetensorsItem::from_tensor("a", test::random_tensor({4}, DType::F32, 1));
  SafetensorsItem bad = good;
  bad.name = "b";
  bad.bytes = [] { return Tensor::zeros({3}, DType::F32); };  // 12 bytes, header says 16
  expect_error([&] { write_safetensors(path, std::vector<SafetensorsItem>{good, bad}); }, {"w.safetensors", "'b'"});
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  expect_error([&] { write_safetensors(path, std::vector<SafetensorsItem>{good, good}); }, {"'a'", "twice"});
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(Safetensors, RewriteReplacesAtomically) {
  ScratchDir dir;
  std::string path = dir / "r.safetensors";
  write_safetensors(path, {{"a", test::random_tensor({4}, DType::F32, 1)}});
  Tensor b = test::random_tensor({8}, DType::F32, 2);
  write_safetensors(path, {{"b", b}});
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.names(), std::vector<std::string>{"b"});
  EXPECT_TRUE(same_bytes(f.tensor("b"), b));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

}  // namespace
}  // namespace quill
