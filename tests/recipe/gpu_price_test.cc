// Where `quill run`'s price per GPU-hour comes from: the flag, the recipe, or the built-in table.
#include "recipe/gpu_price.h"

#include <gtest/gtest.h>

#include "base/error.h"
#include "recipe_test_util.h"

namespace quill {
namespace {

TEST(GpuPrice, BuiltInTablePricesTheH200AsTheSeedsInstance) {
  const std::optional<GpuPrice> p = builtin_gpu_price("NVIDIA H200");
  ASSERT_TRUE(p);
  EXPECT_DOUBLE_EQ(p->usd_per_gpu_hour, 63.296 / 8);
  EXPECT_NE(p->source.find("built-in table: AWS p5en.48xlarge (8 H200) on demand, $63.296 per hour"), std::string::npos)
      << p->source;
  // It gives the seed's cost from the seed's throughput (docs/recipes-and-measurement.md §2).
  EXPECT_NEAR(p->usd_per_gpu_hour / (616.67 * 3600) * 1e6, 3.56, 0.005);
  EXPECT_FALSE(builtin_gpu_price("CPU (fp32 reference backend)"));
}

TEST(GpuPrice, FlagThenRecipeThenTable) {
  Recipe r = read_recipe(test::seed_path());
  EXPECT_EQ(resolve_gpu_price(std::nullopt, r, "NVIDIA H200")->source.rfind("quill's built-in table", 0), 0u);
  EXPECT_FALSE(resolve_gpu_price(std::nullopt, r, "CPU"));

  r.result->usd_per_gpu_hour = 5.0;
  r.result->usd_per_gpu_hour_source = "our cluster's internal rate";
  const GpuPrice from_recipe = *resolve_gpu_price(std::nullopt, r, "CPU");
  EXPECT_EQ(from_recipe.usd_per_gpu_hour, 5.0);
  EXPECT_EQ(from_recipe.source, "the recipe's result.usd_per_gpu_hour (our cluster's internal rate)");
  // A recipe completed with that price and run again keeps the source as it was, not nested.
  r.result->usd_per_gpu_hour_source = from_recipe.source;
  EXPECT_EQ(resolve_gpu_price(std::nullopt, r, "CPU")->source, from_recipe.source);

  const GpuPrice from_flag = *resolve_gpu_price(2.5, r, "NVIDIA H200");
  EXPECT_EQ(from_flag.usd_per_gpu_hour, 2.5);
  EXPECT_EQ(from_flag.source, "the --price-per-gpu-hour flag");
}

TEST(GpuPrice, NonPositivePriceIsRefused) {
  Recipe r = read_recipe(test::seed_path());
  EXPECT_THROW(resolve_gpu_price(0.0, r, "NVIDIA H200"), Error);
  EXPECT_THROW(resolve_gpu_price(-1.0, r, "NVIDIA H200"), Error);
  r.result->usd_per_gpu_hour = -3;
  try {
    resolve_gpu_price(std::nullopt, r, "NVIDIA H200");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("result.usd_per_gpu_hour"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace quill
