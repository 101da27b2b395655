// PassBaton (base/pass_baton.h): two passes take turns at their yields, one at a time, in an order fixed
// by where they yield; a pass that ends hands over for good; an error in one unwinds the other at its next
// yield and is rethrown; yield outside run() does nothing.
#include "base/pass_baton.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <thread>

namespace quill {
namespace {

TEST(PassBaton, PassesTakeTurnsAtTheirYieldsInAFixedOrder) {
  PassBaton baton;
  for (int run = 0; run < 50; ++run) {  // the same order every time, however the threads are scheduled
    std::string log;
    baton.run(
        [&] {
          log += "a1 ";
          baton.yield();
          log += "a2 ";
          baton.yield();
          log += "a3 ";
        },
        [&] {
          log += "b1 ";
          baton.yield();
          log += "b2 ";
        });
    ASSERT_EQ(log, "a1 b1 a2 b2 a3 ") << run;  // b ended after b2: a's last yield returned at once
    EXPECT_EQ(baton.switches(), 3);
  }
}

TEST(PassBaton, TheSecondPassRunsOnItsOwnThreadAfterItsSetup) {
  PassBaton baton;
  const std::thread::id main = std::this_thread::get_id();
  std::thread::id first, second;
  bool setup_first = false;
  baton.run([&] { first = std::this_thread::get_id(); },
            [&] {
              second = std::this_thread::get_id();
              EXPECT_TRUE(setup_first);
            },
            [&] { setup_first = true; });
  EXPECT_EQ(first, main);
  EXPECT_NE(second, main);
  baton.yield();  // outside run(): nothing
}

TEST(PassBaton, AnErrorUnwindsTheOtherPassAndIsRethrown) {
  PassBaton baton;
  bool second_unwound = false, first_unwound = false;
  try {
    baton.run(
        [&] {
          baton.yield();
          throw std::runtime_error("forward failed");
        },
        [&] {
          try {
            baton.yield();
            baton.yield();  // the first pass failed meanwhile: this throws PassAborted
          } catch (const PassAborted&) {
            second_unwound = true;
            throw;
          }
        });
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "forward failed");
  }
  EXPECT_TRUE(second_unwound);
  // The other way round: the second pass fails, the first unwinds at its next yield.
  try {
    baton.run(
        [&] {
          try {
            baton.yield();
          } catch (const PassAborted&) {
            first_unwound = true;
            throw;
          }
        },
        [&] { throw std::runtime_error("backward failed"); });
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "backward failed");
  }
  EXPECT_TRUE(first_unwound);
  // And it runs again afterwards.
  int n = 0;
  baton.run([&] { ++n; }, [&] { ++n; });
  EXPECT_EQ(n, 2);
}

}  // namespace
}  // namespace quill
