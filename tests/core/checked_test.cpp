// core/checked.h: every conversion refuses what does not fit (wrapping,
// truncation, NaN) with a UserError naming the file, field and value; and
// core/atomic_file.h leaves nothing behind when it cannot write.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/atomic_file.h"
#include "core/checked.h"

namespace pd {
namespace {

using nlohmann::json;
const checked::Field kField{"f.json", "field 'x'"};

// The message of the UserError `call` throws ("" when it throws none).
template <class F>
std::string user_error(F call) {
  try {
    call();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(Checked, IntegerRefusesWrapTruncationAndOverflow) {
  EXPECT_EQ(checked::integer(json::parse("4"), kField, 0, 10), 4);
  EXPECT_EQ(checked::integer(json::parse("4.0"), kField, 0, 10), 4);
  // nlohmann holds 0 and 3 as unsigned: the lower bound still applies.
  EXPECT_NE(user_error([] { checked::integer(json::parse("0"), kField, 1, 10); }), "");
  EXPECT_NE(user_error([] { checked::integer(json::parse("3"), kField, -10, -1); }), "");
  for (const char* bad : {"4294967300", "5.7", "1180591620717411303424", "18446744073709551620", "1e308", "-1",
                          "\"4\"", "null", "true"}) {
    const std::string msg = user_error([&] { checked::integer_as<int>(json::parse(bad), kField, 0); });
    EXPECT_NE(msg.find("f.json: field 'x' must be an integer"), std::string::npos) << bad << ": " << msg;
  }
  EXPECT_NE(user_error([] { checked::integer(json::parse("4294967300"), kField, 0, 1 << 30); })
                .find("got 4294967300"),
            std::string::npos);
}

TEST(Checked, NumberIsFiniteAndInRange) {
  EXPECT_DOUBLE_EQ(checked::number(json::parse("0.5"), kField, 0, 1), 0.5);
  EXPECT_NE(user_error([] { checked::number(json::parse("2"), kField, 0, 1); }).find("field 'x'"), std::string::npos);
  EXPECT_NE(user_error([] { checked::number(json::parse("\"nan\""), kField, 0, 1); }), "");
}

TEST(Checked, TextParsingTakesTheWholeText) {
  EXPECT_EQ(checked::parse_integer("12", kField, 0, 100), 12);
  EXPECT_DOUBLE_EQ(checked::parse_number("1e-3", kField, 0, 1), 1e-3);
  for (const char* bad : {"", "12x", " 12", "99999999999999999999", "-1", "1.5"})
    EXPECT_NE(user_error([&] { checked::parse_integer(bad, kField, 0, 100); }), "") << bad;
  for (const char* bad : {"nan", "NaN", "inf", "-inf", "1e999", "0x", "2"})
    EXPECT_NE(user_error([&] { checked::parse_number(bad, kField, 0, 1); }), "") << bad;
  EXPECT_EQ(user_error([] { checked::parse_number("nan", {"", "--lr"}, 0, 1); }),
            "--lr must be a finite number in [0, 1], got nan");
}

TEST(Checked, RoundedAndProductRefuseOverflow) {
  EXPECT_EQ(checked::rounded(1023.6, kField, 0, 2000), 1024);
  EXPECT_NE(user_error([] { checked::rounded(1e30, kField, 0, checked::kMaxCount); }), "");
  EXPECT_NE(user_error([] { checked::rounded(std::nan(""), kField, 0, 10); }), "");
  EXPECT_EQ(checked::product(1 << 20, 1 << 10, kField, 1 << 30), 1 << 30);
  EXPECT_NE(user_error([] { checked::product(int64_t{1} << 62, 4, kField, checked::kMaxCount); }), "");
}

TEST(Checked, StringFieldsNameTheFieldInsteadOfTypeError302) {
  const json j = json::parse(R"({"name": 5})");
  EXPECT_EQ(checked::string_or(j, "other", "dflt", kField), "dflt");
  EXPECT_NE(user_error([&] { checked::string_or(j, "name", "dflt", {"spec.json", "field 'name'"}); })
                .find("spec.json: field 'name' must be a string, got 5"),
            std::string::npos);
}

TEST(AtomicFile, AFolderTargetIsAUserErrorAndLeavesNothingBehind) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "pd_atomic_file_test";
  fs::remove_all(dir);
  fs::create_directories(dir / "target");
  EXPECT_NE(user_error([&] { write_file_atomically((dir / "target").string(), "x"); }).find("is a folder"),
            std::string::npos);
  EXPECT_NE(user_error([&] { write_file_atomically((dir / "missing" / "f").string(), "x"); }).find("does not exist"),
            std::string::npos);
  write_file_atomically((dir / "ok.txt").string(), "hello");
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 2);  // target/ and ok.txt: no temporary file
  EXPECT_EQ(fs::file_size(dir / "ok.txt"), 5u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pd
