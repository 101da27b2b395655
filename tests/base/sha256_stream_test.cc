// SHA-256 (base/sha256_stream.h) against FIPS 180-4's example vectors, fed whole, in pieces, from a
// file and on the background thread: the checkpoint hashes (train/checkpoint_identity.h) rest on it.
#include "base/sha256_stream.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/error.h"

namespace quill {
namespace {

struct Vector {
  std::string message, digest;
};

const std::vector<Vector>& vectors() {
  static const std::vector<Vector> v = {
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {std::string(1000000, 'a'), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
  };
  return v;
}

TEST(Sha256, FipsVectorsWholeAndInPieces) {
  for (const Vector& v : vectors()) {
    Sha256 whole;
    whole.update(v.message.data(), v.message.size());
    EXPECT_EQ(whole.hex(), v.digest) << v.message.size() << " bytes";
    Sha256 pieces;
    for (size_t at = 0; at < v.message.size(); at += 7) pieces.update(v.message.data() + at, std::min<size_t>(7, v.message.size() - at));
    EXPECT_EQ(pieces.hex(), v.digest) << v.message.size() << " bytes in pieces of 7";
  }
}

TEST(Sha256, AFileAndTheBackgroundThreadGiveTheSameDigests) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("quill-sha256-" + std::to_string(::getpid()))).string();
  for (const Vector& v : vectors()) {
    std::ofstream(path, std::ios::binary) << v.message;
    EXPECT_EQ(sha256_file_hex(path), v.digest) << v.message.size() << " bytes";
    BackgroundSha256 background;
    for (size_t at = 0; at < v.message.size(); at += 4096)
      background.push([&v, at](Sha256& sha) { sha.update(v.message.data() + at, std::min<size_t>(4096, v.message.size() - at)); });
    EXPECT_EQ(background.hex(), v.digest) << v.message.size() << " bytes on the thread";
  }
  std::filesystem::remove(path);
  EXPECT_THROW(sha256_file_hex(path), Error);
}

}  // namespace
}  // namespace quill
