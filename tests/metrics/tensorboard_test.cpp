#include "metrics/tensorboard.h"

#include <gtest/gtest.h>

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <map>

#include "core/fs.h"
#include "test_util.h"

namespace normlab {
namespace {
namespace fs = std::filesystem;

// RFC 3720 (iSCSI), appendix B.4, and the common check value of CRC-32C.
TEST(TensorBoardTest, Crc32cMatchesThePublishedVectors) {
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending += static_cast<char>(i);
    descending += static_cast<char>(31 - i);
  }
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(crc32c(descending), 0x113FDB5Cu);
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  // TFRecord's mask: rotate right by 15, add 0xa282ead8 (the CRC of nothing is 0).
  EXPECT_EQ(masked_crc32c(""), 0xa282ead8u);
  const uint32_t c = crc32c("123456789");
  EXPECT_EQ(masked_crc32c("123456789"), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

uint64_t le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int b = 0; b < bytes; ++b) v |= static_cast<uint64_t>(static_cast<unsigned char>(s[at + b])) << (8 * b);
  return v;
}

// The records of an event file, each checked against its two CRCs.
std::vector<std::string> read_records(const std::string& bytes) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_LE(at + 12, bytes.size());
    const uint64_t n = le(bytes, at, 8);
    EXPECT_EQ(le(bytes, at + 8, 4), masked_crc32c(bytes.substr(at, 8)));
    const std::string data = bytes.substr(at + 12, n);
    EXPECT_EQ(le(bytes, at + 12 + n, 4), masked_crc32c(data));
    out.push_back(data);
    at += 12 + n + 4;
  }
  EXPECT_EQ(at, bytes.size());
  return out;
}

TEST(TensorBoardTest, TfRecordFramesLengthDataAndTheirMaskedCrcs) {
  const std::string r = tfrecord("hello");
  ASSERT_EQ(r.size(), 8u + 4 + 5 + 4);
  EXPECT_EQ(le(r, 0, 8), 5u);
  EXPECT_EQ(read_records(r), std::vector<std::string>{"hello"});
  // The empty record: length 0, the masked CRC of those 8 zero bytes (0x07980329, from a bitwise
  // CRC-32C computed apart from this table-driven one), then the mask of the CRC of nothing.
  EXPECT_EQ(tfrecord(""), std::string(8, '\0') + std::string("\x29\x03\x98\x07\xd8\xea\x82\xa2", 8));
}

TEST(TensorBoardTest, RecordsBecomeTaggedScalarsWithPerLayerSeriesByBlock) {
  const YAML::Node train = YAML::Load(
      R"({"kind":"train","step":5,"loss":2.5,"skipped":true,"lr":null,)"
      R"("layers":{"grad_norm":[0.1,0.2],"act_rms":[1,2,3]},"params":{"tok_emb.weight":0.5}})");
  std::map<std::string, double> got;
  for (const auto& [tag, v] : tensorboard_scalars(train, 2)) got[tag] = v;
  const std::map<std::string, double> want{{"train/loss", 2.5},           {"train/skipped", 1},
                                           {"grad_norm/blocks.0", 0.1},   {"grad_norm/blocks.1", 0.2},
                                           {"act_rms/blocks.0", 1},       {"act_rms/blocks.1", 2},
                                           {"act_rms/out", 3},            {"train/params/tok_emb.weight", 0.5}};
  EXPECT_EQ(got, want);  // lr null: skipped
  const YAML::Node spike = YAML::Load(R"({"kind":"spike","step":9,"metric":"loss","value":7,"z":8.5,"action":"log"})");
  const auto s = tensorboard_scalars(spike, 2);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].first, "spike/loss");
  EXPECT_EQ(s[0].second, 8.5);
}

TEST(TensorBoardTest, TheWriterAppendsOneCheckedEventPerRecord) {
  testing::TempDir dir;
  std::string path;
  {
    TensorBoardWriter w(dir / "tb", 2);
    path = w.path();
    EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u);
    w.write(YAML::Load(R"({"kind":"train","step":3,"loss":1.5})"), 1000.0);
    w.write(YAML::Load(R"({"kind":"eval","step":3,"val_loss":0.0})"), 1001.0);
    // Readable as it goes: the events are on disk before the writer closes.
    EXPECT_EQ(read_records(read_file(path)).size(), 3u);
  }
  const auto recs = read_records(read_file(path));
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_NE(recs[0].find("brain.Event:2"), std::string::npos);
  EXPECT_NE(recs[1].find("train/loss"), std::string::npos);
  // 0.0 is written (float 0 on the wire after the tag), not dropped as a proto3 default.
  EXPECT_NE(recs[2].find(std::string("eval/val_loss") + "\x15" + std::string(4, '\0')), std::string::npos);
}

}  // namespace
}  // namespace normlab
