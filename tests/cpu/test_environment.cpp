// integer_from_environment(): the measuring knobs' parser (core/environment.h).
#include "core/environment.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace mla {
namespace {

constexpr const char* kName = "MLA_TEST_ENVIRONMENT_INTEGER";

// Sets kName for one test and unsets it afterwards.
class EnvironmentInteger : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv(kName); }
  static void set(const char* text) { ASSERT_EQ(setenv(kName, text, 1), 0); }
  // The message integer_from_environment() throws for `text`, or "" when it does not throw.
  static std::string error_for(const char* text, int64_t min_value, int64_t max_value) {
    set(text);
    try {
      integer_from_environment(kName, min_value, max_value);
    } catch (const Error& error) {
      return error.what();
    }
    return "";
  }
};

TEST_F(EnvironmentInteger, UnsetOrEmptyIsNothing) {
  unsetenv(kName);
  EXPECT_FALSE(integer_from_environment(kName, 0, 10).has_value());
  set("");
  EXPECT_FALSE(integer_from_environment(kName, 0, 10).has_value());
}

TEST_F(EnvironmentInteger, WholeIntegersInRange) {
  set("7");
  EXPECT_EQ(integer_from_environment(kName, 0, 10), 7);
  set("0");
  EXPECT_EQ(integer_from_environment(kName, 0, 10), 0);
  set("10");
  EXPECT_EQ(integer_from_environment(kName, 0, 10), 10);
  set("-3");
  EXPECT_EQ(integer_from_environment(kName, -5, 5), -3);
  set("1099511627776");  // 2^40: beyond 32 bits
  EXPECT_EQ(integer_from_environment(kName, 0, int64_t(1) << 40), int64_t(1) << 40);
}

TEST_F(EnvironmentInteger, RejectsWhatIsNotAWholeIntegerInRange) {
  for (const char* text : {"11", "-1", "12x", "x12", " 12", "12 ", "+12", "1.5", "0x10",
                           "99999999999999999999", "-"}) {
    const std::string message = error_for(text, 0, 10);
    EXPECT_NE(message.find(kName), std::string::npos) << "'" << text << "': " << message;
    EXPECT_NE(message.find("[0, 10]"), std::string::npos) << "'" << text << "': " << message;
    EXPECT_NE(message.find(std::string("'") + text + "'"), std::string::npos)
        << "'" << text << "': " << message;
  }
}

}  // namespace
}  // namespace mla
